#pragma once
#include "core/classify/classifier.h"
#include "core/model/trace.h"
#include "core/whatif/scenario.h"
#include "core/whatif/stack_facts.h"

#include <cstdint>
#include <string>
#include <vector>

namespace poolscope {

// How an allocation's bytes follow the micro-batch b and the sequence length s: bytes = c * b^i * s^j.
// Korthikanti et al.: activations are s*b*h*(34 + 5*a*s/h) bytes per layer; the 5as/h part is the
// attention-score matrix (b*a*s*s elements), quadratic in s. Linear: the tokens b*s (most activations);
// Quadratic: b*s^2 (scores); SeqSquared: s^2 (a causal mask shared by the batch); Seq: s (position ids,
// position embeddings broadcast over the batch); Batch: b (one value per sequence).
enum class SizeLaw : uint8_t { Fixed, Linear, Quadratic, Batch, Seq, SeqSquared };
int batchExponent(SizeLaw law);
int seqExponent(SizeLaw law);

// Why an allocation got its law, strongest first: its pool or phase, being made from a weight (a
// cast, a weight's gradient on its way into .grad, a dequantised weight), the run's dimensions
// (only one law explains its size), the frames of the code that made it, the law its call site
// follows elsewhere, the law of the tensors its life overlaps, or nothing (a default, reported);
// memory from before recording that the trace rebuilds follows its replacement.
// Replaced: memory from before recording that the trace frees and rebuilds (a forward-only recording
// that starts while the previous step's graph lives): it takes the law of what replaces it.
enum class LawEvidence : uint8_t { Pool, Phase, WeightOrigin, Dimensions, Frames, CallSite, Neighbours, Default, Replaced };
std::string_view lawEvidenceName(LawEvidence e);
inline constexpr uint8_t kNoLawStep = 0xff;

// The run's dimensions as the trace shows them (0: not found).
struct RunDims {
    int64_t tokens = 0;     // T = b*s (up to a factor the sizes cannot tell apart)
    int64_t seq = 0;        // s, from a causal mask (s*s) or position ids (s)
    int64_t batch = 0;      // b = T / s when both are known
    int64_t scoreWidth = 0; // bytes per token of one attention-score tensor (a*s*e)
    std::string tokensFrom, seqFrom, scoresFrom; // the evidence, for the notes
};

// Allocations that more than one law explains and no evidence decided, grouped by call site.
struct AmbiguousSite {
    std::string site;  // the call site (file:line function) or the operator
    SizeLaw chosen = SizeLaw::Linear;
    uint8_t others = 0; // the other laws they could follow, a bit per SizeLaw (1 << law)
    int64_t count = 0;
    int64_t bytes = 0; // summed over its allocations
};

// One layer of one forward pass: the unit of checkpointing and of FSDP wrapping.
struct LayerSpan {
    EventIndex forwardBegin = kNoEvent; // birth of its first saved activation
    EventIndex forwardEnd = kNoEvent;   // last event before the next layer (or the head) begins
    EventIndex backwardBegin = kNoEvent; // where its backward starts (kNoEvent: no backward recorded)
    EventIndex backwardEnd = kNoEvent;   // its last saved activation released
    int64_t savedBytes = 0;              // batch-dependent bytes it keeps for backward
};

struct ForwardPass {
    EventIndex begin = 0, end = 0; // the forward phase run
    std::vector<LayerSpan> layers; // empty when no repeating layer structure was found
    int64_t inputBytes = 0;        // U: a layer's input (the residual stream), what full checkpointing keeps
    EventIndex backwardBegin = kNoEvent, backwardEnd = kNoEvent;
    int64_t durationUs = -1; // of the forward run, when the trace has time
};

// What the what-if engine knows about one device's trace beyond the pools, in typed parts. Each
// part is built by one function from the inputs its comment names, in the order below (a later
// part may read an earlier one, never the other way round); buildTraceModel (trace_model.cpp) runs
// them. Scenarios read the fields directly (m.law[a], m.passes): the part a field sits in says
// which pass filled it. Built once per (trace, classification); every scenario reuses it.

// 1. Per allocation, what the classification and the final segments say.
//    Built by readAllocations (trace_model.cpp) from the DeviceTrace and the Classification.
struct TraceAllocations {
    size_t allocationCount = 0;
    std::vector<Pool> pool;            // Unknown where the classification has none
    std::vector<int64_t> requestedSize; // what was asked for (pre-existing ones: from the final blocks)
    std::vector<int64_t> stream;
};

// 2. The run's phases and facts as the classifier found them (RunFacts, the phase timeline).
//    Built by readRunFacts (trace_model.cpp) from the Classification alone.
struct TraceRunFacts {
    std::vector<PhaseTimeline::Run> phaseRuns; // where a peak is
    bool hasBackward = false;
    bool hasStep = false;
    EventIndex firstStepEvent = kNoEvent;
    Known autocastFact = Known::Unknown; // RunFacts::autocast: the classifier found autocast's casts (with any frames)
    bool parametersGathered = false;     // RunFacts::parametersGathered: the run already shards its parameters
    Phase phaseAt(EventIndex e) const;
};

// 3. What each allocation's operator is, as the size-law cascade's finders read it from the stack
//    facts and the weights: the inputs of the precision knob and of the optimizer's scratch.
//    Built by the cascade (decideSizeLaws, size_laws.h): steps "operator facts", "weight casts
//    found", "weight casts", "gradient clone sources" and "weight matrices" (law_weights.cpp, law_dims.cpp).
struct TraceOperators {
    std::vector<OpPrecision> precision; // how autocast treats the operator that made it
    std::vector<uint8_t> weightCast;    // an autocast cast of a weight (the cast cache)
    std::vector<uint8_t> mask;          // a bool mask (a comparison's output, dropout's mask)
    std::vector<uint8_t> stepWorkspace; // scratch of the optimizer step (follows the optimizer, not the batch)
    std::vector<int32_t> gradSource;    // per Gradient allocation: the transient AccumulateGrad cloned it from, or -1
    bool autocastSeen = false;          // the trace ran under autocast (its frames say so)
    bool autocastFromStructure = false; // no frame names a cast, but 16-bit twins of the weight matrices are cached per forward
    std::vector<int64_t> unitMatrices;  // weight matrices (bytes) of one repeated unit: what autocast casts per unit
    std::vector<int64_t> otherMatrices; // weight matrices outside the units (embeddings, heads)
};

// 4. The forward passes and their repeated units (layers), found from what may follow the tokens
//    (every allocation the weights' steps did not fix) before any token law is decided.
//    Built by findForwardPasses (trace_model_layers.cpp): the cascade's "layers" step calls it
//    with parts 1 and 2 and the weights' decisions.
struct TraceLayers {
    std::vector<int32_t> pass;      // forward pass of a saved activation, -1 otherwise
    std::vector<int32_t> layer;     // its layer within the pass, -1 outside the layers
    std::vector<uint8_t> saved;     // born in a forward pass, alive past its end (kept for backward)
    std::vector<uint8_t> keptInput; // saved, and the layer output that is the next layer's input
    std::vector<ForwardPass> passes;
    int layersPerPass = 0;
    int64_t layerParameterBytes = 0; // one layer's parameters (sizes that repeat once per layer); 0 without layers
};

// 5. Each allocation's size law, why, and the run's dimensions.
//    Built by decideSizeLaws (size_laws.h): the ordered cascade of law_cascade.cpp.
struct TraceLaws {
    std::vector<SizeLaw> law;
    std::vector<LawEvidence> lawEvidence; // why that law
    // For `explain --law`: the cascade step that decided its law (an index into lawSteps(),
    // size_laws.h) and the laws it chose among (a bit per SizeLaw, 1 << law).
    std::vector<uint8_t> lawStep;
    std::vector<uint8_t> lawCandidates;
    RunDims dims;
    std::vector<AmbiguousSite> ambiguous; // largest first
    int64_t ambiguousBytes = 0;
    int64_t replacedCount = 0, replacedBytes = 0; // memory from before recording that the trace rebuilt (LawEvidence::Replaced)
    int64_t linearSavedBytes = 0, quadraticSavedBytes = 0; // saved activations of every pass, by law
    int64_t linearBytes = 0, quadraticBytes = 0;           // every batch-dependent allocation, by law
};

// 6. The optimizer: what ran, and its state bytes per parameter (8 for Adam/AdamW), from the run
//    facts' parameters and optimizer state; a name (PyTorch's Optimizer.step# annotation, an
//    installed optimizer's file in the state's or the step's stacks) names its kind; a user's file
//    never does. Built by findOptimizer (trace_model_optimizer.cpp).
struct TraceOptimizer {
    OptimizerKind recordedOptimizer = OptimizerKind::Keep; // Keep: unknown
    std::string optimizerEvidence;
    int stateBytesPerParam = 0;
    int64_t parameterBytes = 0; // parameter pool alive at the end of the trace (or ever, if none is)
    int64_t gradientBytes = 0;  // largest gradient pool
    int64_t stateBytes = 0;     // optimizer state alive at the end
};

// 7. Replay inputs that depend on the trace alone, found once and reused by every scenario.
//    Built by findReplayInputs (trace_model_replay.cpp) from the Trace and the DeviceTrace.
struct TraceReplayInputs {
    struct ReleaseRun {
        EventIndex at = 0;          // first segment_free of a run
        bool namesEmptyCache = false; // a stack in it names empty_cache()
        bool framed = false;          // any stack at all
        bool requestFollows = false;  // an allocation request comes right after it
        // torch.cuda.empty_cache(), or a release the allocator did inside malloc (which the
        // simulator does by itself when it has a capacity to run into)?
        bool emptyCache(bool haveCapacity) const { return namesEmptyCache || (!framed && (!haveCapacity || !requestFollows)); }
    };
    struct InitialSegment {
        uint64_t addr = 0;
        int64_t size = 0;
        int64_t stream = 0;
        bool small = false;
    };
    std::vector<ReleaseRun> releaseRuns;
    std::vector<InitialSegment> initialSegments; // segments that existed before recording, by address
    // Allocations the trace builder closed where a new allocation reused their live address (their
    // free fell out of the ring buffer): (event, allocation), by event.
    std::vector<std::pair<EventIndex, uint32_t>> reuseCloses;
};

struct TraceModel : TraceAllocations, TraceRunFacts, TraceOperators, TraceLayers, TraceLaws, TraceOptimizer, TraceReplayInputs {
    std::vector<std::string> notes; // assumptions and what could not be found, for the report (every part adds)
};

// The parts' builders (buildTraceModel runs them in order).
TraceAllocations readAllocations(const DeviceTrace& dev, const Classification& c);
TraceRunFacts readRunFacts(const Classification& c);
// `followsTokens`: per allocation, not fixed by the weights' steps (what a forward's units are read from).
TraceLayers findForwardPasses(const Trace& trace, const DeviceTrace& dev, const Classification& c, const TraceAllocations& allocs,
                              const TraceRunFacts& run, const std::vector<uint8_t>& followsTokens, std::vector<std::string>& notes);
TraceOptimizer findOptimizer(const Trace& trace, const DeviceTrace& dev, const Classification& c);
TraceReplayInputs findReplayInputs(const Trace& trace, const DeviceTrace& dev);

TraceModel buildTraceModel(const Trace& trace, const DeviceTrace& dev, const Classification& c);

std::string_view sizeLawName(SizeLaw law);
// "x b*s^2" or "x s or x s^2": the laws of a bit set (1 << law), in SizeLaw order.
std::string sizeLawList(uint8_t laws);

} // namespace poolscope
