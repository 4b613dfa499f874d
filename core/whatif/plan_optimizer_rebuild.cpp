// Changing the optimizer where the recorded state is not whole copies of the parameters.
//
// torch.optim's Adam/AdamW, SGD's momentum and Lion keep per parameter one or two tensors made with
// zeros_like(p): each a parameter's size, so scaling each recorded state block to the new
// optimizer's per-element bytes predicts the new state. An 8-bit optimizer does not: bitsandbytes'
// Optimizer2State.init_state keeps, for a parameter of 4096 elements or more, state1/state2 as uint8
// (one byte an element: a quarter of an fp32 parameter, half a bf16 one) beside absmax1/absmax2 (one
// fp32 per 2048 elements) and two 256-entry quantisation maps shared by all; under 4096 elements it
// keeps two fp32 states of the parameter's size. Its paged variants take the large states from
// cudaMallocManaged, so they are not in the snapshot at all. Block by block, no single factor maps
// that state to Adam's two fp32 moments (an absmax block would become a "moment", a small
// parameter's fp32 state would be read as a uint8 one and quadrupled).
//
// What is true whatever the recorded optimizer kept: the new optimizer makes its state for the
// parameters the step updates, and those are the parameters whose gradients are alive when the step
// begins (a frozen base, as in LoRA and QLoRA, has none). So the recorded state goes, and each such
// gradient gets the new optimizer's state at the first step, one block per tensor it keeps (AdamW
// two, momentum and Lion one). Like the rest of the what-if, a gradient's bytes / 4 is its element
// count; AdamW's and momentum's state, made in the parameter's dtype, is whole gradients' bytes
// either way.
#include "core/whatif/plan.h"

#include "core/util/units.h"

namespace poolscope {

namespace {

// How many tensors of the parameter's size the optimizer keeps (its state split as it is made);
// 1 where the state is one block of another size (Adafactor's factors, an 8-bit state in one).
int stateTensors(OptimizerKind k)
{
    switch (k) {
    case OptimizerKind::AdamW:
    case OptimizerKind::Adam:
        return 2;
    default:
        return 1;
    }
}

} // namespace

bool stateIsWholeParameterCopies(const TraceModel& m)
{
    if (m.recordedOptimizer == OptimizerKind::Adam8bit)
        return false;
    // Unnamed (a renamed or frameless copy without the step's annotation): bytes per parameter that
    // are not whole fp32 copies (2: 8-bit moments) cannot be scaled block by block either.
    return !(m.recordedOptimizer == OptimizerKind::Keep && m.stateBytesPerParam % 4 != 0);
}

bool rebuildOptimizerState(const DeviceTrace& dev, const TraceModel& m, OptimizerKind target, Plan& plan)
{
    const EventIndex at = m.firstStepEvent;
    if (at == kNoEvent)
        return false;
    std::vector<size_t> updated;
    for (size_t a = 0; a < plan.size.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        if (m.pool[a] == Pool::Gradient && (al.preexisting() || al.allocEvent <= at) &&
            (al.freeCompletedEvent == kNoEvent || al.freeCompletedEvent > at))
            updated.push_back(a);
    }
    if (updated.empty())
        return false;
    int64_t was = 0, now = 0;
    for (size_t a = 0; a < plan.size.size(); ++a)
        if (m.pool[a] == Pool::OptimizerState) {
            was += plan.size[a];
            plan.size[a] = 0;
        }
    const int tensors = stateTensors(target);
    for (size_t a : updated) {
        const int64_t bytes = optimizerStateBytes(target, m.requestedSize[a] / 4);
        for (int t = 0; t < tensors && bytes > 0; ++t)
            plan.extras.push_back({at, kNoEvent, bytes / tensors, dev.allocations[a].stream, Pool::OptimizerState});
        now += bytes;
    }
    plan.notes.push_back("the recorded optimizer state (" + formatBytes(was) +
                         " allocated over the trace) is not whole copies of the parameters, so it is replaced: " +
                         std::string(optimizerName(target)) + "'s state for the " + std::to_string(updated.size()) +
                         " gradients alive when the first step begins (" + formatBytes(now) + ")");
    return true;
}

} // namespace poolscope
