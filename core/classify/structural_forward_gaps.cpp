// See structural_forward_gaps.h.
#include "core/classify/structural_forward_gaps.h"

#include "core/classify/structural_common.h"

#include <algorithm>

namespace poolscope {

size_t forwardsBetweenTrainingPasses(PhaseTimeline& tl, RepeatedForwardsOnce& repetition)
{
    if (std::find(tl.phase.begin(), tl.phase.end(), Phase::Backward) == tl.phase.end())
        return 0;
    const RepeatedForwards& calls = repetition.get();
    auto untouched = [&](const EventSpan& f) {
        for (EventIndex e = f.first; e <= f.last; ++e)
            if (tl.phase[size_t(e)] != Phase::Unknown)
                return false;
        return true;
    };
    size_t placed = 0;
    for (const EventSpan& f : calls.calls)
        if (untouched(f))
            classify_detail::placeStructural(tl, f.first, f.last, Phase::Forward, placed);
    for (const EventSpan& run : calls.layerRuns)
        if (untouched(run))
            classify_detail::placeStructural(tl, run.first, run.last, Phase::Forward, placed);
    return placed;
}

size_t forwardTailsBeforeBackwards(PhaseTimeline& tl)
{
    size_t placed = 0;
    const size_t n = tl.phase.size();
    for (size_t i = 1; i < n; ++i) {
        if (tl.phase[i] != Phase::Backward || tl.phase[i - 1] != Phase::Unknown)
            continue;
        size_t j = i;
        while (j > 0 && tl.phase[j - 1] == Phase::Unknown && tl.source[j - 1] == PhaseSource::None)
            --j;
        if (j == 0 || tl.phase[j - 1] != Phase::Forward)
            continue;
        for (size_t e = j; e < i; ++e) {
            tl.phase[e] = Phase::Forward;
            tl.source[e] = PhaseSource::Structure;
            ++placed;
        }
    }
    return placed;
}

} // namespace poolscope
