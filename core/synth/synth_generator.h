#pragma once
// Private to core/synth: the training-loop generator behind synthesize().
#include "core/allocator/caching_allocator.h"
#include "core/synth/synth.h"
#include "core/synth/synth_frames.h"

#include <unordered_map>
#include <vector>

namespace poolscope::synth_detail {

struct OomStop {}; // thrown when the simulated allocator runs out of memory

struct Param {
    int64_t numel = 0;
    int64_t rows = 0; // matrices: rows x cols; vectors: rows = numel, cols = 0
    int64_t cols = 0;
    uint64_t addr = 0;
    uint64_t grad = 0;
    std::vector<uint64_t> state;
    bool frozen = false; // requires_grad off: no gradient, no state
};

struct Tensor {
    uint64_t addr = 0;
    bool live() const { return addr != 0; }
};

// What one transformer layer keeps for backward (Korthikanti et al.'s list), plus autocast's bf16
// weight copies under mixed precision.
struct LayerActs {
    Tensor ln1, castQkv, qkv, probs, attnMask, attnDrop, context, castProj, projMask, residual, ln2, castFc1, fc1, gelu,
        castFc2, mlpMask;
    template <typename F>
    void each(F&& f)
    {
        for (Tensor* t : {&ln1, &castQkv, &qkv, &probs, &attnMask, &attnDrop, &context, &castProj, &projMask, &residual, &ln2,
                          &castFc1, &fc1, &gelu, &castFc2, &mlpMask})
            f(*t);
    }
};

struct HeadActs {
    Tensor lnf, castHead, castIn, logits, logp, loss;
};

class Generator {
public:
    explicit Generator(const SynthModel& model);
    SynthResult run();

private:
    // Recording primitives.
    Tensor alloc(int64_t bytes, StackId stack, Pool pool);
    void release(Tensor& t, StackId stack);
    void releaseAll(std::vector<Tensor>& ts, StackId stack);
    void temp(int64_t bytes, SynthOp op, SynthSite site); // allocated and freed right away
    void annotate(const std::string& name, bool start);
    void tick(int64_t us) { m_time += us; }
    void push(Action a, uint64_t addr, int64_t size, StackId stack);
    void drainSegments(StackId stack);

    // The training loop.
    void allocateParameters();
    void step(int index);
    void forwardOnlyPass(); // SynthModel::forwardOnly
    void forward();
    void layerForward(int layer, bool recompute);
    void backward();
    Tensor layerBackward(int layer, Tensor dout);
    void gradient(Param& p, SynthOp op);
    void optimizerStep(bool first);
    void gatherLayer(int layer, bool backwardPass);
    // The layer variants of synth_variants.cpp (attention styles, SwiGLU, autocast).
    bool variantLayers() const;
    void variantForward(int layer);
    Tensor variantBackward(int layer, Tensor dout);
    StackId variantStack(const std::string& op, int site, int policy, bool backward);

    Pool poolOfFree(uint64_t addr) const;
    void finishTrace();

    const SynthModel& m_model;
    SynthSizes m_sizes;
    SynthResult m_result;
    DeviceTrace m_dev;
    CachingAllocatorSim m_sim;
    SynthStacks m_stacks;
    bool m_recording = false;
    int64_t m_time;
    uint64_t m_rng = 0x9e3779b97f4a7c15ull;

    std::vector<Pool> m_eventPool;                 // per recorded event (meaningful for allocs)
    std::unordered_map<uint64_t, Pool> m_preexisting; // allocations made before recording
    struct Live {
        int64_t requested = 0;
        StackId stack;
    };
    std::unordered_map<uint64_t, Live> m_live; // live address -> requested bytes and alloc stack
    std::unordered_map<uint64_t, StackId> m_segmentStack;

    // Model state.
    int64_t m_ea = 2; // activation element bytes
    int64_t m_ep = 4; // parameter / gradient / optimizer-state element bytes
    std::vector<Param> m_params;                 // embeddings first, then per layer, then ln_f
    std::vector<std::vector<size_t>> m_layerParams;
    std::vector<size_t> m_headParams;           // wte (tied lm_head), wpe, ln_f
    std::vector<LayerActs> m_saved;             // per layer: activations kept for backward
    std::vector<Tensor> m_layerInput;           // per layer (index layers: ln_f input)
    HeadActs m_head;
    std::vector<Tensor> m_gathered;             // ZeRO-3: unsharded parameters of the current layer
    std::vector<Tensor> m_batch;
    struct VariantSaved {
        Tensor t;
        int64_t bytes = 0;
        std::string node; // the autograd node its gradient comes from ("weight": an autocast weight cast)
        int site = 0;
        std::vector<size_t> params; // weights whose gradients its node makes
    };
    std::vector<std::vector<VariantSaved>> m_variantSaved; // per layer, in forward order
    std::unordered_map<std::string, StackId> m_variantStacks;
    // SynthModel::leaks (synth_leaks.cpp): what the planted leaks keep, and the memory bank.
    std::vector<Tensor> m_leaked, m_kept, m_bank;
    void leakAfterBackward(int step);
    void hookCapture(int layer);
    void warmupBuffer(int step);
    void keepLeak(Tensor t, StackId stack, bool leak);
};

} // namespace poolscope::synth_detail
