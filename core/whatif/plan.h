#pragma once
#include "core/classify/pool.h"
#include "core/model/trace.h"
#include "core/whatif/scenario.h"
#include "core/whatif/trace_model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace poolscope {

// A scenario applied to one device's allocation stream: what to replay through the allocator.
// Original allocations keep their events and may change size (0 drops them) or be released early;
// injected allocations (recomputed activations, all-gather buffers, gradient shards, new optimizer
// state) come with the events they live between. An operation "at event e" runs right after the
// trace's own operation of event e (frees before allocations); at kNoEvent it runs before the first
// event, and a free at kNoEvent means "alive at the end".
struct Plan {
    struct Extra {
        EventIndex allocAt = kNoEvent;
        EventIndex freeAt = kNoEvent;
        int64_t size = 0;
        int64_t stream = 0;
        Pool pool = Pool::Unknown;
    };
    std::vector<int64_t> size;         // per original allocation; 0: dropped
    std::vector<EventIndex> earlyFree; // per original allocation; kNoEvent: freed as recorded
    std::vector<Extra> extras;
    bool identity = true; // every size and lifetime as recorded, nothing injected

    std::string recompute;          // the compute the scenario adds ("one extra forward per step ...")
    std::vector<std::string> notes; // what the transform assumed
    std::vector<std::string> caveats; // of those, what a reader of the prediction must not miss (short)
    // Precision: recorded bytes of tensors whose element size under the scenario the trace cannot
    // tell (their frames name no operator); 0 when every changed tensor's type is known.
    int64_t unknownElementBytes = 0;
};

// How a precision what-if sizes the tensors whose element size the trace cannot tell (no operator in
// their frames): as the tensors they follow (the prediction), or all at one end of what they can be,
// the fewest bytes (Low: all 16-bit under autocast, all kept as recorded without it) or the most
// (High: all fp32, each cast from a 16-bit input first as autocast's fp32 operators do).
enum class ElementGuess { Follow, Low, High };

// `frames`: the trace's frame table, for --freeze (which matches the gradients' frames).
Plan buildPlan(const DeviceTrace& dev, const TraceModel& model, const Scenario& scenario, const FrameTable* frames = nullptr,
               ElementGuess guess = ElementGuess::Follow);

// Optimizer arithmetic, exposed for tests. Bytes of state for one parameter tensor of `numel`
// fp32 elements (AdamW 8 B each; SGD 0; momentum and Lion 4; Adafactor factored: (rows + cols)
// x 4 B for matrices, taken as square, full for vectors; 8-bit Adam 2 B plus block-wise scales,
// tensors under 4096 elements stay fp32 as bitsandbytes keeps them).
int64_t optimizerStateBytes(OptimizerKind kind, int64_t numel);
// Scratch a step allocates for all parameters at once, per fp32 parameter (foreach AdamW's sqrt(v)
// list: 4 B; optimizers that step one tensor at a time: 0).
int64_t optimizerWorkspaceBytesPerParam(OptimizerKind kind);
// plan_optimizer_rebuild.cpp: whether the recorded optimizer's state blocks are whole copies of
// the parameters (so each can be scaled to the new optimizer), and, where they are not (an 8-bit
// optimizer), the new optimizer's state made afresh for the gradients alive at the first step.
bool stateIsWholeParameterCopies(const TraceModel& m);
bool rebuildOptimizerState(const DeviceTrace& dev, const TraceModel& m, OptimizerKind target, Plan& plan);

} // namespace poolscope
