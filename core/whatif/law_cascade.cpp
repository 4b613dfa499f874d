// The size-law cascade: an ordered list of small steps. Every allocation starts open with every law
// a candidate; each decider decides the open allocations its evidence covers (recording itself and
// the candidates it chose among) and leaves the rest to the steps after it, so the first step whose
// evidence applies decides. The order is strongest evidence first: what follows the weights (pool,
// phase, origin) before the run's structure and dimensions are read, because the layers and the
// token count are read from what may follow the tokens; then laws the sizes and the code decide;
// then sizes two laws explain, decided by what surrounds them; what is left is reported.
// docs/size-laws.md says how to add a step and where.
#include "core/whatif/law_cascade.h"
#include "core/whatif/size_laws.h"

namespace poolscope {

namespace law_detail {
namespace {

// The layers are read from what may still follow the tokens: every allocation the weights' steps
// before this one did not fix (open ones read as the tokens').
void findLayers(LawContext& x)
{
    std::vector<uint8_t> followsTokens(x.n());
    for (size_t a = 0; a < x.n(); ++a)
        followsTokens[a] = x.open(a) || x.m.law[a] != SizeLaw::Fixed;
    static_cast<TraceLayers&>(x.m) = findForwardPasses(x.trace, x.dev, x.c, x.m, x.m, followsTokens, x.m.notes);
}

} // namespace

LawContext::LawContext(const Trace& trace_, const DeviceTrace& dev_, const Classification& c_, const std::vector<StackOpFacts>& facts_,
                       TraceModel& m_)
    : trace(trace_), dev(dev_), c(c_), stackFacts(facts_), m(m_)
{
    const size_t count = m.allocationCount;
    record.assign(count, LawRecord{});
    // Open allocations read as following the tokens (what the layer finder looks for) until decided.
    m.law.assign(count, SizeLaw::Linear);
    m.lawEvidence.assign(count, LawEvidence::Default);
    m.lawStep.assign(count, kNoLawStep);
    m.lawCandidates.assign(count, kAnyLaw);
    // The operators' part is the cascade's too: its finders fill it as they read the stacks.
    m.precision.assign(count, OpPrecision::Unknown);
    m.weightCast.assign(count, 0);
    m.mask.assign(count, 0);
    m.stepWorkspace.assign(count, 0);
    m.gradSource.assign(count, -1);
}

void LawContext::decide(size_t a, SizeLaw law, LawEvidence why)
{
    m.law[a] = law;
    m.lawEvidence[a] = why;
    m.lawStep[a] = step;
    m.lawCandidates[a] = record[a].candidates | lawBit(law);
    record[a].open = false;
}

std::vector<size_t> LawContext::pending() const
{
    std::vector<size_t> out;
    for (size_t a = 0; a < n(); ++a)
        if (record[a].open)
            out.push_back(a);
    return out;
}

const std::vector<LawStep>& lawCascade()
{
    static const std::vector<LawStep> steps = {
        // What the weights tell, read before anything is decided.
        {"weight shapes", "parameter sizes and the model dimensions they give (finder)", findWeightShapes, false},
        {"operator facts", "each allocation's operator precision, bool masks and optimizer-step scratch (finder)", findOperatorFacts, false},
        {"weight casts found", "autocast casts that mirror a weight, by frames or as 16-bit twins of the matrices (finder)",
         findWeightCasts, false},
        // What follows the weights: decided first, so that the layers and the dimensions are read
        // from what may follow the tokens only.
        {"weight pools", "parameters, gradients, optimizer state, the cast cache, workspaces and the KV cache follow the weights",
         decideWeightPools},
        {"optimizer step", "made in the optimizer step or zero_grad: the step's buffers follow the weights", decideStepBuffers},
        {"library workspace", "a library's own workspace (cuBLAS, cuDNN) follows no token", decideLibraryWorkspace},
        {"kept from before recording", "allocated before recording, neither input nor activation: held as it is",
         decideKeptFromBefore},
        {"made from a weight", "AccumulateGrad's gradient, an embedding table's gradient, a dequantised weight", decideMadeFromWeight},
        {"weight casts", "an autocast cast of a weight: at most one per weight of that size per forward", decideWeightCasts},
        {"gradient clone sources", "the transient gradient AccumulateGrad clones into .grad", decideCloneSources},
        {"stackless mirrors", "no frames: a buffer of a parameter's bytes, no more per phase run than such weights",
         decideStacklessMirrors},
        // The run's structure and dimensions, read from what is still open.
        {"layers", "forward passes and their repeated units, from what may follow the tokens (finder)", findLayers, false},
        {"tokens", "T = b*s, from a layer's input over a norm weight, or the unit explaining the most bytes (finder)", findTokens, false},
        {"sequence", "s from a causal mask, the position embedding's ratio, position ids or the softmax's paired reductions over s "
                     "(finder)",
         findSeq, false},
        {"position embeddings", "an embedding b times smaller than the tokens': x s", decidePositionEmbeddings},
        {"score width", "the attention scores' bytes per token: softmax, the mask, a product of b*a*s*s, what the softmax reduces over s "
                        "(finder)",
         findScoreWidth, false},
        {"a*s = h", "whether the context (attn @ v) has the scores' bytes, and the forward products' order (finder)",
         findContextCollision, false},
        {"attention", "the forward's score chains: tensors of the score family made one from another around a softmax, a mask "
                      "or a reduction over s (finder)", findAttention, false},
        // Laws the sizes and the code decide.
        {"causal mask", "s*s elements from a comparison or a triangle, or made right before a score chain: x s^2", decideCausalMask},
        {"position ids", "an arange of s integers: x s", decidePositionIds},
        {"expanded weights", "2, 4 or 8 times a parameter's bytes that no token width explains: a weight dequantised, fixed",
         decideExpandedWeights},
        {"sizes", "the laws its size admits (tokens x a model dimension, the score family, less than a token): one decides",
         decideBySize},
        {"product order", "a*s = h: a product made before its softmax is the scores, one made from it the context",
         decideProductOrder},
        {"score frames", "softmax, the score operators' autograd nodes, an attention score chain, a line beside softmax: the scores",
         decideScoreFrames},
        {"token frames", "a projection, an embedding, log-softmax, Python code outside the attention chains: the tokens", decideTokenFrames},
        {"rare scores", "a score family seen less often than the layers is something else: back to the tokens", revokeRareScores},
        // Sizes two laws explain: what surrounds them decides.
        {"call site", "its call site follows one law wherever it was decided", decideCallSiteVotes},
        {"autograd mirror", "a gradient follows the law its forward operator made at that size", decideMirrorVotes},
        {"input and neighbours", "an elementwise output has its input's law; else the tensors made while it lives",
         decideInputAndNeighbourVotes},
        {"ambiguous", "nothing decided: taken as the tokens (or as the sizes said), and reported by call site", reportAmbiguous},
        // Memory from before recording that the trace rebuilds follows what replaces it.
        {"rebuilt in the trace", "freed in the trace and built again: the law of the allocation of its size alive when it goes", decideReplaced},
        {"weight matrices", "the weight matrices autocast casts, per unit and others (finder)", findMatrices, false},
    };
    return steps;
}

} // namespace law_detail

using namespace law_detail;

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
    case LawEvidence::Replaced: return "rebuilt in the trace";
    }
    return "?";
}

std::vector<LawStepInfo> lawSteps()
{
    std::vector<LawStepInfo> out;
    for (const LawStep& s : lawCascade())
        out.push_back({s.name, s.does, s.decider});
    return out;
}

void decideSizeLaws(const Trace& trace, const DeviceTrace& dev, const Classification& c, const std::vector<StackOpFacts>& facts, TraceModel& m)
{
    LawContext x(trace, dev, c, facts, m);
    const auto& steps = lawCascade();
    for (size_t i = 0; i < steps.size(); ++i) {
        x.step = uint8_t(i);
        steps[i].run(x);
    }
    // The bytes that follow the batch, by law (the notes and the sequence knob's summary).
    for (size_t a = 0; a < x.n(); ++a) {
        const int64_t size = dev.allocations[a].size;
        if (m.law[a] == SizeLaw::Fixed)
            continue;
        (m.law[a] == SizeLaw::Quadratic ? m.quadraticBytes : m.linearBytes) += size;
        if (m.saved[a])
            (m.law[a] == SizeLaw::Quadratic ? m.quadraticSavedBytes : m.linearSavedBytes) += size;
    }
}

} // namespace poolscope
