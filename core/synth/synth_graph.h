#pragma once
// Private to core/synth: a model as a list of operators, its forward with or without grad and the
// autograd engine's walk back over what the forward saved (synth_multipass.cpp, synth_rollout.cpp).
#include "core/synth/synth_recorder.h"

#include <functional>
#include <vector>

namespace poolscope::synth_detail {

// One operator of a model: the output it makes (the next operator's input, saved for backward when
// grad mode is on), its source line, and the weight whose gradient its node makes (-1: none).
struct Op {
    int64_t bytes;
    int line;
    int weight;
};

struct Saved {
    uint64_t addr;
    int64_t bytes;
    int weight;
};

using At = std::function<Frames(int line)>;

// A forward with grad: every operator's output is saved by the graph.
inline std::vector<Saved> forwardWithGrad(Recorder& r, const std::vector<Op>& ops, const At& at)
{
    std::vector<Saved> saved;
    for (const Op& o : ops)
        saved.push_back(Saved{r.alloc(o.bytes, at(o.line), Pool::Activation), o.bytes, o.weight});
    return saved;
}

// A forward under no_grad: each output is made before its input is let go of; the last output is
// returned alive with `lastPool`.
inline uint64_t forwardNoGrad(Recorder& r, const std::vector<Op>& ops, const At& at, Pool lastPool)
{
    uint64_t prev = 0;
    for (size_t k = 0; k < ops.size(); ++k) {
        const uint64_t out = r.alloc(ops[k].bytes, at(ops[k].line), k + 1 == ops.size() ? lastPool : Pool::Temporary);
        if (prev)
            r.free(prev, at(ops[k].line));
        prev = out;
    }
    return prev;
}

// The engine walking a graph back: each saved tensor's gradient made before what the node saved is
// let go of; a weight's gradient made by AccumulateGrad where the weight has none (kept), else made by
// the node and added in place (let go of). Returns the last gradient flowing (the input's), alive:
// the caller keeps it (a leaf's .grad) or lets it go.
inline uint64_t backwardGraph(Recorder& r, std::vector<Saved>& saved, int64_t rootBytes, std::vector<uint64_t>& grads, const std::vector<int64_t>& weightBytes)
{
    uint64_t flowing = r.alloc(rootBytes, engineAlloc("AddBackward0"), Pool::Temporary);
    for (size_t k = saved.size(); k-- > 0;) {
        const Saved& s = saved[k];
        const uint64_t g = r.alloc(s.bytes, engineAlloc("MmBackward0"), Pool::Temporary);
        if (s.weight >= 0) {
            uint64_t& grad = grads[size_t(s.weight)];
            const int64_t wb = weightBytes[size_t(s.weight)];
            if (!grad) {
                grad = r.alloc(wb, accumulateGrad(), Pool::Gradient);
            } else {
                const uint64_t add = r.alloc(wb, engineAlloc("MmBackward0"), Pool::Temporary);
                r.free(add, kCppFree + Frames{{"??", "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)", 0}} + kEngine);
            }
        }
        r.free(s.addr, engineRelease("MmBackward0"));
        r.free(flowing, kEngineFree);
        flowing = g;
    }
    saved.clear();
    return flowing;
}

inline void zeroGrad(Recorder& r, std::vector<uint64_t>& grads, const Frames& loop)
{
    const Frames at = Frames{{kTorch + "optim/optimizer.py", "zero_grad", 986}} + loop;
    for (uint64_t& g : grads) {
        if (g)
            r.free(g, kCppFree + at);
        g = 0;
    }
}

// A transformer layer's operators as the synth's other training stacks make them: a LayerNorm and
// three Linears (h x h, h x 4h, 4h x h) with GELUs between and a residual.
inline std::vector<Op> layerOps(int64_t tokens, int64_t h, int64_t elem, int firstWeight)
{
    return {{tokens * 4, 30, -1},
            {tokens * 4, 30, -1},
            {tokens * h * elem, 30, firstWeight},
            {tokens * h * elem, 31, -1},
            {tokens * h * elem, 32, firstWeight + 1},
            {tokens * 4 * h * elem, 33, -1},
            {tokens * 4 * h * elem, 34, firstWeight + 2},
            {tokens * h * elem, 36, -1}};
}

} // namespace poolscope::synth_detail
