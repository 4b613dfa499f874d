#pragma once
// Private to core/classify: a cache kept from one call of a model to the next, found from the
// repetition of the model's layers where neither frames nor the passes tell the calls apart (a
// generate loop whose prefill and decode steps differ in shape, read as one long pass).
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// In a run without backward (history, no backward pass, the forwards' products never released by
// the autograd engine), blocks made inside one stretch of repeating layers and let go of inside a
// later stretch are kept from one call of the model's layers into the next: a cache (a KV cache
// grown or replaced per token), at 60 %. At least three such blocks must cross between the two
// stretches (a cache keeps one or two per layer, and layers repeat three times or more to be seen);
// the residual stream crossing between two kinds of layers of one call is one block. The last
// stretch's own cache (held to the end, or let go of after it) is what replaced a cache block: made
// in that stretch and, within the few events of one cache update (torch.cat, then the old block
// let go of), followed by the release of a cache block no larger than it.
void cacheAcrossLayerRuns(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
