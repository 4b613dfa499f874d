// The cascade's attention finder: which forward tensors belong to an attention block, read from the
// run's structure rather than from what the user called their functions or files. A renamed dump,
// or one recorded with Python frames only, has the same structure and gets the same answer.
//
// The structure: attention's scores are a chain of tensors of the score family's bytes (b*a*s*s
// elements: q @ k.T, the scale, the mask, the softmax's steps, the dropout), each made from the one
// before it, so each is born while its input still lives; between them come only tensors far
// smaller than a score tensor (the softmax's row statistics of b*a*s elements, a scalar, an s x s
// mask); the chain ends where something of an activation's width or more is made that is no score
// (the context attn @ v, the next projection). A chain is attention's when it holds a seed: a tensor
// that only attention makes, by an operator fact (softmax's own kernel, the causal mask's where or
// masked_fill, a product made before its softmax), by its size alone (a score width no token width
// explains), or by a reduction over s made from it (a tensor of exactly 1/s of its bytes born while
// it lives: the hand-written softmax's max and sum, with any frames or none). An MLP's tensors of
// the same bytes hold no seed and are no chain of a seed's.
//
// A public library's attention (torch.nn.functional.scaled_dot_product_attention, flash_attn,
// xformers) is named by StackOpFacts::AttentionCode, which only ever reads library files: it
// confirms a tensor of the score family, it never stands in for the structure elsewhere.
#include "core/whatif/law_cascade.h"
#include "core/whatif/seq_reductions.h"

#include <algorithm>

namespace poolscope::law_detail {

namespace {

inline constexpr int kChainGap = 8; // small tensors (statistics, scalars, masks) allowed between two links

bool forward(const LawContext& x, size_t a)
{
    return !x.facts(a).has(StackOpFacts::Backward) && birthPhase(x.c, a) != Phase::Backward &&
           birthPhase(x.c, a) != Phase::OptimizerStep && !x.al(a).preexisting();
}

bool aliveAt(const Allocation& in, const Allocation& at)
{
    return in.freeCompletedEvent == kNoEvent || in.freeCompletedEvent >= at.allocEvent;
}

} // namespace

// Seeds first, then every chain through a seed, walked both ways from it.
void findAttention(LawContext& x)
{
    const size_t n = x.n();
    x.attention.assign(n, 0);
    const int64_t T = x.m.dims.tokens, s = x.m.dims.seq;
    if (x.m.dims.scoreWidth <= 0 || T <= 0)
        return;
    // The smallest score tensor's bytes: anything a quarter of it or less is no link and no break
    // (a row statistic is 1/s of it, a causal mask s*s elements of b*a*s*s).
    int64_t smallest = 0;
    for (int64_t w : x.scores.widths)
        if (smallest == 0 || w * T < smallest)
            smallest = w * T;
    auto member = [&](size_t a) { return forward(x, a) && x.inScoreFamily(a); };
    auto small = [&](size_t a) { return x.size(a) * 4 <= smallest; };

    std::vector<uint8_t> seed(n, 0);
    for (size_t a = 0; a < n; ++a) {
        if (!member(a))
            continue;
        const StackOpFacts& f = x.facts(a);
        // Operator facts: softmax's kernel (not log-softmax), the causal mask applied, a product
        // made before its softmax; or a size only the scores explain.
        bool is = (f.has(StackOpFacts::SoftmaxOp) && !f.has(StackOpFacts::LogSoftmax)) ||
                  (s > 0 && (f.opKey == "maskedfill" || f.opKey == "where")) || (a < x.productOrder.size() && x.productOrder[a] > 0) ||
                  !x.tokensExplained(x.size(a)) || f.has(StackOpFacts::AttentionCode);
        // A reduction over s made from it while it lives: b*a*s rows of one value each.
        if (!is && s > 1 && x.size(a) % s == 0) {
            int seen = 0;
            for (size_t b = a + 1; b < n && seen < kChainGap; ++b, ++seen) {
                if (!aliveAt(x.al(a), x.al(b)))
                    break;
                if (reducesOverSeq(x.size(a), x.size(b), T, s)) {
                    is = true;
                    break;
                }
                if (!small(b) && !member(b))
                    break;
            }
        }
        seed[a] = is;
    }
    // Walk each chain from its seed: forward (each link born while the last one lives) and back
    // (each earlier link alive when the later one is born), across small tensors only.
    for (size_t a = 0; a < n; ++a) {
        if (!seed[a] || x.attention[a])
            continue;
        x.attention[a] = 1;
        for (int dir : {+1, -1}) {
            size_t last = a;
            int gap = 0;
            for (size_t b = a; gap <= kChainGap;) {
                if (dir > 0 ? ++b >= n : b-- == 0)
                    break;
                const Allocation& later = x.al(dir > 0 ? b : last);
                const Allocation& earlier = x.al(dir > 0 ? last : b);
                // The context (attn @ v, made from the probabilities) ends the chain.
                if (dir > 0 && b < x.productOrder.size() && x.productOrder[b] < 0)
                    break;
                if (member(b) && aliveAt(earlier, later)) {
                    x.attention[b] = 1;
                    last = b;
                    gap = 0;
                } else if (small(b) || !forward(x, b)) {
                    ++gap;
                } else {
                    break;
                }
            }
        }
    }
}

} // namespace poolscope::law_detail
