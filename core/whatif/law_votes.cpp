// Deciding sizes two laws explain: the frames that say "attention scores", the causal-mask lines,
// and the votes of a call site, an autograd mirror, an input and the neighbours.
#include "core/whatif/law_decider.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace poolscope::law_detail {

// The anchor's b*a*s*s elements at its own element size; at another size only where a conversion
// or a mask makes them (a bool mask, a dropout mask, a cast, autocast's fp32 softmax), or where no
// model dimension explains the width at all.
bool LawDecider::inScoreFamily(size_t a) const
{
    const int64_t T = m_m.dims.tokens, bytes = size(a);
    const int64_t anchor = m_m.dims.scoreWidth;
    if (T > 0) {
        if (bytes % T != 0 || anchor == 0)
            return false;
        const int64_t w = bytes / T;
        if (w == anchor)
            return true;
        if (w <= 8 || std::find(m_scoreWidths.begin(), m_scoreWidths.end(), w) == m_scoreWidths.end())
            return false;
        if (m_scoresUnexplained && !explainedByDimension(w, m_dims))
            return true;
        const StackOpFacts& f = facts(a);
        const bool mask = !f.has(StackOpFacts::Backward) && (f.has(StackOpFacts::MaskOp) || f.has(StackOpFacts::Dropout));
        if (m_anchorElement > 0) {
            // Known element size: a matmul makes them in 16 bits, an fp32 operator in 32, the rest
            // either; one byte only for a mask.
            const int64_t elements = anchor / m_anchorElement;
            if (f.precision == OpPrecision::Lower && !f.has(StackOpFacts::Backward))
                return w == 2 * elements;
            if (f.precision == OpPrecision::Fp32 && !f.has(StackOpFacts::Backward))
                return w == 4 * elements;
            return w == 2 * elements || w == 4 * elements || (w == elements && mask);
        }
        return !f.has(StackOpFacts::Backward) && (f.precision == OpPrecision::Cast || mask);
    }
    return m_scoreSizes.count(bytes) > 0;
}

bool LawDecider::tokensExplained(int64_t bytes) const
{
    const int64_t T = m_m.dims.tokens;
    return T > 0 && bytes % T == 0 && (bytes / T <= 8 || explainedByDimension(bytes / T, m_dims));
}

bool LawDecider::isProduct(size_t a) const
{
    const std::string& op = facts(a).opKey;
    return op == "bmm" || op == "baddbmm" || op == "matmul" || op == "einsum";
}

// Where a*s = h, q @ k.T and attn @ v are products of the same bytes in the same attention code.
// Data decides: the scores' product is made before the softmax that reads it; the context is made
// from the probabilities, so after them and while they live.
int LawDecider::productOrder(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (!f.userFrame)
        return 0;
    const Frame& here = m_trace.frames.frame(f.userFrame);
    auto softmaxHere = [&](size_t b) {
        // softmax, or the exp of a hand-written one: nothing else in attention exponentiates.
        const StackOpFacts& g = facts(b);
        if (!(g.has(StackOpFacts::SoftmaxOp) || g.opKey == "exp") || g.has(StackOpFacts::Backward) || g.has(StackOpFacts::LogSoftmax) ||
            !g.userFrame)
            return false;
        const Frame& there = m_trace.frames.frame(g.userFrame);
        return there.filename == here.filename && there.name == here.name;
    };
    const Allocation& al = m_dev.allocations[a];
    int seen = 0;
    for (size_t b = a; b-- > 0 && seen < kInputWindow; ++seen) {
        const Allocation& in = m_dev.allocations[b];
        if (in.preexisting())
            break;
        if (softmaxHere(b) && (in.freeCompletedEvent == kNoEvent || in.freeCompletedEvent > al.allocEvent))
            return -1; // made while the probabilities of its own function live: attn @ v
        if (isProduct(b) && size(b) == size(a))
            break; // an earlier product of these bytes (q @ k.T) lies between: this one is after it
    }
    seen = 0;
    for (size_t b = a + 1; b < m_m.allocationCount && seen < kInputWindow; ++b, ++seen) {
        if (isProduct(b) && size(b) == size(a))
            return 0; // another product of these bytes before any softmax: cannot tell
        if (softmaxHere(b))
            return +1; // the softmax of its own function comes after it: q @ k.T
    }
    return 0;
}

// Frames that say "attention scores": softmax, the score operators' autograd nodes, attention code,
// or an operator on a line next to a softmax of the same function (q @ k.T, the scale, the mask).
bool LawDecider::scoreEvidence(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (f.has(StackOpFacts::LinearOp) || f.has(StackOpFacts::Embedding) || f.has(StackOpFacts::LogSoftmax))
        return false;
    if (f.has(StackOpFacts::SoftmaxOp) || f.has(StackOpFacts::ScoreBackward))
        return true;
    // Where the context has the scores' bytes (a*s = h), attention code and the lines beside softmax
    // make both (q @ k.T and attn @ v; the attention dropout and the output's): only the softmax
    // and the score nodes speak; products go by their order, elementwise outputs by their input.
    if (m_contextCollides)
        return false;
    if (f.has(StackOpFacts::AttentionCode))
        return true;
    // A line beside softmax speaks for the anchor's own element size only: a mask or a cast there
    // as likely belongs to the projection next to it.
    // (Under autocast the scores run in both 16 and 32 bits, beside softmax as anywhere.)
    const int64_t T = m_m.dims.tokens;
    if (!f.userFrame || !f.has(StackOpFacts::Python) || T == 0)
        return false;
    if (size(a) != m_m.dims.scoreWidth * T &&
        (m_anchorElement == 0 || (size(a) != 2 * T * m_m.dims.scoreWidth / m_anchorElement &&
                                  size(a) != 4 * T * m_m.dims.scoreWidth / m_anchorElement)))
        return false;
    return nearAnchorLine(a);
}

// On a line beside an anchor in the same function (q @ k.T, the scale, the mask, the softmax), or
// in backward in the same file (a custom autograd function's backward beside its forward).
bool LawDecider::nearAnchorLine(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (!f.userFrame)
        return false;
    const Frame& here = m_trace.frames.frame(f.userFrame);
    if (!here.filename.ends_with(".py"))
        return false;
    for (auto& [frame, line] : m_softmaxLines) {
        const Frame& there = m_trace.frames.frame(frame);
        if (there.filename == here.filename && there.name == here.name && std::abs(there.line - here.line) <= 6)
            return true;
        if (f.has(StackOpFacts::Backward) && there.filename == here.filename && std::abs(there.line - here.line) <= 40)
            return true;
    }
    return false;
}

// Where the trace shows its attention code (softmax in a Python function), Python code elsewhere
// (an MLP's projections of the same bytes) makes no scores.
bool LawDecider::outsideAttention(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (m_softmaxLines.empty() || !f.has(StackOpFacts::Python) || f.has(StackOpFacts::AttentionCode) || !f.userFrame)
        return false;
    return !nearAnchorLine(a);
}

// A causal mask: made by a comparison or a triangle, or converted on a line beside one.
bool LawDecider::maskLine(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (f.has(StackOpFacts::MaskOp))
        return true;
    if (!f.userFrame || (f.precision != OpPrecision::Cast && f.precision != OpPrecision::Promote))
        return false;
    const Frame& here = m_trace.frames.frame(f.userFrame);
    for (FrameId frame : m_maskLines) {
        const Frame& there = m_trace.frames.frame(frame);
        if (there.filename == here.filename && there.name == here.name && std::abs(there.line - here.line) <= 2)
            return true;
    }
    return false;
}

namespace {

// The law all of a group's decided allocations agree on, if they do.
struct Unanimous {
    int state = 0; // 0 no vote, 1 unanimous, 2 split
    SizeLaw law = SizeLaw::Linear;
    void add(SizeLaw l)
    {
        if (state == 0)
            *this = {1, l};
        else if (law != l)
            state = 2;
    }
    bool agreed() const { return state == 1; }
};

} // namespace

// A call site (stack) follows one law wherever the evidence decided it: its undecided allocations
// take that law when all its decided ones agree.
void LawDecider::callSiteVotes(std::vector<size_t>& pending)
{
    std::unordered_map<uint32_t, Unanimous> votes; // by stack
    for (size_t a = 0; a < m_m.allocationCount; ++a) {
        const StackId st = m_dev.allocations[a].stack;
        // Only token laws vote: a weight's gradient from the same operator is another kind of tensor.
        const LawEvidence why = m_m.lawEvidence[a];
        if (open(a) || !st.valid() || (why != LawEvidence::Dimensions && why != LawEvidence::Frames) || !inScoreFamily(a))
            continue;
        votes[st.value].add(m_m.law[a]);
    }
    std::vector<size_t> still;
    for (size_t a : pending) {
        const StackId st = m_dev.allocations[a].stack;
        // Where the scores and the context collide, a stack with no Python line (an autograd node in
        // backward) is shared by both kinds' operators: it speaks for neither.
        if (m_contextCollides && !facts(a).has(StackOpFacts::Python)) {
            still.push_back(a);
            continue;
        }
        auto it = st.valid() ? votes.find(st.value) : votes.end();
        if (it != votes.end() && it->second.agreed())
            set(a, it->second.law, LawEvidence::CallSite);
        else
            still.push_back(a);
    }
    pending.swap(still);
}

// A gradient has the bytes of the tensor its node's forward operator made: the law that operator
// followed at that size in forward (when all its decided outputs of that size agree).
void LawDecider::mirrorVotes(std::vector<size_t>& pending)
{
    std::map<std::pair<std::string, int64_t>, Unanimous> votes; // by forward operator and bytes
    for (size_t a = 0; a < m_m.allocationCount; ++a) {
        const StackOpFacts& f = facts(a);
        const LawEvidence why = m_m.lawEvidence[a];
        if (f.has(StackOpFacts::Backward) || f.opKey.empty())
            continue;
        // Where the scores and the context collide, one forward operator (a dropout, a product) may
        // make both kinds at these bytes: an output still undecided splits the vote (a norm's, which
        // only ever sees the residual stream, stays unanimous).
        if (m_contextCollides && (open(a) || why == LawEvidence::Default)) {
            votes[{f.opKey, size(a)}].state = 2;
            continue;
        }
        if (open(a) || (why != LawEvidence::Dimensions && why != LawEvidence::Frames))
            continue;
        votes[{f.opKey, size(a)}].add(m_m.law[a]);
    }
    std::vector<size_t> still;
    for (size_t a : pending) {
        const StackOpFacts& f = facts(a);
        auto it = f.has(StackOpFacts::Backward) && !f.opKey.empty() ? votes.find({f.opKey, size(a)}) : votes.end();
        if (it != votes.end() && it->second.agreed())
            set(a, it->second.law, LawEvidence::CallSite);
        else
            still.push_back(a);
    }
    pending.swap(still);
}

// An elementwise operator's output has its input's shape: the latest tensor of the same bytes, alive
// when it is born, whose law is decided (gelu of a projection, dropout of the scores, a gradient
// through an activation function).
void LawDecider::inputVotes(std::vector<size_t>& pending)
{
    std::vector<size_t> still;
    for (size_t a : pending) {
        // A product is no elementwise operator: its output need not have its inputs' shape. And in
        // backward, where the scores and the context collide, the gradients of both kinds are made
        // side by side by the same nodes: the nearest one of these bytes is no evidence.
        if ((a < m_collidingProduct.size() && m_collidingProduct[a]) || (m_contextCollides && facts(a).has(StackOpFacts::Backward))) {
            still.push_back(a);
            continue;
        }
        // A dropout mask has its output's elements (the allocation after it, from the same call). Where
        // the scores and the context collide, the one-byte tensor living before it may be either's mask.
        if (m_contextCollides && m_m.mask[a] && facts(a).has(StackOpFacts::Dropout)) {
            if (a + 1 < m_m.allocationCount && m_dev.allocations[a + 1].stack == m_dev.allocations[a].stack && !open(a + 1) &&
                m_m.lawEvidence[a + 1] != LawEvidence::Default)
                set(a, m_m.law[a + 1], LawEvidence::Neighbours);
            else
                still.push_back(a);
            continue;
        }
        const Allocation& al = m_dev.allocations[a];
        bool decided = false;
        int seen = 0;
        for (size_t b = a; b-- > 0 && seen < kInputWindow;) {
            const Allocation& in = m_dev.allocations[b];
            if (in.preexisting())
                break;
            ++seen;
            const LawEvidence why = m_m.lawEvidence[b];
            // A cast has its input's elements at another size.
            const bool sameElements = in.size == al.size ||
                                      (facts(a).precision == OpPrecision::Cast && (in.size == 2 * al.size || 2 * in.size == al.size));
            const bool alive = in.freeCompletedEvent == kNoEvent || in.freeCompletedEvent >= al.allocEvent;
            // Where the scores and the context collide, the nearest live tensor of these bytes is the
            // input; undecided (or decided by nothing), it cannot speak, and one further back is
            // as likely the other kind.
            if (m_contextCollides && sameElements && alive && (open(b) || why == LawEvidence::Default))
                break;
            if (!sameElements || open(b) || m_m.law[b] == SizeLaw::Fixed || why == LawEvidence::Default)
                continue;
            if (!alive)
                continue;
            set(a, m_m.law[b], LawEvidence::Neighbours);
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
void LawDecider::neighbourVotes(std::vector<size_t>& pending)
{
    if (m_contextCollides)
        return; // the scores' neighbours and the context's look alike: what is left is reported
    for (int round = 0; round < 3 && !pending.empty(); ++round) {
        std::vector<size_t> still;
        for (size_t a : pending) {
            if (a < m_collidingProduct.size() && m_collidingProduct[a]) {
                still.push_back(a); // the scores' and the context's neighbours look alike
                continue;
            }
            const Allocation& al = m_dev.allocations[a];
            int quadratic = 0, linear = 0, seen = 0;
            for (size_t b = a + 1; b < m_m.allocationCount && seen < kNeighbourWindow; ++b) {
                const Allocation& nb = m_dev.allocations[b];
                if (al.freeCompletedEvent != kNoEvent && nb.allocEvent > al.freeCompletedEvent)
                    break;
                ++seen;
                const LawEvidence why = m_m.lawEvidence[b];
                if (open(b) || m_m.law[b] == SizeLaw::Fixed || why == LawEvidence::Default || !inScoreFamily(b))
                    continue;
                quadratic += m_m.law[b] == SizeLaw::Quadratic;
                linear += m_m.law[b] == SizeLaw::Linear;
            }
            if (quadratic > linear)
                set(a, SizeLaw::Quadratic, LawEvidence::Neighbours);
            else if (linear > quadratic)
                set(a, SizeLaw::Linear, LawEvidence::Neighbours);
            else
                still.push_back(a);
        }
        if (still.size() == pending.size())
            break;
        pending.swap(still);
    }
}

} // namespace poolscope::law_detail
