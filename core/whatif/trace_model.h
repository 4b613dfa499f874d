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
    SizeLaw other = SizeLaw::Quadratic;
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

// What the what-if engine knows about one device's trace beyond the pools: which allocations
// follow the batch, which are kept for backward and in which layer, and what optimizer ran.
// Built once per (trace, classification); every scenario reuses it.
struct TraceModel {
    size_t allocationCount = 0;
    std::vector<Pool> pool;            // per allocation (Unknown where the classification has none)
    std::vector<SizeLaw> law;          // per allocation
    std::vector<LawEvidence> lawEvidence; // per allocation: why that law
    // Per allocation, for `explain --law`: the cascade step that decided its law (an index into
    // lawSteps(), size_laws.h) and the laws it chose among (a bit per SizeLaw, 1 << law).
    std::vector<uint8_t> lawStep;
    std::vector<uint8_t> lawCandidates;
    std::vector<OpPrecision> precision; // per allocation: how autocast treats the operator that made it
    std::vector<uint8_t> weightCast;    // per allocation: an autocast cast of a weight (the cast cache)
    RunDims dims;
    std::vector<AmbiguousSite> ambiguous; // largest first
    int64_t ambiguousBytes = 0;
    int64_t replacedCount = 0, replacedBytes = 0; // memory from before recording that the trace rebuilt (LawEvidence::Replaced)
    bool autocastSeen = false;          // the trace ran under autocast (its frames say so)
    bool autocastFromStructure = false; // no frame names a cast, but 16-bit twins of the weight matrices are cached per forward
    Known autocastFact = Known::Unknown; // RunFacts::autocast: the classifier found autocast's casts (with any frames)
    std::vector<int32_t> gradSource;    // per Gradient allocation: the transient AccumulateGrad cloned it from, or -1
    std::vector<uint8_t> mask;          // per allocation: a bool mask (a comparison's output, dropout's mask)
    std::vector<int64_t> unitMatrices;  // weight matrices (bytes) of one repeated unit: what autocast casts per unit
    std::vector<int64_t> otherMatrices; // weight matrices outside the units (embeddings, heads)
    std::vector<int64_t> requestedSize; // per allocation: what was asked for (pre-existing ones: from the final blocks)
    std::vector<int32_t> pass;         // forward pass of a saved activation, -1 otherwise
    std::vector<int32_t> layer;        // its layer within the pass, -1 outside the layers
    std::vector<uint8_t> saved;        // born in a forward pass, alive past its end (kept for backward)
    std::vector<uint8_t> keptInput;    // saved, and the layer output that is the next layer's input
    std::vector<uint8_t> stepWorkspace; // scratch of the optimizer step (follows the optimizer, not the batch)
    std::vector<ForwardPass> passes;
    int layersPerPass = 0;

    int64_t linearSavedBytes = 0, quadraticSavedBytes = 0; // saved activations of every pass, by law
    int64_t linearBytes = 0, quadraticBytes = 0;           // every batch-dependent allocation, by law

    // Optimizer: what ran, and its state bytes per parameter (8 for Adam/AdamW).
    OptimizerKind recordedOptimizer = OptimizerKind::Keep; // Keep: unknown
    std::string optimizerEvidence;
    int stateBytesPerParam = 0;
    int64_t parameterBytes = 0; // parameter pool alive at the end of the trace (or ever, if none is)
    int64_t layerParameterBytes = 0; // one layer's parameters (sizes that repeat once per layer); 0 without layers
    int64_t gradientBytes = 0;  // largest gradient pool
    int64_t stateBytes = 0;     // optimizer state alive at the end
    bool hasBackward = false;
    bool hasStep = false;
    EventIndex firstStepEvent = kNoEvent;

    std::vector<PhaseTimeline::Run> phaseRuns; // the classification's phase runs: where a peak is
    Phase phaseAt(EventIndex e) const;

    std::vector<std::string> notes; // assumptions and what could not be found, for the report

    // Replay inputs that depend on the trace alone, found once and reused by every scenario.
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
    std::vector<int64_t> stream; // per allocation
};

TraceModel buildTraceModel(const Trace& trace, const DeviceTrace& dev, const Classification& c);

std::string_view sizeLawName(SizeLaw law);

} // namespace poolscope
