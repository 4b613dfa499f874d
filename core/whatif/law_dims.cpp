// The cascade's finders of the run's dimensions: model dimensions from the parameters, the token
// count T, the sequence length s and the weight matrices (per unit and others); the attention-score
// width's is in law_score_width.cpp. They decide no law (a position embedding found with s is
// decided by the step after).
#include "core/whatif/law_cascade.h"

#include "core/util/units.h"
#include "core/whatif/seq_reductions.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace poolscope::law_detail {

std::unordered_set<int64_t> modelDims(const std::unordered_map<int64_t, int64_t>& paramCount, std::unordered_set<int64_t>& vectors)
{
    int64_t total = 0;
    for (auto& [size, count] : paramCount)
        total += size * count;
    // Sizes seen at least twice, or big enough to be a weight (a tied embedding is one tensor)
    // rather than an input batch kept since before recording.
    std::vector<std::pair<int64_t, int64_t>> repeated;
    for (auto& [size, count] : paramCount)
        if (count >= 2 || size * 200 >= total)
            repeated.emplace_back(size, count);
    std::sort(repeated.begin(), repeated.end(), [](auto& p, auto& q) { return p.second != q.second ? p.second > q.second : p.first < q.first; });
    if (repeated.size() > 64)
        repeated.resize(64);
    std::unordered_set<int64_t> dims{1};
    for (auto& [size, count] : repeated) {
        // A matrix over a vector of the same dtype names the matrix's other dimension (h x 4h over h
        // gives 4h). Small ratios are just ratios between weights (2, 4, 8) and, times the
        // element-size factors, would explain any power of two, the score matrix included.
        bool matrix = false;
        for (auto& [other, count2] : repeated)
            if (other < size && size % other == 0 && size / other >= kMinQuotientDim) {
                dims.insert(size / other);
                matrix = true;
            }
        // A vector's element count is a width (a norm's h, a bias's 4h), in fp32, 16 or 8 bits. A
        // matrix's element count is no width: h*h per token would explain anything.
        if (matrix)
            continue;
        vectors.insert(size);
        for (int64_t e : {1, 2, 4})
            if (size % e == 0 && size / e > 1)
                dims.insert(size / e);
    }
    return dims;
}

bool explainedByDimension(int64_t width, const std::unordered_set<int64_t>& dims)
{
    for (int64_t f : kWidthFactors)
        if (width % f == 0 && width / f > 1 && dims.count(width / f))
            return true;
    return false;
}

// T: the token unit that explains the most bytes as T x (model dimension) x (small factor).
void findTokens(LawContext& x)
{
    std::unordered_map<int64_t, int64_t> bytesBySize;
    for (size_t a = 0; a < x.m.allocationCount; ++a)
        if (x.open(a))
            bytesBySize[x.size(a)] += x.size(a);
    std::vector<std::pair<int64_t, int64_t>> sizes(bytesBySize.begin(), bytesBySize.end());
    std::sort(sizes.begin(), sizes.end(), [](auto& p, auto& q) { return p.second != q.second ? p.second > q.second : p.first < q.first; });
    if (sizes.size() > kMaxSizes)
        sizes.resize(kMaxSizes);
    if (x.weights.dims.size() <= 1 || sizes.empty())
        return;
    // The residual stream: a layer's input is T tokens x the norm weight's bytes (a vector that
    // repeats once or twice per layer), whatever the element size both share.
    const int64_t U = x.m.passes.empty() ? 0 : x.m.passes.front().inputBytes;
    if (U > 0 && x.m.layersPerPass > 0) {
        // Candidates: parameter sizes that repeat at least once per unit and divide the input. The
        // token ids moved to the device (int64, one per token) pick among them; failing those, a
        // norm comes once or twice per unit (pre-norm blocks, plus the final one), preferred over
        // vectors that repeat more often (biases beside it, quantisation statistics), and then the
        // most repeated.
        const int64_t L = x.m.layersPerPass;
        std::unordered_set<int64_t> ids;
        for (size_t a = 0; a < x.m.allocationCount; ++a)
            if (x.m.pool[a] == Pool::Input && x.size(a) % 8 == 0)
                ids.insert(x.size(a) / 8);
        auto normLike = [&](int64_t count) { return count == L || count == L + 1 || count == 2 * L || count == 2 * L + 1; };
        int64_t norm = 0, normCount = 0;
        int normRank = -1;
        for (auto& [bytes, count] : x.weights.paramCount) {
            if (count < L || U % bytes != 0 || U / bytes < 2)
                continue;
            // The ids speak for a norm of the activations' element size, or of twice or half it
            // (fp32 weights under 16-bit activations, the mixed-precision case).
            const int64_t q = U / bytes;
            const bool idsAgree = ids.count(q) || ids.count(2 * q) || (q % 2 == 0 && ids.count(q / 2));
            // The final norm after the last unit makes a norm's count one or two (a LayerNorm's
            // weight and bias) more than a multiple of the units (2L + 1, 4L + 2, or more with
            // biases of its size beside it): a bias of another width (an MLP's 4h) repeats a whole
            // number of times per unit. Where the ids do not speak (Python-only stacks do not show
            // them as inputs), that decides.
            const bool finalNorm = count > L && L > 2 && (count % L == 1 || count % L == 2);
            const int rank = idsAgree ? 3 : finalNorm ? 2 : normLike(count) ? 1 : 0;
            if (std::tie(rank, count, bytes) > std::tie(normRank, normCount, norm)) {
                norm = bytes;
                normCount = count;
                normRank = rank;
            }
        }
        if (norm > 0) {
            x.m.dims.tokens = U / norm;
            x.m.dims.tokensFrom = "a layer's input (" + formatBytes(U) + ") over a norm weight's (" + formatBytes(norm) + ")";
            // Weights and activations of different element sizes (fp32 weights, 16-bit activations)
            // make that T/2 or 2T: the token ids (int64, one per token) moved to the device decide.
            for (size_t a = 0; a < x.m.allocationCount; ++a) {
                if (x.m.pool[a] != Pool::Input || x.size(a) % 8 != 0)
                    continue;
                const int64_t ids = x.size(a) / 8;
                if (ids == 2 * x.m.dims.tokens || 2 * ids == x.m.dims.tokens) {
                    x.m.dims.tokens = ids;
                    x.m.dims.tokensFrom += ", as many as the token ids moved to the device";
                    break;
                }
            }
            return;
        }
    }
    std::unordered_set<int64_t> candidates;
    for (size_t i = 0; i < std::min<size_t>(4, sizes.size()); ++i)
        for (int64_t d : x.weights.dims)
            for (int64_t f : kWidthFactors)
                if (sizes[i].first % (d * f) == 0)
                    candidates.insert(sizes[i].first / (d * f));
    // Scored first by the bytes that are exactly an element size times a dimension (the hidden
    // size, the MLP's width, the vocabulary), then with the small multiples too: T and 16T would
    // otherwise explain the same sizes (T x 4h fp32 = 16T x h/4 ...).
    auto exact = [&](int64_t width) {
        for (int64_t e : {1, 2, 4, 8})
            if (width % e == 0 && width / e > 1 && x.weights.dims.count(width / e))
                return true;
        return false;
    };
    int64_t bestT = 0, bestExact = -1, bestScore = -1;
    for (int64_t t : candidates) {
        if (t < 2)
            continue;
        int64_t score = 0, exactBytes = 0;
        for (auto& [s, bytes] : sizes) {
            if (s % t != 0)
                continue;
            score += explainedByDimension(s / t, x.weights.dims) ? bytes : 0;
            exactBytes += exact(s / t) ? bytes : 0;
        }
        if (std::tie(exactBytes, score, t) > std::tie(bestExact, bestScore, bestT)) {
            bestExact = exactBytes;
            bestScore = score;
            bestT = t;
        }
    }
    x.m.dims.tokens = bestT;
    if (bestT > 0)
        x.m.dims.tokensFrom = "the unit that explains the most activation bytes as tokens x a parameter dimension";
}

namespace {

// The softmax's reductions over s (seq_reductions.h), read from sizes and lifetimes alone: in
// forward, a tensor of fewer bytes per row made while a wider one lives (within a few allocations
// after it), and broadcast back over it (x - max, e / sum: a tensor of the wider one's bytes made
// while the reduction lives, within a few allocations). A maximum's int64 indices right after its
// values are no second reduction. Each reduction counts once, against the nearest wider tensor.
// A numerically stable softmax reduces twice (its maximum, then its sum of the exps), each at its
// input's element size: only such pairs count (one reduction alone, a fused logsumexp or an fp32
// statistic of 16-bit scores, says s only up to the element sizes' ratio, and a*s = h makes the
// context look like its broadcast). And the scores are wider than a layer's input (b*a*s*s against
// b*s*h elements, at s > h/a): rotary's cos and sin over q and k (per-token tables a fraction of q's
// bytes, used twice per layer) have that shape too, on tensors no wider than the layer's input.
inline constexpr size_t kReductionWindow = 8; // allocations between the reduced tensor and its reduction
inline constexpr size_t kBroadcastWindow = 3; // allocations between the reduction and its broadcast
inline constexpr size_t kPairWindow = 12;     // allocations between the maximum and the sum

void findReductions(LawContext& x)
{
    const int64_t T = x.m.dims.tokens;
    x.scores.reductions.clear();
    x.scores.sumWidths.clear();
    if (T <= 0)
        return;
    auto forward = [&](size_t a) {
        const Phase p = birthPhase(x.c, a);
        return !x.facts(a).has(StackOpFacts::Backward) && p != Phase::Backward && p != Phase::OptimizerStep &&
               !x.al(a).preexisting();
    };
    auto alive = [&](size_t in, size_t at) {
        return x.al(in).freeCompletedEvent == kNoEvent || x.al(in).freeCompletedEvent >= x.al(at).allocEvent;
    };
    const size_t n = x.m.allocationCount;
    const int64_t U = x.m.passes.empty() ? 0 : x.m.passes.front().inputBytes;
    size_t lastReduction = n;
    struct Found {
        size_t at;
        int64_t q, tensor, reduced;
    };
    std::vector<Found> found;
    for (size_t b = 1; b < n; ++b) {
        if (!forward(b) || x.size(b) % T != 0)
            continue;
        if (lastReduction == b - 1 && x.size(b) == 2 * x.size(b - 1))
            continue; // the maximum's indices beside its values
        for (size_t a = b; a-- > 0 && b - a <= kReductionWindow;) {
            if (!forward(a) || !alive(a, b) || x.size(a) <= U)
                continue;
            const int64_t q = reducedLength(x.size(a), x.size(b), T);
            if (q == 0)
                continue;
            bool broadcast = false;
            for (size_t c = b + 1; c < n && c - b <= kBroadcastWindow && !broadcast; ++c)
                broadcast = x.size(c) == x.size(a) && alive(b, c) && forward(c);
            if (broadcast) {
                found.push_back({b, q, x.size(a), x.size(b)});
                lastReduction = b;
            }
            break;
        }
    }
    for (size_t i = 0; i + 1 < found.size(); ++i) {
        const Found &r = found[i], &next = found[i + 1];
        if (next.at - r.at <= kPairWindow && next.q == r.q) {
            x.scores.reductions[{r.q, r.tensor / T}] += 2;
            x.scores.sumWidths[{r.q, r.tensor / T}] = next.tensor / T;
            ++i;
        }
    }
}

} // namespace

// s: a causal mask is s x s (a comparison or triangle of s*s elements, 1 to 8 bytes each); position
// ids are s long (arange); a position embedding is the token embedding over b.
void findSeq(LawContext& x)
{
    const int64_t T = x.m.dims.tokens;
    std::map<int64_t, int64_t> votes;
    for (size_t a = 0; a < x.m.allocationCount; ++a) {
        if (!x.open(a))
            continue;
        const StackOpFacts& f = x.facts(a);
        if (!f.has(StackOpFacts::MaskOp) || f.has(StackOpFacts::Backward))
            continue;
        for (int64_t e : {1, 2, 4, 8}) {
            if (x.size(a) % e != 0)
                continue;
            const int64_t q2 = x.size(a) / e;
            int64_t q = 1;
            while ((q + 1) * (q + 1) <= q2)
                ++q;
            if (q * q == q2 && q >= 8 && (T == 0 || T % q == 0)) {
                ++votes[q];
                if (f.userFrame && std::find(x.scores.maskLines.begin(), x.scores.maskLines.end(), f.userFrame) == x.scores.maskLines.end())
                    x.scores.maskLines.push_back(f.userFrame);
            }
        }
    }
    int64_t best = 0, most = 0;
    for (auto& [q, n] : votes)
        if (n > most || (n == most && q > best)) {
            best = q;
            most = n;
        }
    if (best > 0) {
        x.m.dims.seq = best;
        x.m.dims.seqFrom = "a causal mask of s x s";
    }
    // Position ids: an arange of s integers in forward. Attention that builds no mask (SDPA's
    // is_causal, flash attention) and rotary positions leave only these. They speak after a mask
    // and before the position embedding's ratio to the tokens', which needs b > 1 to show at all.
    int64_t positionIds = 0;
    if (x.m.dims.seq == 0) {
        std::map<int64_t, int64_t> aranges;
        for (size_t a = 0; a < x.m.allocationCount; ++a) {
            const StackOpFacts& f = x.facts(a);
            if (!x.open(a) || !f.has(StackOpFacts::Arange) || f.has(StackOpFacts::Backward) || birthPhase(x.c, a) == Phase::Backward)
                continue;
            for (int64_t e : {8, 4})
                if (x.size(a) % e == 0 && x.size(a) / e >= 8 && (T == 0 || T % (x.size(a) / e) == 0)) {
                    ++aranges[x.size(a) / e];
                    break;
                }
        }
        int64_t most = 0;
        for (auto& [q, n] : aranges)
            if (n > most || (n == most && q > positionIds)) {
                positionIds = q;
                most = n;
            }
    }
    // Embedding outputs in forward: the largest is the tokens', one b times smaller broadcasts over the batch.
    int64_t tokenEmbedding = 0;
    for (size_t a = 0; a < x.m.allocationCount; ++a)
        if (x.open(a) && x.facts(a).has(StackOpFacts::Embedding) && !x.facts(a).has(StackOpFacts::Backward) &&
            birthPhase(x.c, a) != Phase::Backward)
            tokenEmbedding = std::max(tokenEmbedding, x.size(a));
    for (size_t a = 0; a < x.m.allocationCount && tokenEmbedding > 0; ++a) {
        if (!x.open(a) || !x.facts(a).has(StackOpFacts::Embedding) || x.facts(a).has(StackOpFacts::Backward) ||
            birthPhase(x.c, a) == Phase::Backward)
            continue;
        const int64_t s = x.size(a);
        if (s == tokenEmbedding) {
            // One sequence in the batch: a position embedding (broadcast over b) has the token
            // embedding's bytes, and only the code could tell them apart. Said, not guessed.
            x.embeddingsUnsure.push_back(a);
        } else if (s < tokenEmbedding && tokenEmbedding % s == 0) {
            const int64_t b = tokenEmbedding / s;
            if (x.m.dims.seq == 0 && T > 0 && T % b == 0) {
                x.m.dims.seq = T / b;
                x.m.dims.seqFrom = "a position embedding b times smaller than the token embedding";
            }
            if (x.m.dims.seq == 0 || T == 0 || T / x.m.dims.seq == b)
                x.positionEmbeddings.push_back(a); // decided by the next step, before the score width is read
        }
    }
    if (x.m.dims.seq == 0 && positionIds > 0) {
        x.m.dims.seq = positionIds;
        x.m.dims.seqFrom = "position ids (an arange of s in forward)";
    }
    // Last, what no frame has to name: the softmax's reductions over s, two per attention block (its
    // maximum and its sum). The s most of them show, when at least two do.
    findReductions(x);
    if (x.m.dims.seq == 0 && T > 0) {
        std::map<int64_t, int64_t> perSeq;
        for (auto& [qw, count] : x.scores.reductions)
            perSeq[qw.first] += count;
        int64_t best = 0, most = 1;
        for (auto& [q, count] : perSeq)
            if (count > most) {
                best = q;
                most = count;
            }
        if (best > 0) {
            x.m.dims.seq = best;
            x.m.dims.seqFrom = "the softmax's reductions over s (a maximum and a sum of the scores' rows)";
        }
    }
    if (x.m.dims.seq > 0 && T > 0 && T % x.m.dims.seq == 0)
        x.m.dims.batch = T / x.m.dims.seq;
    // Two or more embedding outputs of the tokens' bytes in one forward make an ambiguity only
    // when b = 1; alone, or with b > 1, the largest is the tokens' own.
    std::map<uint32_t, int> perRun;
    auto runOf = [&](size_t a) { return x.c.phases.runOf(x.dev.allocations[a]); };
    for (size_t a : x.embeddingsUnsure)
        ++perRun[runOf(a)];
    std::erase_if(x.embeddingsUnsure, [&](size_t a) { return x.m.dims.batch > 1 || perRun[runOf(a)] < 2; });
}

// How many matrices of `bytes` outside the repeated units a matmul reads in one forward pass, by
// what the pass makes: a matrix of rows x h read by a projection makes a tokens x rows output (the
// head's logits), one the embedding only gathers from makes none of that width (its output is
// tokens x h). Counted per pass among the outputs of matmul-family operators (all outputs where the
// trace names no operator), at most `count`. Without the run's tokens or layer input: `count`.
int64_t LawContext::matmulReaders(int64_t bytes, int64_t count) const
{
    const int64_t T = m.dims.tokens;
    if (count <= 0 || T <= 0 || m.passes.empty() || m.passes.front().inputBytes <= 0)
        return count;
    const ForwardPass& pass = m.passes.front();
    const int64_t U = pass.inputBytes;
    std::unordered_set<int64_t> widths; // bytes of a tokens x rows output
    for (int64_t e : {2, 4}) {          // the residual stream's element size
        if (U % (T * e))
            continue;
        const int64_t h = U / (T * e);
        for (int64_t ep : {2, 4}) { // the parameter's element size
            if (h <= 1 || bytes % (ep * h))
                continue;
            const int64_t rows = bytes / (ep * h);
            for (int64_t eo : {2, 4}) // the output's
                widths.insert(T * rows * eo);
        }
    }
    if (widths.empty())
        return count;
    bool anyOperator = false;
    int64_t outputs = 0;
    for (size_t a = 0; a < m.allocationCount; ++a) {
        const Allocation& al = dev.allocations[a];
        if (al.preexisting() || al.allocEvent < pass.begin || al.allocEvent > pass.end || facts(a).has(StackOpFacts::Backward))
            continue;
        anyOperator |= m.precision[a] != OpPrecision::Unknown;
    }
    for (size_t a = 0; a < m.allocationCount; ++a) {
        const Allocation& al = dev.allocations[a];
        if (al.preexisting() || al.allocEvent < pass.begin || al.allocEvent > pass.end || facts(a).has(StackOpFacts::Backward) ||
            !widths.count(size(a)))
            continue;
        if (!anyOperator || m.precision[a] == OpPrecision::Lower)
            ++outputs;
    }
    return std::min(count, outputs);
}

void findMatrices(LawContext& x)
{
    // A table only an embedding reads (its gradients all come from the embedding's backward) is no
    // matmul's weight: autocast never casts it.
    std::map<int64_t, std::pair<int, int>> gradsBySize; // bytes -> (from an embedding, all)
    for (size_t a = 0; a < x.m.allocationCount; ++a)
        if (x.m.pool[a] == Pool::Gradient && !x.dev.allocations[a].preexisting()) {
            auto& [emb, all] = gradsBySize[x.size(a)];
            ++all;
            emb += x.facts(a).has(StackOpFacts::Embedding) || x.facts(a).has(StackOpFacts::IndexBackward) ? 1 : 0;
        }
    const int L = x.m.layersPerPass;
    for (auto& [bytes, count] : x.weights.paramCount) {
        if (x.weights.vectors.count(bytes) || bytes < 4096)
            continue;
        // Tables of this size that only a gather reads: as many as the share of their gradients an
        // embedding or indexing node makes (an untied embedding beside a head of its size: one of two).
        int64_t tables = 0;
        if (auto it = gradsBySize.find(bytes); it != gradsBySize.end() && it->second.second > 0)
            tables = (count * it->second.first + it->second.second / 2) / it->second.second;
        const int64_t perUnit = L > 0 ? count / L : 0;
        for (int64_t i = 0; i < perUnit; ++i)
            x.m.unitMatrices.push_back(bytes);
        const int64_t others = count - perUnit * std::max(L, 1);
        const int64_t read = std::min(others - std::min(others, tables), x.matmulReaders(bytes, others));
        for (int64_t i = 0; i < read; ++i)
            x.m.otherMatrices.push_back(bytes);
    }
    std::sort(x.m.unitMatrices.begin(), x.m.unitMatrices.end());
    std::sort(x.m.otherMatrices.begin(), x.m.otherMatrices.end());
}

} // namespace poolscope::law_detail
