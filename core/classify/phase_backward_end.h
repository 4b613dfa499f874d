#pragma once
// Where a named backward ends when nothing names the forward after it.
//
// Events whose frames name no phase inherit the phase of the event before them (phases.cpp): the
// autograd engine's events with Python-only frames, the caller's loss and update code. In a script
// without nn.Module (plain functions for attention and the MLP) no frame names a forward, so after
// the first loss.backward() every event of the next step inherits "backward", and the next forward's
// saved tensors read as gradients. The structure says where that forward is: a block the caller's
// code makes after one backward that the autograd engine releases during the next backward was
// saved for it by a forward (the engine releases what a node saved once the node ran; a gradient
// the engine makes is let go of by the caller, not by the engine).
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <cstdint>
#include <vector>

namespace poolscope {

// Re-places, as Forward (source Structure), the inherited-"backward" events from the first block
// the caller's code made that a later backward's engine releases, to the next event a frame or an
// annotation named. `python[e]`: event e's stack holds a Python frame (the caller's code or a
// Python operator), as computePhases judged it; the engine's thread has none. Only where no frame
// or annotation names a forward between that block's birth and its release (where one does, the
// frames show the forward). Returns the number of events re-placed.
size_t endInheritedBackward(const DeviceTrace& dev, const std::vector<uint8_t>& python, PhaseTimeline& tl);

// Where a recording begins inside a backward: places, as Backward (source Structure), the events
// before `firstKnown` (the first event a frame or an annotation named) when the device records
// frames (`framesRecorded`), every one of them has none (the autograd engine's thread: it records
// no Python frame), and `firstKnown` is a Backward its own frames named (the program's thread,
// blocked in the backward call until the engine is done). Anything with a frame before it, or a
// first named event of another phase, leaves them Unknown. Returns the number of events placed.
size_t leadingEngineEventsOfBackward(const FrameTable& frames, const DeviceTrace& dev, bool framesRecorded,
                                     EventIndex firstKnown, PhaseTimeline& tl);

// Where a recording begins inside a backward and no frame names it (a frameless ring buffer's
// window): an optimizer step a frame or an annotation names follows the opening stretch with nothing
// between. A step reads the gradients a backward made, and a forward the recording opened inside
// would be followed by its backward before any step: the stretch, from the recording's first event
// to the step, is that backward (source Structure). Where the stream's shape read the stretch as a
// forward (from event 0, or after events no reading placed), always; where it placed nothing before
// the step, where the stretch acts as a backward: it lets go of blocks from before recording (what
// the forward saved) for an eighth of the bytes it lets go of or more, and makes a block kept into
// the step (a gradient). Returns the number of events re-placed.
size_t openingBackwardBeforeANamedStep(const DeviceTrace& dev, PhaseTimeline& tl);

} // namespace poolscope
