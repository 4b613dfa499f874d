// The classes of issue 22 as short dumps with known pools: each is a way real programs make memory
// whose pool the frames do not name (the user's own code, Python-only captures), so the classifier
// has to find it from the run's structure. The user's files are deliberately called nothing a rule
// knows (run.py, lib.py, model.py); only PyTorch's own frames carry public names.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"

#include <functional>
#include <stdexcept>
#include <vector>

namespace poolscope::synth_detail {

// --- a home-made KV cache grown per token in generate() ------------------------------------------

// One decoder layer of a Llama-style model under no_grad, operator by operator as eager PyTorch
// allocates it (modeling_llama.py in the user's fork: RMSNorm in fp32, q/k/v projections, rotary
// embedding through rotate_half's cat, the cache update, eager attention with the softmax in fp32,
// o_proj, the residual, the gated MLP): each output is made before its inputs are let go of. A real
// layer makes a few dozen blocks of which only the cache's two are kept; a layer of five blocks
// with two kept (this scenario's first form) resembles no model and hid the calls' structure.

// Returns the residual stream's new block; `residual` is let go of once the layer no longer needs it.
uint64_t decoderLayer(Recorder& r, const DecoderSizes& d, uint64_t residual, uint64_t& key, uint64_t& value, const Frames& forward,
                      const Frames& cacheUpdate)
{
    const int64_t bf = 2, f32 = 4, n = d.n, h = d.h;
    auto at = [&](int line) { return inModel(line, forward); };
    // RMSNorm: x.float(), pow(2).mean(-1), rsqrt, x * rsqrt, .to(bf16), weight * x.
    auto rmsNorm = [&](uint64_t x, int line) {
        const uint64_t up = r.alloc(n * h * f32, at(line), Pool::Temporary);
        const uint64_t sq = r.alloc(n * h * f32, at(line + 1), Pool::Temporary);
        const uint64_t mean = r.alloc(n * f32, at(line + 1), Pool::Temporary);
        r.free(sq, at(line + 1));
        const uint64_t rs = r.alloc(n * f32, at(line + 2), Pool::Temporary);
        r.free(mean, at(line + 2));
        const uint64_t scaled = r.alloc(n * h * f32, at(line + 2), Pool::Temporary);
        r.free(rs, at(line + 2));
        r.free(up, at(line + 2));
        const uint64_t down = r.alloc(n * h * bf, at(line + 3), Pool::Temporary);
        r.free(scaled, at(line + 3));
        const uint64_t out = r.alloc(n * h * bf, at(line + 3), Pool::Temporary);
        r.free(down, at(line + 3));
        (void)x;
        return out;
    };
    // apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half = cat(-x2, x1).
    auto rotary = [&](uint64_t x, int line, Pool pool) {
        const uint64_t xc = r.alloc(n * h * bf, at(line), Pool::Temporary);
        const uint64_t neg = r.alloc(n * h / 2 * bf, at(line + 1), Pool::Temporary);
        const uint64_t rot = r.alloc(n * h * bf, at(line + 1), Pool::Temporary);
        r.free(neg, at(line + 1));
        const uint64_t xs = r.alloc(n * h * bf, at(line), Pool::Temporary);
        r.free(rot, at(line));
        const uint64_t out = r.alloc(n * h * bf, at(line), pool);
        r.free(xc, at(line));
        r.free(xs, at(line));
        r.free(x, at(line));
        return out;
    };
    const uint64_t x = rmsNorm(residual, 70);
    const uint64_t q = r.alloc(n * h * bf, at(140), Pool::Temporary);
    const uint64_t k = r.alloc(n * h * bf, at(141), Pool::Temporary);
    // On the first call the cache keeps the rotated keys and the values as they are: those blocks
    // are the cache from the start.
    const Pool firstCache = key ? Pool::Temporary : Pool::KvCache;
    const uint64_t v = r.alloc(n * h * bf, at(142), firstCache);
    r.free(x, at(143));
    const uint64_t qe = rotary(q, 150, Pool::Temporary);
    const uint64_t ke = rotary(k, 151, firstCache);
    // The user's cache class: on the first call it keeps the keys and values it is given; then it
    // torch.cat-s the new ones onto what it held, and the old blocks go as the attributes are rebound.
    if (!key) {
        key = ke;
        value = v;
    } else {
        const uint64_t k2 = r.alloc(d.total * h * bf, cacheUpdate, Pool::KvCache);
        r.free(key, cacheUpdate);
        r.free(ke, cacheUpdate);
        key = k2;
        const uint64_t v2 = r.alloc(d.total * h * bf, cacheUpdate, Pool::KvCache);
        r.free(value, cacheUpdate);
        r.free(v, cacheUpdate);
        value = v2;
    }
    const int64_t scores = d.heads * n * d.total;
    const uint64_t s1 = r.alloc(scores * bf, at(180), Pool::Temporary); // q @ k^T
    const uint64_t s2 = r.alloc(scores * bf, at(180), Pool::Temporary); // * scaling
    r.free(s1, at(180));
    const uint64_t s3 = r.alloc(scores * bf, at(182), Pool::Temporary); // + causal mask
    r.free(s2, at(182));
    const uint64_t p32 = r.alloc(scores * f32, at(184), Pool::Temporary); // softmax(dtype=float32)
    r.free(s3, at(184));
    const uint64_t p = r.alloc(scores * bf, at(184), Pool::Temporary); // .to(query.dtype)
    r.free(p32, at(184));
    const uint64_t attn = r.alloc(n * h * bf, at(186), Pool::Temporary); // probs @ v
    r.free(p, at(186));
    r.free(qe, at(186));
    const uint64_t attnT = r.alloc(n * h * bf, at(187), Pool::Temporary); // transpose(1, 2).contiguous()
    r.free(attn, at(187));
    const uint64_t o = r.alloc(n * h * bf, at(190), Pool::Temporary); // o_proj
    r.free(attnT, at(190));
    const uint64_t mid = r.alloc(n * h * bf, at(236), Pool::Temporary); // residual + attention
    r.free(o, at(236));
    r.free(residual, at(236));
    const uint64_t y = rmsNorm(mid, 74);
    const uint64_t gate = r.alloc(n * d.ffn * bf, at(96), Pool::Temporary);
    const uint64_t upProj = r.alloc(n * d.ffn * bf, at(96), Pool::Temporary);
    r.free(y, at(96));
    const uint64_t act = r.alloc(n * d.ffn * bf, at(96), Pool::Temporary);
    r.free(gate, at(96));
    const uint64_t prod = r.alloc(n * d.ffn * bf, at(96), Pool::Temporary);
    r.free(act, at(96));
    r.free(upProj, at(96));
    const uint64_t downProj = r.alloc(n * h * bf, at(96), Pool::Temporary);
    r.free(prod, at(96));
    const uint64_t out = r.alloc(n * h * bf, at(242), Pool::Temporary); // residual + MLP
    r.free(downProj, at(242));
    r.free(mid, at(242));
    return out;
}

namespace {

SynthResult kvGenerate(int scale)
{
    Recorder r;
    const int64_t h = 256 * scale, ffn = 688 * scale, vocab = 8000, prompt = 64, layers = 6, heads = 8, bf = 2;
    // Weights in bf16, moved to the device by model.to(): per layer q, k, v, o, gate, up, down and
    // two norms; then the embedding, the final norm and the head.
    for (int l = 0; l < layers; ++l) {
        for (int64_t bytes : {h * h, h * h, h * h, h * h, ffn * h, ffn * h, h * ffn, h, h})
            r.alloc(bytes * bf, moveFrames(kApplyParam), Pool::Parameter);
    }
    for (int64_t bytes : {vocab * h, h, vocab * h})
        r.alloc(bytes * bf, moveFrames(kApplyParam), Pool::Parameter);
    // generate() in the user's lib.py: one forward per token under no_grad; the cache is the user's
    // own class, torch.cat-ing each layer's keys and values onto what it held.
    const Frames generate = Frames{{kUser + "lib.py", "generate", 212}} + kMain;
    const Frames forward = inModel(88, generate);
    const Frames cacheUpdate = Frames{{kUser + "lib.py", "update", 51}, {kUser + "model.py", "forward", 161}} + kModuleCall + forward;
    // Two batches of prompts. The first batch's cache goes when generate() returns; the second's is
    // still held by the output when the dump is taken (return_dict_in_generate keeps past_key_values).
    for (int batch = 0; batch < 2; ++batch) {
        std::vector<uint64_t> keys(layers, 0), values(layers, 0);
        for (int t = 0; t < 8; ++t) {
            const int64_t n = t == 0 ? prompt : 1, total = prompt + t;
            // The embedding lookup, the rotary table for these positions, the causal mask.
            uint64_t hidden = r.alloc(n * h * bf, inModel(60, forward), Pool::Temporary);
            const uint64_t cos = r.alloc(n * (h / heads) * bf, inModel(62, forward), Pool::Temporary);
            const uint64_t sin = r.alloc(n * (h / heads) * bf, inModel(62, forward), Pool::Temporary);
            const uint64_t mask = r.alloc(n * total * bf, inModel(64, forward), Pool::Temporary);
            for (int l = 0; l < layers; ++l)
                hidden = decoderLayer(r, DecoderSizes{n, total, h, heads, ffn}, hidden, keys[size_t(l)], values[size_t(l)], forward, cacheUpdate);
            r.free(mask, inModel(66, forward));
            r.free(cos, inModel(66, forward));
            r.free(sin, inModel(66, forward));
            // The final norm and the head on the last position only; the logits go back to generate(),
            // which samples from them (in fp32) and lets them go.
            const uint64_t normed = r.alloc(h * bf, inModel(90, forward), Pool::Temporary);
            r.free(hidden, inModel(90, forward));
            const uint64_t logits = r.alloc(vocab * bf, inModel(92, generate), Pool::Activation);
            r.free(normed, inModel(92, forward));
            const Frames sample = Frames{{kUser + "lib.py", "generate", 215}} + kMain;
            const uint64_t probs = r.alloc(vocab * 4, sample, Pool::Temporary);
            r.free(logits, sample);
            const uint64_t next = r.alloc(8, sample, Pool::Temporary);
            r.free(probs, sample);
            r.free(next, sample);
        }
        if (batch == 0)
            for (int l = 0; l < layers; ++l)
                r.free(keys[size_t(l)], generate), r.free(values[size_t(l)], generate);
    }
    return r.finish();
}

// --- gradients moved with .to() ------------------------------------------------------------------

SynthResult gradsMoved(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale;
    // A trained model, back on the host with every parameter's .grad, moved to the device for an
    // evaluation: _apply moves each parameter, then its gradient, from a line of its own.
    for (int l = 0; l < 4; ++l)
        for (int64_t rows : {3 * h, h, 4 * h, h}) {
            const int64_t cols = rows == h && l % 2 ? 4 * h : h;
            r.alloc(rows * cols * 4, moveFrames(kApplyParam), Pool::Parameter);
            r.alloc(rows * cols * 4, moveFrames(kApplyGrad), Pool::Gradient);
        }
    // The evaluation forward under no_grad: scratch only.
    const Frames evaluate = Frames{{kUser + "run.py", "evaluate", 120}} + kMain;
    for (int l = 0; l < 4; ++l) {
        const uint64_t a = r.alloc(256 * 4 * h * 4, inModel(30, evaluate), Pool::Temporary);
        const uint64_t b = r.alloc(256 * h * 4, inModel(31, evaluate), Pool::Temporary);
        r.free(a, inModel(32, evaluate));
        r.free(b, inModel(33, evaluate));
    }
    // The next request does not fit: the OOM names the wall.
    r.oom(int64_t(64) << 30, inModel(30, evaluate));
    return r.finish();
}

// --- the cuBLAS workspace under Python-only frames -----------------------------------------------

SynthResult workspacePython(int scale)
{
    Recorder r;
    const int64_t h = 256 * scale;
    // A Windows capture: backslash paths, Python frames only.
    const std::string torch = "C:\\Users\\user\\miniconda3\\Lib\\site-packages\\torch\\";
    const Frames main = {{"C:\\Users\\user\\ddpm\\sample.py", "sample", 31}, {"C:\\Users\\user\\ddpm\\sample.py", "<module>", 60}};
    const Frames call = {{torch + "nn\\modules\\module.py", "_call_impl", 1527}, {torch + "nn\\modules\\module.py", "_wrapped_call_impl", 1518}};
    const Frames move = Frames{{torch + "nn\\modules\\module.py", "convert", 1150},
                               {torch + "nn\\modules\\module.py", "_apply", 802},
                               {torch + "nn\\modules\\module.py", "to", 1160}} +
                        main;
    for (int l = 0; l < 6; ++l)
        r.alloc(h * h * 4, move, Pool::Parameter);
    const Frames unet = Frames{{"C:\\Users\\user\\ddpm\\unet.py", "forward", 77}} + call + main;
    const Frames linear = Frames{{torch + "nn\\modules\\linear.py", "forward", 116}} + call + unet;
    for (int step = 0; step < 3; ++step) {
        std::vector<uint64_t> scratch;
        for (int l = 0; l < 6; ++l) {
            // The first matmul of the process creates its handle's workspace, under the layer's frames.
            if (step == 0 && l == 0)
                r.alloc(8519680, linear, Pool::Workspace);
            scratch.push_back(r.alloc(64 * h * 4, linear, Pool::Temporary));
            if (scratch.size() > 2) {
                r.free(scratch.front(), unet);
                scratch.erase(scratch.begin());
            }
        }
        for (uint64_t s : scratch)
            r.free(s, unet);
    }
    return r.finish();
}

// --- a training step of a small model, operator by operator ------------------------------------

// The forward and backward of `weights.size() / 3` blocks (LayerNorm, three Linears with a GELU
// between, the residual), as eager PyTorch allocates them: the forward saves each operator's input
// for the backward (LayerNorm its output, mean and rstd too) and lets go of what no one saved; the
// backward walks the graph from the loss back, making each input's gradient before letting go of
// what the node saved, and each weight's gradient as it reaches the Linear that used it. Returns
// the weights' gradients, in the order of `weights` (their sizes). A block of five saved tensors
// per layer, as the first form of these scenarios had, resembles no model.
// `afterLayer` (when set) runs after each layer's forward and returns blocks the forward made
// there that the graph saved too (a nested autograd call's outputs the forward goes on to use).
using SavedBlocks = std::vector<std::pair<uint64_t, int64_t>>;
std::vector<uint64_t> trainingStep(Recorder& r, const std::vector<int64_t>& weights, int64_t tokens, int64_t h, const Frames& caller,
                                   const Frames& backwardCall, const std::function<SavedBlocks(size_t)>& afterLayer = {})
{
    const int64_t f32 = 4;
    const size_t layers = weights.size() / 3;
    struct Saved {
        uint64_t addr;
        int64_t bytes;
        int weight; // the weight whose gradient its node makes once it is released; -1: none
    };
    std::vector<Saved> saved;
    auto keep = [&](int64_t bytes, int line, int weight) {
        saved.push_back(Saved{r.alloc(bytes, inModel(line, caller), Pool::Activation), bytes, weight});
    };
    saved.push_back(Saved{r.alloc(tokens * h * f32, inModel(20, caller), Pool::Activation), tokens * h * f32, -1}); // the embedding
    for (size_t l = 0; l < layers; ++l) {
        keep(tokens * f32, 30, -1); // LayerNorm's mean and rstd
        keep(tokens * f32, 30, -1);
        keep(tokens * h * f32, 30, int(3 * l)); // its output, the first Linear's input
        const int64_t width = weights[3 * l + 1] / (h * f32);
        keep(tokens * h * f32, 31, -1);                 // the first Linear's output, GELU's input
        keep(tokens * h * f32, 32, int(3 * l + 1));     // GELU's output, the second Linear's input
        keep(tokens * width * f32, 33, -1);             // the second Linear's output, GELU's input
        keep(tokens * width * f32, 34, int(3 * l + 2)); // GELU's output, the third Linear's input
        const uint64_t out = r.alloc(tokens * h * f32, inModel(35, caller), Pool::Temporary);
        keep(tokens * h * f32, 36, -1); // the residual: the next LayerNorm's input
        r.free(out, inModel(36, caller));
        if (afterLayer)
            for (const auto& [addr, bytes] : afterLayer(l))
                saved.push_back(Saved{addr, bytes, -1});
    }
    const uint64_t loss = r.alloc(4, inModel(40, caller), Pool::Activation);
    // loss.backward(): the engine's graph root, then the nodes from the last operator back.
    const uint64_t root = r.alloc(4, backwardCall, Pool::Temporary);
    std::vector<uint64_t> grads(weights.size(), 0);
    uint64_t flowing = r.alloc(tokens * h * f32, engineAlloc("AddBackward0"), Pool::Temporary);
    r.free(root, kEngineFree);
    for (size_t k = saved.size(); k-- > 0;) {
        const Saved& s = saved[k];
        const uint64_t g = r.alloc(s.bytes, engineAlloc("MmBackward0"), Pool::Temporary);
        if (s.weight >= 0)
            grads[size_t(s.weight)] = r.alloc(weights[size_t(s.weight)], accumulateGrad(), Pool::Gradient);
        r.free(s.addr, engineRelease("MmBackward0"));
        r.free(flowing, kEngineFree);
        flowing = g;
    }
    r.free(flowing, kEngineFree);
    r.free(loss, caller); // the loop rebinds `loss`
    return grads;
}

// --- torch.autograd.functional.jvp inside the forward --------------------------------------------

SynthResult jvpForward(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale, tokens = 1024;
    std::vector<int64_t> weights;
    for (int l = 0; l < 4; ++l)
        for (int64_t cols : {h, 4 * h, h}) {
            r.alloc(h * cols * 4, moveFrames(kApplyParam), Pool::Parameter);
            weights.push_back(h * cols * 4);
        }
    const Frames trainStep = Frames{{kUser + "run.py", "train_step", 90}} + kMain;
    // In the middle of the forward the model calls jvp, whose double backward runs on the engine's
    // thread and whose outputs the forward goes on to use (and keep).
    const Frames jvp = Frames{{kTorch + "autograd/functional.py", "_autograd_grad", 192}, {kTorch + "autograd/functional.py", "jvp", 437}} +
                       inModel(45, trainStep);
    // torch.autograd.grad inside jvp runs the engine on the calling thread: the nodes' allocations
    // carry the engine's C++ frames and, outside them, the forward's Python frames.
    const Frames nested = Frames{{"??", "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, ...)", 0},
                                 {"??", "torch::autograd::Engine::execute(std::vector<torch::autograd::Edge> const&, ...)", 0},
                                 {"python_engine.cpp", "torch::autograd::python::PythonEngine::execute(...)", 0},
                                 {kTorch + "autograd/__init__.py", "grad", 411}} +
                          jvp;
    auto nestedAlloc = [&](const std::string& node) { return kCppAlloc + Frames{{"??", "torch::autograd::generated::" + node + "::apply(std::vector<at::Tensor>&&)", 0}} + nested; };
    auto jvpCall = [&](size_t layer) {
        SavedBlocks out;
        if (layer != 1)
            return out;
        const uint64_t seed = r.alloc(tokens * h * 4, jvp, Pool::Temporary);
        // Outputs of the nested backward: tangents of an activation's size, kept by the forward.
        for (int k = 0; k < 2; ++k)
            out.push_back({r.alloc(tokens * h * 4, nestedAlloc("MmBackward0"), Pool::Activation), tokens * h * 4});
        const uint64_t inner = r.alloc(tokens * 4 * h * 4, nestedAlloc("GeluBackward0"), Pool::Temporary);
        r.free(inner, kCppFree + nested);
        r.free(seed, jvp);
        return out;
    };
    // The training step: the forward keeps its activations; the engine frees them in backward and
    // makes each weight's gradient.
    trainingStep(r, weights, tokens, h, trainStep, kBackwardCall, jvpCall);
    // AdamW's step: the moments made on the first step, foreach scratch.
    const Frames step = Frames{{kTorch + "optim/adamw.py", "_init_group", 120}, {kTorch + "optim/adamw.py", "step", 196},
                               {kTorch + "optim/optimizer.py", "wrapper", 484}} +
                        kMain;
    r.annotate("Optimizer.step#AdamW.step", true);
    for (int64_t bytes : weights) {
        r.alloc(bytes, step, Pool::OptimizerState);
        r.alloc(bytes, step, Pool::OptimizerState);
    }
    const Frames foreach = Frames{{kTorch + "optim/adamw.py", "_multi_tensor_adamw", 640}, {kTorch + "optim/adamw.py", "step", 210},
                                  {kTorch + "optim/optimizer.py", "wrapper", 484}} +
                           kMain;
    const uint64_t tmp = r.alloc(weights.front(), foreach, Pool::Temporary);
    r.free(tmp, foreach);
    r.annotate("Optimizer.step#AdamW.step", false);
    return r.finish();
}

// --- a hand-written optimizer: moments in its constructor, p.data rebuilt in step ---------------

SynthResult handOptimizer(int scale)
{
    Recorder r;
    const int64_t h = 256 * scale, tokens = 2048;
    // Parameters made on the device by the model's constructors (the user's own modules).
    const Frames build = Frames{{kTorch + "nn/modules/linear.py", "__init__", 106}, {kUser + "model.py", "__init__", 22}} + kMain;
    struct P {
        uint64_t p, m, v;
        int64_t bytes;
    };
    std::vector<P> ps;
    for (int l = 0; l < 4; ++l)
        for (int64_t cols : {h, 4 * h, h})
            ps.push_back({r.alloc(h * cols * 4, build, Pool::Parameter), 0, 0, h * cols * 4});
    // The optimizer's constructor (lib.py, a torch.optim.Optimizer subclass): two moments per parameter.
    for (P& p : ps) {
        p.m = r.alloc(p.bytes, Frames{{kUser + "lib.py", "__init__", 19}} + kMain, Pool::OptimizerState);
        p.v = r.alloc(p.bytes, Frames{{kUser + "lib.py", "__init__", 20}} + kMain, Pool::OptimizerState);
    }
    const Frames stepCall = {{kTorch + "optim/optimizer.py", "wrapper", 493}, {kUser + "run.py", "main", 52}, {kUser + "run.py", "<module>", 77}};
    auto stepLine = [&](int line) { return Frames{{kUser + "lib.py", "step", line}} + stepCall; };
    std::vector<uint64_t> grads(ps.size(), 0);
    for (int s = 0; s < 2; ++s) {
        r.annotate("Optimizer.zero_grad#MyAdam.zero_grad", true);
        for (uint64_t& g : grads)
            if (g) {
                r.free(g, Frames{{kTorch + "optim/optimizer.py", "zero_grad", 980}} + kMain);
                g = 0;
            }
        r.annotate("Optimizer.zero_grad#MyAdam.zero_grad", false);
        const Frames trainStep = Frames{{kUser + "run.py", "main", 48}, {kUser + "run.py", "<module>", 77}};
        const Frames backward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                       {kTorch + "autograd/__init__.py", "backward", 267},
                                       {kTorch + "_tensor.py", "backward", 521},
                                       {kUser + "run.py", "main", 50},
                                       {kUser + "run.py", "<module>", 77}};
        std::vector<int64_t> weights;
        for (const P& p : ps)
            weights.push_back(p.bytes);
        const std::vector<uint64_t> made = trainingStep(r, weights, tokens, h, trainStep, backward);
        for (size_t i = 0; i < ps.size(); ++i)
            grads[i] = made[i];
        // step(): m = b1 * m + (1 - b1) * g; v = ...; p.data = p.data - lr * m / (sqrt(v) + eps);
        // p.data = p.data - lr * wd * p.data. Each update makes new tensors and drops the old ones.
        r.annotate("Optimizer.step#MyAdam.step", true);
        for (P& p : ps) {
            const uint64_t t1 = r.alloc(p.bytes, stepLine(51), Pool::Temporary);
            const uint64_t m = r.alloc(p.bytes, stepLine(51), Pool::OptimizerState);
            r.free(t1, stepLine(51));
            r.free(p.m, stepLine(51));
            p.m = m;
            const uint64_t t2 = r.alloc(p.bytes, stepLine(56), Pool::Temporary);
            const uint64_t v = r.alloc(p.bytes, stepLine(56), Pool::OptimizerState);
            r.free(t2, stepLine(56));
            r.free(p.v, stepLine(56));
            p.v = v;
            const uint64_t t3 = r.alloc(p.bytes, stepLine(63), Pool::Temporary);
            const uint64_t first = r.alloc(p.bytes, stepLine(63), Pool::Parameter);
            r.free(t3, stepLine(63));
            r.free(p.p, stepLine(63)); // p.data = ...: the old storage goes
            const uint64_t t4 = r.alloc(p.bytes, stepLine(64), Pool::Temporary);
            const uint64_t second = r.alloc(p.bytes, stepLine(64), Pool::Parameter);
            r.free(t4, stepLine(64));
            r.free(first, stepLine(64)); // replaced again by the weight decay
            p.p = second;
        }
        r.annotate("Optimizer.step#MyAdam.step", false);
    }
    return r.finish();
}

// --- a script-level attention whose exp output the engine frees in backward ----------------------

SynthResult scriptAttention(int scale)
{
    Recorder r;
    const int64_t h = 256 * scale, tokens = 1024, heads = 8, f32 = 4, layers = 2;
    // No nn.Module anywhere: weights made by the script with requires_grad, plain functions for
    // attention and the MLP, loss.backward() and a hand-written SGD update, twice. The second step
    // matters: no frame names its forward, so only the run's structure can end the first backward
    // (its saved tensors would otherwise inherit "backward" and read as gradients).
    const Frames script = {{kUser + "run.py", "<module>", 20}};
    std::vector<uint64_t> weights;
    for (int l = 0; l < layers; ++l)
        for (int64_t cols : {h, h, h, h, 4 * h, h}) // Wq, Wk, Wv, Wo, W1 (h x 4h), W2 (4h x h)
            weights.push_back(r.alloc(h * cols * f32, script, Pool::Parameter));
    auto at = [&](const char* fn, int line) { return Frames{{kUser + "run.py", fn, line}, {kUser + "run.py", "<module>", 40}}; };
    std::vector<uint64_t> grads(weights.size(), 0);
    for (int step = 0; step < 2; ++step) {
        // What the graph saved, in the order the forward made it, with the weight whose gradient the
        // backward makes when it reaches that tensor's matmul (-1: none).
        std::vector<std::pair<uint64_t, int>> saved;
        std::vector<int64_t> bytesOf;
        auto keep = [&](int64_t bytes, const Frames& f, int weight) {
            saved.push_back({r.alloc(bytes, f, Pool::Activation), weight});
            bytesOf.push_back(bytes);
            return saved.back().first;
        };
        const int64_t act = tokens * h * f32, scores = heads * tokens * tokens * f32, small = heads * tokens * f32;
        // A fresh noisy input each step (a denoising objective): saved by the first matmuls.
        keep(act, at("loss_fn", 30), -1);
        for (int l = 0; l < layers; ++l) {
            const int w = 6 * l;
            // attention(x): q, k, v; q @ k^T / sqrt(d); exp(s - max) / sum; @ v; @ Wo.
            keep(act, at("attention", 9), w);     // q (saved by q @ k^T), Wq's gradient made there
            keep(act, at("attention", 9), w + 1); // k
            keep(act, at("attention", 9), w + 2); // v (saved by probs @ v)
            const uint64_t s1 = r.alloc(scores, at("attention", 10), Pool::Temporary);
            const uint64_t s2 = r.alloc(scores, at("attention", 10), Pool::Temporary); // / sqrt(d)
            r.free(s1, at("attention", 10));
            const uint64_t mx = r.alloc(small, at("attention", 11), Pool::Temporary);
            keep(small * 2, at("attention", 11), -1); // max's indices, saved by MaxBackward
            const uint64_t z = r.alloc(scores, at("attention", 11), Pool::Temporary);
            r.free(s2, at("attention", 11));
            r.free(mx, at("attention", 11));
            keep(scores, at("attention", 11), -1); // exp(z): ExpBackward0 saves its result
            r.free(z, at("attention", 11));
            keep(small, at("attention", 12), -1);      // the denominator, saved by the division
            keep(scores, at("attention", 12), -1);     // probs, saved by probs @ v
            keep(act, at("attention", 13), w + 3);     // the heads' output, saved by @ Wo
            const uint64_t o = r.alloc(act, at("attention", 14), Pool::Temporary);
            keep(act, at("block", 20), -1); // x + attention(x)
            r.free(o, at("block", 20));
            // mlp(x): relu(x @ W1) @ W2, the residual.
            const uint64_t h1 = r.alloc(4 * act, at("mlp", 16), Pool::Temporary);
            keep(4 * act, at("mlp", 16), w + 4); // relu's output: ReluBackward0 and @ W2 save it
            r.free(h1, at("mlp", 16));
            const uint64_t h2 = r.alloc(act, at("mlp", 17), Pool::Temporary);
            keep(act, at("block", 21), w + 5); // x + mlp(x)
            r.free(h2, at("block", 21));
        }
        const uint64_t sq = r.alloc(tokens * h * f32, at("loss_fn", 33), Pool::Temporary);
        const uint64_t loss = r.alloc(4, at("loss_fn", 33), Pool::Activation);
        r.free(sq, at("loss_fn", 33));
        // loss.backward(): the engine walks back, making each input's gradient before letting go of
        // what the node saved, and each weight's gradient as it reaches its matmul.
        const uint64_t root = r.alloc(4, kBackwardCall, Pool::Temporary);
        uint64_t flowing = r.alloc(tokens * h * f32, engineAlloc("PowBackward0"), Pool::Temporary);
        r.free(root, kEngineFree);
        for (size_t k = saved.size(); k-- > 0;) {
            const uint64_t g = r.alloc(bytesOf[k], engineAlloc(k % 3 ? "MmBackward0" : "ExpBackward0"), Pool::Temporary);
            if (saved[k].second >= 0) {
                const size_t wi = size_t(saved[k].second);
                const int64_t wb = wi % 6 == 4 ? h * 4 * h * f32 : h * h * f32;
                grads[wi] = r.alloc(wb, accumulateGrad(), Pool::Gradient);
            }
            r.free(saved[k].first, engineRelease(k % 3 ? "MmBackward0" : "ExpBackward0"));
            r.free(flowing, kEngineFree);
            flowing = g;
        }
        r.free(flowing, kEngineFree);
        r.free(loss, at("main", 45));
        // with torch.no_grad(): w -= lr * w.grad; w.grad = None
        for (size_t i = 0; i < weights.size(); ++i) {
            const int64_t wb = i % 6 == 4 ? h * 4 * h * f32 : h * h * f32;
            const uint64_t t = r.alloc(wb, at("main", 48), Pool::Temporary);
            r.free(t, at("main", 48));
            r.free(grads[i], at("main", 49));
            grads[i] = 0;
        }
    }
    return r.finish();
}

} // namespace

SynthResult synthesizeClassScenario(StackScenario scenario, int scale)
{
    switch (scenario) {
    case StackScenario::KvGenerate: return kvGenerate(scale);
    case StackScenario::GradsMoved: return gradsMoved(scale);
    case StackScenario::WorkspacePython: return workspacePython(scale);
    case StackScenario::JvpForward: return jvpForward(scale);
    case StackScenario::HandOptimizer: return handOptimizer(scale);
    case StackScenario::ScriptAttention: return scriptAttention(scale);
    default: break;
    }
    throw std::invalid_argument("not an issue-22 class scenario");
}

} // namespace poolscope::synth_detail
