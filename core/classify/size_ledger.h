#pragma once
// The size ledger (see size_ledger.cpp): stackless blocks from before recording, counted per
// gradient of their size, after the rules and before the structural readings, and again after them
// (a window's last gradients can be read as gradients only by a structural pass; what the first
// run split, the second finds split and leaves).
#include "core/classify/classifier.h"
#include "core/model/trace.h"

#include <cstdint>
#include <vector>

namespace poolscope {

// What the ledger reads of each allocation besides its pool and its event (indexed like
// DeviceTrace::allocations).
struct LedgerBlock {
    int64_t mirrorSize = 0;       // the classifier's size key (a pre-existing block's requested size)
    bool aliveWholeTrace = false; // from before recording and never let go of
    bool emptyStack = true;
};

// Rewrites pools and confidences of blocks the rules called parameters. Running it twice is safe:
// the rules it adds are found again by name and reason, not added twice.
void sizeLedger(const DeviceTrace& dev, const std::vector<LedgerBlock>& blocks, Classification& c);

} // namespace poolscope
