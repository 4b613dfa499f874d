#pragma once
// What each libFuzzer harness does with one input, as plain functions, so the checked-in regression
// inputs (tests/data/fuzz_regressions/<harness>/) replay through exactly the same code in the Qt
// Test suite (tests/core/robustness/test_fuzz_regressions.cpp) as in the fuzzers.
//
// Each returns an empty string when the input was handled: it loaded into a consistent Trace, or was
// refused with LoadError. It returns what is wrong when an invariant does not hold. Anything other
// than LoadError thrown by the readers escapes (a crash for the fuzzer, a failure for the test).
#include "core/formats/html_embed.h"
#include "core/formats/input.h"
#include "core/formats/kineto.h"
#include "core/formats/memory_timeline.h"
#include "core/formats/pickle_vm.h"
#include "core/formats/snapshot_readers.h"
#include "core/load.h"
#include "trace_invariants.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace poolscope::fuzz {

using Input = std::span<const uint8_t>;

// Small enough that the budget, not libFuzzer's RSS limit, stops an amplifying input.
inline LoadOptions fuzzOptions()
{
    LoadOptions o;
    o.memoryBudgetBytes = int64_t(256) << 20;
    o.maxDecompressionRatio = 200;
    o.maxNesting = 64;
    return o;
}

// The pickle VM alone. The decoded tree is walked (with a visit cap: memo sharing makes it a DAG),
// so a stale reference into the arena would show as an ASan report.
inline std::string pickleTarget(Input data)
{
    const LoadOptions options = fuzzOptions();
    ValueArena arena(options.memoryBudgetBytes);
    try {
        const PickleResult r = runPickle(data, "fuzz.pickle", arena, nullptr, options, nullptr);
        if (r.stopOffset <= 0 || size_t(r.stopOffset) > data.size())
            return "stopOffset " + std::to_string(r.stopOffset) + " outside the input";
        std::vector<PyValue> todo{r.root};
        for (size_t visits = 0; !todo.empty() && visits < 100000; ++visits) {
            const PyValue v = todo.back();
            todo.pop_back();
            if (v.kind == PyKind::Str || v.kind == PyKind::Bytes) {
                (void)arena.str(v).size();
            } else if (v.isContainer()) {
                if (v.ref >= arena.containerCount())
                    return "container reference out of range";
                for (const PyValue& c : arena.items(v))
                    todo.push_back(c);
                (void)arena.get(v, "action");
            } else {
                (void)v.asFloat();
            }
        }
    } catch (const LoadError&) {
    }
    return {};
}

// Allocator snapshots through the whole model build: pickle (0x80...), memory_viz HTML ('<...') or
// JSON (anything else) -> SnapshotDecoder -> SnapshotAssembler -> finalizeDevice.
inline std::string snapshotTarget(Input data)
{
    if (data.empty())
        return {};
    const LoadOptions options = fuzzOptions();
    Progress progress;
    Trace trace;
    try {
        if (data[0] == 0x80) {
            readSnapshotPickle(data, "fuzz.pickle", trace, options, progress);
        } else if (data[0] == '<') {
            const auto pickle = extractHtmlPickle(data, "fuzz.html");
            readSnapshotPickle(pickle, "fuzz.html", trace, options, progress);
        } else {
            readSnapshotJson(data, "fuzz.json", trace, options, progress);
        }
    } catch (const LoadError&) {
        return {};
    }
    return invariants::violation(trace);
}

inline std::string kinetoTarget(Input data)
{
    const LoadOptions options = fuzzOptions();
    Progress progress;
    Trace trace;
    try {
        readKinetoTrace(data, "fuzz.trace.json", trace, options, progress);
    } catch (const LoadError&) {
        return {};
    }
    return invariants::violation(trace);
}

inline std::string memoryTimelineTarget(Input data)
{
    const LoadOptions options = fuzzOptions();
    Progress progress;
    Trace trace;
    try {
        readMemoryTimelineRaw(data, "fuzz.raw.json", trace, options, progress);
    } catch (const LoadError&) {
        return {};
    }
    if (trace.devices.size() != 1)
        return "a timeline export must give exactly one device";
    for (const Allocation& a : trace.devices[0].allocations)
        if (a.category < ProfilerCategory::None || a.category > ProfilerCategory::Unknown)
            return "category out of range";
    return invariants::violation(trace);
}

// zstd/gzip decoding: what comes out never exceeds the ratio/budget limit, and every byte is readable.
inline std::string decompressTarget(Input data)
{
    LoadOptions options = fuzzOptions();
    options.memoryBudgetBytes = int64_t(64) << 20;
    options.maxDecompressionRatio = 50;
    Progress progress;
    try {
        const auto out = decodeBuffer(data, "fuzz.gz", options, progress);
        const int64_t limit = std::min<int64_t>(options.memoryBudgetBytes,
                                                std::max<int64_t>(int64_t(1) << 20, int64_t(data.size()) * options.maxDecompressionRatio));
        if (int64_t(out->bytes().size()) > limit)
            return "decoded " + std::to_string(out->bytes().size()) + " bytes, limit " + std::to_string(limit);
        if (out->compression == Compression::None && out->bytes().size() != data.size())
            return "uncompressed input changed size";
        uint8_t x = 0;
        for (uint8_t b : out->bytes())
            x ^= b;
        (void)x;
    } catch (const LoadError&) {
    }
    return {};
}

// The whole of load() as the CLI and GUI call it; the input is handed over as an in-memory file.
inline std::string loadTarget(Input data)
{
    static const int fd = memfd_create("poolscope-fuzz", 0);
    if (fd < 0)
        throw std::runtime_error("memfd_create failed");
    if (ftruncate(fd, 0) != 0 || (!data.empty() && pwrite(fd, data.data(), data.size(), 0) != ssize_t(data.size())))
        throw std::runtime_error("cannot write the memfd");
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const LoadOptions options = fuzzOptions();
    Progress progress;
    try {
        const auto trace = load(path, options, progress);
        return invariants::violation(*trace);
    } catch (const LoadError&) {
    }
    return {};
}

// By harness name (the folder names under tests/data/fuzz_regressions/).
inline std::string runTarget(std::string_view harness, Input data)
{
    if (harness == "fuzz_pickle")
        return pickleTarget(data);
    if (harness == "fuzz_snapshot")
        return snapshotTarget(data);
    if (harness == "fuzz_kineto")
        return kinetoTarget(data);
    if (harness == "fuzz_memory_timeline")
        return memoryTimelineTarget(data);
    if (harness == "fuzz_decompress")
        return decompressTarget(data);
    if (harness == "fuzz_load")
        return loadTarget(data);
    throw std::invalid_argument("unknown harness " + std::string(harness));
}

} // namespace poolscope::fuzz
