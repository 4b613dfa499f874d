#pragma once
// Private to core/steps: the ways a recording is split into steps, each returning event ranges.
#include "core/engine/document.h"

#include <string>
#include <vector>

namespace poolscope::steps_detail {

struct Range {
    EventIndex start = 0, end = 0; // inclusive
    std::string name;
    bool complete = true;
    bool unnamedEnd = false; // phaseSteps: no event names its end (an optimizer step that allocated nothing)
};

// ProfilerStep#N windows (torch.profiler's schedule marks every step with one).
std::vector<Range> profilerSteps(const Trace& trace, const DeviceTrace& dev);
// Each Optimizer.step window ends a step (its record_function, or a window the rules call the
// optimizer step); the first step begins where the run's first phase does.
std::vector<Range> optimizerSteps(const Trace& trace, const DeviceTrace& dev, const Classification* c);
// From the classifier's phase runs: an optimizer step ends a step; without one, a backward followed
// by a forward; without backward, each forward pass is a step. `silentUndecided`, where given, is set
// where backwards run into forwards after the last optimizer step the stream shows and the recording
// cannot tell whether they are micro-batches or steps whose optimizer step allocated nothing (it
// opened inside the step that would tell).
std::vector<Range> phaseSteps(const DeviceTrace& dev, const Classification& c, bool* silentUndecided = nullptr);
// The allocation stream's own period: the smallest lag at which the sequence of (call stack, size)
// repeats itself; boundaries at the lowest allocated bytes in each period (between two steps the
// step's transient memory is gone). `period` receives the allocations per step.
std::vector<Range> repeatingSteps(const DeviceTrace& dev, int64_t* period);
// Whether the repeating pattern's repetitions are the layers of one pass rather than steps or calls.
// A step's passes let go of their activations before the next, so memory falls back and a
// repetition keeps little of what it rose by; the layers of one forward each keep what they made
// (saved for backward, or held to an OOM inside it), and so do calls that keep their graphs (an
// evaluation loop with grad on, whose growth per call is the finding). A call runs its model's
// layers, whose allocations repeat within it; one layer does not repeat within itself. True where
// at least three quarters of the complete repetitions keep half or more of their rise and a
// complete one (the second: the first can hold warm-up) does not repeat within itself.
bool repetitionsAreLayers(const DeviceTrace& dev, const std::vector<Range>& ranges);
// Whether the repetitions lie inside the passes the classifier read (RunFacts::passes): more than
// half of the complete ones fall wholly inside a pass that holds two or more of them. A step or a
// call holds its passes, never the other way round, so repetitions a pass holds are its layers (or
// steps the stream cannot tell apart, where its reading found one pass for several): a frameless
// no_grad forward's layers, which let go of what they make as steps do, read as 23 to 43 "steps"
// otherwise, and a grad-mode forward's as steps whose growth is a leak.
bool repetitionsInsidePasses(const DeviceTrace& dev, const Classification& c, const std::vector<Range>& ranges);
// Whether steps phaseSteps cut from passes the allocation stream alone placed (no frame or annotation
// named a phase) are steps: two or more complete ones, alike (none allocates more than twice what
// another does), and either a backward the stream read among the passes (the autograd engine's walk,
// which no layer makes), or, forward only, most of them repeat within themselves as a call running
// its model's layers does (a layer does not: a frameless no_grad forward's layers, each letting go of
// what it made, read as passes too).
bool structuralPassesAreSteps(const DeviceTrace& dev, const Classification& c, const std::vector<Range>& ranges);

} // namespace poolscope::steps_detail
