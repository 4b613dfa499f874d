#pragma once
// Private to core/classify: events between the passes the stream's readings placed that are a
// forward's too (used by structural_phases.cpp's inferFromStream). Nothing here reads a name.
#include "core/classify/phases.h"
#include "core/classify/structural_repetition.h"

#include <cstddef>

namespace poolscope {

// In a training run, the calls of the model where the stream's reading placed nothing at all
// (between a step's backward and the next forward): forwards that neither rise nor fall as a training
// pass does, a generate loop inside a training step (TRL's rollouts) or an evaluation under no_grad.
// Where a call is not told from the next (a prefill whose shapes the decode steps do not repeat), the
// runs of its layers.
size_t forwardsBetweenTrainingPasses(PhaseTimeline& tl, RepeatedForwardsOnce& repetition);

// A forward runs until its backward begins: the loss, and the head's outputs made after the last
// repeated layer, are the forward's too. Between a forward and the backward that follows it nothing
// else of a step runs (an optimizer step never sits between a forward and its backward), so events
// no reading placed there are the forward's tail, whatever named the two passes.
size_t forwardTailsBeforeBackwards(PhaseTimeline& tl);

} // namespace poolscope
