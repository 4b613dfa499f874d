#pragma once
#include "core/classify/phase.h"
#include "core/engine/document.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope {

// How a device's recording was split into steps, strongest first. The annotations are PyTorch's own
// instrumentation (the profiler's ProfilerStep#N, Optimizer.step's record_function); the phases are
// the classifier's (frames, then annotation windows); the repeating pattern needs neither names nor
// frames: the allocation stream of a training loop repeats itself once per step.
enum class StepSource : uint8_t { ProfilerSteps, OptimizerSteps, Phases, RepeatingPattern, Whole, None };
std::string_view stepSourceName(StepSource s); // "profiler_steps", "optimizer_steps", ...

struct Step {
    int index = 0;                  // 0-based
    std::string name;               // "ProfilerStep#3" when an annotation named it, else empty
    EventIndex start = 0, end = 0;  // inclusive events
    int64_t peakAllocated = 0;
    EventIndex peakEvent = kNoEvent;
    Phase peakPhase = Phase::Unknown;
    int64_t aliveAtStart = 0; // allocated bytes just before `start`
    int64_t aliveAtEnd = 0;   // allocated bytes after `end`
    int64_t growth() const { return aliveAtEnd - aliveAtStart; }
    // False for the last step when the recording stopped inside it (an OOM, a dump taken mid-step):
    // shorter than the others, no end of its own.
    bool complete = true;
};

struct StepTable {
    StepSource source = StepSource::None;
    std::string how;                // one sentence: how the steps were found
    std::vector<std::string> notes; // what the dump cannot tell (one step, no history, ...)
    std::vector<Step> steps;
    EventIndex setupEnd = kNoEvent; // last event before the first step (set-up, model build); kNoEvent: none
    int64_t period = 0;             // RepeatingPattern: allocations per step
    // Phases read from the allocation stream alone (no frame or annotation named a pass): the step
    // ends are the stream's pass starts, which can fall before the caller let go of the previous
    // call's output, so a leak must show at every step end (see findLeaks).
    bool passesFromStream = false;

    size_t completeSteps() const;
    // Growth of the memory alive at step ends, per step: (alive at the last complete step's end -
    // alive at the first one's end) / (complete steps - 1). 0 with fewer than two complete steps.
    int64_t growthPerStep() const;
};

// Splits one device's recording into steps (see StepSource for the order tried).
StepTable findSteps(const DeviceDocument& doc);

// The step holding `event`; -1 when it is outside every step.
int stepOf(const StepTable& table, EventIndex event);

} // namespace poolscope
