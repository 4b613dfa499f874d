// Per-allocation size laws decided from the structure of the whole trace. First what follows the
// weights (by pool, phase, and by origin: a weight's cast, its gradient on the way into .grad, an
// embedding table's gradient), then the run's dimensions (tokens T = b*s from the sizes the model's
// own dimensions explain, s from the causal mask or the position ids, the attention-score width
// from softmax or from a width no dimension explains), then each remaining allocation by the laws
// its size admits: one law is decided by the size alone; two by the code that made it (attention
// frames, score operators and their autograd nodes, a projection), by the law its call site
// follows elsewhere, or by the tensors its life overlaps. What stays open is reported.
#include "core/whatif/size_laws.h"

#include "core/util/units.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace poolscope {
namespace {

// e (bytes per element: 1, 2, 4, 8) times k (small multiples: fused q/k/v, gates, pairs).
constexpr std::array<int64_t, 12> kWidthFactors = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
constexpr size_t kMaxSizes = 256;
constexpr int64_t kMinQuotientDim = 64;
constexpr size_t kMinScoreTensors = 4;
constexpr int kNeighbourWindow = 4; // allocations born right after an ambiguous one that may vote
constexpr int kInputWindow = 8;     // allocations before an ambiguous one where its input may be
constexpr EventIndex kCloneFreeWindow = 4;  // events between AccumulateGrad's clone and the source's free
constexpr size_t kCloneSourceDistance = 2;  // allocations between the clone's source and the clone // allocations born while an ambiguous one lives that may vote

bool isWeightPool(Pool p)
{
    return p == Pool::Parameter || p == Pool::CastCache || p == Pool::Gradient || p == Pool::OptimizerState ||
           p == Pool::Workspace || p == Pool::KvCache;
}

Phase birthPhase(const Classification& c, size_t a) { return a < c.birthPhase.size() ? c.birthPhase[a] : Phase::Unknown; }

const StackOpFacts kNoFacts{};

// Model dimensions: parameter element counts (fp32 or 16-bit) and their quotients (a weight of
// h x 4h over a norm of h gives 4h). Activations are tokens x these (times small factors).
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
    std::sort(repeated.begin(), repeated.end(), [](auto& x, auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
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

// width = e x k x d for a model dimension d > 1.
bool explainedByDimension(int64_t width, const std::unordered_set<int64_t>& dims)
{
    for (int64_t f : kWidthFactors)
        if (width % f == 0 && width / f > 1 && dims.count(width / f))
            return true;
    return false;
}

std::string siteName(const Trace& trace, const Allocation& al, const StackOpFacts& f)
{
    if (f.userFrame) {
        const Frame& fr = trace.frames.frame(f.userFrame);
        std::string file = fr.filename;
        if (const size_t slash = file.rfind('/'); slash != std::string::npos)
            file = file.substr(slash + 1);
        return file + ":" + std::to_string(fr.line) + " " + fr.name;
    }
    if (al.stack.valid())
        if (FrameId u = trace.frames.userFrame(al.stack))
            return trace.frames.frame(u).name.substr(0, 80);
    return "(no stack)";
}

class LawDecider {
public:
    LawDecider(const Trace& trace, const DeviceTrace& dev, const Classification& c, const std::vector<StackOpFacts>& facts, TraceModel& m)
        : m_trace(trace), m_dev(dev), m_c(c), m_facts(facts), m_m(m)
    {
    }

    void decideFixed();
    void decideTokens();
    void findMatrices();

private:
    const StackOpFacts& facts(size_t a) const
    {
        const StackId st = m_dev.allocations[a].stack;
        return st.valid() && st.value < m_facts.size() ? m_facts[st.value] : kNoFacts;
    }
    int64_t size(size_t a) const { return m_m.requestedSize[a]; }
    bool open(size_t a) const { return m_undecided[a] != 0; }
    void set(size_t a, SizeLaw law, LawEvidence why)
    {
        m_m.law[a] = law;
        m_m.lawEvidence[a] = why;
        m_undecided[a] = 0;
    }

    void findTokens();
    void findSeq();
    void findScoreWidth();
    bool inScoreFamily(size_t a) const;
    bool tokensExplained(int64_t bytes) const;
    bool scoreEvidence(size_t a) const;
    bool maskLine(size_t a) const;
    bool outsideAttention(size_t a) const;
    bool nearAnchorLine(size_t a) const;
    void callSiteVotes(std::vector<size_t>& pending);
    void neighbourVotes(std::vector<size_t>& pending);
    void inputVotes(std::vector<size_t>& pending);
    void mirrorVotes(std::vector<size_t>& pending);

    const Trace& m_trace;
    const DeviceTrace& m_dev;
    const Classification& m_c;
    const std::vector<StackOpFacts>& m_facts;
    TraceModel& m_m;
    std::vector<uint8_t> m_undecided; // law still to be decided by the token laws
    std::vector<size_t> m_castsUnsure; // casts of a weight's bytes that outnumber such weights
    std::unordered_map<int64_t, int64_t> m_paramCount;
    std::unordered_set<int64_t> m_dims;
    std::unordered_set<int64_t> m_vectors; // parameter sizes that are no matrix over another
    std::vector<int64_t> m_scoreWidths;      // bytes per token of the score family (T known)
    std::unordered_set<int64_t> m_scoreSizes; // whole sizes of the family (T unknown)
    std::vector<std::pair<FrameId, int64_t>> m_softmaxLines; // (user frame, line) of the anchors
    std::vector<FrameId> m_maskLines;                        // user frames of the causal masks
    bool m_scoresUnexplained = false;                        // the score width is one no dimension explains
    int64_t m_anchorElement = 0;                             // bytes per element of the anchor, 0 unknown
};

void LawDecider::decideFixed()
{
    const size_t n = m_m.allocationCount;
    m_undecided.assign(n, 0);
    m_m.gradSource.assign(n, -1);
    for (size_t a = 0; a < n; ++a)
        if (m_m.pool[a] == Pool::Parameter)
            ++m_paramCount[size(a)];
    m_dims = modelDims(m_paramCount, m_vectors);
    const bool haveRuns = m_c.phases.run.size() == m_dev.eventCount();
    // Autocast casts that mirror a weight: at most one per weight of that size per forward run.
    std::map<std::pair<uint32_t, int64_t>, int64_t> castsPerRun;
    auto runOf = [&](const Allocation& al) { return haveRuns && !al.preexisting() ? m_c.phases.run[size_t(al.allocEvent)] : 0u; };
    auto mirrors = [&](int64_t bytes) {
        auto it = m_paramCount.find(bytes);
        return it == m_paramCount.end() ? int64_t(0) : it->second;
    };
    // The cache keeps a weight's cast until the autocast region (the forward at least) ends: a cast
    // that dies inside its forward run is an activation's (the logits upcast for the loss).
    auto cachedLifetime = [&](const Allocation& al) {
        if (al.preexisting() || al.freeCompletedEvent == kNoEvent || !haveRuns)
            return true;
        const uint32_t r = m_c.phases.run[size_t(al.allocEvent)];
        return r >= m_c.phases.runs.size() || m_c.phases.runs[r].phase != Phase::Forward ||
               al.freeCompletedEvent > m_c.phases.runs[r].last;
    };
    std::vector<uint8_t> castCandidate(n, 0);
    // (A batch moved to the device is a copy too, and no weight's.)
    auto castPhase = [&](size_t a) {
        const Phase p = birthPhase(m_c, a);
        return m_m.pool[a] != Pool::Input && (p == Phase::Forward || p == Phase::Backward || p == Phase::Unknown);
    };
    for (size_t a = 0; a < n; ++a)
        if (facts(a).precision == OpPrecision::Cast && mirrors(size(a) * 2) > 0 && castPhase(a) &&
            cachedLifetime(m_dev.allocations[a])) {
            castCandidate[a] = 1;
            ++castsPerRun[{runOf(m_dev.allocations[a]), size(a)}];
        }

    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = m_dev.allocations[a];
        const StackOpFacts& f = facts(a);
        const Pool p = m_m.pool[a];
        const Phase birth = birthPhase(m_c, a);
        m_m.precision[a] = f.precision;
        m_m.autocastSeen |= f.has(StackOpFacts::Autocast);
        // Bool masks: a comparison's output, or dropout's mask (the smaller of the pair it makes).
        if (!f.has(StackOpFacts::Backward) && f.has(StackOpFacts::MaskOp))
            m_m.mask[a] = 1;
        if (!f.has(StackOpFacts::Backward) && f.has(StackOpFacts::Dropout) && a + 1 < n &&
            m_dev.allocations[a + 1].stack == al.stack && size(a + 1) >= 2 * size(a))
            m_m.mask[a] = 1;
        if ((p == Pool::Temporary || p == Pool::Other || p == Pool::Unknown) && birth == Phase::OptimizerStep)
            m_m.stepWorkspace[a] = 1;
        if (isWeightPool(p)) {
            set(a, SizeLaw::Fixed, LawEvidence::Pool);
            m_m.weightCast[a] = p == Pool::CastCache;
            continue;
        }
        // The step's and zero_grad's own buffers follow the weights; the next batch, moved to the
        // device while zero_grad's phase still holds, does not.
        if (birth == Phase::OptimizerStep || f.has(StackOpFacts::Optimizer) ||
            (birth == Phase::ZeroGrad && p != Pool::Input && p != Pool::Activation)) {
            set(a, SizeLaw::Fixed, LawEvidence::Phase);
            continue;
        }
        if (a < m_c.rule.size() && m_c.rule[a] < m_c.rules.size()) {
            const std::string& rule = m_c.rules[m_c.rule[a]].name;
            if (rule.find("workspace") != std::string::npos || rule.find("cufft") != std::string::npos ||
                rule.find("collective") != std::string::npos) {
                set(a, SizeLaw::Fixed, LawEvidence::Pool);
                continue;
            }
        }
        if (al.preexisting() && p != Pool::Input && p != Pool::Activation) {
            set(a, SizeLaw::Fixed, LawEvidence::Pool);
            continue;
        }
        // Made from a weight: a gradient stored by AccumulateGrad, an embedding table's gradient,
        // a dequantised weight, an autocast cast of a weight (once per weight per forward).
        if (f.has(StackOpFacts::AccumulateGrad) || (f.has(StackOpFacts::Embedding) && f.has(StackOpFacts::Backward) && mirrors(size(a)) > 0) ||
            (f.has(StackOpFacts::Dequantize) && (mirrors(size(a)) || mirrors(size(a) / 2) || mirrors(size(a) / 4) || mirrors(size(a) / 8)))) {
            set(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
            continue;
        }
        if (castCandidate[a]) {
            if (castsPerRun[{runOf(al), size(a)}] <= mirrors(size(a) * 2)) {
                set(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
                m_m.weightCast[a] = 1;
                continue;
            }
            // More casts of a weight's bytes than such weights: inputs' casts of the same bytes
            // among them, and nothing tells which is which. Taken by the sizes, and said.
            m_castsUnsure.push_back(a);
        }
        m_m.law[a] = SizeLaw::Linear;
        m_m.lawEvidence[a] = LawEvidence::Default;
        m_undecided[a] = 1;
    }
    // A weight's gradient the engine could not steal: AccumulateGrad clones it into .grad and the
    // source goes right after, first of the tensors of its size alive then. An activation's
    // gradient of the same bytes lives on into the next node.
    // By allocation index: the clone's source is made by the node just before it (the weight's
    // gradient, perhaps with its input's gradient beside it).
    std::unordered_set<size_t> gradIndex;
    for (size_t a = 0; a < n; ++a)
        if (!m_dev.allocations[a].preexisting() && facts(a).has(StackOpFacts::AccumulateGrad))
            gradIndex.insert(a); // a stolen gradient carries its node's frames: only a clone has a source
    for (size_t gi : gradIndex) {
        const EventIndex g = m_dev.allocations[gi].allocEvent;
        const int64_t bytes = size(gi);
        size_t best = SIZE_MAX;
        for (size_t a = gi >= kCloneSourceDistance ? gi - kCloneSourceDistance : 0; a < gi; ++a) {
            const Allocation& al = m_dev.allocations[a];
            if (!open(a) || al.preexisting() || al.freeCompletedEvent == kNoEvent || !facts(a).has(StackOpFacts::Backward))
                continue;
            if (size(a) != bytes && size(a) * 2 != bytes) // the same bytes, or 16-bit cast into an fp32 .grad
                continue;
            if (al.freeCompletedEvent >= g && al.freeCompletedEvent <= g + kCloneFreeWindow &&
                (best == SIZE_MAX || al.freeCompletedEvent < m_dev.allocations[best].freeCompletedEvent))
                best = a;
        }
        if (best != SIZE_MAX) {
            set(best, SizeLaw::Fixed, LawEvidence::WeightOrigin);
            m_m.gradSource[gi] = int32_t(best);
        }
    }
    // Stackless traces (Kineto without stacks, frames not recorded): a buffer that mirrors a
    // parameter's bytes follows the model when there are no more of them per phase run than weights.
    std::map<std::pair<uint32_t, int64_t>, int64_t> perRun;
    for (size_t a = 0; a < n; ++a)
        if (open(a) && !m_dev.allocations[a].stack.valid() && mirrors(size(a)) > 0)
            ++perRun[{runOf(m_dev.allocations[a]), size(a)}];
    for (size_t a = 0; a < n; ++a)
        if (open(a) && !m_dev.allocations[a].stack.valid() && mirrors(size(a)) > 0 &&
            perRun[{runOf(m_dev.allocations[a]), size(a)}] <= mirrors(size(a)))
            set(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
}

// T: the token unit that explains the most bytes as T x (model dimension) x (small factor).
void LawDecider::findTokens()
{
    std::unordered_map<int64_t, int64_t> bytesBySize;
    for (size_t a = 0; a < m_m.allocationCount; ++a)
        if (open(a))
            bytesBySize[size(a)] += size(a);
    std::vector<std::pair<int64_t, int64_t>> sizes(bytesBySize.begin(), bytesBySize.end());
    std::sort(sizes.begin(), sizes.end(), [](auto& x, auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
    if (sizes.size() > kMaxSizes)
        sizes.resize(kMaxSizes);
    if (m_dims.size() <= 1 || sizes.empty())
        return;
    // The residual stream: a layer's input is T tokens x the norm weight's bytes (a vector that
    // repeats once or twice per layer), whatever the element size both share.
    const int64_t U = m_m.passes.empty() ? 0 : m_m.passes.front().inputBytes;
    if (U > 0 && m_m.layersPerPass > 0) {
        // Candidates: parameter sizes that repeat at least once per unit and divide the input. The
        // token ids moved to the device (int64, one per token) pick among them; failing those, a
        // norm comes once or twice per unit (pre-norm blocks, plus the final one), preferred over
        // vectors that repeat more often (biases beside it, quantisation statistics), and then the
        // most repeated.
        const int64_t L = m_m.layersPerPass;
        std::unordered_set<int64_t> ids;
        for (size_t a = 0; a < m_m.allocationCount; ++a)
            if (m_m.pool[a] == Pool::Input && size(a) % 8 == 0)
                ids.insert(size(a) / 8);
        auto normLike = [&](int64_t count) { return count == L || count == L + 1 || count == 2 * L || count == 2 * L + 1; };
        int64_t norm = 0, normCount = 0;
        int normRank = -1;
        for (auto& [bytes, count] : m_paramCount) {
            if (count < L || U % bytes != 0 || U / bytes < 2)
                continue;
            const int rank = ids.count(U / bytes) ? 2 : normLike(count) ? 1 : 0;
            if (std::tie(rank, count, bytes) > std::tie(normRank, normCount, norm)) {
                norm = bytes;
                normCount = count;
                normRank = rank;
            }
        }
        if (norm > 0) {
            m_m.dims.tokens = U / norm;
            m_m.dims.tokensFrom = "a layer's input (" + formatBytes(U) + ") over a norm weight's (" + formatBytes(norm) + ")";
            // Weights and activations of different element sizes (fp32 weights, 16-bit activations)
            // make that T/2 or 2T: the token ids (int64, one per token) moved to the device decide.
            for (size_t a = 0; a < m_m.allocationCount; ++a) {
                if (m_m.pool[a] != Pool::Input || size(a) % 8 != 0)
                    continue;
                const int64_t ids = size(a) / 8;
                if (ids == 2 * m_m.dims.tokens || 2 * ids == m_m.dims.tokens) {
                    m_m.dims.tokens = ids;
                    m_m.dims.tokensFrom += ", as many as the token ids moved to the device";
                    break;
                }
            }
            return;
        }
    }
    std::unordered_set<int64_t> candidates;
    for (size_t i = 0; i < std::min<size_t>(4, sizes.size()); ++i)
        for (int64_t d : m_dims)
            for (int64_t f : kWidthFactors)
                if (sizes[i].first % (d * f) == 0)
                    candidates.insert(sizes[i].first / (d * f));
    // Scored first by the bytes that are exactly an element size times a dimension (the hidden
    // size, the MLP's width, the vocabulary), then with the small multiples too: T and 16T would
    // otherwise explain the same sizes (T x 4h fp32 = 16T x h/4 ...).
    auto exact = [&](int64_t width) {
        for (int64_t e : {1, 2, 4, 8})
            if (width % e == 0 && width / e > 1 && m_dims.count(width / e))
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
            score += explainedByDimension(s / t, m_dims) ? bytes : 0;
            exactBytes += exact(s / t) ? bytes : 0;
        }
        if (std::tie(exactBytes, score, t) > std::tie(bestExact, bestScore, bestT)) {
            bestExact = exactBytes;
            bestScore = score;
            bestT = t;
        }
    }
    m_m.dims.tokens = bestT;
    if (bestT > 0)
        m_m.dims.tokensFrom = "the unit that explains the most activation bytes as tokens x a parameter dimension";
}

// s: a causal mask is s x s (a comparison or triangle of s*s elements, 1 to 8 bytes each); position
// ids are s long (arange); a position embedding is the token embedding over b.
void LawDecider::findSeq()
{
    const int64_t T = m_m.dims.tokens;
    std::map<int64_t, int64_t> votes;
    for (size_t a = 0; a < m_m.allocationCount; ++a) {
        if (!open(a))
            continue;
        const StackOpFacts& f = facts(a);
        if (!f.has(StackOpFacts::MaskOp) || f.has(StackOpFacts::Backward))
            continue;
        for (int64_t e : {1, 2, 4, 8}) {
            if (size(a) % e != 0)
                continue;
            const int64_t q2 = size(a) / e;
            int64_t q = 1;
            while ((q + 1) * (q + 1) <= q2)
                ++q;
            if (q * q == q2 && q >= 8 && (T == 0 || T % q == 0)) {
                ++votes[q];
                if (f.userFrame && std::find(m_maskLines.begin(), m_maskLines.end(), f.userFrame) == m_maskLines.end())
                    m_maskLines.push_back(f.userFrame);
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
        m_m.dims.seq = best;
        m_m.dims.seqFrom = "a causal mask of s x s";
    }
    // Embedding outputs in forward: the largest is the tokens', one b times smaller broadcasts over the batch.
    int64_t tokenEmbedding = 0;
    for (size_t a = 0; a < m_m.allocationCount; ++a)
        if (open(a) && facts(a).has(StackOpFacts::Embedding) && !facts(a).has(StackOpFacts::Backward) &&
            birthPhase(m_c, a) != Phase::Backward)
            tokenEmbedding = std::max(tokenEmbedding, size(a));
    for (size_t a = 0; a < m_m.allocationCount && tokenEmbedding > 0; ++a) {
        if (!open(a) || !facts(a).has(StackOpFacts::Embedding) || facts(a).has(StackOpFacts::Backward) ||
            birthPhase(m_c, a) == Phase::Backward)
            continue;
        const int64_t s = size(a);
        if (s < tokenEmbedding && tokenEmbedding % s == 0) {
            const int64_t b = tokenEmbedding / s;
            if (m_m.dims.seq == 0 && T > 0 && T % b == 0) {
                m_m.dims.seq = T / b;
                m_m.dims.seqFrom = "a position embedding b times smaller than the token embedding";
            }
            if (m_m.dims.seq == 0 || T == 0 || T / m_m.dims.seq == b)
                set(a, SizeLaw::Seq, LawEvidence::Dimensions);
        }
    }
    if (m_m.dims.seq > 0 && T > 0 && T % m_m.dims.seq == 0)
        m_m.dims.batch = T / m_m.dims.seq;
}

// The score width: softmax's outputs (and its autograd node's) where the trace has them, else the
// most common width (by bytes) that no model dimension explains.
void LawDecider::findScoreWidth()
{
    const int64_t T = m_m.dims.tokens;
    std::map<int64_t, int64_t> anchorBytes; // width (T known) or size -> bytes
    auto anchorOp = [&](const StackOpFacts& f) {
        if (f.has(StackOpFacts::LogSoftmax))
            return false;
        if (f.has(StackOpFacts::SoftmaxOp))
            return true;
        // The causal mask is applied to the scores and nothing else (masked_fill, where), in forward
        // or by their autograd nodes.
        return m_m.dims.seq > 0 && (f.opKey == "maskedfill" || f.opKey == "where");
    };
    std::vector<std::pair<int64_t, FrameId>> anchorLines; // (width, the Python call site)
    std::map<int64_t, int64_t> forwardBytes, softmaxBytes; // of anchorBytes, the forward's and the fp32 operators' among them
    // Without softmax or the mask, the scores are the width the most score operators make (q @ k.T,
    // exp, the scale...), not the context (attn @ v) that only a product makes.
    std::map<int64_t, std::set<std::string>> opsAt;
    auto pythonSite = [&](const StackOpFacts& f) {
        return f.userFrame && f.has(StackOpFacts::Python) && m_trace.frames.frame(f.userFrame).isPython() &&
               m_trace.frames.frame(f.userFrame).filename.ends_with(".py");
    };
    for (size_t a = 0; a < m_m.allocationCount; ++a) {
        if (!open(a))
            continue;
        const StackOpFacts& f = facts(a);
        if (!anchorOp(f))
            continue;
        if (T > 0 && (size(a) % T != 0 || size(a) / T <= 8))
            continue; // per-row statistics of the softmax (max, sum): tokens x heads
        const int64_t w = T > 0 ? size(a) / T : size(a);
        anchorBytes[w] += size(a);
        if (!f.has(StackOpFacts::Backward)) {
            forwardBytes[w] += size(a);
            if (f.precision == OpPrecision::Fp32)
                softmaxBytes[w] += size(a);
        }
        if (pythonSite(f))
            anchorLines.emplace_back(w, f.userFrame);
    }
    // No softmax and no mask: a product of activations (bmm, matmul) of b*a*s*s elements, s known.
    const int64_t s = m_m.dims.seq;
    if (anchorBytes.empty() && T > 0 && s > 0)
        for (size_t a = 0; a < m_m.allocationCount; ++a) {
            const StackOpFacts& f = facts(a);
            if (!open(a) || !f.has(StackOpFacts::ScoreOp) || f.has(StackOpFacts::LinearOp) || f.has(StackOpFacts::Backward) ||
                size(a) % (T * s) != 0)
                continue;
            const int64_t headsTimesE = size(a) / (T * s);
            if (headsTimesE < 2 || headsTimesE > 1024)
                continue;
            opsAt[size(a) / T].insert(f.opKey);
            anchorBytes[size(a) / T] += size(a);
            forwardBytes[size(a) / T] += size(a);
            if (f.precision == OpPrecision::Fp32)
                softmaxBytes[size(a) / T] += size(a);
            if (pythonSite(f))
                anchorLines.emplace_back(size(a) / T, f.userFrame);
        }
    int64_t anchor = 0, most = 0;
    size_t mostOps = 0;
    for (auto& [w, bytes] : anchorBytes) {
        const size_t ops = opsAt.count(w) ? opsAt[w].size() : 0;
        if (std::tie(ops, bytes, w) > std::tie(mostOps, most, anchor)) {
            mostOps = ops;
            most = bytes;
            anchor = w;
        }
    }
    if (anchor > 0) {
        m_m.dims.scoresFrom = "softmax's output, the causal mask's masked_fill or a product of b*a*s*s elements";
    } else if (T > 0 && m_dims.size() > 1) {
        std::map<int64_t, int64_t> unexplained;
        int64_t total = 0;
        for (size_t a = 0; a < m_m.allocationCount; ++a) {
            if (!open(a))
                continue;
            total += size(a);
            if (size(a) % T == 0 && size(a) / T > 8 && !explainedByDimension(size(a) / T, m_dims))
                unexplained[size(a) / T] += size(a);
        }
        for (auto& [w, bytes] : unexplained)
            if (bytes > most) {
                most = bytes;
                anchor = w;
            }
        if (anchor > 0 && most * 100 >= total) {
            m_m.dims.scoresFrom = "a width no parameter dimension explains";
            m_scoresUnexplained = true;
        }
        else
            anchor = 0;
    }
    if (anchor == 0)
        return;
    for (auto& [w, frame] : anchorLines)
        if (w == anchor || T == 0)
            m_softmaxLines.emplace_back(frame, m_trace.frames.frame(frame).line);
    // Under autocast softmax (and exp) run in fp32, the scores around them (q @ k.T, the mask) in 16 bits.
    if (m_m.autocastSeen)
        m_anchorElement = softmaxBytes[anchor] > 0 ? 4 : 2; // an fp32 operator there makes the width fp32
    // The family: the same elements at 1, 2, 4 and 8 bytes (masks, half-precision copies, fp32 upcasts).
    for (int64_t k : {4, 2}) {
        if (anchor % k == 0) {
            (T > 0 ? (void)m_scoreWidths.push_back(anchor / k) : (void)m_scoreSizes.insert(anchor / k));
        }
    }
    (T > 0 ? (void)m_scoreWidths.push_back(anchor) : (void)m_scoreSizes.insert(anchor));
    (T > 0 ? (void)m_scoreWidths.push_back(anchor * 2) : (void)m_scoreSizes.insert(anchor * 2));
    m_m.dims.scoreWidth = T > 0 ? anchor : 0;
}

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

// Frames that say "attention scores": softmax, the score operators' autograd nodes, attention code,
// or an operator on a line next to a softmax of the same function (q @ k.T, the scale, the mask).
bool LawDecider::scoreEvidence(size_t a) const
{
    const StackOpFacts& f = facts(a);
    if (f.has(StackOpFacts::LinearOp) || f.has(StackOpFacts::Embedding) || f.has(StackOpFacts::LogSoftmax))
        return false;
    if (f.has(StackOpFacts::SoftmaxOp) || f.has(StackOpFacts::ScoreBackward) || f.has(StackOpFacts::AttentionCode))
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

// A call site (stack) follows one law wherever the evidence decided it: its undecided allocations
// take that law when all its decided ones agree.
void LawDecider::callSiteVotes(std::vector<size_t>& pending)
{
    std::unordered_map<uint32_t, std::pair<int, SizeLaw>> votes; // stack -> (0 none, 1 unanimous, 2 split)
    for (size_t a = 0; a < m_m.allocationCount; ++a) {
        const StackId st = m_dev.allocations[a].stack;
        // Only token laws vote: a weight's gradient from the same operator is another kind of tensor.
        const LawEvidence why = m_m.lawEvidence[a];
        if (open(a) || !st.valid() || (why != LawEvidence::Dimensions && why != LawEvidence::Frames) || !inScoreFamily(a))
            continue;
        auto& v = votes[st.value];
        if (v.first == 0)
            v = {1, m_m.law[a]};
        else if (v.second != m_m.law[a])
            v.first = 2;
    }
    std::vector<size_t> still;
    for (size_t a : pending) {
        const StackId st = m_dev.allocations[a].stack;
        auto it = st.valid() ? votes.find(st.value) : votes.end();
        if (it != votes.end() && it->second.first == 1)
            set(a, it->second.second, LawEvidence::CallSite);
        else
            still.push_back(a);
    }
    pending.swap(still);
}

// A gradient has the bytes of the tensor its node's forward operator made: the law that operator
// followed at that size in forward (when all its decided outputs of that size agree).
void LawDecider::mirrorVotes(std::vector<size_t>& pending)
{
    std::map<std::pair<std::string, int64_t>, std::pair<int, SizeLaw>> votes;
    for (size_t a = 0; a < m_m.allocationCount; ++a) {
        const StackOpFacts& f = facts(a);
        const LawEvidence why = m_m.lawEvidence[a];
        if (open(a) || f.has(StackOpFacts::Backward) || f.opKey.empty() || (why != LawEvidence::Dimensions && why != LawEvidence::Frames))
            continue;
        auto& v = votes[{f.opKey, size(a)}];
        if (v.first == 0)
            v = {1, m_m.law[a]};
        else if (v.second != m_m.law[a])
            v.first = 2;
    }
    std::vector<size_t> still;
    for (size_t a : pending) {
        const StackOpFacts& f = facts(a);
        auto it = f.has(StackOpFacts::Backward) && !f.opKey.empty() ? votes.find({f.opKey, size(a)}) : votes.end();
        if (it != votes.end() && it->second.first == 1)
            set(a, it->second.second, LawEvidence::CallSite);
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
            if (!sameElements || open(b) || m_m.law[b] == SizeLaw::Fixed || why == LawEvidence::Default)
                continue;
            if (in.freeCompletedEvent != kNoEvent && in.freeCompletedEvent < al.allocEvent)
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
    for (int round = 0; round < 3 && !pending.empty(); ++round) {
        std::vector<size_t> still;
        for (size_t a : pending) {
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

void LawDecider::decideTokens()
{
    findTokens();
    findSeq();
    findScoreWidth();
    const int64_t T = m_m.dims.tokens, s = m_m.dims.seq;
    std::vector<size_t> pending; // both the tokens and the scores explain them
    size_t scoreTensors = 0;
    for (size_t a = 0; a < m_m.allocationCount; ++a) {
        if (!open(a))
            continue;
        const int64_t bytes = size(a);
        const StackOpFacts& f = facts(a);
        // A causal mask: s*s elements, from a comparison or a triangle (or on such a line).
        if (s > 0 && !f.has(StackOpFacts::Backward)) {
            bool square = false;
            for (int64_t e : {1, 2, 4, 8})
                square |= bytes == e * s * s;
            if (square && maskLine(a)) {
                set(a, SizeLaw::SeqSquared, LawEvidence::Dimensions);
                continue;
            }
            if (f.has(StackOpFacts::Arange) && (bytes == 8 * s || bytes == 4 * s)) {
                set(a, SizeLaw::Seq, LawEvidence::Dimensions);
                continue;
            }
        }
        const bool scores = inScoreFamily(a);
        const bool tokens = tokensExplained(bytes);
        if (scores && (!tokens || (T == 0 && scoreEvidence(a)))) {
            set(a, SizeLaw::Quadratic, T > 0 ? LawEvidence::Dimensions : LawEvidence::Frames);
            ++scoreTensors;
        } else if (scores && tokens) {
            if (scoreEvidence(a)) {
                set(a, SizeLaw::Quadratic, LawEvidence::Frames);
                ++scoreTensors;
            } else if (f.has(StackOpFacts::LinearOp) || f.has(StackOpFacts::Embedding) || f.has(StackOpFacts::LogSoftmax) ||
                       outsideAttention(a)) {
                set(a, SizeLaw::Linear, LawEvidence::Frames);
            } else {
                pending.push_back(a);
            }
        } else if (tokens) {
            set(a, SizeLaw::Linear, LawEvidence::Dimensions);
        } else if (T > 0 && bytes < T) {
            // Smaller than one element per token: it cannot follow the tokens.
            set(a, SizeLaw::Fixed, LawEvidence::Dimensions);
        } else {
            m_m.law[a] = SizeLaw::Linear; // nothing explains it: taken as tokens, the usual case
            m_undecided[a] = 0;
        }
    }
    // A score family seen less often than the layers is something else (logits, a one-off buffer).
    if (scoreTensors < kMinScoreTensors && !(m_m.dims.scoresFrom.starts_with("softmax") && scoreTensors > 0)) {
        for (size_t a = 0; a < m_m.allocationCount; ++a)
            if (m_m.law[a] == SizeLaw::Quadratic) {
                m_m.law[a] = SizeLaw::Linear;
                m_m.lawEvidence[a] = LawEvidence::Default;
            }
        for (size_t a : pending)
            set(a, SizeLaw::Linear, LawEvidence::Dimensions);
        pending.clear();
        m_m.dims.scoreWidth = 0;
        m_m.dims.scoresFrom.clear();
    }
    callSiteVotes(pending);
    mirrorVotes(pending);
    // Inputs first, to a fixed point (each decided tensor may decide the next op's output), then
    // the weaker evidence of what is made next.
    for (int round = 0; round < 4 && !pending.empty(); ++round) {
        const size_t before = pending.size();
        for (size_t left = pending.size() + 1; pending.size() < left;) {
            left = pending.size();
            inputVotes(pending);
        }
        neighbourVotes(pending);
        if (pending.size() == before)
            break;
    }
    // What no evidence decided: taken as tokens, and said.
    std::map<std::string, AmbiguousSite> sites;
    for (size_t a : pending) {
        set(a, SizeLaw::Linear, LawEvidence::Default);
        AmbiguousSite& site = sites[siteName(m_trace, m_dev.allocations[a], facts(a))];
        ++site.count;
        site.bytes += size(a);
        m_m.ambiguousBytes += size(a);
    }
    for (size_t a : m_castsUnsure) {
        AmbiguousSite& site = sites[siteName(m_trace, m_dev.allocations[a], facts(a)) + " (a weight's cast or an input's)"];
        site.chosen = m_m.law[a];
        site.other = SizeLaw::Fixed;
        ++site.count;
        site.bytes += size(a);
        m_m.ambiguousBytes += size(a);
    }
    for (auto& [name, site] : sites) {
        site.site = name;
        m_m.ambiguous.push_back(site);
    }
    std::sort(m_m.ambiguous.begin(), m_m.ambiguous.end(), [](auto& x, auto& y) { return x.bytes > y.bytes; });
}

// Weight matrices (no vector: a norm's or a bias's weight is used elementwise, autocast casts only
// what a matmul takes): those that repeat once per unit, and the rest.
void LawDecider::findMatrices()
{
    // A table only an embedding reads (its gradients all come from the embedding's backward) is no
    // matmul's weight: autocast never casts it.
    std::map<int64_t, std::pair<int, int>> gradsBySize; // bytes -> (from an embedding, all)
    for (size_t a = 0; a < m_m.allocationCount; ++a)
        if (m_m.pool[a] == Pool::Gradient && !m_dev.allocations[a].preexisting()) {
            auto& [emb, all] = gradsBySize[size(a)];
            ++all;
            emb += facts(a).has(StackOpFacts::Embedding) ? 1 : 0;
        }
    const int L = m_m.layersPerPass;
    for (auto& [bytes, count] : m_paramCount) {
        if (m_vectors.count(bytes) || bytes < 4096)
            continue;
        if (auto it = gradsBySize.find(bytes); it != gradsBySize.end() && it->second.first == it->second.second)
            continue;
        const int64_t perUnit = L > 0 ? count / L : 0;
        for (int64_t i = 0; i < perUnit; ++i)
            m_m.unitMatrices.push_back(bytes);
        for (int64_t i = 0; i < count - perUnit * std::max(L, 1); ++i)
            m_m.otherMatrices.push_back(bytes);
    }
    std::sort(m_m.unitMatrices.begin(), m_m.unitMatrices.end());
    std::sort(m_m.otherMatrices.begin(), m_m.otherMatrices.end());
}

} // namespace

int batchExponent(SizeLaw law)
{
    return law == SizeLaw::Linear || law == SizeLaw::Quadratic || law == SizeLaw::Batch ? 1 : 0;
}

int seqExponent(SizeLaw law)
{
    switch (law) {
    case SizeLaw::Linear:
    case SizeLaw::Seq:
        return 1;
    case SizeLaw::Quadratic:
    case SizeLaw::SeqSquared:
        return 2;
    default:
        return 0;
    }
}

std::string_view lawEvidenceName(LawEvidence e)
{
    switch (e) {
    case LawEvidence::Pool: return "pool";
    case LawEvidence::Phase: return "phase";
    case LawEvidence::WeightOrigin: return "made from a weight";
    case LawEvidence::Dimensions: return "dimensions";
    case LawEvidence::Frames: return "frames";
    case LawEvidence::CallSite: return "call site";
    case LawEvidence::Neighbours: return "neighbours";
    case LawEvidence::Default: return "default";
    }
    return "?";
}

void decideSizeLaws(const Trace& trace, const DeviceTrace& dev, const Classification& c, const std::vector<StackOpFacts>& facts,
                    TraceModel& m, const std::function<void()>& findLayers)
{
    LawDecider d(trace, dev, c, facts, m);
    d.decideFixed();
    if (findLayers)
        findLayers();
    d.decideTokens();
    d.findMatrices();
}

} // namespace poolscope
