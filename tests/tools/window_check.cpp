// poolscope_window_check: ring-buffer windows of real dumps against the whole dump (issue 22).
//
//   poolscope_window_check [FILE|DIR]... [--shares 0.8,0.5,0.2] [--copies all,python,none] [--flows]
//                          [--reference same|all]
//
// A capture with max_entries (PyTorch's own advice) or one started at a later step keeps only the
// last entries of a longer run. No truth comes with the corpus, but the whole dump is the reference
// the window must agree with: for every file, share of entries kept and copy of the frames, the
// bytes alive at the dump's end (the same blocks in both: same address and size) whose pool the
// window reads differently. Without FILE or DIR: every dump in ../shared/corpus. Rules: the source
// tree's resources/classifier/rules.json. --flows adds the three largest moves per row (whole ->
// window, the window's rule). --reference all compares every window with the whole dump as written
// (its best reading: what the cut and the lost frames cost together) instead of the whole dump with
// the same frames (what the cut alone costs). Exit 0 unless an argument is wrong.
#include "core/classify/classifier.h"
#include "core/classify/gpu_truth.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/rules.h"
#include "core/load.h"
#include "dump_files.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace poolscope;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> splitList(const std::string& s)
{
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty())
            out.push_back(item);
    return out;
}

struct Moved {
    int64_t alive = 0, moved = 0;
    std::map<std::string, int64_t> flows;
};

// Bytes alive at the end of both dumps, and those whose pool differs, over every device.
Moved compare(const Trace& whole, const Trace& window, const RuleSet& rules)
{
    Moved m;
    for (size_t d = 0; d < whole.devices.size() && d < window.devices.size(); ++d) {
        const DeviceTrace& wd = whole.devices[d];
        const DeviceTrace& cd = window.devices[d];
        if (wd.events.count() == 0 || cd.events.count() == 0)
            continue; // no history: nothing to cut
        const Classification wc = classify(whole, wd, rules), cc = classify(window, cd, rules);
        std::map<std::pair<uint64_t, int64_t>, Pool> atEnd;
        const EventIndex we = EventIndex(wd.eventCount()) - 1, ce = EventIndex(cd.eventCount()) - 1;
        for (size_t k = 0; k < wd.allocations.size(); ++k)
            if (wd.allocations[k].aliveAfter(we))
                atEnd[{wd.allocations[k].address, wd.allocations[k].size}] = wc.pool[k];
        for (size_t k = 0; k < cd.allocations.size(); ++k) {
            const Allocation& a = cd.allocations[k];
            const auto it = a.aliveAfter(ce) ? atEnd.find({a.address, a.size}) : atEnd.end();
            if (it == atEnd.end())
                continue;
            m.alive += a.size;
            if (it->second == cc.pool[k])
                continue;
            m.moved += a.size;
            m.flows[std::string(poolName(it->second)) + "->" + std::string(poolName(cc.pool[k])) + " (" + cc.rules[cc.rule[k]].name + ")"] += a.size;
        }
    }
    return m;
}

} // namespace

int main(int argc, char** argv)
{
    std::vector<double> shares = {0.8, 0.5, 0.2};
    std::vector<std::string> copies = {"all", "python", "none"};
    bool flows = false, againstWritten = false;
    std::vector<fs::path> inputs;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--shares" && i + 1 < argc) {
            shares.clear();
            for (const std::string& s : splitList(argv[++i])) {
                char* end = nullptr;
                const double v = std::strtod(s.c_str(), &end);
                if (end == s.c_str() || *end || v <= 0 || v >= 1) {
                    std::cerr << "poolscope_window_check: --shares wants fractions between 0 and 1, got " << s << "\n";
                    return 2;
                }
                shares.push_back(v);
            }
        } else if (a == "--copies" && i + 1 < argc) {
            copies = splitList(argv[++i]);
            for (const std::string& c : copies)
                if (std::find(std::begin(gpu_truth::kCopies), std::end(gpu_truth::kCopies), c) == std::end(gpu_truth::kCopies)) {
                    std::cerr << "poolscope_window_check: --copies takes all, renamed, python, none; got " << c << "\n";
                    return 2;
                }
        } else if (a == "--flows") {
            flows = true;
        } else if (a == "--reference" && i + 1 < argc) {
            const std::string r = argv[++i];
            if (r != "same" && r != "all") {
                std::cerr << "poolscope_window_check: --reference takes same or all, got " << r << "\n";
                return 2;
            }
            againstWritten = r == "all";
        } else if (a == "--help" || a == "-h") {
            std::cout << "usage: poolscope_window_check [FILE|DIR]... [--shares 0.8,0.5,0.2] [--copies all,python,none] [--flows] "
                         "[--reference same|all]\n";
            return 0;
        } else if (!a.empty() && a.front() == '-') {
            std::cerr << "poolscope_window_check: unknown option " << a << "\n";
            return 2;
        } else {
            inputs.emplace_back(a);
        }
    }
    const auto found = tools::dumpFiles(inputs, "poolscope_window_check");
    if (!found)
        return 2;
    const std::vector<fs::path>& files = *found;
    const auto rules = std::make_shared<const RuleSet>(RuleSet::fromFile(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
    std::map<std::pair<double, std::string>, Moved> total;
    for (const fs::path& f : files) {
        std::shared_ptr<const Trace> t;
        try {
            t = load(f.string());
        } catch (const std::exception& e) {
            std::printf("%-40s not read: %s\n", f.filename().string().c_str(), e.what());
            continue;
        }
        for (const std::string& copy : copies) {
            const auto whole = againstWritten ? t : gpu_truth::copyOf(t, copy, *rules);
            for (double share : shares) {
                const auto window = gpu_truth::copyOf(testing::keepLastEntries(*t, share), copy, *rules);
                const Moved m = compare(*whole, *window, *rules);
                Moved& tot = total[{share, copy}];
                tot.alive += m.alive;
                tot.moved += m.moved;
                if (m.alive == 0)
                    continue;
                std::printf("%-40s last %.2f %-7s %5.1f %% of %9.1f MiB", f.filename().string().c_str(), share, copy.c_str(),
                            100.0 * double(m.moved) / double(m.alive), double(m.alive) / 1048576.0);
                if (flows) {
                    std::vector<std::pair<int64_t, std::string>> v;
                    for (const auto& [k, b] : m.flows)
                        v.push_back({b, k});
                    std::sort(v.rbegin(), v.rend());
                    for (size_t j = 0; j < v.size() && j < 3; ++j)
                        std::printf("  %s %.1f MiB;", v[j].second.c_str(), double(v[j].first) / 1048576.0);
                }
                std::printf("\n");
            }
        }
    }
    std::printf("\nbytes alive at the end whose pool the window reads differently, over every file:\n");
    for (const auto& [key, m] : total)
        std::printf("  last %.2f %-7s %5.1f %% of %.1f MiB\n", key.first, key.second.c_str(), m.alive ? 100.0 * double(m.moved) / double(m.alive) : 0.0,
                    double(m.alive) / 1048576.0);
    return 0;
}
