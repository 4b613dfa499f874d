#include "core/classify/structural_state_bursts.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <iterator>
#include <unordered_set>

namespace poolscope {

using classify_detail::sizeKey;

namespace {

bool inRuns(const std::vector<std::pair<EventIndex, EventIndex>>& runs, EventIndex e)
{
    auto it = std::upper_bound(runs.begin(), runs.end(), e, [](EventIndex v, const auto& r) { return v < r.first; });
    return it != runs.begin() && std::prev(it)->second >= e;
}

bool runBetween(const std::vector<std::pair<EventIndex, EventIndex>>& runs, EventIndex after, EventIndex before)
{
    auto it = std::upper_bound(runs.begin(), runs.end(), after, [](EventIndex v, const auto& r) { return v < r.second; });
    return it != runs.end() && std::max(it->first, after + 1) < before;
}

void updateScratch(const DeviceTrace& dev, std::vector<std::pair<EventIndex, EventIndex>>& out)
{
    constexpr size_t kScratchRun = 8;
    const EventIndex n = EventIndex(dev.events.count());
    std::unordered_set<int64_t> keptSizes; // of blocks never let go of: the weights, the state
    for (const Allocation& a : dev.allocations)
        if (classify_detail::freeEventOf(a) == kNoEvent)
            keptSizes.insert(sizeKey(a.size));
    std::vector<const Allocation*> made;
    auto judge = [&](EventIndex lastBirth) {
        if (made.size() < kScratchRun)
            return;
        // Every block let go of after the last birth (nothing was let go of among the births), in
        // one run of releases: nothing made between.
        EventIndex lastRelease = kNoEvent;
        int64_t bytes = 0, keptSized = 0;
        for (const Allocation* a : made) {
            const EventIndex r = classify_detail::freeEventOf(*a);
            if (r == kNoEvent)
                return;
            lastRelease = std::max(lastRelease, r);
            bytes += a->size;
            keptSized += keptSizes.count(sizeKey(a->size)) ? a->size : 0;
        }
        if (keptSized * 2 < bytes)
            return;
        for (EventIndex e = lastBirth + 1; e <= lastRelease; ++e)
            if (classify_detail::bornAt(dev, e))
                return;
        out.emplace_back(made.front()->allocEvent, lastRelease);
    };
    EventIndex lastBirth = kNoEvent;
    for (EventIndex e = 0; e < n; ++e) {
        if (const Allocation* a = classify_detail::bornAt(dev, e)) {
            made.push_back(a);
            lastBirth = e;
        } else if (classify_detail::releasedAt(dev, e)) {
            judge(lastBirth);
            made.clear();
        }
    }
}

} // namespace

StateBursts stateBursts(const DeviceTrace& dev)
{
    constexpr size_t kStateBurst = 8;
    const EventIndex n = EventIndex(dev.events.count());
    StateBursts out;
    size_t count = 0;
    EventIndex runStart = kNoEvent, lastBirth = kNoEvent;
    auto flush = [&] {
        if (count >= kStateBurst)
            out.runs.emplace_back(runStart, lastBirth);
        count = 0;
    };
    for (EventIndex e = 0; e < n; ++e) {
        if (const Allocation* a = classify_detail::bornAt(dev, e)) {
            if (classify_detail::freeEventOf(*a) != kNoEvent) {
                flush();
                continue;
            }
            if (count++ == 0)
                runStart = e;
            lastBirth = e;
        } else if (const Allocation* r = classify_detail::releasedAt(dev, e); r && !r->preexisting()) {
            flush();
        }
    }
    flush();
    updateScratch(dev, out.scratch);
    return out;
}

bool StateBursts::at(EventIndex e) const { return inRuns(runs, e); }
bool StateBursts::between(EventIndex after, EventIndex before) const { return runBetween(runs, after, before); }
bool StateBursts::scratchAt(EventIndex e) const { return inRuns(scratch, e); }
bool StateBursts::scratchBetween(EventIndex after, EventIndex before) const { return runBetween(scratch, after, before); }

size_t stepsCoverTheirBursts(PhaseTimeline& tl, const StateBursts& bursts)
{
    size_t placed = 0;
    for (const auto& [b0, b1] : bursts.runs) {
        bool step = false;
        for (EventIndex e = b0; e <= b1 && !step; ++e)
            step = tl.phase[size_t(e)] == Phase::OptimizerStep && tl.source[size_t(e)] == PhaseSource::Structure;
        if (!step)
            continue;
        for (EventIndex e = b0; e <= b1; ++e)
            if (tl.phase[size_t(e)] != Phase::OptimizerStep &&
                (tl.source[size_t(e)] == PhaseSource::None || tl.source[size_t(e)] == PhaseSource::Structure)) {
                tl.phase[size_t(e)] = Phase::OptimizerStep;
                tl.source[size_t(e)] = PhaseSource::Structure;
                ++placed;
            }
    }
    return placed;
}


StepBurst firstStepBurst(const DeviceTrace& dev, const StateBursts& bursts, EventIndex after, EventIndex before,
                         const std::unordered_set<int64_t>& weightSizes, const std::unordered_set<int64_t>& known)
{
    // The first burst after the backward only (runs are in event order and do not overlap).
    const auto it = std::upper_bound(bursts.runs.begin(), bursts.runs.end(), after, [](EventIndex v, const auto& r) { return v < r.first; });
    if (it == bursts.runs.end() || it->second >= before)
        return {};
    StepBurst burst{it->first, {}};
    bool newSize = false;
    for (EventIndex e = it->first; e <= it->second; ++e)
        if (const Allocation* a = classify_detail::bornAt(dev, e)) {
            if (!weightSizes.count(sizeKey(a->size)))
                return {};
            newSize = newSize || !known.count(sizeKey(a->size));
            burst.sizes.insert(sizeKey(a->size));
        }
    return newSize ? burst : StepBurst{};
}

} // namespace poolscope
