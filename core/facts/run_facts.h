#pragma once
// The run's structure, worked out once per device by the classifier (which the Document runs once)
// and read by everyone who needs to know what the program did rather than what its frames are
// called: the classifier's structural decisions, the what-if, compare and steps.
//
// What is here is measured from the history (events, phases, lifetimes), never from names of the
// user's files or functions. Where the dump cannot tell (no history), a fact says "unknown" rather
// than "no".
#include "core/classify/phase.h"
#include "core/model/trace.h"

#include <cstdint>
#include <vector>

namespace poolscope {

struct PhaseTimeline;
struct Classification;
class FrameMatcher;

// Three-valued: the dump may not be able to say.
enum class Known : uint8_t { Unknown, No, Yes };

// A pass of the model: a maximal stretch of events of one phase whose own frames (or an annotation)
// named it, from its first to its last event. Passes index PhaseTimeline::runs too (`run`).
struct Pass {
    Phase phase = Phase::Unknown;
    EventIndex first = kNoEvent, last = kNoEvent;
    uint32_t run = 0;
};

// One training or inference step as the history shows it: the forward passes before a backward,
// that backward, then the optimizer step (kNoEvent where the step has none of them).
struct StepFacts {
    EventIndex first = kNoEvent, last = kNoEvent;
    EventIndex firstForward = kNoEvent, firstBackward = kNoEvent, firstOptimizerStep = kNoEvent;
};

// A parameter as the run shows it: the allocation, its size, and what it was made from (the
// allocation it replaced when a step rebuilt it by assigning p.data; npos when none).
struct ParameterFact {
    uint32_t allocation = 0;
    int64_t bytes = 0;
    uint32_t replaces = UINT32_MAX;
};

struct RunFacts {
    bool history = true; // alloc/free entries exist; without them every Known below is Unknown

    // Passes in event order, and the steps they make.
    std::vector<Pass> passes;
    std::vector<StepFacts> steps;
    size_t forwardPasses = 0, backwardPasses = 0, optimizerSteps = 0;
    EventIndex firstForward = kNoEvent, firstBackward = kNoEvent, firstOptimizerStep = kNoEvent;

    // Whether a training backward ran: a backward pass named by frames or an annotation, or the
    // autograd engine freeing tensors. A nested autograd call inside a forward
    // (torch.autograd.functional.jvp, torch.autograd.grad in a forward) is not one: its events are
    // forward (see FrameMatcher::stackPhase).
    Known backward = Known::Unknown;
    // Free events inside backward passes: the autograd engine releasing what the forward saved.
    size_t engineFrees = 0;
    // Grad mode of the forwards: Yes when something a forward made was freed by the autograd engine
    // (in backward or when its graph was torn down); No when the run has history and no forward's
    // product was ever released that way; Unknown without history.
    Known gradMode = Known::Unknown;
    // In a run without backward: most of what each forward made is still alive when the next forward
    // ends (the autograd graph kept by outputs the program holds: an evaluation without no_grad that
    // keeps its logits). Grad mode is then Yes although nothing released a graph.
    bool graphsKeptAcrossCalls = false;
    // A forward's products released by deleting its autograd graph without a backward (teardown
    // frames or a burst after the forward), before any OOM: grad mode was on and nothing trained on
    // the graph. (After an OOM the same releases are the exception unwinding, under no_grad as well.)
    bool graphsDroppedWithoutBackward = false;
    // Autocast regions: the forward passes that made autocast casts (allocations decided by a rule
    // with role weight_cast or cast_surplus). Empty when no stack shows one (which, with Python-only
    // frames, does not mean autocast was off: `autocast` then stays Unknown). Filled by addPoolFacts.
    std::vector<Pass> autocastRegions;
    Known autocast = Known::Unknown;
    // The parameters are gathered for each layer's use and let go of after it, in forward and again
    // in backward (FSDP, FSDP2, ZeRO-3, an offloading hook): what is kept between uses is a shard
    // (structural_sharded.cpp). Sharding advice does not apply to what is already sharded.
    bool parametersGathered = false;

    // Filled once pools are decided (classify's last step): parameters, gradients and optimizer
    // state by allocation index; the optimizer's step regions are the OptimizerStep passes.
    std::vector<ParameterFact> parameters;
    std::vector<uint32_t> gradients, optimizerState;

    bool backwardSeen() const { return backward == Known::Yes; }
    // The pass (index into passes) holding event e, or -1.
    int passAt(EventIndex e) const;
};

// Built from the phase timeline, before any pool is decided: passes, steps, backward, engine frees,
// grad mode.
RunFacts buildRunFacts(const DeviceTrace& dev, const PhaseTimeline& phases, bool history);
// Adds what the pools say (parameters, gradients, optimizer state, autocast): classify's last step.
void addPoolFacts(RunFacts& facts, const DeviceTrace& dev, const Classification& c);

} // namespace poolscope
