#pragma once
#include "core/allocator/allocator_config.h"
#include "core/classify/pool.h"
#include "core/model/trace.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope {

// Mixed: fp32 weights, bf16 activations with weight casts; Autocast: torch.autocast's own rules
// (matmuls in bf16, norms and softmax in fp32, the rest after their input, casts of fp32 inputs).
enum class SynthDtype : uint8_t { Fp32, Bf16, Mixed, Autocast };
// How a layer's attention is written (see synth_variants.cpp): softmax's module code (the
// default), nanoGPT's inline q @ k.T / sqrt(d), causal masked_fill and F.softmax, the same with a
// hand-written softmax (max, sub, exp, sum, div: no softmax anywhere), or a fused function that
// keeps no probabilities and recomputes the scores in its backward.
enum class SynthAttention : uint8_t { Softmax, Inline, Manual, Recompute };
enum class SynthMlp : uint8_t { Gelu, SwiGlu };
enum class SynthOptimizer : uint8_t { AdamW, Adam, Sgd, SgdMomentum, Lion, Adafactor };

std::optional<SynthDtype> parseSynthDtype(std::string_view s);
std::optional<SynthAttention> parseSynthAttention(std::string_view s); // softmax|inline|manual|recompute
std::optional<SynthMlp> parseSynthMlp(std::string_view s);             // gelu|swiglu
std::optional<SynthOptimizer> parseSynthOptimizer(std::string_view s);
std::string_view synthOptimizerClass(SynthOptimizer o); // "AdamW", "SGD", ...

// Leaks planted in the training loop, and look-alikes that are not leaks (issue 24): each switch
// on its own, so a test knows which call sites truly leak (SynthResult::leakStacks).
struct SynthLeaks {
    bool keptGraph = false;     // leak: an evaluation forward every step whose loss is kept with its graph
                                // (`total_val += model(val).loss`, grad on): all its saved activations stay
    bool growingCache = false;  // leak: train.py keeps `cache[step] = hidden.detach().clone()`, never evicted
    bool capturingHook = false; // leak: a forward hook on block 0 appends a clone of its output to a list
    bool warmup = false;        // not a leak: a causal-mask buffer made lazily in the first forward, kept
    int bankSize = 0;           // not a leak: a memory bank (a queue of detached features) that fills one
                                // entry per step up to bankSize entries, then drops its oldest
    bool any() const { return keptGraph || growingCache || capturingHook || warmup || bankSize > 0; }
};

// "kept-graph,growing-cache,hook,warmup,bank=3"; nullopt for anything else.
std::optional<SynthLeaks> parseSynthLeaks(std::string_view list);

// A GPT-style decoder trained with one optimizer: what `poolscope synth` turns into a trace.
struct SynthModel {
    int layers = 12;
    int64_t hidden = 768;
    int64_t heads = 12;
    int64_t seq = 1024;
    int64_t microBatch = 4;
    int64_t vocab = 50304;
    int64_t positions = 0; // rows of the position embedding (max positions); 0: seq
    SynthAttention attention = SynthAttention::Softmax;
    SynthMlp mlp = SynthMlp::Gelu;
    int64_t ffn = 0;            // the MLP's width; 0: 4 x hidden
    int accumulate = 1;         // micro-steps per optimizer step (gradient accumulation)
    // zero_grad(set_to_none=False): the gradients are zeroed in place and kept from step to step, so
    // zero_grad neither allocates nor frees (with SGD's momentum, no event names a step after the first).
    bool zeroGradKeeps = false;
    bool normsOnly = false;     // only the norms' weights train (the matrices are frozen)
    SynthDtype dtype = SynthDtype::Mixed;
    SynthOptimizer optimizer = SynthOptimizer::AdamW;
    int steps = 2;
    // Forward passes with grad on and no backward or optimizer step (a forward-only profile): each
    // pass's graph lives until the next pass's output replaces it, as `out = model(x)` in a loop does.
    bool forwardOnly = false;
    // Steps (or passes) run before recording begins: with forwardOnly, the recording then starts while
    // the previous pass's graph is alive, and the trace frees it and builds the next one.
    int warmupSteps = 0;
    bool checkpointing = false; // full recompute: one layer input kept per layer
    double trainable = 1.0;     // fraction of the transformer layers that train; the lowest layers are frozen
                                // (requires_grad off: no gradients, no optimizer state)
    int dataParallel = 1;       // ranks (Nd); the trace is rank 0's
    int zeroStage = 0;          // 0..3: ZeRO sharding of optimizer state / gradients / parameters
    std::optional<int64_t> capacity; // device bytes: the run stops at the first OOM
    int64_t targetEntries = 0;  // > 0: repeat steps until about this many trace entries
    AllocatorConfig allocator;
    SynthLeaks leaks;
    int64_t startTimeUs = 1748730219000000;
};

// The generator's own figures, for tests: what the formulas say each pool should hold.
struct SynthSizes {
    int64_t parameterElements = 0;  // Ψ
    int64_t parameterBytes = 0;     // on this rank (sharded under ZeRO-3)
    int64_t gradientBytes = 0;      // persistent gradients on this rank
    int64_t optimizerStateBytes = 0;
    int64_t activationBytesPerLayer = 0; // kept for backward, one layer, without checkpointing
    int64_t activationElementSize = 2;
};
SynthSizes synthSizes(const SynthModel& model);
// Layers frozen by SynthModel::trainable: the first frozenLayers(m) of them.
int frozenLayers(const SynthModel& model);

struct SynthResult {
    Trace trace; // one CUDA device, finalized (allocations paired, series built)
    // The true pool of every allocation, in the order of trace.devices[0].allocations.
    std::vector<Pool> truth;
    SynthSizes sizes;
    int stepsRun = 0;
    bool oom = false;
    EventIndex oomIndex = kNoEvent;
    int64_t peakReserved = 0;
    // The stacks whose allocations SynthModel::leaks planted as leaks, and as look-alikes.
    std::vector<StackId> leakStacks, lookalikeStacks;
};

// Runs the training loop through CachingAllocatorSim: parameters before recording, then per step
// zero_grad, the batch's .to(), forward (per-layer activations, Korthikanti sizes), backward
// (activations freed, gradients via AccumulateGrad), optimizer step (state created at the first step),
// with Python and C++ frames and record_function annotations. Throws std::invalid_argument on a
// model that makes no sense (zero layers, heads not dividing hidden, ...).
SynthResult synthesize(const SynthModel& model);

} // namespace poolscope
