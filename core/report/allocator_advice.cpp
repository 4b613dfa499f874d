#include "core/report/allocator_advice.h"

#include "core/allocator/allocator_config.h"
#include "core/whatif/whatif.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace poolscope {
namespace {

std::string gib(int64_t bytes)
{
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(int64_t(1) << 30));
    return buf;
}

// The settings PyTorch's documentation offers against fragmentation, less the ones the run had.
std::vector<std::string> candidates(const AllocatorConfig& run)
{
    std::vector<std::string> out;
    if (!run.expandableSegments)
        out.push_back("expandable_segments:True");
    if (run.maxSplitSize == kNoSplitLimit && !run.expandableSegments) {
        out.push_back("max_split_size_mb:512");
        out.push_back("max_split_size_mb:128");
    }
    if (std::all_of(run.roundupPower2Divisions.begin(), run.roundupPower2Divisions.end(), [](int64_t d) { return d <= 1; }))
        out.push_back("roundup_power2_divisions:4");
    return out;
}

} // namespace

AllocatorAdvice adviseAllocatorAtOom(const Trace& trace, const DeviceTrace& dev, const TraceModel& model, EventIndex oomIndex)
{
    AllocatorAdvice a;
    a.oomIndex = oomIndex;
    const OomEvent* oom = nullptr;
    for (const OomEvent& o : dev.ooms)
        if (o.index == oomIndex)
            oom = &o;
    if (!oom) {
        a.why = "no OOM recorded at this event";
        return a;
    }
    if (oom->deviceFree < 0) {
        a.why = "the OOM did not record the device's free memory, so the memory PyTorch could use is unknown";
        return a;
    }
    if (dev.eventCount() == 0 || dev.allocations.empty()) {
        a.why = "the dump holds no allocation history to replay";
        return a;
    }
    // At a limit of the process's own the device had room; the limit lies between the bytes
    // reserved and those plus the request's segment: the replay takes the lower end, so that no
    // setting is said to fit on room the limit may not have given.
    a.capacity = oom->atProcessLimit() ? dev.reservedAt(oomIndex) : dev.reservedAt(oomIndex) + oom->deviceFree;
    a.request = oom->requestedBytes;
    const AllocatorConfig run = allocatorConfigFromSettings(trace.allocatorSettings);
    a.baseline = describeAllocConf(run) + (trace.allocatorSettings.empty() ? " (assumed: no allocator_settings in the dump)" : "");

    const auto t0 = std::chrono::steady_clock::now();
    WhatIfOptions options;
    options.keepSeries = false;
    Scenario scenario;
    scenario.capacity = a.capacity;
    const WhatIfResult base = runWhatIf(trace, dev, model, scenario, options);
    if (!base.oom) {
        a.why = "the replay under the run's own settings does not run out at " + gib(a.capacity) + ", so no setting is judged";
        a.costUs = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
        return a;
    }
    a.judged = true;
    a.aliveRequested = base.oom->requestedLive;
    // What the program holds plus what it asks for: no placement rule can make that smaller.
    // (At a process limit the capacity is its lower end; the limit may hold the request beside what
    // is alive, so that is never concluded there.)
    a.nothingHelps = a.aliveRequested + a.request > a.capacity && !oom->atProcessLimit();
    if (!a.nothingHelps) {
        for (const std::string& conf : candidates(run)) {
            Scenario s = scenario;
            s.allocConf = conf;
            const WhatIfResult r = runWhatIf(trace, dev, model, s, options);
            a.trials.push_back({conf, !r.oom, r.peakReserved, r.oom ? r.oom->index : kNoEvent});
        }
    }
    a.costUs = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();

    const std::string cap = gib(a.capacity) + (oom->atProcessLimit() ? " the process's own limit left PyTorch (at least the bytes reserved at the OOM)"
                                                                      : " PyTorch could use (reserved + free at the OOM)");
    if (a.nothingHelps) {
        a.sentence = "Allocated alone is over capacity: the " + gib(a.aliveRequested) + " alive plus the " + gib(a.request) +
                     " request exceed the " + cap + ", so no allocator setting helps.";
        return a;
    }
    std::vector<const AllocatorTrial*> fitting;
    for (const auto& t : a.trials)
        if (t.fits)
            fitting.push_back(&t);
    std::stable_sort(fitting.begin(), fitting.end(), [](auto* x, auto* y) { return x->peakReserved < y->peakReserved; });
    if (!fitting.empty()) {
        const AllocatorTrial& best = *fitting.front();
        a.sentence = "With " + best.conf + " the replay's reserved peak is " + gib(best.peakReserved) + ", under the " + cap +
                     ": this OOM would not have happened (set PYTORCH_CUDA_ALLOC_CONF to " + best.conf + ")";
        // (Not "VAR=value": one word that long overran the window's breakdown column at 1280×720.)
        for (size_t k = 1; k < fitting.size(); ++k)
            a.sentence += std::string(k == 1 ? "; " : ", ") + fitting[k]->conf + " also fits (" + gib(fitting[k]->peakReserved) + ")";
        a.sentence += ".";
    } else if (!a.trials.empty()) {
        std::string tried;
        for (const auto& t : a.trials)
            tried += (tried.empty() ? "" : ", ") + t.conf;
        a.sentence = "No allocator setting fits by replay (" + tried + " still run out at " + gib(a.capacity) +
                     "): the memory itself has to shrink.";
    } else {
        a.sentence = "The run already used " + a.baseline + "; no other allocator setting is tried.";
    }
    return a;
}

nlohmann::json allocatorAdviceJson(const AllocatorAdvice& a)
{
    nlohmann::json trials = nlohmann::json::array();
    for (const auto& t : a.trials)
        trials.push_back({{"alloc_conf", t.conf},
                          {"fits", t.fits},
                          {"peak_reserved", t.peakReserved},
                          {"oom_index", t.oomAt == kNoEvent ? nlohmann::json(nullptr) : nlohmann::json(t.oomAt)}});
    return {{"judged", a.judged},         {"why_not", a.why},          {"oom_index", a.oomIndex},
            {"capacity", a.capacity},     {"alive_requested", a.aliveRequested}, {"request", a.request},
            {"no_setting_helps", a.nothingHelps}, {"baseline", a.baseline}, {"trials", trials},
            {"sentence", a.sentence}}; // no wall-clock time: the report JSON is reproducible
}

std::string allocatorAdvice(const MomentEvidence&)
{
    return "the allocator holds memory it could not hand out; whether an allocator setting would help is answered by "
           "replay (poolscope whatif FILE --alloc-conf expandable_segments:True)";
}

} // namespace poolscope
