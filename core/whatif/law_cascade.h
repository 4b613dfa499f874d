// The size-law cascade's parts: the state every step reads and writes (LawContext), and the ordered
// list of steps (law_cascade.cpp). Each step is one small function with one job, in one of
// law_weights.cpp (what follows the weights), law_dims.cpp (the run's dimensions), law_tokens.cpp
// (laws the sizes and the code decide) and law_votes.cpp (sizes two laws explain, decided by what
// surrounds them). docs/size-laws.md says how to add one. Internal to core/whatif.
#pragma once

#include "core/classify/classifier.h"
#include "core/model/trace.h"
#include "core/whatif/stack_facts.h"
#include "core/whatif/trace_model.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
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

// What the weights tell: how many parameters of each size, and the model dimensions they give.
struct WeightShapes {
    std::unordered_map<int64_t, int64_t> paramCount; // bytes -> weights of that size
    std::unordered_set<int64_t> dims;                // model dimensions (element counts), 1 included
    std::unordered_set<int64_t> vectors;             // parameter sizes that are no matrix over another
    int64_t mirrors(int64_t bytes) const
    {
        auto it = paramCount.find(bytes);
        return it == paramCount.end() ? int64_t(0) : it->second;
    }
};

// Autocast casts that mirror a weight, found before any law (the cast deciders read them).
struct WeightCasts {
    std::vector<uint8_t> candidate;                        // per allocation
    std::map<std::pair<uint32_t, int64_t>, int64_t> perRun; // (phase run, bytes) -> candidates
};

// The attention-score family as the dimensions found it.
struct ScoreFamily {
    std::vector<int64_t> widths;                        // bytes per token of the family (T known)
    std::unordered_set<int64_t> sizes;                  // whole sizes of the family (T unknown)
    std::vector<std::pair<FrameId, int64_t>> softmaxLines; // (user frame, line) of the anchors
    std::vector<FrameId> maskLines;                     // user frames of the causal masks
    bool unexplained = false;                           // the score width is one no dimension explains
    int64_t anchorElement = 0;                          // bytes per element of the anchor, 0 unknown
    size_t tensors = 0;                                 // allocations decided as scores so far
    // Reductions over s (seq_reductions.h) found by findSeq: (s they show, the reduced tensor's
    // bytes per token) -> how many. The score width where no frame names softmax or the mask.
    std::map<std::pair<int64_t, int64_t>, int64_t> reductions;
    // The same pairs' second reduction (the sum of the exps): (s, the first's bytes per token) -> the
    // bytes per token of the tensor the sum reduced. Under autocast exp's output is fp32, so it gives
    // the scores' element size where no frame names an operator.
    std::map<std::pair<int64_t, int64_t>, int64_t> sumWidths;
};

// A bit per SizeLaw: the laws an allocation's size and origin still admit.
inline constexpr uint8_t lawBit(SizeLaw l) { return uint8_t(1u << unsigned(l)); }
inline constexpr uint8_t kAnyLaw = 0x3f;
inline constexpr size_t kLawCount = 6; // SizeLaw's values

// Per allocation: what the cascade knows while it decides.
struct LawRecord {
    uint8_t candidates = kAnyLaw; // laws still possible
    bool open = true;             // no step decided it yet
    // a*s = h (the attention context, attn @ v, has the scores' bytes): this allocation's two laws
    // are the scores' and the context's, so what speaks for "scores" elsewhere (attention code, a
    // line beside softmax, a neighbour, a backward node) speaks as much for the context here.
    bool contextTwin = false;
    bool unorderedProduct = false; // ... and it is a product whose order around softmax is unknown
};

struct LawStep;

// Everything the steps share: the inputs, the typed parts the finders fill, and one record per
// allocation. A step decides an allocation through decide(), which records the step and the
// candidates it had for `poolscope explain --law`.
class LawContext {
public:
    LawContext(const Trace& trace, const DeviceTrace& dev, const Classification& c, const std::vector<StackOpFacts>& facts,
               TraceModel& m);

    const Trace& trace;
    const DeviceTrace& dev;
    const Classification& c;
    const std::vector<StackOpFacts>& stackFacts;
    TraceModel& m;

    WeightShapes weights;
    WeightCasts casts;
    ScoreFamily scores;
    std::vector<LawRecord> record;
    bool contextCollides = false;           // the run's a*s = h (tags each two-law allocation contextTwin)
    std::vector<int8_t> productOrder;       // per forward product: +1 q @ k.T, -1 attn @ v, 0 unknown
    std::vector<uint8_t> attention;         // per allocation: a forward tensor of an attention block's score chain (law_attention.cpp)
    std::vector<size_t> castsUnsure;        // casts of a weight's bytes that outnumber such weights
    std::vector<size_t> embeddingsUnsure;   // at b = 1: embedding outputs of the tokens' bytes (tokens' or positions')
    std::vector<size_t> positionEmbeddings; // found with s: embeddings that follow s (b times smaller than the tokens')
    uint8_t step = 0;                       // the step now running (index into lawCascade())

    size_t n() const { return m.allocationCount; }
    const Allocation& al(size_t a) const { return dev.allocations[a]; }
    const StackOpFacts& facts(size_t a) const
    {
        const StackId st = dev.allocations[a].stack;
        return st.valid() && st.value < stackFacts.size() ? stackFacts[st.value] : kNoFacts;
    }
    int64_t size(size_t a) const { return m.requestedSize[a]; }
    bool open(size_t a) const { return record[a].open; }
    bool admits(size_t a, SizeLaw l) const { return (record[a].candidates & lawBit(l)) != 0; }
    bool twoLaws(size_t a) const { return record[a].candidates == (lawBit(SizeLaw::Linear) | lawBit(SizeLaw::Quadratic)); }
    // Decides a's law: the step that did, and the candidates it chose among, are kept for explain.
    void decide(size_t a, SizeLaw law, LawEvidence why);
    // Open allocations, by index (the votes read earlier decisions in this order).
    std::vector<size_t> pending() const;

    // Queries on the run's dimensions, shared by several steps (law_votes.cpp).
    bool inScoreFamily(size_t a) const;
    bool tokensExplained(int64_t bytes) const;
    bool scoreEvidence(size_t a) const;
    bool maskLine(size_t a) const;
    bool outsideAttention(size_t a) const;
    bool isProduct(size_t a) const;
    int productOrderOf(size_t a) const; // +1 made before its softmax (q @ k.T), -1 from its output (attn @ v), 0 unknown
    bool nearAnchorLine(size_t a) const;
    int64_t matmulReaders(int64_t bytes, int64_t count) const;
};

// One step of the cascade. A finder fills the context's parts (dimensions, structure) and decides
// no law; a decider decides some open allocations' laws and leaves the rest to the steps after it.
struct LawStep {
    std::string_view name; // what explain --law prints
    std::string_view does; // what it decides and why it sits where it does
    void (*run)(LawContext&);
    bool decider = true;
};

// The cascade in order (law_cascade.cpp).
const std::vector<LawStep>& lawCascade();

// The steps, by file.
// law_weights.cpp
void findWeightShapes(LawContext& x);
void findWeightCasts(LawContext& x);
void findOperatorFacts(LawContext& x);
void decideWeightPools(LawContext& x);
void decideStepBuffers(LawContext& x);
void decideLibraryWorkspace(LawContext& x);
void decideKeptFromBefore(LawContext& x);
void decideMadeFromWeight(LawContext& x);
void decideWeightCasts(LawContext& x);
void decideCloneSources(LawContext& x);
void decideStacklessMirrors(LawContext& x);
// law_dims.cpp
void findTokens(LawContext& x);
void findSeq(LawContext& x);
void findScoreWidth(LawContext& x);
void findMatrices(LawContext& x);
// law_attention.cpp
void findAttention(LawContext& x);
// law_tokens.cpp
void decidePositionEmbeddings(LawContext& x);
void findContextCollision(LawContext& x);
void decideCausalMask(LawContext& x);
void decidePositionIds(LawContext& x);
void decideExpandedWeights(LawContext& x);
void decideBySize(LawContext& x);
void decideProductOrder(LawContext& x);
void decideScoreFrames(LawContext& x);
void decideTokenFrames(LawContext& x);
void revokeRareScores(LawContext& x);
void decideReplaced(LawContext& x);
// law_votes.cpp
void decideCallSiteVotes(LawContext& x);
void decideMirrorVotes(LawContext& x);
void decideInputAndNeighbourVotes(LawContext& x);
void reportAmbiguous(LawContext& x);

} // namespace poolscope::law_detail
