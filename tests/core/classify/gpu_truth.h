#pragma once
// Real dumps from GPU runs and the truth each run recorded beside its dump (tests/capture/truth_runs.py):
// which live tensors were parameters, gradients, optimizer state, inputs, a KV cache, autocast weight
// casts or saved for backward, by storage address, at the moment of the dump (its last event).
// Shared by test_gpu_runs and the poolscope_truth_check tool. No Qt: the tool links core only.
#include "core/classify/classifier.h"
#include "core/classify/rules.h"
#include "core/formats/input.h"
#include "core/load.h"
#include "core/redact/redact.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope::gpu_truth {

struct Named {
    uint64_t ptr = 0;
    int64_t nbytes = 0;
    Pool pool = Pool::Unknown;
};

// DUMP without .gz/.zst/.pickle/.json, plus .truth.json (or .truth.json.gz beside it).
inline std::vector<std::string> truthPaths(std::string dump)
{
    for (std::string_view ext : {".gz", ".zst", ".pickle", ".json"})
        if (dump.size() > ext.size() && dump.ends_with(ext))
            dump.resize(dump.size() - ext.size());
    return {dump + ".truth.json", dump + ".truth.json.gz"};
}

inline std::vector<Named> readTruth(const std::string& path)
{
    Progress progress;
    const auto in = openInput(path, LoadOptions{}, progress);
    const auto bytes = in->bytes();
    const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
    std::vector<Named> v;
    for (const auto& t : j.at("tensors")) {
        Named n;
        n.ptr = t.at("ptr").get<uint64_t>();
        n.nbytes = t.at("nbytes").get<int64_t>();
        const std::string label = t.at("label").get<std::string>();
        const auto it = std::find(kPoolNames.begin(), kPoolNames.end(), label);
        if (it == kPoolNames.end())
            throw std::runtime_error(path + ": field tensors[].label: unknown pool '" + label + "'");
        n.pool = Pool(it - kPoolNames.begin());
        v.push_back(n);
    }
    std::sort(v.begin(), v.end(), [](const Named& a, const Named& b) { return a.ptr < b.ptr; });
    return v;
}

// The run's name for an allocation: a tensor whose storage starts inside it (a storage is one
// allocation; the caching allocator hands out a block's start).
inline const Named* nameOf(const std::vector<Named>& truth, const Allocation& a)
{
    auto it = std::lower_bound(truth.begin(), truth.end(), a.address, [](const Named& n, uint64_t p) { return n.ptr < p; });
    if (it != truth.end() && it->ptr < a.address + uint64_t(std::max(a.size, a.blockSize)))
        return &*it;
    return nullptr;
}

inline constexpr std::string_view kCopies[] = {"all", "renamed", "python", "none"};

// The dump as written ("all"), with the user's code renamed, with Python frames only, or with none.
inline std::shared_ptr<const Trace> copyOf(const std::shared_ptr<const Trace>& original, std::string_view copy, const RuleSet& rules)
{
    if (copy == "all")
        return original;
    RedactOptions o;
    o.markers = &rules;
    if (copy == "renamed")
        o.renameCode = true;
    else
        o.frames = copy == "python" ? FrameKeep::Python : FrameKeep::None;
    return redact(*original, o);
}

struct Misfiled {
    uint32_t allocation = 0;
    Pool truth = Pool::Unknown, got = Pool::Unknown;
};

struct Score {
    int64_t named = 0, wrong = 0, sure = 0; // sure: wrong at a confidence of 70 % or more
    std::map<std::string, int64_t> by;      // "truth->got (rule)" -> bytes
    std::map<Pool, int64_t> unnamed;        // what the classifier called the bytes the run did not name
    std::vector<Misfiled> misfiled;
    std::map<Pool, int64_t> truthTotals, gotTotals; // the named bytes per pool, by the run and by the classifier
    double wrongShare() const { return named ? double(wrong) / double(named) : 0; }
    // Bytes a pool's total is off by, over the named bytes (half the L1 distance): what the pool
    // table and the verdict show, where which of a weight's same-size copies is which is no matter.
    int64_t totalsOff() const
    {
        int64_t over = 0;
        for (const auto& [pool, got] : gotTotals) {
            const auto t = truthTotals.find(pool);
            over += std::max<int64_t>(0, got - (t == truthTotals.end() ? 0 : t->second));
        }
        return over;
    }
};

// Pools of the allocations alive at the dump's last event against the run's names.
inline Score score(const DeviceTrace& dev, const Classification& c, const std::vector<Named>& truth)
{
    Score s;
    const EventIndex at = EventIndex(dev.eventCount()) - 1;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.aliveAfter(at))
            continue;
        const Named* n = nameOf(truth, a);
        if (!n) {
            s.unnamed[c.pool[i]] += a.size;
            continue;
        }
        s.named += a.size;
        s.truthTotals[n->pool] += a.size;
        s.gotTotals[c.pool[i]] += a.size;
        if (c.pool[i] == n->pool)
            continue;
        s.wrong += a.size;
        if (c.confidence[i] >= 70)
            s.sure += a.size;
        s.by[std::string(poolName(n->pool)) + "->" + std::string(poolName(c.pool[i])) + " (" + c.rules[c.rule[i]].name + ")"] += a.size;
        s.misfiled.push_back({uint32_t(i), n->pool, c.pool[i]});
    }
    return s;
}

} // namespace poolscope::gpu_truth
