// The queries the token-law steps share (the score family, the frames that say "attention scores",
// the causal-mask lines, a product's order around softmax), and the cascade's last deciders: sizes
// more than one law explains (an allocation's candidates, LawRecord), decided by the votes of a call
// site, an autograd mirror, an input and the neighbours; what no vote decides is reported as
// ambiguous. A vote is over laws, not over a fixed pair: a voter speaks for the law it was decided
// with, and a vote decides only a law the allocation's candidates admit. (Today the sizes leave
// two candidates open, the tokens' and the scores'; a new law with its own ambiguity votes the same
// way.)
#include "core/whatif/law_cascade.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace poolscope::law_detail {

// The anchor's b*a*s*s elements at its own element size; at another size only where a conversion
// or a mask makes them (a bool mask, a dropout mask, a cast, autocast's fp32 softmax), or where no
// model dimension explains the width at all.
bool LawContext::inScoreFamily(size_t a) const
{
    const int64_t T = m.dims.tokens, bytes = size(a);
    const int64_t anchor = m.dims.scoreWidth;
    if (T > 0) {
        if (bytes % T != 0 || anchor == 0)
            return false;
        const int64_t w = bytes / T;
        if (w == anchor)
            return true;
        if (w <= 8 || std::find(scores.widths.begin(), scores.widths.end(), w) == scores.widths.end())
            return false;
        if (scores.unexplained && !explainedByDimension(w, weights.dims))
            return true;
        const StackOpFacts& f = facts(a);
        const bool mask = !f.has(StackOpFacts::Backward) && (f.has(StackOpFacts::MaskOp) || f.has(StackOpFacts::Dropout));
        if (scores.anchorElement > 0) {
            // Known element size: a matmul makes them in 16 bits, an fp32 operator in 32, the rest
            // either; one byte only for a mask.
            const int64_t elements = anchor / scores.anchorElement;
            if (f.precision == OpPrecision::Lower && !f.has(StackOpFacts::Backward))
                return w == 2 * elements;
            if (f.precision == OpPrecision::Fp32 && !f.has(StackOpFacts::Backward))
                return w == 4 * elements;
            return w == 2 * elements || w == 4 * elements || (w == elements && mask);
        }
        return !f.has(StackOpFacts::Backward) && (f.precision == OpPrecision::Cast || mask);
    }
    return scores.sizes.count(bytes) > 0;
}

bool LawContext::tokensExplained(int64_t bytes) const
{
    const int64_t T = m.dims.tokens;
    return T > 0 && bytes % T == 0 && (bytes / T <= 8 || explainedByDimension(bytes / T, weights.dims));
}

bool LawContext::isProduct(size_t a) const
{
    const std::string& op = facts(a).opKey;
    return op == "bmm" || op == "baddbmm" || op == "matmul" || op == "einsum";
}

// Where a*s = h, q @ k.T and attn @ v are products of the same bytes in the same attention code.
// Data decides: the scores' product is made before the softmax that reads it; the context is made
// from the probabilities, so after them and while they live.
int LawContext::productOrderOf(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (!f.userFrame)
        return 0;
    const Frame& here = trace.frames.frame(f.userFrame);
    auto softmaxHere = [&](size_t b) {
        // softmax, or the exp of a hand-written one: nothing else in attention exponentiates.
        const StackOpFacts& g = facts(b);
        if (!(g.has(StackOpFacts::SoftmaxOp) || g.opKey == "exp") || g.has(StackOpFacts::Backward) || g.has(StackOpFacts::LogSoftmax) ||
            !g.userFrame)
            return false;
        const Frame& there = trace.frames.frame(g.userFrame);
        return there.filename == here.filename && there.name == here.name;
    };
    const Allocation& al = dev.allocations[a];
    int seen = 0;
    for (size_t b = a; b-- > 0 && seen < kInputWindow; ++seen) {
        const Allocation& in = dev.allocations[b];
        if (in.preexisting())
            break;
        if (softmaxHere(b) && (in.freeCompletedEvent == kNoEvent || in.freeCompletedEvent > al.allocEvent))
            return -1; // made while the probabilities of its own function live: attn @ v
        if (isProduct(b) && size(b) == size(a))
            break; // an earlier product of these bytes (q @ k.T) lies between: this one is after it
    }
    seen = 0;
    for (size_t b = a + 1; b < m.allocationCount && seen < kInputWindow; ++b, ++seen) {
        if (isProduct(b) && size(b) == size(a))
            return 0; // another product of these bytes before any softmax: cannot tell
        if (softmaxHere(b))
            return +1; // the softmax of its own function comes after it: q @ k.T
    }
    return 0;
}

// What says "attention scores": softmax, the score operators' autograd nodes, a forward score chain
// (law_attention.cpp: structure, not names), or an operator on a line next to a softmax of the same
// function (q @ k.T, the scale, the mask).
bool LawContext::scoreEvidence(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (f.has(StackOpFacts::LinearOp) || f.has(StackOpFacts::Embedding) || f.has(StackOpFacts::LogSoftmax))
        return false;
    if (f.has(StackOpFacts::SoftmaxOp) || f.has(StackOpFacts::ScoreBackward))
        return true;
    // Where the context has the scores' bytes (a*s = h), the score chains and the lines beside softmax
    // make both (q @ k.T and attn @ v; the attention dropout and the output's): only the softmax
    // and the score nodes speak; products go by their order, elementwise outputs by their input.
    if (record[a].contextTwin)
        return false;
    if (attention[a])
        return true;
    // A line beside softmax speaks for the anchor's own element size only: a mask or a cast there
    // as likely belongs to the projection next to it.
    // (Under autocast the scores run in both 16 and 32 bits, beside softmax as anywhere.)
    const int64_t T = m.dims.tokens;
    if (!f.userFrame || !f.has(StackOpFacts::Python) || T == 0)
        return false;
    if (size(a) != m.dims.scoreWidth * T &&
        (scores.anchorElement == 0 || (size(a) != 2 * T * m.dims.scoreWidth / scores.anchorElement &&
                                  size(a) != 4 * T * m.dims.scoreWidth / scores.anchorElement)))
        return false;
    return nearAnchorLine(a);
}

// On a line beside an anchor in the same function (q @ k.T, the scale, the mask, the softmax), or
// in backward in the same file (a custom autograd function's backward beside its forward).
bool LawContext::nearAnchorLine(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (!f.userFrame)
        return false;
    const Frame& here = trace.frames.frame(f.userFrame);
    if (!here.filename.ends_with(".py"))
        return false;
    for (auto& [frame, line] : scores.softmaxLines) {
        const Frame& there = trace.frames.frame(frame);
        if (there.filename == here.filename && there.name == here.name && std::abs(there.line - here.line) <= 6)
            return true;
        if (f.has(StackOpFacts::Backward) && there.filename == here.filename && std::abs(there.line - here.line) <= 40)
            return true;
    }
    return false;
}

// Where the trace shows its attention code (softmax in a Python function), Python code elsewhere
// (an MLP's projections of the same bytes) makes no scores: outside the score chains and away
// from the anchors' lines.
bool LawContext::outsideAttention(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (scores.softmaxLines.empty() || !f.has(StackOpFacts::Python) || attention[a] || !f.userFrame)
        return false;
    return !nearAnchorLine(a);
}

// A causal mask: made by a comparison or a triangle, or converted on a line beside one.
bool LawContext::maskLine(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (f.has(StackOpFacts::MaskOp))
        return true;
    if (!f.userFrame || (f.precision != OpPrecision::Cast && f.precision != OpPrecision::Promote))
        return false;
    const Frame& here = trace.frames.frame(f.userFrame);
    for (FrameId frame : scores.maskLines) {
        const Frame& there = trace.frames.frame(frame);
        if (there.filename == here.filename && there.name == here.name && std::abs(there.line - here.line) <= 2)
            return true;
    }
    return false;
}

namespace {

// The law all of a group's decided allocations agree on, if they do (any law: one vote each).
struct Unanimous {
    int state = 0; // 0 no vote, 1 unanimous, 2 split
    SizeLaw law = SizeLaw::Linear;
    // A voter still open or decided by nothing: where a*s = h, one forward operator (a dropout, a
    // product) may make both kinds at these bytes, so an undecided output splits the vote for a
    // contextTwin (a norm's, which only ever sees the residual stream, stays unanimous).
    bool undecided = false;
    void add(SizeLaw l)
    {
        if (state == 0) {
            state = 1;
            law = l;
        }
        else if (law != l)
            state = 2;
    }
    bool agreed() const { return state == 1; }
};

// A call site (stack) follows one law wherever the evidence decided it: its undecided allocations
// take that law when all its decided ones agree.
void callSiteVotes(LawContext& x, std::vector<size_t>& pending)
{
    std::unordered_map<uint32_t, Unanimous> votes; // by stack
    for (size_t a = 0; a < x.m.allocationCount; ++a) {
        const StackId st = x.dev.allocations[a].stack;
        // Only token laws vote: a weight's gradient from the same operator is another kind of tensor.
        const LawEvidence why = x.m.lawEvidence[a];
        if (x.open(a) || !st.valid() || (why != LawEvidence::Dimensions && why != LawEvidence::Frames) || !x.inScoreFamily(a))
            continue;
        votes[st.value].add(x.m.law[a]);
    }
    std::vector<size_t> still;
    for (size_t a : pending) {
        const StackId st = x.dev.allocations[a].stack;
        // Where the scores and the context collide, a stack with no Python line (an autograd node in
        // backward) is shared by both kinds' operators: it speaks for neither.
        if (x.record[a].contextTwin && !x.facts(a).has(StackOpFacts::Python)) {
            still.push_back(a);
            continue;
        }
        auto it = st.valid() ? votes.find(st.value) : votes.end();
        if (it != votes.end() && it->second.agreed() && x.admits(a, it->second.law))
            x.decide(a, it->second.law, LawEvidence::CallSite);
        else
            still.push_back(a);
    }
    pending.swap(still);
}

// A gradient has the bytes of the tensor its node's forward operator made: the law that operator
// followed at that size in forward (when all its decided outputs of that size agree). Where the
// frames name no node (Python frames only: backward records no Python line), the gradient still has
// the bytes of a forward tensor: the law every forward tensor of those bytes was decided with, when
// all of them were decided and agree.
void mirrorVotes(LawContext& x, std::vector<size_t>& pending)
{
    std::map<std::pair<std::string, int64_t>, Unanimous> votes; // by forward operator and bytes
    std::map<int64_t, Unanimous> byBytes;                          // by bytes alone, any forward operator
    for (size_t a = 0; a < x.m.allocationCount; ++a) {
        const StackOpFacts& f = x.facts(a);
        const LawEvidence why = x.m.lawEvidence[a];
        if (!f.has(StackOpFacts::Backward) && !x.al(a).preexisting() && birthPhase(x.c, a) == Phase::Forward) {
            if (x.open(a) || why == LawEvidence::Default)
                byBytes[x.size(a)].undecided = true;
            else if (why == LawEvidence::Dimensions || why == LawEvidence::Frames)
                byBytes[x.size(a)].add(x.m.law[a]);
        }
        if (f.has(StackOpFacts::Backward) || f.opKey.empty())
            continue;
        // An output still open or decided by nothing votes for no law, and splits the vote for a
        // contextTwin (see Unanimous::undecided).
        if (x.open(a) || why == LawEvidence::Default) {
            votes[{f.opKey, x.size(a)}].undecided = true;
            continue;
        }
        if (why != LawEvidence::Dimensions && why != LawEvidence::Frames)
            continue;
        votes[{f.opKey, x.size(a)}].add(x.m.law[a]);
    }
    std::vector<size_t> still;
    for (size_t a : pending) {
        const StackOpFacts& f = x.facts(a);
        auto it = f.has(StackOpFacts::Backward) && !f.opKey.empty() ? votes.find({f.opKey, x.size(a)}) : votes.end();
        auto bytes = f.opKey.empty() && !x.record[a].contextTwin && birthPhase(x.c, a) == Phase::Backward ? byBytes.find(x.size(a))
                                                                                                          : byBytes.end();
        if (it != votes.end() && it->second.agreed() && x.admits(a, it->second.law) && !(x.record[a].contextTwin && it->second.undecided))
            x.decide(a, it->second.law, LawEvidence::CallSite);
        else if (bytes != byBytes.end() && bytes->second.agreed() && !bytes->second.undecided && x.admits(a, bytes->second.law))
            x.decide(a, bytes->second.law, LawEvidence::CallSite);
        else
            still.push_back(a);
    }
    pending.swap(still);
}

// An elementwise operator's output has its input's shape: the latest tensor of the same bytes, alive
// when it is born, whose law is decided (gelu of a projection, dropout of the scores, a gradient
// through an activation function).
void inputVotes(LawContext& x, std::vector<size_t>& pending)
{
    std::vector<size_t> still;
    for (size_t a : pending) {
        // A product is no elementwise operator: its output need not have its inputs' shape. And in
        // backward, where the scores and the context collide, the gradients of both kinds are made
        // side by side by the same nodes: the nearest one of these bytes is no evidence.
        if (x.record[a].unorderedProduct || (x.record[a].contextTwin && x.facts(a).has(StackOpFacts::Backward))) {
            still.push_back(a);
            continue;
        }
        // A dropout mask has its output's elements (the allocation after it, from the same call). Where
        // the scores and the context collide, the one-byte tensor living before it may be either's mask.
        if (x.record[a].contextTwin && x.m.mask[a] && x.facts(a).has(StackOpFacts::Dropout)) {
            if (a + 1 < x.m.allocationCount && x.dev.allocations[a + 1].stack == x.dev.allocations[a].stack && !x.open(a + 1) &&
                x.m.lawEvidence[a + 1] != LawEvidence::Default && x.admits(a, x.m.law[a + 1]))
                x.decide(a, x.m.law[a + 1], LawEvidence::Neighbours);
            else
                still.push_back(a);
            continue;
        }
        const Allocation& al = x.dev.allocations[a];
        bool decided = false;
        int seen = 0;
        for (size_t b = a; b-- > 0 && seen < kInputWindow;) {
            const Allocation& in = x.dev.allocations[b];
            if (in.preexisting())
                break;
            ++seen;
            const LawEvidence why = x.m.lawEvidence[b];
            // A cast has its input's elements at another size.
            const bool sameElements = in.size == al.size ||
                                      (x.facts(a).precision == OpPrecision::Cast && (in.size == 2 * al.size || 2 * in.size == al.size));
            const bool alive = in.freeCompletedEvent == kNoEvent || in.freeCompletedEvent >= al.allocEvent;
            // Where the scores and the context collide, the nearest live tensor of these bytes is the
            // input; undecided (or decided by nothing), it cannot speak, and one further back is
            // as likely the other kind.
            if (x.record[a].contextTwin && sameElements && alive && (x.open(b) || why == LawEvidence::Default))
                break;
            if (!sameElements || x.open(b) || x.m.law[b] == SizeLaw::Fixed || why == LawEvidence::Default || !x.admits(a, x.m.law[b]))
                continue;
            if (!alive)
                continue;
            x.decide(a, x.m.law[b], LawEvidence::Neighbours);
            decided = true;
            break;
        }
        if (!decided)
            still.push_back(a);
    }
    pending.swap(still);
}

// The tensors born while an ambiguous one lives are what the next operators made from it: a
// score gradient feeds the softmax backward's score-sized outputs, a projection's feeds its own.
void neighbourVotes(LawContext& x, std::vector<size_t>& pending)
{
    for (int round = 0; round < 3 && !pending.empty(); ++round) {
        std::vector<size_t> still;
        for (size_t a : pending) {
            if (x.record[a].contextTwin) {
                still.push_back(a); // a*s = h: the scores' neighbours and the context's look alike
                continue;
            }
            const Allocation& al = x.dev.allocations[a];
            std::array<int, kLawCount> tally{}; // neighbours per law, among a's candidates
            int seen = 0;
            for (size_t b = a + 1; b < x.m.allocationCount && seen < kNeighbourWindow; ++b) {
                const Allocation& nb = x.dev.allocations[b];
                if (al.freeCompletedEvent != kNoEvent && nb.allocEvent > al.freeCompletedEvent)
                    break;
                ++seen;
                const LawEvidence why = x.m.lawEvidence[b];
                if (x.open(b) || x.m.law[b] == SizeLaw::Fixed || why == LawEvidence::Default || !x.inScoreFamily(b) ||
                    !x.admits(a, x.m.law[b]))
                    continue;
                ++tally[size_t(x.m.law[b])];
            }
            // The law with more neighbours than any other decides; a tie decides nothing.
            size_t best = 0;
            for (size_t l = 1; l < kLawCount; ++l)
                if (tally[l] > tally[best])
                    best = l;
            const bool tie = std::count(tally.begin(), tally.end(), tally[best]) > 1;
            if (tally[best] > 0 && !tie)
                x.decide(a, SizeLaw(best), LawEvidence::Neighbours);
            else
                still.push_back(a);
        }
        if (still.size() == pending.size())
            break;
        pending.swap(still);
    }
}

} // namespace

void decideCallSiteVotes(LawContext& x)
{
    std::vector<size_t> pending = x.pending();
    callSiteVotes(x, pending);
}

void decideMirrorVotes(LawContext& x)
{
    std::vector<size_t> pending = x.pending();
    mirrorVotes(x, pending);
}

// Inputs first, to a fixed point (each decided tensor may decide the next op's output), then the
// weaker evidence of what is made next.
void decideInputAndNeighbourVotes(LawContext& x)
{
    std::vector<size_t> pending = x.pending();
    for (int round = 0; round < 4 && !pending.empty(); ++round) {
        const size_t before = pending.size();
        for (size_t left = pending.size() + 1; pending.size() < left;) {
            left = pending.size();
            inputVotes(x, pending);
        }
        neighbourVotes(x, pending);
        if (pending.size() == before)
            break;
    }
}

// What no evidence decided: taken as the tokens where they are a candidate (the usual case; else
// the first law its candidates admit), and said, by call site, with the laws it could have been.
// The casts of a weight's bytes that outnumber such weights and, at b = 1, the embedding outputs of
// the tokens' bytes were decided by their sizes; the law the sizes could not rule out stays a candidate.
void reportAmbiguous(LawContext& x)
{
    std::map<std::string, AmbiguousSite> sites;
    auto report = [&](size_t a, const char* what, uint8_t others) {
        x.record[a].candidates = others | lawBit(x.m.law[a]);
        x.decide(a, x.m.law[a], LawEvidence::Default);
        AmbiguousSite& site = sites[siteName(x.trace, x.al(a), x.facts(a)) + what];
        site.chosen = x.m.law[a];
        site.others |= others;
        ++site.count;
        site.bytes += x.size(a);
        x.m.ambiguousBytes += x.size(a);
    };
    for (size_t a : x.pending()) {
        const uint8_t candidates = x.record[a].candidates;
        x.m.law[a] = SizeLaw::Linear;
        if (!(candidates & lawBit(SizeLaw::Linear)))
            for (size_t l = 0; l < kLawCount; ++l)
                if (candidates & lawBit(SizeLaw(l)) && SizeLaw(l) != SizeLaw::Fixed) {
                    x.m.law[a] = SizeLaw(l);
                    break;
                }
        report(a, "", uint8_t(candidates & ~lawBit(x.m.law[a])));
    }
    for (size_t a : x.castsUnsure)
        report(a, " (a weight's cast or an input's)", lawBit(SizeLaw::Fixed));
    for (size_t a : x.embeddingsUnsure)
        report(a, " (the tokens' embedding or the positions', at b = 1)", lawBit(SizeLaw::Seq));
    for (auto& [name, site] : sites) {
        site.site = name;
        x.m.ambiguous.push_back(site);
    }
    std::sort(x.m.ambiguous.begin(), x.m.ambiguous.end(), [](auto& p, auto& q) { return p.bytes > q.bytes; });
}

} // namespace poolscope::law_detail
