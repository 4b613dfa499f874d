#include "core/classify/structural_backward_tail.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <limits>

namespace poolscope {
namespace {

using classify_detail::bornAt;
using classify_detail::releasedAt;
using classify_detail::sizeKey;
constexpr auto releaseOf = classify_detail::freeEventOf;

// Made and let go of within this many events: one operator's scratch, not a block kept.
constexpr EventIndex kAtOnce = 16;
// Releases of gradients in a row, nothing made between: zero_grad's, not the engine's.
constexpr size_t kGradientBurst = 4;

} // namespace

int64_t RunState::aliveAfter(EventIndex e) const
{
    const auto it = std::partition_point(releases.begin(), releases.end(), [&](const auto& p) { return p.first <= e; });
    return after[size_t(it - releases.begin())];
}

RunState runStateAt(const DeviceTrace& dev, EventIndex firstForward)
{
    RunState s;
    const auto requested = classify_detail::requestedBytesByAddress(dev);
    for (const Allocation& a : dev.allocations)
        if (const EventIndex r = releaseOf(a); (a.preexisting() || a.allocEvent < firstForward) && (r == kNoEvent || r > firstForward)) {
            s.sizes.insert(sizeKey(a.size));
            s.weightSizes.insert(sizeKey(classify_detail::requestedBytesOf(a, requested)));
            s.releases.emplace_back(r == kNoEvent ? EventIndex(dev.events.count()) : r, a.size);
        }
    std::sort(s.releases.begin(), s.releases.end());
    s.after.assign(s.releases.size() + 1, 0);
    for (size_t k = s.releases.size(); k-- > 0;)
        s.after[k] = s.after[k + 1] + s.releases[k].second;
    return s;
}

EventIndex backwardTailEnd(const DeviceTrace& dev, const RunState& state, EventIndex releaseStart, EventIndex lastSaved,
                           EventIndex nextStart)
{
    auto weightSized = [&](const Allocation& a) { return state.sizes.count(sizeKey(a.size)) > 0; };
    // Room for gradients: the state still alive after the walk, less the gradients the walk made
    // (kept past it; a compiled backward's buffers of a weight's size are let go of at its end).
    int64_t room = state.aliveAfter(lastSaved);
    for (EventIndex e = releaseStart; e <= lastSaved; ++e)
        if (const Allocation* b = bornAt(dev, e); b && (releaseOf(*b) == kNoEvent || releaseOf(*b) > lastSaved + kAtOnce) && weightSized(*b))
            room -= b->size;
    // A gradient the walk made: made there, of a weight's size, and kept a while (but for the first
    // of a run: the walk's last product, let go of by zero_grad right after an update in place).
    auto gradientLike = [&](const Allocation* a, bool first) {
        return a && !a->preexisting() && a->allocEvent >= releaseStart && a->allocEvent <= lastSaved &&
               (first || releaseOf(*a) - a->allocEvent > kAtOnce) && weightSized(*a);
    };
    EventIndex end = lastSaved;
    while (end + 1 < nextStart) {
        const EventIndex e = end + 1;
        if (const Allocation* b = bornAt(dev, e)) {
            const EventIndex r = releaseOf(*b);
            if (r != kNoEvent && r - e <= kAtOnce)
                break;
            if (weightSized(*b)) {
                if (b->size > room)
                    break;
                room -= b->size;
            }
        } else if (const Allocation* r = releasedAt(dev, e)) {
            size_t burst = 0;
            if (gradientLike(r, true))
                for (EventIndex k = e; k < nextStart && burst < kGradientBurst; ++k) {
                    if (bornAt(dev, k))
                        break;
                    if (const Allocation* q = releasedAt(dev, k)) {
                        if (!gradientLike(q, k == e))
                            break;
                        ++burst;
                    }
                }
            const bool own = !r->preexisting() && r->allocEvent >= releaseStart && r->allocEvent <= lastSaved && burst < kGradientBurst;
            if (!own)
                break;
        }
        ++end;
    }
    return end;
}

bool backwardRunsToTheEnd(const DeviceTrace& dev, EventIndex from, EventIndex backwardStart, const std::unordered_set<int64_t>& gradientSizes)
{
    size_t forwards = 0;
    int64_t keptGradients = 0, keptOther = 0;
    for (EventIndex e = std::max<EventIndex>(from, 0); e < EventIndex(dev.events.count()); ++e) {
        if (const Allocation* r = releasedAt(dev, e);
            r && (r->preexisting() || r->allocEvent < backwardStart) && !gradientSizes.count(sizeKey(r->size)))
            ++forwards;
        else if (const Allocation* a = bornAt(dev, e); a && releaseOf(*a) == kNoEvent)
            (gradientSizes.count(sizeKey(a->size)) ? keptGradients : keptOther) += a->size;
    }
    return forwards >= 8 && keptGradients > keptOther;
}

} // namespace poolscope
