#pragma once
#include "core/classify/classifier.h"
#include "core/classify/phase.h"
#include "core/classify/pool_series.h"
#include "core/model/trace.h"
#include "core/whatif/trace_model.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope {

// One run as a comparison reads it: the loaded trace, the device compared, and what the classifier
// made of it. Nothing else: the comparison derives the rest itself, but takes the what-if engine's
// model of the device where its caller has one built already (a Document keeps one).
struct RunInput {
    const Trace& trace;
    const DeviceTrace& device;
    const Classification& classification;
    const PoolSeries& series;
    const TraceModel* model = nullptr;
};

// A maximal stretch of one training phase: the classifier's phase runs of that phase merged across
// runs of unknown phase between them (a frame-less stretch inside a forward is still that forward).
struct PhaseBlock {
    Phase phase = Phase::Unknown;
    EventIndex first = 0, last = 0;
    int ordinal = 0; // how many blocks of this phase came before it (the step it belongs to)
};

// An allocation outside the weight pools as the call-site pairing needs it.
struct SiteAllocation {
    int64_t size = 0;
    SizeLaw law = SizeLaw::Fixed; // the what-if engine's: Fixed follows no token count, Quadratic is b*a*s*s
    bool input = false;           // in the input pool: integer token ids and labels, whose element size no precision changes
    // Made in the first forward pass with exactly half a kept parameter's bytes: what autocast's
    // 16-bit copy of an fp32 weight looks like. Sizes alone also match activations by coincidence
    // (b*s*h*2 bytes is an h x h fp32 weight when b*s = 2h); the pairing decides (site_pairs.h).
    bool castShaped = false;
    // Made by an operator on autocast's fp32 list (softmax, exp, norms, losses; by its frames), in a
    // run that ran under autocast (autocastRun: frames or 16-bit weight twins say so). Paired with the
    // same operator's output in a run without autocast, its element size is fp32 in both.
    bool fp32List = false;
    bool autocastRun = false;
    EventIndex event = kNoEvent;
};

// The facts about one run that the axes are inferred from. Sizes are requested bytes, as the trace
// records them (pre-existing blocks: the final segments' requested size).
struct RunProfile {
    std::string label; // "k_ctx128_fullstep.pickle cuda:0"
    std::vector<PhaseBlock> blocks;
    int steps = 0;               // optimizer steps recorded: blocks, or annotation windows where a step allocated nothing
    int passes = 0;              // forward blocks
    bool endsInOom = false;
    EventIndex oomIndex = kNoEvent;
    uint64_t oomWhere = ~uint64_t(0); // siteWhere() of the block the OOM cut short
    int64_t initialAllocated = 0;

    // Weights and what follows them, as tensors (sorted sizes) and totals.
    std::vector<int64_t> parameterSizes; // parameter tensors kept throughout (transient gathers excluded)
    std::vector<int64_t> gradientSizes;  // gradients alive when the first optimizer step begins (else at the end)
    std::vector<int64_t> stateSizes;     // optimizer state alive at the end
    int64_t parameterBytes = 0, gradientBytes = 0, stateBytes = 0;
    int64_t transientParameterBytes = 0; // parameter-pool allocations made and freed inside the trace (ZeRO-3/FSDP gathers)
    int stateShapedParameters = 0;       // copies per weight of parameter-pool buffers left out as an optimizer's (made before the forward)
    bool stateCreatedInTrace = false;    // the first step's lazy state creation was recorded
    bool statePreexisting = false;       // state existed before recording began
    OptimizerKind optimizer = OptimizerKind::Keep; // named by an annotation or frames; Keep when no name says
    std::string optimizerEvidence;

    // Precision (the size evidence for autocast needs both runs: SitePairing::casts).
    int autocastFrameAllocations = 0; // allocations whose stack names autocast (at::autocast::..., autocast_mode.py)
    Known autocastFact = Known::Unknown; // RunFacts::autocast: the classifier found autocast's casts (any frames)
    int64_t castCacheBytes = 0;       // the classifier's cast_cache pool at its peak

    // Sharding: collectives named by the frames (all_gather, reduce_scatter, DeepSpeed, FSDP).
    int collectiveAllocations = 0;

    // Grad mode: +1 on (a backward, or a forward that keeps its graph), -1 off (torch.no_grad /
    // inference_mode by its frames, or a forward that keeps nothing), 0 the trace cannot tell.
    int gradMode = 0;
    std::string gradModeEvidence;

    // Activation checkpointing.
    int recomputeAllocations = 0; // made in backward by the forward's own code lines, or under checkpoint frames
    int64_t recomputeBytes = 0;
    int checkpointFrameAllocations = 0;
    int layers = 0;               // repeating layers per forward pass (0: none found)
    int64_t savedPerLayer = 0;    // mean bytes a layer keeps for backward in the first pass
    int64_t layerInputBytes = 0;

    // Allocations outside the weight pools by (phase block, call site), in event order; the key hashes the phase,
    // the block's ordinal and the Python frames (file name without its folder, function; no line numbers,
    // which an edited script shifts).
    std::unordered_map<uint64_t, std::vector<SiteAllocation>> sites;
    std::unordered_map<uint64_t, std::string> siteNames; // key -> "model.py:forward", for evidence
    // key -> the same site without PyTorch's own frames: where a wrapper (torch.utils.checkpoint,
    // torch.compile) changed the full stacks, sites still pair by the user's code.
    std::unordered_map<uint64_t, uint64_t> userSiteOf;
};

RunProfile profileRun(const RunInput& run, const TraceModel& model);

// Defined in grad_mode.cpp: whether autograd recorded a graph in this run, from its structure.
struct GradModeFinding {
    int mode = 0; // +1 on, -1 off, 0 unknown
    std::string evidence;
};
GradModeFinding findGradMode(const Trace& trace, const DeviceTrace& dev, const Classification& c, const TraceModel& m);

// A site key: the phase block in the top 24 bits (siteWhere), a hash of the frames below.
constexpr uint64_t kSiteHashMask = (uint64_t(1) << 40) - 1;
constexpr uint64_t siteWhere(Phase phase, int64_t ordinal) { return (uint64_t(phase) << 56) | ((uint64_t(ordinal) & 0xffff) << 40); }
constexpr uint64_t siteWhereOf(uint64_t key) { return key & ~kSiteHashMask; }

// "forward, backward, optimizer step"
std::string blockSequence(const std::vector<PhaseBlock>& blocks);

} // namespace poolscope
