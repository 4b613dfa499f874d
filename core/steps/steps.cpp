#include "core/steps/steps.h"

#include "core/steps/step_boundaries.h"

#include <algorithm>
#include <optional>

namespace poolscope {

using steps_detail::Range;

std::string_view stepSourceName(StepSource s)
{
    switch (s) {
    case StepSource::ProfilerSteps: return "profiler_steps";
    case StepSource::OptimizerSteps: return "optimizer_steps";
    case StepSource::Phases: return "phases";
    case StepSource::RepeatingPattern: return "repeating_pattern";
    case StepSource::Whole: return "whole_recording";
    case StepSource::None: return "none";
    }
    return "none";
}

size_t StepTable::completeSteps() const
{
    return size_t(std::count_if(steps.begin(), steps.end(), [](const Step& s) { return s.complete; }));
}

int64_t StepTable::growthPerStep() const
{
    const Step* first = nullptr;
    const Step* last = nullptr;
    size_t n = 0;
    for (const Step& s : steps)
        if (s.complete) {
            first = first ? first : &s;
            last = &s;
            ++n;
        }
    return n < 2 ? 0 : (last->aliveAtEnd - first->aliveAtEnd) / int64_t(n - 1);
}

int stepOf(const StepTable& table, EventIndex event)
{
    auto it = std::partition_point(table.steps.begin(), table.steps.end(), [&](const Step& s) { return s.end < event; });
    return it != table.steps.end() && it->start <= event ? int(it - table.steps.begin()) : -1;
}

namespace {

// Steps must not overlap and must lie inside the recording; annotation windows can nest or repeat.
std::vector<Range> tidy(std::vector<Range> ranges, EventIndex last)
{
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
    std::vector<Range> out;
    for (Range r : ranges) {
        r.end = std::min(r.end, last);
        if (!out.empty() && r.start <= out.back().end)
            r.start = out.back().end + 1;
        if (r.start <= r.end)
            out.push_back(std::move(r));
    }
    return out;
}

// Annotations that stop before the recording does (a ring buffer that kept the first step's, a
// profiler window shorter than the run): when the stretch after the last annotated step is longer
// than any annotated step and the phases find more steps, the phases are the better split.
bool tailOutgrows(const std::vector<Range>& annotated, const DeviceTrace& dev, const Classification* c)
{
    if (annotated.empty() || annotated.back().complete || !c || !c->phases.anyFrameEvidence)
        return false;
    EventIndex longest = 0;
    for (const Range& r : annotated)
        if (r.complete)
            longest = std::max(longest, r.end - r.start + 1);
    const Range& tail = annotated.back();
    if (tail.end - tail.start + 1 <= longest)
        return false;
    size_t complete = 0, phaseComplete = 0;
    for (const Range& r : annotated)
        complete += r.complete;
    for (const Range& r : steps_detail::phaseSteps(dev, *c))
        phaseComplete += r.complete;
    return phaseComplete > complete;
}

// The repeating allocation pattern and what it turned out to be, computed once: the stream's passes
// are weighed against it (whichever tells more complete steps apart) and, where they lose, it is the
// reading.
struct Repeating {
    std::vector<Range> ranges;
    int64_t period = 0;
    bool layers = false; // the layers of one pass (steps_detail::repetitionsAreLayers)
    bool inPasses = false; // repetitions inside the passes the stream shows (steps_detail::repetitionsInsidePasses)
    bool steps() const { return ranges.size() >= 2 && !layers && !inPasses; }
};

Repeating readRepeating(const DeviceTrace& dev, const Classification* c)
{
    Repeating rep;
    rep.ranges = steps_detail::repeatingSteps(dev, &rep.period);
    if (rep.ranges.size() >= 2) {
        rep.layers = steps_detail::repetitionsAreLayers(dev, rep.ranges);
        rep.inPasses = !rep.layers && c && steps_detail::repetitionsInsidePasses(dev, *c, rep.ranges);
    }
    return rep;
}

size_t completeOf(const std::vector<Range>& v)
{
    return size_t(std::count_if(v.begin(), v.end(), [](const Range& x) { return x.complete; }));
}

bool anyRunOf(const Classification& c, Phase p)
{
    return std::any_of(c.phases.runs.begin(), c.phases.runs.end(), [p](const auto& run) { return run.phase == p; });
}

} // namespace

StepTable findSteps(const DeviceDocument& doc)
{
    const DeviceTrace& dev = doc.device();
    const Classification* c = doc.classification();
    StepTable table;
    const EventIndex last = EventIndex(dev.eventCount()) - 1;
    if (dev.eventCount() == 0 || dev.allocations.empty() || (c && !c->history)) {
        table.source = StepSource::None;
        table.how = "no steps: the dump holds no allocation history (only the final segments)";
        table.notes.push_back("without history the dump cannot tell steps apart, nor what grows between them");
        return table;
    }
    std::vector<Range> ranges;
    bool silentUndecided = false; // steps_detail::phaseSteps
    std::optional<Repeating> rep;
    auto repeating = [&]() -> Repeating& {
        if (!rep)
            rep = readRepeating(dev, c);
        return *rep;
    };
    if (auto r = steps_detail::profilerSteps(doc.trace(), dev); !r.empty()) {
        table.source = StepSource::ProfilerSteps;
        table.how = "from the profiler's ProfilerStep#N annotations";
        ranges = std::move(r);
    } else if (auto r = steps_detail::optimizerSteps(doc.trace(), dev, c); !r.empty() && !tailOutgrows(r, dev, c)) {
        table.source = StepSource::OptimizerSteps;
        table.how = "each optimizer step's annotation ends a step";
        ranges = std::move(r);
    } else if (c && c->phases.anyFrameEvidence && !(r = steps_detail::phaseSteps(dev, *c, &silentUndecided)).empty()) {
        table.source = StepSource::Phases;
        bool silentStep = false, backwardSince = false;
        for (const auto& run : c->phases.runs) {
            silentStep = silentStep || (run.phase == Phase::ZeroGrad && backwardSince);
            backwardSince = run.phase == Phase::Backward || (backwardSince && run.phase != Phase::OptimizerStep && run.phase != Phase::ZeroGrad);
        }
        const bool opt = anyRunOf(*c, Phase::OptimizerStep);
        const bool unnamedEnds = std::any_of(r.begin(), r.end(), [](const Range& x) { return x.unnamedEnd; });
        table.how = opt && silentStep ? "from the phases: each optimizer step ends a step (where one allocated nothing, the zero_grad after "
                                        "its backward)"
                    : opt && unnamedEnds ? "from the phases: each optimizer step ends a step (where later ones allocated nothing and "
                                           "nothing names them, each step ends as the last named one did: after as many backward "
                                           "passes, where the next forward begins)"
                    : opt ? "from the phases: each optimizer step ends a step"
                    : anyRunOf(*c, Phase::Backward) ? "from the phases: each backward ends a step (no optimizer step was recorded)"
                                                    : "from the phases: each forward pass is a step (no backward was recorded)";
        ranges = std::move(r);
    } else if (c && !c->phases.anyFrameEvidence && (r = steps_detail::phaseSteps(dev, *c)).size() >= 2 &&
               steps_detail::structuralPassesAreSteps(dev, *c, r) && !(repeating().steps() && completeOf(repeating().ranges) > completeOf(r))) {
        // Where the pattern tells more complete steps apart (a frameless decoder whose first call the
        // stream read as one pass with the rest), the pattern is read, in the next branch.
        table.source = StepSource::Phases;
        table.passesFromStream = true;
        table.how = anyRunOf(*c, Phase::Backward) ? "from the passes the allocation stream shows (no frame or annotation names them): each "
                                                    "backward and what follows it up to the next forward is a step"
                                                  : "from the passes the allocation stream shows (no frame or annotation names them): each "
                                                    "forward pass is a step";
        ranges = std::move(r);
    } else if (repeating().steps()) {
        table.source = StepSource::RepeatingPattern;
        table.period = repeating().period;
        table.how = "from the repeating allocation pattern (" + std::to_string(table.period) +
                    " allocations per step), boundaries at the lowest memory between repetitions";
        ranges = std::move(repeating().ranges);
    } else if (repeating().inPasses && (r = steps_detail::phaseSteps(dev, *c)).size() >= 2) {
        // No frame names a pass, but the stream's own reading found several, each holding repetitions.
        table.source = StepSource::Phases;
        table.how = "from the passes the allocation stream shows (no frame names them); the allocation pattern repeats "
                    "inside each pass: its layers, not steps";
        ranges = std::move(r);
    } else {
        table.source = StepSource::Whole;
        const bool layers = repeating().layers, inPasses = repeating().inPasses;
        table.how = layers     ? "one step: the allocation pattern repeats, but each repetition keeps most of what it made and holds "
                                 "no repeats of its own: the layers of one pass, not steps or calls"
                    : inPasses ? "one step: the allocation pattern repeats inside what the allocation stream reads as one pass (no "
                                 "frame names it): the layers of one pass, or steps the stream cannot tell apart"
                               : "one step: neither annotations, phases nor a repeating allocation pattern mark steps";
        ranges.push_back(Range{0, last, {}, true});
    }
    ranges = tidy(std::move(ranges), last);
    const PhaseTimeline* phases = c ? &c->phases : nullptr;
    for (const Range& r : ranges) {
        Step s;
        s.index = int(table.steps.size());
        s.name = r.name;
        s.start = r.start;
        s.end = r.end;
        s.complete = r.complete;
        s.aliveAtStart = dev.allocatedAt(r.start - 1);
        s.aliveAtEnd = dev.allocatedAt(r.end);
        s.peakAllocated = dev.allocated[size_t(r.start)];
        s.peakEvent = r.start;
        for (EventIndex i = r.start; i <= r.end; ++i)
            if (dev.allocated[size_t(i)] > s.peakAllocated) {
                s.peakAllocated = dev.allocated[size_t(i)];
                s.peakEvent = i;
            }
        if (phases && size_t(s.peakEvent) < phases->phase.size())
            s.peakPhase = phases->phase[size_t(s.peakEvent)];
        table.steps.push_back(std::move(s));
    }
    if (!table.steps.empty() && table.steps.front().start > 0)
        table.setupEnd = table.steps.front().start - 1;
    const size_t complete = table.completeSteps();
    if (complete < 2)
        table.notes.push_back(complete == 1 ? "one step: growth from step to step and leaks cannot be judged"
                                            : "no complete step: growth from step to step and leaks cannot be judged");
    else if (complete == 2)
        table.notes.push_back("two steps: too few to tell a leak from state made once (leaks need three)");
    if (table.source == StepSource::Phases && silentUndecided)
        table.notes.push_back("after the last optimizer step the dump shows, backward passes run into forwards with nothing between: "
                              "micro-batches of a gradient accumulation, or optimizer steps that allocate nothing (a fused AdamW, "
                              "SGD's momentum); the recording opens inside the step that would tell how many backwards make a "
                              "step, so all of them are read as one step");
    if (!table.steps.empty() && !table.steps.back().complete)
        table.notes.push_back("the recording stops inside the last step (" +
                              std::string(dev.ooms.empty() ? "the dump was taken mid-step" : "an OOM") + "): it is not compared");
    return table;
}

} // namespace poolscope
