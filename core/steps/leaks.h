#pragma once
#include "core/classify/pool.h"
#include "core/sites/site_key.h"
#include "core/steps/steps.h"

#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// A call site whose allocations made in one step are still alive a full step later, again and
// again, while the memory it holds at step ends keeps growing to the end of the recording.
// What is not one: state made once (warm-up, optimizer state at the first step: one step only),
// memory handed from one step to the next (the next batch, gradients kept until zero_grad: held
// bytes stay flat), a cache that fills to its budget (stops growing), the allocator's cache
// (reserved, never counted: only allocated bytes are).
struct LeakSuspect {
    SiteKey key = 0;
    std::string site;          // "file:line function" of the first user frame, as `report` prints it
    // Where the site is a library's line (transformers' lm_head, torchvision's conv), the innermost
    // line of the program's own code it was reached from ("file:line function"): the call a user
    // keeps the outputs of. Empty where the site is the program's own line or no such frame exists.
    std::string calledFrom;
    int64_t bytesPerStep = 0;  // growth of what the site holds at step ends, per step
    int steps = 0;             // steps whose allocations from this site outlived the next step
    std::optional<Pool> pool;  // by bytes, when classified
    Phase birthPhase = Phase::Unknown;
    bool bornInCallerCode = false; // made outside the model's passes (the training loop's own code)
    std::vector<int64_t> heldAtStepEnds; // bytes from this site alive at each complete step's end
    std::string cause;         // what usually makes this shape, and the usual fix
    // Without frames a site is a size, split by the phase its blocks were born in: that phase.
    std::optional<Phase> splitPhase;
};

struct LeakReport {
    std::vector<LeakSuspect> suspects; // largest bytes per step first
    std::string verdict;               // one line: what grows, by how much per step, from which line
    std::vector<std::string> notes;    // what could not be judged
    bool judged = false;               // false: too few complete steps (notes say why)
};

LeakReport findLeaks(const DeviceDocument& doc, const StepTable& steps);

// Whether `a` was made at the suspect's site (and, frameless, born in its phase): the allocations a
// viewer lists for it. `c` is the device's classification (null: phases unknown, no frameless split).
bool madeAtSuspectSite(const LeakSuspect& s, const SiteNames& names, const Classification* c, const Allocation& a);

} // namespace poolscope
