#pragma once
// Private to core/classify: a forward's graph released when the next forward's output replaces it.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// `out = model(x)` in a loop with grad on keeps each forward's graph (its saved tensors) until the
// next forward has returned and its output replaces `out`: then the whole earlier graph goes in one
// burst of frees with no allocation between. The autograd engine's C++ frames show that release
// (RunFacts::gradMode); with Python frames only or none it looks like state "made by one forward
// and let go of by a later one", which forwardCache would call a KV cache (the synth forward-only
// model Python-only: 89.8 % of its bytes moved). A cache is let go of inside the next forward, a
// layer at a time between its allocations (torch.cat per token), or never, or in a burst before
// the next forward begins (a new prompt); a graph in a burst after a later forward ran.
// True when such a burst frees at least kMinGraphBurst blocks born in one earlier forward pass,
// with another forward pass begun between that pass's end and the burst.
constexpr size_t kMinGraphBurst = 8;
bool graphReleasedAfterLaterForward(const DeviceTrace& dev, const Classification& c);

} // namespace poolscope::classify_detail
