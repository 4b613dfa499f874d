#include "core/whatif/whatif.h"

#include "core/classify/pool_display.h"
#include "core/report/json_text.h"

#include "core/util/units.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace poolscope {
namespace {

// The recorded side of the comparison, with the same pool bookkeeping the replay uses.
void recordedFigures(const DeviceTrace& dev, const TraceModel& model, WhatIfResult& out)
{
    out.recordedPeakAllocated = dev.peakAllocated;
    out.recordedPeakAt = dev.peakIndex;
    // As for the prediction: after requests and frees, not inside a run of segment events.
    out.recordedPeakReserved = -1;
    for (size_t i = 0; i < dev.reserved.size(); ++i) {
        const Action a = dev.events.action[i];
        if (a != Action::SegmentAlloc && a != Action::SegmentFree && a != Action::SegmentMap && a != Action::SegmentUnmap)
            out.recordedPeakReserved = std::max(out.recordedPeakReserved, dev.reserved[i]);
    }
    if (out.recordedPeakReserved < 0)
        out.recordedPeakReserved = dev.initialReserved;
    PoolBytes cur{};
    auto poolOf = [&](size_t a) { return size_t(a < model.pool.size() ? model.pool[a] : Pool::Unknown); };
    for (size_t a = 0; a < dev.allocations.size(); ++a)
        if (dev.allocations[a].preexisting())
            cur[poolOf(a)] += dev.allocations[a].size;
    out.recordedPoolPeaks = cur;
    out.recordedPoolsAtPeak = cur;
    const auto& ev = dev.events;
    size_t nextClose = 0;
    for (size_t i = 0; i < ev.count(); ++i) {
        for (; nextClose < model.reuseCloses.size() && model.reuseCloses[nextClose].first == EventIndex(i); ++nextClose) {
            const uint32_t a = model.reuseCloses[nextClose].second;
            cur[poolOf(a)] -= dev.allocations[a].size;
        }
        const AllocId id = dev.eventAlloc[i];
        if (id.valid() && (ev.action[i] == Action::Alloc || ev.action[i] == Action::FreeCompleted)) {
            const size_t p = poolOf(id.value);
            const int64_t size = dev.allocations[id.value].size;
            cur[p] += ev.action[i] == Action::Alloc ? size : -size;
            out.recordedPoolPeaks[p] = std::max(out.recordedPoolPeaks[p], cur[p]);
        }
        if (EventIndex(i) == dev.peakIndex)
            out.recordedPoolsAtPeak = cur;
    }
}

std::string percent(int64_t from, int64_t to)
{
    if (from == 0)
        return to == 0 ? "0%" : "new";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * double(to - from) / double(from));
    return buf;
}

std::string row(const std::string& label, int64_t recorded, int64_t predicted)
{
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-22s %14s %14s %9s\n", label.c_str(), formatBytes(recorded).c_str(),
                  formatBytes(predicted).c_str(), percent(recorded, predicted).c_str());
    return buf;
}

} // namespace

WhatIfResult runWhatIf(const Trace& trace, const DeviceTrace& dev, const TraceModel& model, const Scenario& scenario,
                       const WhatIfOptions& options)
{
    const Plan plan = buildPlan(dev, model, scenario, &trace.frames);
    WhatIfResult r = replayPlan(trace, dev, model, plan, scenario, options);
    if (!scenario.allocConf.empty() && !r.oom && !r.cancelled && r.peakReservedAt != kNoEvent && !options.layoutAt) {
        // The layout at the predicted reserved peak is known only once the peak is: a second replay
        // (milliseconds; a what-if of the allocator is asked for once, not per frame).
        WhatIfOptions again;
        again.keepSeries = false;
        again.cancel = options.cancel;
        again.layoutAt = r.peakReservedAt;
        r.fragmentationDetail = replayPlan(trace, dev, model, plan, scenario, again).fragmentationDetail;
        if (r.fragmentationDetail.known)
            r.fragmentationDetail.source = "the replay at its reserved peak (event " + std::to_string(r.peakReservedAt) + ")";
    }
    r.peakAllocatedLow = r.peakAllocatedHigh = r.peakAllocated;
    r.peakReservedLow = r.peakReservedHigh = r.peakReserved;
    r.fitsAll16Bit = r.fitsAllFp32 = r.fits();
    r.unknownElementBytes = plan.unknownElementBytes;
    if (plan.unknownElementBytes > 0 && !r.cancelled) {
        // The element sizes the trace cannot tell, at each end: two more replays, only for these.
        // Each gives its allocated and reserved peaks and whether it fits the same capacity.
        WhatIfOptions bound;
        bound.keepSeries = false;
        bound.cancel = options.cancel;
        for (ElementGuess guess : {ElementGuess::Low, ElementGuess::High}) {
            const WhatIfResult end = replayPlan(trace, dev, model, buildPlan(dev, model, scenario, &trace.frames, guess), scenario, bound);
            r.peakAllocatedLow = std::min(r.peakAllocatedLow, end.peakAllocated);
            r.peakAllocatedHigh = std::max(r.peakAllocatedHigh, end.peakAllocated);
            r.peakReservedLow = std::min(r.peakReservedLow, end.peakReserved);
            r.peakReservedHigh = std::max(r.peakReservedHigh, end.peakReserved);
            (guess == ElementGuess::Low ? r.fitsAll16Bit : r.fitsAllFp32) = end.fits();
        }
    }
    recordedFigures(dev, model, r);
    r.dims = model.dims;
    r.ambiguousBytes = model.ambiguousBytes;
    r.peakPhase = model.phaseAt(r.peakAt);
    r.recordedPeakPhase = model.phaseAt(r.recordedPeakAt);
    r.recompute = plan.recompute;
    r.notes = model.notes;
    r.notes.insert(r.notes.end(), plan.notes.begin(), plan.notes.end());
    r.caveats = plan.caveats;
    // A range wider than the size laws' own error (about 1 %) is what a reader must see.
    if (r.unknownElementBytes > 0 && (r.peakAllocatedHigh - r.peakAllocatedLow) * 100 > r.peakAllocated) {
        const std::string range = "peak allocated between " + formatBytes(r.peakAllocatedLow) + " and " + formatBytes(r.peakAllocatedHigh);
        // One caveat for one cause: the plan's "the element size of ... is a guess" gets the range.
        auto guess = std::find_if(r.caveats.begin(), r.caveats.end(),
                                  [](const std::string& c) { return c.starts_with("precision: the element size of"); });
        if (guess != r.caveats.end())
            *guess += ": " + range;
        else
            r.caveats.push_back("precision: " + range + " (element sizes the frames cannot tell)");
    }
    if (r.recordedOom)
        r.notes.push_back("the recorded run ended in an OOM: the prediction covers the events up to it");
    return r;
}

WhatIfResult runWhatIf(const Trace& trace, const DeviceTrace& dev, const Classification& c, const Scenario& scenario,
                       const WhatIfOptions& options)
{
    return runWhatIf(trace, dev, buildTraceModel(trace, dev, c), scenario, options);
}

std::string fitRangeText(const WhatIfResult& r)
{
    if (!r.capacity || !r.hasRange())
        return {};
    auto fit = [](bool f) { return std::string(f ? "it fits" : "it does not fit"); };
    if (!r.fitUncertain())
        return std::string(r.fits() ? "It fits" : "It does not fit") + " at both ends of that range: the reserved peak is between " +
               formatBytes(r.peakReservedLow) + " and " + formatBytes(r.peakReservedHigh) + " against " + formatBytes(*r.capacity) + ".";
    return "Whether it fits depends on the element sizes the trace cannot tell: with all of them 16-bit " + fit(r.fitsAll16Bit) +
           ", with all of them fp32 " + fit(r.fitsAllFp32) + " (reserved peak between " + formatBytes(r.peakReservedLow) + " and " +
           formatBytes(r.peakReservedHigh) + " against " + formatBytes(*r.capacity) + ").";
}

std::string renderWhatIfText(const WhatIfResult& r)
{
    std::string out = r.device + ": what if " + r.scenario.describe() + "\n";
    if (r.cancelled)
        return out + "  cancelled\n";
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %-22s %14s %14s %9s\n", "", "recorded", "predicted", "change");
    out += buf;
    out += row("peak allocated", r.recordedPeakAllocated, r.peakAllocated);
    if (r.unknownElementBytes > 0)
        out += "  peak allocated between " + formatBytes(r.peakAllocatedLow) + " (all 16-bit) and " + formatBytes(r.peakAllocatedHigh) +
               " (all fp32): the trace cannot tell the element size of " + formatBytes(r.unknownElementBytes) +
               " allocated over it (no operator in their frames)\n";
    out += row("peak reserved", r.recordedPeakReserved, r.peakReserved);
    if (r.hasRange())
        out += "  peak reserved between " + formatBytes(r.peakReservedLow) + " and " + formatBytes(r.peakReservedHigh) +
               " over the same range of element sizes\n";
    out += "  per-pool peaks\n";
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (r.recordedPoolPeaks[p] != 0 || r.poolPeaks[p] != 0)
            out += row("  " + std::string(poolDisplayName(Pool(p))), r.recordedPoolPeaks[p], r.poolPeaks[p]);
    out += "  predicted peak at event " + std::to_string(r.peakAt) + " (" + std::string(phaseName(r.peakPhase)) +
           "; recorded at event " + std::to_string(r.recordedPeakAt) + ", " + std::string(phaseName(r.recordedPeakPhase)) +
           "); free in segments at the reserved peak: " + formatBytes(r.fragmentation()) + "\n";
    if (!r.capacity) {
        out += "  capacity: unknown (no OOM recorded; pass --capacity) \n";
    } else if (r.oom) {
        out += "  OOM at " + formatBytes(*r.capacity) + " (" + r.capacitySource + "): event " + std::to_string(r.oom->index) +
               " tried to allocate " + formatBytes(r.oom->wantedBytes) + " with " + formatBytes(r.oom->allocated) +
               " allocated and " + formatBytes(r.oom->reserved - r.oom->allocated) + " " + std::string(kCachedFreeLabel) + "\n";
    } else if (!r.fits()) {
        out += "  does not fit in " + formatBytes(*r.capacity) + " (" + r.capacitySource + "): " + formatBytes(r.overCapacity()) +
               " over, the predicted reserved peak is " + formatBytes(r.peakReserved) + "\n";
    } else {
        out += "  fits in " + formatBytes(*r.capacity) + " (" + r.capacitySource + "): headroom " +
               formatBytes(*r.capacity - r.peakReserved) + " over the predicted reserved peak\n";
    }
    if (const std::string range = fitRangeText(r); !range.empty())
        out += "  " + range + "\n";
    out += "  allocator: " + r.allocatorBaseline + "\n";
    if (r.allocatorChanged)
        out += "  replayed with: " + r.allocatorReplayed + "\n";
    if (r.oom && r.capacity && r.oom->requestedLive + r.oom->requested > *r.capacity)
        out += "  allocated alone (" + formatBytes(r.oom->requestedLive) + " alive + the " + formatBytes(r.oom->requested) +
               " request) is over the capacity: no allocator setting helps\n";
    if (r.fragmentationDetail.known && (!r.scenario.allocConf.empty() || r.oom))
        out += fragmentationText(r.fragmentationDetail, "  ");
    if (!r.recompute.empty())
        out += "  recompute: " + r.recompute + "\n";
    if (r.identity) {
        out += "  replay check: allocated equal after " + std::to_string(r.events - r.allocatedMismatches) + " / " +
               std::to_string(r.events) + " events; reserved equal after " + std::to_string(r.reservedMatches) + " / " +
               std::to_string(r.reservedCompared) + " non-segment events\n";
    }
    for (const auto& n : r.notes)
        out += "  - " + n + "\n";
    for (const auto& w : r.allocatorWarnings)
        out += "  - allocator: " + w + "\n";
    return out;
}

nlohmann::json whatIfJson(const WhatIfResult& r)
{
    using nlohmann::json;
    auto pools = [](const PoolBytes& b) {
        json j = json::object();
        for (size_t p = 0; p < kAllocationPoolCount; ++p)
            j[std::string(poolName(Pool(p)))] = b[p];
        return j;
    };
    json j;
    j["device"] = r.device;
    j["scenario"] = {{"description", r.scenario.describe()},
                     {"batch_scale", r.scenario.batchScale.text()},
                     {"seq_scale", r.scenario.seqScale.text()},
                     {"activation_scale", r.scenario.activationScale.text()},
                     {"checkpoint", std::string(checkpointName(r.scenario.checkpoint))},
                     {"optimizer", std::string(optimizerName(r.scenario.optimizer))},
                     {"sharding", std::string(shardingName(r.scenario.sharding))},
                     {"ranks", r.scenario.ranks},
                     {"offload_optimizer", r.scenario.offloadOptimizer},
                     {"autocast", std::string(autocastName(r.scenario.autocast))},
                     {"trainable", r.scenario.trainable.text()},
                     {"freeze", r.scenario.freeze},
                     {"accumulate", r.scenario.accumulate},
                     {"alloc_conf", r.scenario.allocConf}};
    j["events"] = r.events;
    j["cancelled"] = r.cancelled;
    j["recorded"] = {{"peak_allocated", r.recordedPeakAllocated},
                     {"peak_index", r.recordedPeakAt},
                     {"peak_reserved", r.recordedPeakReserved},
                     {"pool_peaks", pools(r.recordedPoolPeaks)},
                     {"pools_at_peak", pools(r.recordedPoolsAtPeak)}};
    j["predicted"] = {{"peak_allocated", r.peakAllocated},
                      {"peak_index", r.peakAt},
                      {"peak_reserved", r.peakReserved},
                      {"peak_reserved_index", r.peakReservedAt},
                      {"reserved_unallocated_at_peak", r.fragmentation()},
                      {"pool_peaks", pools(r.poolPeaks)},
                      {"pools_at_peak", pools(r.poolsAtPeak)},
                      {"peak_phase", std::string(phaseName(r.peakPhase))}};
    // The range the unknown element sizes span (null when the trace tells every tensor's type).
    j["predicted"]["peak_allocated_range"] =
        r.unknownElementBytes > 0
            ? json{{"low", r.peakAllocatedLow}, {"high", r.peakAllocatedHigh}, {"unknown_element_bytes", r.unknownElementBytes}}
            : json(nullptr);
    j["predicted"]["peak_reserved_range"] =
        r.hasRange() ? json{{"low", r.peakReservedLow}, {"high", r.peakReservedHigh}} : json(nullptr);
    j["recorded"]["peak_phase"] = std::string(phaseName(r.recordedPeakPhase));
    j["laws"] = {{"tokens", r.dims.tokens},
                 {"seq", r.dims.seq},
                 {"batch", r.dims.batch},
                 {"score_width", r.dims.scoreWidth},
                 {"ambiguous_bytes", r.ambiguousBytes}};
    j["capacity"] = r.capacity ? json(*r.capacity) : json(nullptr);
    j["capacity_source"] = r.capacitySource;
    j["fits"] = r.capacity ? json(r.fits()) : json(nullptr);
    // The fit at each end of the element-size range (null without a capacity or a range).
    j["fits_range"] = r.capacity && r.hasRange() ? json{{"all_16bit", r.fitsAll16Bit}, {"all_fp32", r.fitsAllFp32}} : json(nullptr);
    j["allocator"] = {{"baseline", r.allocatorBaseline},
                      {"settings_recorded", r.allocatorSettingsRecorded},
                      {"replayed", r.allocatorReplayed},
                      {"changed", r.allocatorChanged},
                      {"alloc_conf", r.scenario.allocConf}};
    j["fragmentation"] = fragmentationJson(r.fragmentationDetail);
    if (r.oom)
        j["oom"] = {{"index", r.oom->index},          {"requested", r.oom->requested}, {"tried_to_allocate", r.oom->wantedBytes},
                    {"device_free", r.oom->deviceFree}, {"allocated", r.oom->allocated}, {"reserved", r.oom->reserved},
                    {"alive_requested", r.oom->requestedLive},
                    {"no_allocator_setting_helps", r.capacity && r.oom->requestedLive + r.oom->requested > *r.capacity}};
    else
        j["oom"] = nullptr;
    j["recorded_oom"] = r.recordedOom;
    j["recompute"] = r.recompute;
    j["notes"] = r.notes;
    j["caveats"] = r.caveats;
    j["allocator_warnings"] = r.allocatorWarnings;
    if (r.identity)
        j["replay_check"] = {{"allocated_mismatches", r.allocatedMismatches},
                             {"first_allocated_mismatch", r.firstAllocatedMismatch},
                             {"reserved_matches", r.reservedMatches},
                             {"reserved_compared", r.reservedCompared}};
    j["replay_us"] = r.replayUs;
    return j;
}

std::string whatIfJsonText(const WhatIfResult& r, const std::string& file)
{
    nlohmann::json j = whatIfJson(r);
    j["file"] = file;
    return jsonText(j) + "\n";
}

} // namespace poolscope
