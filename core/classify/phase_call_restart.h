#pragma once
// Where a forward pass restarts though the caller's code between two calls made nothing.
//
// A pass ends where the caller's code takes over (phases.cpp): an evaluation loop that keeps each
// call's logits (`kept.append(model(ids).logits)`) allocates nothing of its own between calls, so
// four calls read as one forward and steps, leaks and "kept into the next forward" see one pass.
// The Python frames still show the restart: within one call, the function that made the pass's
// first block moves on to later lines (the embedding, then the layers' loop, then the norm); a new
// call makes its first block again from the same site, every frame the same, after a function
// above it had gone on to a later line. A loop inside the model's own forward comes back to a site
// inside it the same way when the pass's first block is made inside the loop (a GCN's
// `for conv in self.convs: x = relu(conv(x))`), so restarts are taken for calls only where the
// structure says so too: from the second call on, every call makes the same blocks from the same
// sites in the same order (layers differ in width, and the last has no activation after it), and
// each keeps a quarter or more of what it made past the next call (with grad on and an output of
// each call kept, the graph; under no_grad a layer's tensors go within the next layer). Calls under
// no_grad with nothing of the caller's between them stay one pass, as before.
//
// A recording that begins mid-call (a ring buffer) opens inside the model, where the restarts at
// the opening's site are the layers'; there the calls are where the shallowest function that moves
// back to an earlier line does so, if the opening sat past that line (it was mid-call), judged by the
// same structure.
//
// Only line order is read, never a file or function name, so a renamed dump (lines kept) splits the
// same; a frameless one has nothing to split on. Only in runs without backward: in training the
// backward and the optimizer step end each pass already.
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <cstdint>
#include <vector>

namespace poolscope {

// Marks boundary[e] = 1 at each allocation made from the very site (all Python frames) that opened
// its forward run, after a function on that stack had gone on to a later line. Does nothing where any event is
// Backward. Returns the number of boundaries added.
size_t splitRestartedCalls(const FrameTable& frames, const DeviceTrace& dev, const PhaseTimeline& tl, std::vector<uint8_t>& boundary);

} // namespace poolscope
