#include "core/classify/structural_setup.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <unordered_set>

namespace poolscope {
namespace {

using classify_detail::bornAt;
using classify_detail::freeEventOf;

// Held by the graph until the backward let go of it (one operator's scratch is let go of at once).
constexpr EventIndex kSaved = 16;

} // namespace

EventIndex forwardAfterSetUp(const DeviceTrace& dev, EventIndex start, EventIndex peak, EventIndex releaseStart, EventIndex releaseEnd,
                             bool firstPass)
{
    if (start == kNoEvent || peak <= start || releaseEnd < releaseStart || size_t(peak) >= dev.eventAlloc.size())
        return start;
    auto saved = [&](const Allocation& a) {
        const EventIndex r = freeEventOf(a);
        return r != kNoEvent && r >= releaseStart && r <= releaseEnd && r - a.allocEvent > kSaved;
    };
    EventIndex firstSaved = kNoEvent;
    int64_t savedBytes = 0;
    for (EventIndex e = start; e <= peak; ++e)
        if (const Allocation* a = bornAt(dev, e); a && saved(*a)) {
            if (firstSaved == kNoEvent)
                firstSaved = e;
            savedBytes += a->size;
        }
    if (firstSaved == kNoEvent)
        return start;
    // Sizes of the blocks the backward made and kept past its end: its gradients. A kept block of
    // one of them is a parameter's size, however small beside what the forward saved. Only before
    // the run's first pass (later ones follow no set-up), and only where the backward ended before
    // the dump did (a backward cut short still holds the gradients of its activations).
    std::unordered_set<int64_t> gradientSizes;
    const bool releaseEnded = size_t(releaseEnd) + size_t(kSaved) < dev.eventAlloc.size();
    for (EventIndex e = releaseStart; firstPass && releaseEnded && e <= releaseEnd; ++e)
        if (const Allocation* a = bornAt(dev, e)) {
            const EventIndex r = freeEventOf(*a);
            if (r == kNoEvent || r > releaseEnd)
                gradientSizes.insert(a->size);
        }
    EventIndex lastKept = kNoEvent;
    int64_t keptBytes = 0;
    bool parameterSized = false;
    for (EventIndex e = start; e < firstSaved; ++e)
        if (const Allocation* a = bornAt(dev, e)) {
            const EventIndex r = freeEventOf(*a);
            if (r == kNoEvent || r > releaseEnd) {
                lastKept = e;
                keptBytes += a->size;
                parameterSized = parameterSized || (gradientSizes.count(a->size) && !classify_detail::isCublasWorkspaceSize(a->size));
            }
        }
    if (lastKept == kNoEvent || (keptBytes * 4 < savedBytes && !parameterSized))
        return start;
    for (EventIndex e = lastKept + 1; e <= firstSaved; ++e)
        if (bornAt(dev, e))
            return e;
    return firstSaved;
}

size_t setUpReadAsForwards(const DeviceTrace& dev, PhaseTimeline& tl, const std::vector<Phase>& phaseBefore,
                           const std::vector<PhaseSource>& sourceBefore)
{
    const size_t n = tl.phase.size();
    auto byStream = [&](size_t e, Phase p) { return tl.phase[e] == p && tl.source[e] == PhaseSource::Structure; };
    size_t firstBackward = n;
    for (size_t e = 0; e < n && firstBackward == n; ++e)
        if (tl.phase[e] == Phase::Backward)
            firstBackward = e;
    if (firstBackward == n || n != dev.eventAlloc.size())
        return 0;
    size_t given = 0;
    for (size_t e = 0; e < firstBackward;) {
        if (!byStream(e, Phase::Forward)) {
            ++e;
            continue;
        }
        size_t fEnd = e;
        while (fEnd + 1 < firstBackward && byStream(fEnd + 1, Phase::Forward))
            ++fEnd;
        size_t tEnd = fEnd; // its teardown, if one follows; the forward's own fall is inside it otherwise
        while (tEnd + 1 < firstBackward && byStream(tEnd + 1, Phase::Teardown))
            ++tEnd;
        int64_t kept = 0, dropped = 0;
        // From a few events before: the swings start a pass at its first block let go of again, and
        // what came just before it (the first weight's partition) is the same set-up's.
        for (size_t k = e > size_t(kSaved) ? e - size_t(kSaved) : 0; k <= fEnd; ++k)
            if (const Allocation* a = bornAt(dev, EventIndex(k))) {
                const EventIndex r = freeEventOf(*a);
                if (r == kNoEvent)
                    kept += classify_detail::isCublasWorkspaceSize(a->size) ? 0 : a->size; // a first matmul's, kept per handle
                else if (r <= EventIndex(tEnd) + kSaved && r - a->allocEvent > kSaved)
                    dropped += a->size; // held (an operator's last scratch, let go of at once, is not)
            }
        // Or what it let go of lives on in one block made with their bytes (within alignment padding):
        // the blocks flattened into one buffer (ZeRO's defragment after zero.Init, Megatron's
        // param_data, FSDP's flat parameters), not a graph dropped.
        bool flattened = false;
        for (size_t k = e; dropped > 0 && k < n && k <= tEnd + kSaved && !flattened; ++k)
            if (const Allocation* a = bornAt(dev, EventIndex(k)); a && freeEventOf(*a) == kNoEvent)
                flattened = a->size >= dropped && a->size - dropped <= std::max<int64_t>(dropped / 64, 4096);
        // The forward the first backward follows is the training's, whatever it keeps.
        size_t next = tEnd + 1;
        while (next < n && tl.phase[next] == Phase::Unknown)
            ++next;
        const bool trains = next < n && tl.phase[next] == Phase::Backward;
        if (!trains && ((kept > 0 && kept >= dropped) || flattened))
            for (size_t k = e; k <= tEnd; ++k) {
                tl.phase[k] = phaseBefore[k];
                tl.source[k] = sourceBefore[k];
                ++given;
            }
        e = tEnd + 1;
    }
    return given;
}

EventIndex forwardsFirstOutput(const DeviceTrace& dev, const PhaseTimeline& tl, EventIndex start, EventIndex end)
{
    constexpr EventIndex kFirstOperator = 8;
    auto keptPast = [](const Allocation& a, EventIndex e) {
        const EventIndex r = classify_detail::freeEventOf(a);
        return r == kNoEvent || r > e;
    };
    std::vector<EventIndex> before; // kept births just before the start, nearest first
    for (EventIndex e = start - 1; e >= 0 && start - e <= kFirstOperator && tl.phase[size_t(e)] == Phase::Unknown; --e)
        if (const Allocation* a = classify_detail::bornAt(dev, e); a && keptPast(*a, start))
            before.push_back(e);
    if (before.empty())
        return start;
    std::unordered_set<int64_t> keptSizes; // held longer than one operator
    for (EventIndex f = start; f <= end; ++f)
        if (const Allocation* b = classify_detail::bornAt(dev, f); b && keptPast(*b, f + kFirstOperator))
            keptSizes.insert(b->size);
    EventIndex from = start;
    for (EventIndex e : before)
        if (keptSizes.count(classify_detail::bornAt(dev, e)->size))
            from = e;
    return from;
}

} // namespace poolscope
