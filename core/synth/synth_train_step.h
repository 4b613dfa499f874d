#pragma once
// Private to core/synth: one forward and backward of a small model with a data-parallel stack's
// hooks around each layer and each weight's gradient (used by synth_distributed.cpp and
// synth_sharded.cpp).
#include "core/synth/synth_recorder.h"

#include <functional>
#include <vector>

namespace poolscope::synth_detail {

// --- one forward and backward of a small model, with the stack's hooks ---------------------------

// The blocks of trainingStep (synth_classes.cpp): per layer a LayerNorm and three Linears
// (h x h, h x 4h, 4h x h) with GELUs between and a residual; the forward saves each operator's
// input, the backward walks back making each input's gradient before letting go of what the node
// saved, and each weight's gradient as it reaches the Linear that used it. The stacks differ in
// what they do around a layer (FSDP gathers and frees its parameters) and with each gradient
// (DeepSpeed copies it into its bucket, DDP into its bucket's view).
struct Hooks {
    std::function<void(size_t layer)> preForward, postForward, preBackward, postBackward;
    // After the forward (the loss made), before loss.backward() starts the engine.
    std::function<void()> startBackward;
    // After the last node ran, before loss.backward() returns (the engine's final callbacks).
    std::function<void()> endBackward;
    // The engine made weight w's gradient: return its block (the hook may let it go at once).
    std::function<void(size_t weight, uint64_t grad)> gradReady;
    // Where weight w's gradient is made (AccumulateGrad by default).
    std::function<uint64_t(size_t weight)> makeGrad;
};

struct Net {
    std::vector<int64_t> weightNumel; // 3 per layer
    int64_t tokens = 0, h = 0, elem = 4, paramElem = 4;
    size_t layers() const { return weightNumel.size() / 3; }
    int64_t weightBytes(size_t w) const { return weightNumel[w] * paramElem; }
    int64_t numel() const
    {
        int64_t n = 0;
        for (int64_t k : weightNumel)
            n += k;
        return n;
    }
};

inline Net makeNet(int64_t h, int64_t tokens, int64_t elem, int64_t paramElem)
{
    Net n;
    n.h = h;
    n.tokens = tokens;
    n.elem = elem;
    n.paramElem = paramElem;
    for (int l = 0; l < 4; ++l)
        for (int64_t cols : {h, 4 * h, 4 * h})
            n.weightNumel.push_back(h * cols);
    return n;
}

inline void forwardBackward(Recorder& r, const Net& net, const Frames& caller, const Frames& backwardCall, const Hooks& hk)
{
    const int64_t e = net.elem, t = net.tokens, h = net.h;
    struct Saved {
        uint64_t addr;
        int64_t bytes;
        int weight;
        int layer;
    };
    std::vector<Saved> saved;
    auto keep = [&](int64_t bytes, int line, int weight, int layer) {
        saved.push_back(Saved{r.alloc(bytes, inModel(line, caller), Pool::Activation), bytes, weight, layer});
    };
    keep(t * h * e, 20, -1, -1); // the embedding's output
    for (size_t l = 0; l < net.layers(); ++l) {
        if (hk.preForward)
            hk.preForward(l);
        const int L = int(l), w = int(3 * l);
        keep(t * 4, 30, -1, L); // LayerNorm's mean and rstd (fp32)
        keep(t * 4, 30, -1, L);
        keep(t * h * e, 30, w, L);         // its output: the first Linear's input
        keep(t * h * e, 31, -1, L);        // the first Linear's output, GELU's input
        keep(t * h * e, 32, w + 1, L);     // GELU's output, the second Linear's input
        keep(t * 4 * h * e, 33, -1, L);    // the second Linear's output, GELU's input
        keep(t * 4 * h * e, 34, w + 2, L); // GELU's output, the third Linear's input
        const uint64_t out = r.alloc(t * h * e, inModel(35, caller), Pool::Temporary);
        keep(t * h * e, 36, -1, L); // the residual
        r.free(out, inModel(36, caller));
        if (hk.postForward)
            hk.postForward(l);
    }
    const uint64_t loss = r.alloc(4, inModel(40, caller), Pool::Activation);
    if (hk.startBackward)
        hk.startBackward();
    const uint64_t root = r.alloc(4, backwardCall, Pool::Temporary);
    uint64_t flowing = r.alloc(t * h * e, engineAlloc("AddBackward0"), Pool::Temporary);
    r.free(root, kEngineFree);
    int current = -1;
    for (size_t k = saved.size(); k-- > 0;) {
        const Saved& s = saved[k];
        if (s.layer != current) {
            if (current >= 0 && hk.postBackward)
                hk.postBackward(size_t(current));
            current = s.layer;
            if (current >= 0 && hk.preBackward)
                hk.preBackward(size_t(current));
        }
        const uint64_t g = r.alloc(s.bytes, engineAlloc("MmBackward0"), Pool::Temporary);
        if (s.weight >= 0) {
            const size_t w = size_t(s.weight);
            const uint64_t grad = hk.makeGrad ? hk.makeGrad(w) : r.alloc(net.weightBytes(w), accumulateGrad(), Pool::Gradient);
            if (hk.gradReady)
                hk.gradReady(w, grad);
        }
        r.free(s.addr, engineRelease("MmBackward0"));
        r.free(flowing, kEngineFree);
        flowing = g;
    }
    r.free(flowing, kEngineFree);
    if (hk.endBackward)
        hk.endBackward();
    r.free(loss, caller);
}

// optimizer.step() of torch.optim.AdamW (foreach, the default), called from `loop`: under
// PyTorch's Optimizer.step record_function, two moments per tensor on the first step
// (_init_group), then one update temporary per tensor (_multi_tensor_adamw). `bytes`: each trained
// tensor's size.
inline void adamwStep(Recorder& r, const std::vector<int64_t>& bytes, bool first, const Frames& loop,
                      const std::string& annotation = "Optimizer.step#AdamW.step")
{
    r.annotate(annotation, true);
    if (first)
        for (int64_t b : bytes) {
            const Frames init = optimFrames(kTorch + "optim/adamw.py", "_init_group", 120, 196, loop);
            r.alloc(b, init, Pool::OptimizerState);
            r.alloc(b, init, Pool::OptimizerState);
        }
    const Frames foreach = optimFrames(kTorch + "optim/adamw.py", "_multi_tensor_adamw", 640, 210, loop);
    for (int64_t b : bytes) {
        const uint64_t tmp = r.alloc(b, foreach, Pool::Temporary);
        r.free(tmp, foreach);
    }
    r.annotate(annotation, false);
}

inline std::vector<int64_t> weightBytes(const Net& net)
{
    std::vector<int64_t> out;
    for (size_t w = 0; w < net.weightNumel.size(); ++w)
        out.push_back(net.weightBytes(w));
    return out;
}

} // namespace poolscope::synth_detail
