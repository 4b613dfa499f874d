#pragma once
#include "core/classify/frame_matcher.h"
#include "core/classify/phase.h"
#include "core/model/trace.h"

#include <limits>
#include <string>
#include <vector>

namespace poolscope {

// A phase window opened and closed by a record_function annotation (external_annotations).
struct PhaseWindow {
    std::string name;
    Phase phase = Phase::Unknown;
    int64_t startUs = 0; // inclusive; INT64_MIN when the START fell out of the ring buffer
    int64_t endUs = 0;   // inclusive; INT64_MAX when the END never came (the dump was taken inside it)
};

// Per event: the phase it belongs to, where that came from, and which run (maximal stretch of
// events with one phase) it is in. Lifetimes are judged on runs: "freed in the same phase" means
// "freed in the same run", so one step's forward is not confused with the next step's.
struct PhaseTimeline {
    std::vector<Phase> phase;
    std::vector<PhaseSource> source;
    std::vector<uint32_t> run;
    struct Run {
        Phase phase = Phase::Unknown;
        EventIndex first = 0, last = 0;
        // The run this one continues: itself, or for a backward run the backward it resumes after
        // optimizer steps run inside it (a post-accumulate-grad hook stepping each parameter as its
        // gradient is made: torchtune's optimizer_in_bwd), with nothing else between. "Freed in the
        // same phase" compares these, so the engine's products let go of after a nested step are
        // still the backward's own.
        uint32_t continues = 0;
    };
    std::vector<Run> runs;
    std::vector<PhaseWindow> windows; // this device's annotation windows that name a phase
    std::vector<FrameId> decisiveFrame; // per StackId: the frame that named the stack's phase
    bool anyFrameEvidence = false;

    // Whether a frame or an annotation named event e's phase (not inherited, not read off the stream).
    bool named(EventIndex e) const { return source[size_t(e)] == PhaseSource::Frames || source[size_t(e)] == PhaseSource::Annotation; }
    // Whether event e is in an optimizer step a frame or an annotation named.
    bool namedStep(EventIndex e) const { return phase[size_t(e)] == Phase::OptimizerStep && named(e); }

    // Whether events a and b lie in one phase run, counting a backward resumed after nested
    // optimizer steps as the same run.
    bool sameRun(EventIndex a, EventIndex b) const { return runs[run[size_t(a)]].continues == runs[run[size_t(b)]].continues; }

    // The run an allocation was born in; 0 for one that predates recording (no birth event) or
    // where the timeline has no runs.
    uint32_t runOf(const Allocation& al) const
    {
        return !al.preexisting() && al.allocEvent >= 0 && size_t(al.allocEvent) < run.size() ? run[size_t(al.allocEvent)] : 0u;
    }
};

// The phase of event `at`, or where it has none (an OOM's own entry carries no frames), of the last
// event before it that has one, looking back at most `within` events; Unknown past that.
inline Phase phaseAtOrBefore(const PhaseTimeline& tl, EventIndex at, EventIndex within = std::numeric_limits<EventIndex>::max())
{
    Phase p = Phase::Unknown;
    for (EventIndex e = std::min<EventIndex>(at, EventIndex(tl.phase.size()) - 1); e >= 0 && at - e <= within && p == Phase::Unknown; --e)
        p = tl.phase[size_t(e)];
    return p;
}

std::vector<PhaseWindow> phaseWindows(const Trace& trace, const DeviceTrace& dev, const RuleSet& rules);

// Frames decide first (the innermost frame that names a phase; a forward inside backward is
// checkpoint recomputation and counts as backward), then annotation windows, then the previous
// event's phase (the autograd engine's thread has no Python frames, so with stacks='python' its
// events are empty and belong to the backward() that started them).
PhaseTimeline computePhases(const Trace& trace, const DeviceTrace& dev, const RuleSet& rules, FrameMatcher& matcher);

} // namespace poolscope
