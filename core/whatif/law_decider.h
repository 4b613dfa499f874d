// The size-law decider's parts, shared by size_laws.cpp (fixed and token laws), law_dims.cpp (the
// run's dimensions and weight matrices) and law_votes.cpp (score evidence and the votes that decide
// two-law sizes). Internal to core/whatif.
#pragma once

#include "core/classify/classifier.h"
#include "core/model/trace.h"
#include "core/whatif/stack_facts.h"
#include "core/whatif/trace_model.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace poolscope::law_detail {

// e (bytes per element: 1, 2, 4, 8) times k (small multiples: fused q/k/v, gates, pairs).
inline constexpr std::array<int64_t, 12> kWidthFactors = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
inline constexpr size_t kMaxSizes = 256;
inline constexpr int64_t kMinQuotientDim = 64;
inline constexpr size_t kMinScoreTensors = 4;
inline constexpr int kNeighbourWindow = 4; // allocations born right after an ambiguous one that may vote
inline constexpr int kInputWindow = 8;     // allocations before an ambiguous one where its input may be
inline constexpr EventIndex kCloneFreeWindow = 4;  // events between AccumulateGrad's clone and the source's free
inline constexpr size_t kCloneSourceDistance = 2;  // allocations between the clone's source and the clone

bool isWeightPool(Pool p);
Phase birthPhase(const Classification& c, size_t a);
inline const StackOpFacts kNoFacts{};

// Model dimensions: parameter element counts (fp32 or 16-bit) and their quotients (a weight of
// h x 4h over a norm of h gives 4h). Activations are tokens x these (times small factors).
std::unordered_set<int64_t> modelDims(const std::unordered_map<int64_t, int64_t>& paramCount, std::unordered_set<int64_t>& vectors);
// width = e x k x d for a model dimension d > 1.
bool explainedByDimension(int64_t width, const std::unordered_set<int64_t>& dims);
std::string siteName(const Trace& trace, const Allocation& al, const StackOpFacts& f);

class LawDecider {
public:
    LawDecider(const Trace& trace, const DeviceTrace& dev, const Classification& c, const std::vector<StackOpFacts>& facts, TraceModel& m)
        : m_trace(trace), m_dev(dev), m_c(c), m_facts(facts), m_m(m)
    {
    }

    void decideFixed();
    void decideTokens();
    void decideReplaced(); // memory from before recording, freed and rebuilt in the trace
    void findMatrices();

private:
    int64_t matmulReaders(int64_t bytes, int64_t count) const;
    void structuralCasts(std::vector<uint8_t>& candidate, std::map<std::pair<uint32_t, int64_t>, int64_t>& perRun,
                         const std::function<bool(size_t)>& castPhase, const std::function<bool(const Allocation&)>& cachedLifetime);
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
    bool isProduct(size_t a) const;
    int productOrder(size_t a) const; // +1 made before its softmax (q @ k.T), -1 from its output (attn @ v), 0 unknown
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
    std::vector<size_t> m_embeddingsUnsure; // at b = 1: embedding outputs of the tokens' bytes (tokens' or positions')
    std::unordered_map<int64_t, int64_t> m_paramCount;
    std::unordered_set<int64_t> m_dims;
    std::unordered_set<int64_t> m_vectors; // parameter sizes that are no matrix over another
    std::vector<int64_t> m_scoreWidths;      // bytes per token of the score family (T known)
    std::unordered_set<int64_t> m_scoreSizes; // whole sizes of the family (T unknown)
    std::vector<std::pair<FrameId, int64_t>> m_softmaxLines; // (user frame, line) of the anchors
    std::vector<FrameId> m_maskLines;                        // user frames of the causal masks
    bool m_scoresUnexplained = false;                        // the score width is one no dimension explains
    bool m_contextCollides = false; // a*s = h: the context (attn @ v) has the scores' bytes
    std::vector<uint8_t> m_collidingProduct; // products of those bytes only their order can tell apart
    int64_t m_anchorElement = 0;                             // bytes per element of the anchor, 0 unknown
};

} // namespace poolscope::law_detail
