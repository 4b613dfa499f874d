#pragma once
// Private to core/classify: where a backward the swings found ends (structural_phases.cpp). After
// the last release of what the forward saved come the backward's last products (the first layers'
// gradients, an embedding's made last) and the release of its own scratch (the first layer's input
// gradient); the step after it makes and keeps blocks of the same sizes. Nothing here reads a name.
#include "core/model/trace.h"

#include <cstdint>
#include <unordered_set>
#include <utility>
#include <vector>

namespace poolscope {

// The run's state where the first forward starts (`firstForward`): the blocks alive there, from
// before recording or made before it and kept. A gradient has the size of one of them; and the
// state outlives every backward, which what the first forward made before its first scratch does
// not.
struct RunState {
    std::unordered_set<int64_t> sizes;                    // as classify_detail::sizeKey rounds them
    // The same blocks by the bytes their tensors asked for: a block from before recording carries its
    // rounded size, while the recording knows a block it saw made by its requested bytes (a weight of
    // 131,072,000 B sits in a 126 MiB block; its gradient is made at 131,072,000 B).
    std::unordered_set<int64_t> weightSizes;
    std::vector<std::pair<EventIndex, int64_t>> releases; // (release, or the end; bytes), sorted
    std::vector<int64_t> after;                           // suffix sums of `releases`' bytes
    // The bytes of the state still alive after event e.
    int64_t aliveAfter(EventIndex e) const;
};
RunState runStateAt(const DeviceTrace& dev, EventIndex firstForward);

// The backward's last event, from `lastSaved` (its last release of what the forward saved; the
// release began at `releaseStart`) and before `nextStart` (the next forward). It goes on over:
// - blocks made and kept (the first layers' gradients), but not a block made and let go of at once
//   (the next stretch's), nor, of a weight's size, more than the run's state less the gradients the
//   walk made: a backward makes each weight's gradient once, so an embedding's gradient fits and an
//   optimizer's state made at its first step (Adam's two moments per weight, straight after the
//   backward where nothing is clipped) does not;
// - releases of its own scratch, but not a run of releases of gradients with nothing made between
//   (zero_grad after an update that made nothing: bitsandbytes' 8-bit step works in place).
EventIndex backwardTailEnd(const DeviceTrace& dev, const RunState& state, EventIndex releaseStart, EventIndex lastSaved,
                           EventIndex nextStart);

// A stretch after a backward that the dump ends in, read as its optimizer step, which goes on letting
// go of what the forward made (eight or more blocks from before `backwardStart` or before recording,
// of no gradient's size: saved activations) and keeps more bytes of the gradients' sizes than of
// others to the end, is the backward still running: a step lets go of its own scratch and of the
// state it rewrites, of the weights' sizes, and the next forward lets go of the last batch as it
// starts and keeps activations (llama_autocast_adamw_midbackward's last fifth: the backward's last
// 376 events, the remaining layers' gradients among them, read as a step and 57 MiB of gradients as
// its state).
bool backwardRunsToTheEnd(const DeviceTrace& dev, EventIndex from, EventIndex backwardStart, const std::unordered_set<int64_t>& gradientSizes);

} // namespace poolscope
