// The gradient buffer beside the parameters' flat buffer, from the run's structure.
//
// Megatron-Core wraps the model in its DistributedDataParallel before the first forward; for each
// (parameter dtype, gradient dtype) _ParamAndGradBuffer.__init__ (megatron/core/distributed/
// param_and_grad_buffer.py) makes param_data = torch.zeros(numel, param_dtype) (with the
// distributed optimizer), then grad_data = torch.zeros(numel, grad_dtype), and only then walks the
// parameters (params[::-1]) making each param.data a view of param_data, copying the values and
// letting the original block go (`del old_param_data`), and each param.main_grad a view of
// grad_data. numel is the parameters' summed elements, each start padded to 64 elements and the
// bucket's end to lcm(dp, 128). grad_dtype is fp32 under bf16 (accumulate_allreduce_grads_in_fp32,
// Megatron-LM's default for bf16) and the parameters' dtype otherwise. The backward writes every
// gradient into grad_data (the wgrad GEMM adds into main_grad, or the DDP hook adds param.grad and
// drops it), and it lives across every step: it is the run's gradients.
//
// So, before the first forward: parameters made, then one kept block of their summed bytes (the
// flat parameters), then one kept block of once or twice those bytes (the gradients at the
// parameters' or at twice their element size), then the parameters let go of. The second block is
// no master copy: the optimizer's step makes state of a master copy's size (ZeRO's flat fp32
// partition gets moments of its own size); Megatron's main parameters are one fp32 block per
// parameter, and nothing the step makes has the buffer's size. DeepSpeed frees its parameters
// before it flattens them, and FSDP's flat parameter is not kept, so neither reads so. Nothing here
// is a name: the rename of a Megatron checkout (docs/classifier.md) and a frameless copy keep it.
#include "core/classify/structural_gradient_buffer.h"

#include "core/classify/structural_common.h"

#include <unordered_set>

namespace poolscope::classify_detail {
namespace {

bool keptPastSetUp(const Classification& c, const Allocation& a)
{
    const EventIndex fe = freeEventOf(a);
    return fe == kNoEvent || c.phases.phase[size_t(fe)] == Phase::OptimizerStep;
}

bool near(int64_t bytes, int64_t target)
{
    return target > 0 && bytes >= target && bytes - target <= std::max<int64_t>(target / 64, 4096);
}

} // namespace

void gradientBufferBesideFlatParameters(const DeviceTrace& dev, Classification& c)
{
    const EventIndex bound = c.facts.firstForward;
    if (!c.history || bound == kNoEvent)
        return;
    // Blocks let go of before the first forward (whatever their pool: the last parameters made
    // before the wrap live a few events and read as scratch), and kept blocks made before it.
    std::vector<uint32_t> moved, kept;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.allocEvent >= bound)
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe != kNoEvent && fe < bound)
            moved.push_back(uint32_t(i));
        else if (keptPastSetUp(c, a) && a.size >= (int64_t(64) << 10))
            kept.push_back(uint32_t(i));
    }
    if (moved.size() < 2 || kept.size() < 2)
        return;
    std::sort(kept.begin(), kept.end(), [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
    // Sizes of the state the optimizer's step makes and keeps: a master copy's size is among them.
    std::unordered_set<int64_t> stepState;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() && c.phases.phase[size_t(a.allocEvent)] == Phase::OptimizerStep && keptPastSetUp(c, a))
            stepState.insert(mirrorKey(a.size));
    }
    uint16_t rule = 0, paramRule = 0;
    for (size_t k = 0; k + 1 < kept.size(); ++k) {
        const Allocation& flat = dev.allocations[kept[k]];
        const Allocation& grad = dev.allocations[kept[k + 1]];
        // The blocks made before the flat block and let go of after the next one was made (the
        // parameters moved in once both buffers exist), before the first forward.
        int64_t sum = 0;
        size_t count = 0;
        std::vector<uint32_t> members;
        for (uint32_t p : moved) {
            const Allocation& a = dev.allocations[p];
            if (a.allocEvent < flat.allocEvent && freeEventOf(a) > grad.allocEvent) {
                sum += a.size;
                count += a.size >= 4096; // a stub left in a moved parameter's place does not count
                members.push_back(p);
            }
        }
        if (count < 2 || !near(flat.size, sum) || !(near(grad.size, sum) || near(grad.size, 2 * sum)))
            continue;
        if (stepState.count(mirrorKey(grad.size)))
            continue;
        if (!paramRule)
            paramRule = addRule(c, "parameter-moved-into-flat-buffer",
                                "made before the first forward and let go of once a kept block of the summed bytes of the "
                                "blocks let go of with it, and a gradient buffer beside it, were made: a parameter until the "
                                "library moved it into its flat buffer (Megatron's param_data)",
                                Pool::Parameter, kEvidenceLifetime | kEvidenceSize);
        for (uint32_t p : members)
            if (c.pool[p] != Pool::Parameter)
                decide(c, p, Pool::Parameter, paramRule, 60);
        if (c.pool[kept[k]] != Pool::Parameter)
            decide(c, kept[k], Pool::Parameter, paramRule, 60);
        if (c.pool[kept[k + 1]] == Pool::Gradient)
            continue;
        if (!rule)
            rule = addRule(c, "gradient-buffer-beside-flat-parameters",
                           "made before the first forward right after a kept block of the parameters' summed bytes and before "
                           "the parameters were let go of, with once or twice their bytes, and kept; no optimizer state of "
                           "its size: the flat gradient buffer (Megatron's grad_data, fp32 under bf16), whatever the frames "
                           "call it",
                           Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        decide(c, kept[k + 1], Pool::Gradient, rule, 60);
        ++k;
    }
}

} // namespace poolscope::classify_detail
