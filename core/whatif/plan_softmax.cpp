// A softmax written by hand (max, sub, exp, sum, div) under Python-only stacks: no frame names exp
// or sum, which autocast runs in fp32 (aten/src/ATen/autocast_mode.h: exp on the fp32 list, sum on
// fp32_set_opt_dtype). What the structure of attention still tells, between its two products (the
// b*s^2 scores a product makes and the next product, which reads the probabilities):
// - A reduction over the scores' last dimension has the scores' bytes over s: one value per token
//   and head (a multiple of T bytes, following the batch), smaller than the scores and dividing them.
// - A numerically stable softmax reduces twice: the maximum first, the sum last. The sum is fp32 under
//   autocast, and so is the quotient that divides by it (type promotion: an fp32 operand makes the
//   result fp32), with whatever follows it elementwise up to the product, which casts it.
// - Between the two reductions, what is kept for backward with the scores' bytes is exp's output:
//   exp saves its result, while the subtraction, the scaling and the mask keep nothing of that size.
//   exp is fp32 under autocast. (Without grad nothing is kept, and those stay unknown.)
// These are read from structure, not confirmed by a frame: the range a precision what-if reports
// (ElementGuess Low, High) still spans them.
// Everything else in the chain stays as the frames leave it (unknown: the range covers it).
#include "core/whatif/plan.h"
#include "core/whatif/seq_reductions.h"

#include <vector>

namespace poolscope {

namespace {
inline constexpr size_t kChainWindow = 8; // allocations before the scores where a live b*s^2 tensor makes them no chain's first
}

size_t softmaxFromStructure(const DeviceTrace& dev, const TraceModel& m, std::vector<OpPrecision>& precision, int64_t& bytes)
{
    const int64_t tokens = m.dims.tokens;
    if (tokens <= 0)
        return 0;
    const size_t n = dev.allocations.size();
    auto activation = [&](size_t a) {
        const Pool p = m.pool[a];
        return !dev.allocations[a].preexisting() && !m.weightCast[a] && !m.mask[a] &&
               (p == Pool::Activation || p == Pool::Temporary || p == Pool::Other || p == Pool::Unknown);
    };
    auto forward = [&](size_t a) {
        const Phase p = m.phaseAt(dev.allocations[a].allocEvent);
        return p != Phase::Backward && p != Phase::OptimizerStep;
    };
    auto scoresLaw = [&](size_t a) { return seqExponent(m.law[a]) >= 2 && batchExponent(m.law[a]) >= 1; };
    auto alive = [&](size_t in, size_t at) {
        const Allocation& al = dev.allocations[in];
        return al.freeCompletedEvent == kNoEvent || al.freeCompletedEvent >= dev.allocations[at].allocEvent;
    };
    // An inline q @ k.T has no Python frame of its own (Python-only stacks): the scores' product is
    // the chain's first b*s^2 tensor, which only a product of two per-token tensors can make from
    // what came before it; no b*s^2 tensor made just before it still lives (each later link, the
    // scale, the mask, the softmax's steps, is made from a live one).
    auto firstOfChain = [&](size_t a) {
        if (precision[a] != OpPrecision::Unknown || !scoresLaw(a) || !activation(a) || !forward(a))
            return false;
        for (size_t b = a, seen = 0; b-- > 0 && seen < kChainWindow; ++seen)
            if (scoresLaw(b) && alive(b, a))
                return false;
        return true;
    };
    size_t found = 0;
    for (size_t start = 0; start < n; ++start) {
        // The scores: a product's output that grows with s^2 (named by a frame, or the chain's first).
        const bool named = precision[start] == OpPrecision::Lower;
        if (!(named ? seqExponent(m.law[start]) >= 2 && activation(start) : firstOfChain(start)))
            continue;
        const int64_t scores = dev.allocations[start].size;
        // The next product (or the trace's end): named, or where no frame names it, the first
        // per-token tensor of a token width after the scores that is no reduction of them (attn @ v).
        size_t end = start + 1;
        bool endNamed = true;
        for (; end < n && precision[end] != OpPrecision::Lower; ++end) {
            const int64_t size = dev.allocations[end].size;
            if (!named && precision[end] == OpPrecision::Unknown && activation(end) && forward(end) && !scoresLaw(end) &&
                batchExponent(m.law[end]) > 0 && seqExponent(m.law[end]) == 1 && size % tokens == 0 &&
                !reducesOverSeq(scores, size, tokens, m.dims.seq)) {
                endNamed = false;
                break;
            }
        }
        if (end >= n)
            break;
        std::vector<size_t> reductions;
        for (size_t a = start + 1; a < end; ++a) {
            const int64_t size = dev.allocations[a].size;
            if (activation(a) && precision[a] == OpPrecision::Unknown && reducesOverSeq(scores, size, tokens, m.dims.seq) &&
                batchExponent(m.law[a]) > 0)
                reductions.push_back(a);
        }
        // The maximum's indices (int64, right after its values) reduce too: two groups at least.
        size_t groups = 0;
        for (size_t i = 0; i < reductions.size(); ++i)
            if (i == 0 || reductions[i] != reductions[i - 1] + 1)
                ++groups;
        if (groups < 2) {
            start = end - 1;
            continue;
        }
        // Found from structure: the products run in 16 bits under autocast, as a named one would.
        for (size_t product : {named ? n : start, endNamed ? n : end})
            if (product < n) {
                precision[product] = OpPrecision::Lower;
                bytes += dev.allocations[product].size;
                ++found;
            }
        const size_t first = reductions.front(), last = reductions.back();
        for (size_t a = first + 1; a < last; ++a)
            if (activation(a) && precision[a] == OpPrecision::Unknown && dev.allocations[a].size == scores && m.saved[a]) {
                precision[a] = OpPrecision::Fp32; // exp's output, kept for its backward
                bytes += dev.allocations[a].size;
                ++found;
            }
        precision[last] = OpPrecision::Fp32; // the sum
        bytes += dev.allocations[last].size;
        ++found;
        for (size_t a = last + 1; a < end; ++a)
            if (activation(a) && precision[a] == OpPrecision::Unknown && dev.allocations[a].size == scores) {
                precision[a] = OpPrecision::Fp32; // the quotient and what follows it elementwise
                bytes += dev.allocations[a].size;
                ++found;
            }
        start = end - 1;
    }
    return found;
}

} // namespace poolscope
