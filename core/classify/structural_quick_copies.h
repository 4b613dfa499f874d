#pragma once
// Private to core/classify: a .to() copy let go of at once is no batch.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// The rule batch-to-device reads `.to()`/`.cuda()` in the C++ frames (THPVariable_to) and calls the
// copy an input: a batch moved to the device. The same call converts dtypes (`logits.to(float32)`
// before a loss), and such a conversion is let go of as soon as the op that read it has made its
// output. A batch is moved before the pass that reads it and lives until that pass has run. A copy
// made inside a forward or backward pass and freed with at most kQuickCopyBirths other allocations
// made while it lived is the conversion's scratch: temporary, as its Python-only copy already says
// (frames gone, only the lifetime is left). Outside the passes (a data loader's host batch, freed
// once copied to the device) the frames' word stands.
constexpr size_t kQuickCopyBirths = 1;
void quickCopiesAreScratch(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
