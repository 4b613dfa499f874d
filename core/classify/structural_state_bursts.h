#pragma once
// Private to core/classify: an optimizer making its state in a burst, and the first optimizer step
// after a backward that made no gradient of a weight's size. A sharding wrapper (FSDP2) reduces the
// gradients into buffers of its own, one per group of layers, and hands each weight its gradient only
// after the walk; the step's search, which looks for blocks of the gradients' sizes, then finds
// nothing. At its first step the optimizer makes its state in a burst (Adam's moments, zeros_like one
// weight after the other): blocks of the weights' own sizes, kept. Nothing here reads a name.
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <utility>
#include <vector>

namespace poolscope {

// An optimizer making its state at its first step (Adam's two moments per weight, zeros_like one
// after the other): runs of eight blocks or more made one after the other, none ever let go of, with
// no release between. The engine lets go of saved blocks between the gradients it makes, and a
// recomputed segment's blocks are let go of in the same backward. Each run from its first birth to
// its last, in event order.
struct StateBursts {
    std::vector<std::pair<EventIndex, EventIndex>> runs;
    bool at(EventIndex e) const;                             // e lies inside a run
    bool between(EventIndex after, EventIndex before) const; // a run has an event in (after, before)
    // An update's scratch once the state exists (a foreach optimizer's per-weight temporaries:
    // _foreach_sqrt of the second moments, let go of as a list): eight births or more with no
    // release between, most of their bytes of the sizes of blocks the run keeps (the weights'),
    // every one let go of in the run of releases that follows, nothing made between. From the
    // first birth to the last release, in event order. The engine lets go of saved blocks between
    // the gradients it makes, so no backward makes such a run.
    std::vector<std::pair<EventIndex, EventIndex>> scratch;
    bool scratchAt(EventIndex e) const;
    bool scratchBetween(EventIndex after, EventIndex before) const;
};
StateBursts stateBursts(const DeviceTrace& dev);

// An optimizer step read from the stream begins where blocks of a gradient's size are made, and the
// readings bound it by the gradient sizes they found (an embedding's gradient made at the
// backward's very end can be missing among them). Where such a step (source Structure) holds part
// of a burst, the whole burst becomes the step's: no other pass makes such a run. Events a frame or
// an annotation named stay as named. Returns the number of events placed.
size_t stepsCoverTheirBursts(PhaseTimeline& tl, const StateBursts& bursts);

// The first state burst that begins after `after` and ends before `before`, each of its blocks of a
// weight's size (`weightSizes`: RunState::weightSizes, by the bytes asked), one at least of a size `known` lacks (where the known gradients' sizes already find
// the step, nothing changes): its first event and its blocks' sizes, the step's search keys (not
// every size alive at the first forward: the batch is, and the next one would read as the step's).
// `first` is kNoEvent where there is none.
struct StepBurst {
    EventIndex first = kNoEvent;
    std::unordered_set<int64_t> sizes;
};
StepBurst firstStepBurst(const DeviceTrace& dev, const StateBursts& bursts, EventIndex after, EventIndex before,
                         const std::unordered_set<int64_t>& weightSizes, const std::unordered_set<int64_t>& known);

} // namespace poolscope
