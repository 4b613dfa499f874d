// fp32 master copies of 16-bit parameters, one per parameter, from the run's structure.
//
// A mixed-precision optimizer keeps a 32-bit copy of every 16-bit parameter and updates that copy:
// Megatron-Core's Float16OptimizerWithFloat16Params makes `param.detach().clone().float()` for each
// parameter of each group in the model's order, its DistributedOptimizer
// (_build_model_and_main_param_groups) `shard_model_param.clone().float()` for each parameter in
// the gradient buffer's order (param_index_map: the model's parameters reversed), apex's O2 the
// same per parameter. Each is made before the first forward (in the optimizer's constructor),
// kept for the whole run, and has exactly twice its parameter's bytes (the 16-bit clone beside it
// is let go of at once). The copies come one after another in the parameters' order or its reverse,
// so their sizes repeat the parameters' sizes, doubled, in that order.
//
// So: before the first forward, after the parameters were made, a run of kept blocks whose bytes
// are twice the parameters' bytes taken in order of their making, forwards or backwards, covering
// nine parameters in ten at least (four or more): the optimizer's master weights, optimizer state
// (as ZeRO's fp32 partition is). A size can coincide with an activation's gradient (an fp32 copy of
// an h x 4h weight has the bytes of T = 2h tokens' bf16 hidden states), which is why the test is
// the whole sequence, not a size. Only blocks no frame decided as optimizer state already.
#include "core/classify/structural_master_copies.h"

#include "core/classify/structural_common.h"

#include <algorithm>

namespace poolscope::classify_detail {
namespace {

bool keptPastSetUp(const Classification& c, const Allocation& a)
{
    const EventIndex fe = freeEventOf(a);
    return fe == kNoEvent || c.phases.phase[size_t(fe)] == Phase::OptimizerStep;
}

} // namespace

void masterCopiesByOrder(const DeviceTrace& dev, Classification& c)
{
    const EventIndex bound = c.facts.firstForward;
    if (!c.history || bound == kNoEvent)
        return;
    // The parameters made before the first forward, in order of making.
    std::vector<uint32_t> params, later;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() && a.allocEvent < bound && c.pool[i] == Pool::Parameter)
            params.push_back(uint32_t(i));
    }
    if (params.size() < 4 || params.size() > 20000)
        return;
    auto byBirth = [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; };
    std::sort(params.begin(), params.end(), byBirth);
    {
        // A flat buffer the parameters were moved into holds the bytes of the blocks made before it
        // and let go of after it was made (Megatron's param_data): it is left out.
        std::vector<uint32_t> kept;
        for (uint32_t x : params) {
            const Allocation& a = dev.allocations[x];
            int64_t movedIn = 0;
            if (a.size >= (int64_t(64) << 10))
                for (uint32_t p : params) {
                    const Allocation& b = dev.allocations[p];
                    const EventIndex fe = freeEventOf(b);
                    if (b.allocEvent < a.allocEvent && fe != kNoEvent && fe > a.allocEvent)
                        movedIn += b.size;
                }
            if (movedIn == 0 || a.size - movedIn > std::max<int64_t>(movedIn / 64, 4096) || a.size < movedIn)
                kept.push_back(x);
        }
        params.swap(kept);
    }
    // Kept blocks made after the first parameter and before the first forward, not parameters.
    const EventIndex firstParam = dev.allocations[params.front()].allocEvent;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() && a.allocEvent > firstParam && a.allocEvent < bound && c.pool[i] != Pool::Parameter && keptPastSetUp(c, a))
            later.push_back(uint32_t(i));
        else if (!a.preexisting() && a.allocEvent > firstParam && a.allocEvent < bound && c.pool[i] == Pool::Parameter &&
                 keptPastSetUp(c, a) && !(c.evidenceOf(i) & kEvidenceFrames))
            later.push_back(uint32_t(i)); // a parameter only by lifetime (made before the first forward, kept)
    }
    if (later.size() < 4)
        return;
    std::sort(later.begin(), later.end(), byBirth);
    uint16_t rule = 0;
    for (const bool reversed : {false, true}) {
        std::vector<uint32_t> order = params;
        if (reversed)
            std::reverse(order.begin(), order.end());
        // The longest run of consecutive kept blocks matching consecutive parameters, doubled
        // (run[p]: the run ending at the current block and parameter p).
        size_t bestEnd = 0, bestLen = 0;
        std::vector<uint32_t> run(order.size() + 1, 0), next(order.size() + 1, 0);
        for (size_t s = 0; s < later.size(); ++s) {
            const int64_t bytes = dev.allocations[later[s]].size;
            for (size_t p = 0; p < order.size(); ++p) {
                const Allocation& param = dev.allocations[order[p]];
                const Allocation& copy = dev.allocations[later[s]];
                // A parameter let go of after its copy was made was replaced by it (a model
                // converted to fp32), not copied: a master copy sits beside what it copies, or
                // beside the flat buffer the parameter was moved into before the optimizer was built.
                const EventIndex fe = freeEventOf(param);
                const bool replaced = fe != kNoEvent && fe > copy.allocEvent;
                next[p + 1] = bytes == 2 * param.size && param.allocEvent < copy.allocEvent && !replaced ? run[p] + 1 : 0;
                if (next[p + 1] > bestLen)
                    bestLen = next[p + 1], bestEnd = s;
            }
            run.swap(next);
        }
        if (bestLen < 4)
            continue;
        const size_t bestStart = bestEnd + 1 - bestLen;
        // Nine parameters in ten have their copy; the copies themselves, where lifetime alone called
        // them parameters, are not counted among the parameters.
        size_t copiesAmongParams = 0;
        for (size_t k = bestStart; k < bestStart + bestLen; ++k)
            copiesAmongParams += std::find(params.begin(), params.end(), later[k]) != params.end();
        if (bestLen * 10 < (params.size() - copiesAmongParams) * 9)
            continue;
        if (!rule)
            rule = addRule(c, "master-copies-of-parameters",
                           "made before the first forward and kept, one after another with twice the bytes of each parameter "
                           "taken in the order the parameters were made (or its reverse): an fp32 master copy of each 16-bit "
                           "parameter (Megatron's main parameters, apex O2's masters), counted as optimizer state",
                           Pool::OptimizerState, kEvidenceLifetime | kEvidenceSize);
        for (size_t k = bestStart; k < bestStart + bestLen; ++k)
            if (c.pool[later[k]] != Pool::OptimizerState)
                decide(c, later[k], Pool::OptimizerState, rule, 60);
        return;
    }
}

} // namespace poolscope::classify_detail
