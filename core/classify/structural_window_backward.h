#pragma once
// Private to core/classify: a frameless recording that opens inside a backward (a ring buffer that
// kept only a step's last part, a capture started from a hook), read before the other stream
// readings (structural_phases.cpp). Nothing here reads a name.
//
// Why it shows: the forward that the backward follows ran before the recording, so the tensors it
// saved are blocks from before recording, and the autograd engine lets go of them node by node while
// it makes each weight's gradient (a block of the weight's size, kept for the optimizer step) and
// its own scratch. Without frames the swings see no rise (the saved blocks were never made in the
// recording) and the layers' repetition reads as forwards.
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <cstddef>
#include <cstdint>
#include <unordered_set>

namespace poolscope {

struct WindowBackward {
    EventIndex last = kNoEvent;             // the backward's last event; kNoEvent where there is none
    std::unordered_set<int64_t> gradientSizes; // size keys of the gradients it made and kept
};

// From the recording's first event: the releases of blocks from before recording that no state size
// has (state: the blocks from before recording alive to its end, weights and an optimizer's moments;
// zero_grad's releases have their sizes), at least 8, up to the last of them before a gap of more
// than 512 events without one; in that stretch the blocks made and kept past it of a state size (the
// gradients: at least 2) weigh at least three quarters of every block it makes and keeps (a forward
// keeps its activations, some of a weight's size by chance, and a generate loop its new cache
// blocks), and those releases at least a quarter of them (a forward lets go of little it did not
// make: the window cut into ViT's mixed-precision forward let go of 55 MiB and kept 3.9 GiB, 47 %
// of it of weight sizes; Lightning's and a Llama's backwards 116 of 212 and 1,299 of 1,413 MiB,
// 100 and 92 % gradients). Only where no frame or
// annotation named a pass (a named optimizer step is no pass).
WindowBackward backwardTheRecordingOpensIn(const DeviceTrace& dev, const PhaseTimeline& tl);

// Its optimizer step, where none is named or read after it: before the next forward, zero_grad or
// teardown a reading found, the stretch that makes or lets go of blocks of its gradients' sizes, to
// the release of the temporaries it made. Placed on the events no reading placed; returns how many.
size_t placeStepAfterWindowBackward(const DeviceTrace& dev, PhaseTimeline& tl, const WindowBackward& opened);

} // namespace poolscope
