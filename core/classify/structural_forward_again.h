#pragma once
// Private to core/classify: a forward that frames, annotations and the stream's swings left
// unplaced, told by what it makes. A model called again on a batch of the same shape makes the same
// blocks in the same order, whatever the program keeps of them: an evaluation forward with grad on
// whose loss is added to a running total (its graph kept, so it neither rises and falls like a
// training pass nor frees what it made), a reference model's call inside a step, a forward
// annotated nowhere between two annotated ones.
#include "core/classify/phases.h"
#include "core/classify/structural_engine_walks.h"
#include "core/model/trace.h"

#include <cstddef>

namespace poolscope::classify_detail {

// A stretch of events after the first forward that no reading placed (or that only the stream's
// shape read as an optimizer step: blocks of a gradient's size after a backward) whose births follow,
// size after size and in order, the births of a forward of the usual length already placed on this
// device (at least kMinRepeatedBirths of them, and most of what the stretch makes between its first
// and last such birth) is that model called again: each call's events, from its first to its last
// such birth, are a forward; the caller's code between two calls keeps its phase. A piece whose
// births all lie in `bursts` and have the sizes of the run's state (the blocks alive where the first
// forward starts) is an optimizer making its state (blocks made one after the other, none let go
// of): where a batch's tokens equal the width, Adam's moments, made weight after weight, have the
// sizes of a layer's activations in their order, but a forward's operators let go of their scratch.
// Returns the number of events placed.
size_t forwardsRepeatingAForward(const DeviceTrace& dev, PhaseTimeline& tl, const StateBursts& bursts);
inline size_t forwardsRepeatingAForward(const DeviceTrace& dev, PhaseTimeline& tl)
{
    return forwardsRepeatingAForward(dev, tl, stateBursts(dev));
}

// Fewer births than a few layers' operators match by chance (a norm, a projection, a residual).
constexpr size_t kMinRepeatedBirths = 32;

} // namespace poolscope::classify_detail
