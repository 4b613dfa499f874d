// The cascade's token-law steps: once the run's dimensions are known, the laws an allocation's size
// admits (its candidates), one law decided by the size alone or by a mask's or position ids' shape,
// two laws by the code that made it; a score family too rare to be attention's is taken back. And
// the last decider: memory from before recording that the trace rebuilds follows what replaces it.
#include "core/whatif/law_cascade.h"

#include <algorithm>
#include <map>
#include <set>

namespace poolscope::law_detail {

namespace {

inline constexpr uint8_t kTwoLaws = lawBit(SizeLaw::Linear) | lawBit(SizeLaw::Quadratic);

// Decides a as the scores, counting them (a family seen too rarely is taken back).
void decideScores(LawContext& x, size_t a, LawEvidence why)
{
    x.decide(a, SizeLaw::Quadratic, why);
    ++x.scores.tensors;
}

} // namespace

// Found with s by findSeq: an embedding b times smaller than the tokens' broadcasts over the batch.
// Decided before the score width is read, which looks only at what is still open.
void decidePositionEmbeddings(LawContext& x)
{
    for (size_t a : x.positionEmbeddings)
        if (x.open(a))
            x.decide(a, SizeLaw::Seq, LawEvidence::Dimensions);
}

// a*s = h: the scores' bytes per token equal a layer input's (the residual stream, the context's
// shape). Equal bytes only: with the residual in fp32 and the scores in 16 bits (or the reverse) a
// factor of two is as often a*s = 2h as a collision, and the element sizes are not known here. Or
// seen directly, whatever the element sizes (autocast: fp32 residual, 16-bit products): a product
// made before its function's softmax and one made from it with the same bytes. The forward
// products' order is worked out once: under the collision it also tells which is which. The
// collision is a fact of the run; decideBySize marks each allocation it makes two-law with it.
void findContextCollision(LawContext& x)
{
    const int64_t T = x.m.dims.tokens;
    if (const int64_t U = x.m.passes.empty() ? 0 : x.m.passes.front().inputBytes; T > 0 && U > 0 && U % T == 0)
        x.contextCollides = x.m.dims.scoreWidth > 0 && x.m.dims.scoreWidth == U / T;
    x.productOrder.assign(x.n(), 0);
    std::set<int64_t> before, after;
    for (size_t a = 0; x.m.dims.scoreWidth > 0 && a < x.n(); ++a)
        if (x.open(a) && x.isProduct(a) && !x.facts(a).has(StackOpFacts::Backward) && !x.facts(a).has(StackOpFacts::LinearOp)) {
            x.productOrder[a] = int8_t(x.productOrderOf(a));
            if (x.productOrder[a] > 0)
                before.insert(x.size(a));
            else if (x.productOrder[a] < 0)
                after.insert(x.size(a));
        }
    for (int64_t bytes : before)
        x.contextCollides |= after.count(bytes) > 0;
}

// A causal mask: s*s elements, from a comparison or a triangle (or converted on such a line). Where
// no frame names the operator (Python frames only: torch.triu is a C function), the structure: made
// in forward right before the score chain it masks (law_attention.cpp) and alive while the chain's
// next tensor is made, no chain tensor of its block made just before it (a statistic or index of
// the scores, made from them, comes after the chain began), and of a size no token width explains
// (a layer's tensor made before the scores may have s*s elements too).
void decideCausalMask(LawContext& x)
{
    const int64_t s = x.m.dims.seq;
    constexpr size_t kMaskGap = 8; // allocations between the mask and the chain it masks
    auto chain = [&](size_t b) { return b < x.attention.size() && x.attention[b]; };
    auto beforeChain = [&](size_t a) {
        if (x.al(a).preexisting() || birthPhase(x.c, a) != Phase::Forward)
            return false;
        for (size_t b = a; b-- > 0 && a - b <= kMaskGap;)
            if (chain(b))
                return false;
        for (size_t b = a + 1; b < x.n() && b - a <= kMaskGap; ++b)
            if (chain(b))
                return x.al(a).freeCompletedEvent == kNoEvent || x.al(a).freeCompletedEvent >= x.al(b).allocEvent;
        return false;
    };
    for (size_t a = 0; s > 0 && a < x.n(); ++a) {
        if (!x.open(a) || x.facts(a).has(StackOpFacts::Backward))
            continue;
        bool square = false;
        for (int64_t e : {1, 2, 4, 8})
            square |= x.size(a) == e * s * s;
        if (square && (x.maskLine(a) || (!x.tokensExplained(x.size(a)) && beforeChain(a))))
            x.decide(a, SizeLaw::SeqSquared, LawEvidence::Dimensions);
    }
}

// Position ids: an arange of s integers (int64 or int32).
void decidePositionIds(LawContext& x)
{
    const int64_t s = x.m.dims.seq;
    for (size_t a = 0; s > 0 && a < x.n(); ++a) {
        const StackOpFacts& f = x.facts(a);
        if (x.open(a) && !f.has(StackOpFacts::Backward) && f.has(StackOpFacts::Arange) && (x.size(a) == 8 * s || x.size(a) == 4 * s))
            x.decide(a, SizeLaw::Seq, LawEvidence::Dimensions);
    }
}

// A weight expanded: 2, 4 or 8 times a weight matrix's bytes (no norm's or bias's vector: a 4-bit or 8-bit weight dequantised to
// 16 or 32 bits, then perhaps cast), where no number of tokens divides the size (nor is it the scores'),
// made for the product that reads it and freed right after, no more of them in a phase run than such
// weights: made from the weight, it follows no token. The structure, whatever the code that made it is called:
// a library's name (bitsandbytes, ATen's dequantize) decides the same earlier ("made from a
// weight"); a user's own dequantisation is found here. Where a token width explains the size too,
// the sizes decide (the tokens, the usual case).
void decideExpandedWeights(LawContext& x)
{
    const int64_t T = x.m.dims.tokens;
    if (T <= 0)
        return;
    std::vector<std::pair<size_t, int64_t>> found; // (allocation, the weight's bytes)
    std::map<std::pair<uint32_t, int64_t>, int64_t> perRun; // (phase run, bytes) -> candidates
    for (size_t a = 0; a < x.n(); ++a) {
        const int64_t bytes = x.size(a);
        // Bytes no number of tokens divides: nothing per token makes them (a width no dimension
        // explains is as often a misread T as a weight).
        if (!x.open(a) || x.al(a).preexisting() || bytes < T || bytes % T == 0 || x.inScoreFamily(a))
            continue;
        // Made for the one product that reads it and freed right after: a handful of tensors born
        // while it lives (a tensor saved for backward, such as attention's logsumexp, lives on).
        const EventIndex freed = x.al(a).freeCompletedEvent;
        if (freed == kNoEvent)
            continue;
        int bornWhileAlive = 0;
        for (size_t b = a + 1; b < x.n() && x.al(b).allocEvent < freed && bornWhileAlive <= kInputWindow; ++b)
            ++bornWhileAlive;
        if (bornWhileAlive > kInputWindow)
            continue;
        for (int64_t k : {2, 4, 8})
            if (bytes % k == 0 && x.weights.mirrors(bytes / k) > 0 && !x.weights.vectors.count(bytes / k)) {
                found.emplace_back(a, bytes / k);
                ++perRun[{x.c.phases.runOf(x.al(a)), bytes}];
                break;
            }
    }
    // Each weight is expanded once per pass that reads it: more tensors of these bytes in one phase
    // run than such weights are something else (activations, where the tokens were misread).
    for (auto [a, weight] : found)
        if (perRun[{x.c.phases.runOf(x.al(a)), x.size(a)}] <= x.weights.mirrors(weight)) {
            x.record[a].candidates = lawBit(SizeLaw::Fixed);
            x.decide(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
        }
}

// The laws each open allocation's size admits: the tokens' (T x a model dimension), the scores'
// (the score family), none of those and less than a token (fixed). One candidate decides; two are
// left to the steps after this one; none is taken as tokens (the usual case) with nothing said.
void decideBySize(LawContext& x)
{
    const int64_t T = x.m.dims.tokens;
    for (size_t a = 0; a < x.n(); ++a) {
        if (!x.open(a))
            continue;
        const bool scores = x.inScoreFamily(a);
        const bool tokens = x.tokensExplained(x.size(a));
        LawRecord& r = x.record[a];
        if (scores && tokens) {
            r.candidates = kTwoLaws;
            r.contextTwin = x.contextCollides;
        } else if (scores) {
            r.candidates = lawBit(SizeLaw::Quadratic);
            decideScores(x, a, T > 0 ? LawEvidence::Dimensions : LawEvidence::Frames);
        } else if (tokens) {
            r.candidates = lawBit(SizeLaw::Linear);
            x.decide(a, SizeLaw::Linear, LawEvidence::Dimensions);
        } else if (T > 0 && x.size(a) < T) {
            // Smaller than one element per token: it cannot follow the tokens.
            r.candidates = lawBit(SizeLaw::Fixed);
            x.decide(a, SizeLaw::Fixed, LawEvidence::Dimensions);
        } else {
            x.decide(a, SizeLaw::Linear, LawEvidence::Default); // nothing explains it: taken as tokens, the usual case
        }
    }
}

// Where the context has the scores' bytes, a product's order around its function's softmax tells
// them apart: made before it, q @ k.T; made from it, attn @ v. A product whose order is unknown is
// left to the votes, marked: the frames that speak for the scores elsewhere speak for either here.
void decideProductOrder(LawContext& x)
{
    for (size_t a = 0; a < x.n(); ++a) {
        if (!x.open(a) || !x.twoLaws(a) || !x.record[a].contextTwin || !x.isProduct(a) || x.facts(a).has(StackOpFacts::LinearOp))
            continue;
        if (x.productOrder[a] > 0)
            decideScores(x, a, LawEvidence::Frames);
        else if (x.productOrder[a] < 0)
            x.decide(a, SizeLaw::Linear, LawEvidence::Frames);
        else
            x.record[a].unorderedProduct = true;
    }
}

// Frames that say "attention scores" (scoreEvidence, law_votes.cpp).
void decideScoreFrames(LawContext& x)
{
    for (size_t a = 0; a < x.n(); ++a)
        if (x.open(a) && x.twoLaws(a) && !x.record[a].unorderedProduct && x.scoreEvidence(a))
            decideScores(x, a, LawEvidence::Frames);
}

// Frames that say "tokens": a projection, an embedding, the loss's log-softmax, or Python code away
// from the attention code the trace shows.
void decideTokenFrames(LawContext& x)
{
    for (size_t a = 0; a < x.n(); ++a) {
        if (!x.open(a) || !x.twoLaws(a) || x.record[a].unorderedProduct)
            continue;
        const StackOpFacts& f = x.facts(a);
        if (f.has(StackOpFacts::LinearOp) || f.has(StackOpFacts::Embedding) || f.has(StackOpFacts::LogSoftmax) || x.outsideAttention(a))
            x.decide(a, SizeLaw::Linear, LawEvidence::Frames);
    }
}

// A score family seen less often than the layers is something else (logits, a one-off buffer):
// what was decided as scores is taken as tokens (by default, said), and what the two laws left open
// is the tokens'. A softmax's width needs only one.
void revokeRareScores(LawContext& x)
{
    if (x.scores.tensors >= kMinScoreTensors || (x.m.dims.scoresFrom.starts_with("softmax") && x.scores.tensors > 0))
        return;
    for (size_t a = 0; a < x.n(); ++a)
        if (!x.open(a) && x.m.law[a] == SizeLaw::Quadratic) {
            x.record[a].candidates = kTwoLaws;
            x.decide(a, SizeLaw::Linear, LawEvidence::Default);
        }
    for (size_t a : x.pending())
        x.decide(a, SizeLaw::Linear, LawEvidence::Dimensions);
    x.m.dims.scoreWidth = 0;
    x.m.dims.scoresFrom.clear();
}

// Memory from before recording that the trace frees: a forward-only recording that starts while the
// previous step's graph (or batch) still lives sees it freed and the same structure built again, the
// same sizes from the same call sites. It is that structure, so it follows the law of what replaces
// it: with a longer context the previous step's graph was longer too. What replaces a graph is the
// next graph, alive when the old one goes (`out = model(x)` drops the old graph once the new output
// exists): each such block (in the order they go) takes the law of the first allocation of its size
// made in the trace outside the weights and alive when it is freed, else of the first of its size
// at all. Transients of the same bytes (a score matrix only softmax keeps, next to the MLP's
// activations of a*s = 4h) are made too but are not the graph. A size the trace never makes again is
// left as it was (held constant, as before).
void decideReplaced(LawContext& x)
{
    std::vector<size_t> gone;
    for (size_t a = 0; a < x.n(); ++a) {
        const Allocation& al = x.al(a);
        if (al.preexisting() && al.freeCompletedEvent != kNoEvent && !isWeightPool(x.m.pool[a]) && x.m.lawEvidence[a] != LawEvidence::Phase)
            gone.push_back(a);
    }
    if (gone.empty())
        return;
    std::unordered_map<int64_t, std::vector<size_t>> made; // size -> in-trace allocations outside the weights, in order
    for (size_t a = 0; a < x.n(); ++a)
        if (!x.al(a).preexisting() && !isWeightPool(x.m.pool[a]) && x.m.lawEvidence[a] != LawEvidence::Phase && !x.m.stepWorkspace[a])
            made[x.size(a)].push_back(a);
    std::stable_sort(gone.begin(), gone.end(), [&](size_t p, size_t q) { return x.al(p).freeCompletedEvent < x.al(q).freeCompletedEvent; });
    // Two cursors per size, each only moving forward (the blocks go in time order): the first not yet
    // used, and the first not used nor freed before the current block goes.
    std::vector<uint8_t> used(x.n(), 0);
    std::unordered_map<int64_t, std::pair<size_t, size_t>> cursor;
    for (size_t a : gone) {
        const auto it = made.find(x.size(a));
        if (it == made.end())
            continue;
        const std::vector<size_t>& list = it->second;
        const EventIndex freed = x.al(a).freeCompletedEvent;
        auto& [any, alive] = cursor[x.size(a)];
        while (any < list.size() && used[list[any]])
            ++any;
        if (any >= list.size())
            continue;
        while (alive < list.size() &&
               (used[list[alive]] || (x.al(list[alive]).freeCompletedEvent != kNoEvent && x.al(list[alive]).freeCompletedEvent <= freed)))
            ++alive;
        const size_t by = alive < list.size() && x.al(list[alive]).allocEvent < freed ? list[alive] : list[any];
        used[by] = 1;
        x.record[a].candidates = kAnyLaw; // its own size and frames no longer decide: what replaces it does
        x.decide(a, x.m.law[by], LawEvidence::Replaced);
        x.m.precision[a] = x.m.precision[by];
        x.m.mask[a] = x.m.mask[by];
        ++x.m.replacedCount;
        x.m.replacedBytes += x.size(a);
    }
}

} // namespace poolscope::law_detail
