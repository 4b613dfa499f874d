#pragma once
// The redaction ablation over the whole run (issue 22): the default moment and the peak miss a
// misreading whose tensors are gone by then (fp32 linear outputs filed as cast cache in the middle
// of a forward). Per allocation the pool is one label over its lifetime, so the bytes alive and the
// bytes alive in another pool than in the original follow from one sweep of births and frees: exact
// at every event, O(events + allocations).
#include "core/classify/classifier.h"
#include "core/model/trace.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace poolscope {

class DeviceDocument;

// One allocation alive at the worst moment whose pool the redaction changed.
struct MovedAllocation {
    size_t index = 0; // into DeviceTrace::allocations
    int64_t size = 0;
    std::string from, to; // "pool (rule)" in the original and in the redacted copy
    std::string site;     // the original's user frame ("file:line function"), empty without frames
};

struct AblationRunWorst {
    EventIndex index = kNoEvent; // the event after which the moved share is largest; kNoEvent: none moved
    bool beforeFirstEvent = false; // ... or the state before the first event (pre-existing blocks)
    std::string phase;             // the original's phase of that event ("forward", "backward", ...)
    int64_t bytes = 0;           // alive allocations' bytes there (Allocation::size)
    int64_t moved = 0;           // ... in another pool than in the original
    // The largest allocated bytes at any moment: moments below kRunFloor of it are not judged.
    int64_t peakBytes = 0;
    std::vector<std::pair<std::string, int64_t>> flows; // "from -> to" pools there, largest first
    std::vector<MovedAllocation> allocations;           // the largest moved allocations there, largest first
    double movedFraction() const { return bytes > 0 ? double(moved) / double(bytes) : 0.0; }
};

// Moments holding less than this share of the run's largest allocated bytes are not judged: in the
// first few allocations of a run one misfiled block is "100 %" of a few KiB. Kept low so that a
// misreading early in a forward still counts (dd_ditext8 Python-only: 15 MiB of 275 MiB at 11 % of
// the peak shows at 1 %, and vanished under a 10 % floor's larger moments).
constexpr double kRunFloor = 0.01;

// The moment of the run (every event; the state before the first event too) at which the largest
// share of the alive bytes sits in another pool than in `original`, among moments holding at
// least kRunFloor of the run's largest allocated bytes. Both documents are the same dump, one
// redacted (the allocations correspond one to one).
AblationRunWorst worstMomentOfRun(const DeviceDocument& original, const DeviceDocument& redacted, size_t topAllocations = 8);

} // namespace poolscope
