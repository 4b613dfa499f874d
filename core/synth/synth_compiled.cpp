// torch.compile'd models as short dumps with known pools: a training step whose forward and backward
// are each one Inductor-generated `call(args)` (AOTAutograd's CompiledFunction), and an inference
// decode loop under mode="reduce-overhead" (CUDA graph trees in a private pool).
//
// What the real stack does (torch 2.5/2.6 sources):
// - Inductor writes the graph as Python: a module under /tmp/torchinductor_<user>/<2 chars>/c<hash>.py
//   whose `call(args)` unpacks its inputs, `args.clear()`s the list, makes every buffer with
//   `empty_strided_cuda(...)` (torch._C._dynamo.guards._empty_strided_cuda), writes them with Triton
//   kernels or `extern_kernels.mm(..., out=buf)`, frees each with `del bufN` after its last use,
//   reuses a dead buffer of the same size/dtype for a later one (`buf9 = buf4; del buf4  # reuse`: no
//   allocator event), and calls ATen fallbacks (`torch.ops.aten._scaled_dot_product_flash_attention`)
//   whose outputs the operator allocates. The file name and `call` are generated: renamed, they are
//   any user's file and function.
// - AOTAutograd (_aot_autograd/runtime_wrappers.py): in training the compiled forward returns the
//   user's outputs followed by the tensors saved for backward (CompiledFunction.forward keeps them with
//   ctx.save_for_backward); the whole graph is one autograd node. Its backward runs on the engine's
//   device thread (PyNode::apply -> CompiledFunction.backward -> _backward_impl ->
//   call_compiled_backward): ctx.maybe_clear_saved_tensors(), then the compiled backward is called with
//   steal_args=True, so each saved tensor is freed at its `del` inside the backward's call. The
//   backward graph's outputs are the parameters' gradients, made with empty_strided_cuda in that
//   call; AccumulateGrad steals each one into .grad when .grad is None (zero_grad(set_to_none=True),
//   the default), so no copy is made and the gradient is the block the backward graph made.
// - Under autocast the bf16 weight casts are buffers of the graph, freed after their matmul; the
//   min-cut partitioner recomputes them in backward rather than saving them.
// - The first call compiles (FakeTensors: no device memory) and Triton autotuning clones the
//   buffers a kernel mutates while it benchmarks configurations (triton_heuristics.clone_args).
// - CUDA graph trees (torch/_inductor/cudagraph_trees.py, mode="reduce-overhead"): one private pool
//   per device (torch.cuda.graph_pool_handle(): pool id (0, N)). A function's first call is a warm-up
//   run (CUDAWarmupNode.run) whose allocations already go to that pool; its next call records
//   (CUDAGraphNode._record under torch.cuda.graph): non-static inputs are copied into the pool first
//   (_allocate_and_copy_recording_inputs), the graph's buffers are allocated and freed in the pool,
//   and the outputs stay allocated (cached tensor outputs) for every replay to overwrite. Replays
//   make no allocator call at all. Parameters and tensors marked static (transformers' StaticCache
//   calls torch._dynamo.mark_static_address) are used in place.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_inductor.h"
#include "core/synth/synth_recorder.h"

#include <stdexcept>
#include <vector>

namespace poolscope::synth_detail {
namespace {
using namespace inductor;

// --- a compiled training step ----------------------------------------------------------------------

// nanoGPT's train.py shape: model = torch.compile(GPT(config).to(device)); each step runs the
// compiled forward under bf16 autocast (the model computes its own loss), loss.backward(),
// optimizer.step() (torch.optim.AdamW, foreach, two parameter groups: matrices decayed, vectors not),
// optimizer.zero_grad(set_to_none=True). Three steps; the first compiles.
class CompiledTraining {
public:
    explicit CompiledTraining(int scale) : h(256 * scale) {}

    SynthResult run()
    {
        makeParameters();
        for (int step = 0; step < 3; ++step) {
            batch(step);
            forward(step);
            backward(step);
            optimizerStep(step);
            zeroGrad();
        }
        return r.finish();
    }

private:
    static constexpr int64_t kLayers = 4, kVocab = 8192, kSeq = 512, kBatch = 8, kHeads = 4, bf = 2, f32 = 4;
    const int64_t h;
    const int64_t n = kBatch * kSeq; // tokens
    Recorder r;

    struct Param {
        int64_t rows = 0, cols = 0; // vectors: cols = 1
        uint64_t addr = 0, grad = 0, expAvg = 0, expAvgSq = 0;
        bool matrix() const { return cols > 1; }
        int64_t bytes() const { return rows * cols * f32; }
    };
    std::vector<Param> params; // wte, wpe, per layer 12, ln_f w/b (lm_head is tied to wte)
    size_t layerParam(int64_t l, int k) const { return size_t(2 + 12 * l + k); }
    enum { Ln1W, Ln1B, AttnW, AttnB, ProjW, ProjB, Ln2W, Ln2B, FcW, FcB, MlpW, MlpB };

    uint64_t xBatch = 0, yBatch = 0, loss = 0, workspaceFw = 0, workspaceBw = 0;
    std::vector<uint64_t> saved; // what the forward returned for backward, in the graph's order

    Frames loopAt(int line) const { return Frames{{kUser + "train.py", "<module>", line}}; }

    // The forward's Python frames: the generated call under AOTAutograd's CompiledFunction, the
    // dynamo frame of the user's forward, OptimizedModule's call, the training loop.
    Frames fwPython(int line) const
    {
        return compiledGraph(kFwModule, line) + Frames{{kAot + "utils.py", "call_func_at_runtime_with_args", 126},
                                                       {kAot + "runtime_wrappers.py", "forward", 1574},
                                                       {kTorch + "autograd/function.py", "apply", 575},
                                                       {kAot + "utils.py", "call_func_at_runtime_with_args", 126},
                                                       {kAot + "runtime_wrappers.py", "runtime_wrapper", 343},
                                                       {kTorch + "_functorch/aot_autograd.py", "forward", 1201},
                                                       {kTorch + "_dynamo/eval_frame.py", "_fn", 745},
                                                       {kUser + "model.py", "forward", 170}} +
               kModuleCall + Frames{{kTorch + "_dynamo/eval_frame.py", "_fn", 574}} + kModuleCall + loopAt(298);
    }
    // The backward's: the engine's device thread calls CompiledFunction.backward through PyNode; the
    // Python stack starts there (no <module> frame).
    Frames bwPython(int line) const
    {
        return compiledGraph(kBwModule, line) + Frames{{kAot + "utils.py", "call_func_at_runtime_with_args", 126},
                                                       {kAot + "runtime_wrappers.py", "call_compiled_backward", 2032},
                                                       {kAot + "runtime_wrappers.py", "_backward_impl", 2047},
                                                       {kAot + "runtime_wrappers.py", "impl_fn", 1941},
                                                       {kAot + "runtime_wrappers.py", "backward", 1955},
                                                       {kTorch + "autograd/function.py", "apply", 307},
                                                       {"??", "torch::autograd::PyNode::apply(std::vector<at::Tensor>&&)", 0}} +
               kEngine;
    }
    uint64_t fwBuf(int64_t bytes, int line, Pool pool) { return r.alloc(bytes, kEmptyStrided + fwPython(line), pool); }
    void fwDel(uint64_t& a, int line)
    {
        r.free(a, kCppFree + fwPython(line));
        a = 0;
    }
    uint64_t bwBuf(int64_t bytes, int line, Pool pool) { return r.alloc(bytes, kEmptyStrided + bwPython(line), pool); }
    void bwDel(uint64_t& a, int line)
    {
        r.free(a, kCppFree + bwPython(line));
        a = 0;
    }

    void makeParameters()
    {
        // GPT(config) on the host, then model.to(device): nn.Module._apply moves each parameter.
        params.push_back({kVocab, h});
        params.push_back({kSeq, h});
        for (int64_t l = 0; l < kLayers; ++l)
            for (auto [rows, cols] : {std::pair{h, int64_t(1)}, {h, 1}, {3 * h, h}, {3 * h, 1}, {h, h}, {h, 1}, {h, 1}, {h, 1}, {4 * h, h}, {4 * h, 1},
                                      {h, 4 * h}, {h, 1}})
                params.push_back({rows, cols});
        params.push_back({h, 1});
        params.push_back({h, 1});
        const Frames to = Frames{{kTorch + "nn/modules/module.py", "convert", 1340}, {kTorch + "nn/modules/module.py", "_apply", 927},
                                 {kTorch + "nn/modules/module.py", "_apply", 900}, {kTorch + "nn/modules/module.py", "to", 1355}} +
                          loopAt(160);
        for (Param& p : params)
            p.addr = r.alloc(p.bytes(), to, Pool::Parameter);
    }

    void batch(int step)
    {
        // get_batch: torch.from_numpy(...).pin_memory().to(device, non_blocking=True), x and y; the
        // previous batch goes when the names are rebound.
        const Frames get = Frames{{kUser + "train.py", "get_batch", 131}} + loopAt(step == 0 ? 263 : 303);
        const uint64_t x = r.alloc(n * 8, get, Pool::Input);
        const uint64_t y = r.alloc(n * 8, get, Pool::Input);
        r.free(xBatch, loopAt(303));
        r.free(yBatch, loopAt(303));
        xBatch = x;
        yBatch = y;
    }

    void forward(int step)
    {
        saved.clear();
        const int64_t nh = n * h;
        // Embeddings: wte[idx] + wpe[pos] in fp32, the residual stream's first block (saved: the first
        // layer norm's input).
        uint64_t x = fwBuf(nh * f32, 412, Pool::Activation);
        saved.push_back(x);
        for (int64_t l = 0; l < kLayers; ++l) {
            const int base = 430 + int(l) * 120;
            // ln_1: mean and rstd (saved), the normalized output cast to bf16 for the matmul (saved:
            // the c_attn weight gradient's input).
            saved.push_back(fwBuf(n * f32, base, Pool::Activation));
            saved.push_back(fwBuf(n * f32, base, Pool::Activation));
            saved.push_back(fwBuf(nh * bf, base + 1, Pool::Activation));
            if (step == 0 && l == 0) {
                // Triton autotuning at the first launch: the kernel's in/out buffer cloned per benchmark.
                const Frames bench = Frames{{kTorch + "_inductor/runtime/triton_heuristics.py", "clone_args", 768},
                                            {kTorch + "_inductor/runtime/triton_heuristics.py", "bench", 735},
                                            {kTorch + "_inductor/runtime/triton_heuristics.py", "benchmark_all_configs", 789},
                                            {kTorch + "_inductor/runtime/triton_heuristics.py", "autotune_to_one_config", 809},
                                            {kTorch + "_inductor/runtime/triton_heuristics.py", "run", 1046}} +
                                     fwPython(base + 2);
                for (int k = 0; k < 2; ++k) {
                    const uint64_t clone = r.alloc(nh * bf, kCppAlloc + bench, Pool::Temporary);
                    r.free(clone, kCppFree + bench);
                }
            }
            // c_attn: the weight cast to bf16 (a buffer of the graph), addmm into qkv (saved: the
            // attention's inputs).
            uint64_t cast = fwBuf(3 * h * h * bf, base + 4, Pool::Temporary);
            if (step == 0 && l == 0)
                workspaceFw = r.alloc(8519680, kCublas + fwPython(base + 6), Pool::Workspace); // the first matmul's cuBLAS workspace
            const uint64_t qkv = fwBuf(n * 3 * h * bf, base + 5, Pool::Activation);
            saved.push_back(qkv);
            fwDel(cast, base + 7);
            // The flash attention fallback: out (saved), logsumexp (saved).
            const Frames flash = atenFallback("at::native::_scaled_dot_product_flash_attention_cuda(at::Tensor const&, at::Tensor const&, ...)") +
                                 fwPython(base + 10);
            saved.push_back(r.alloc(nh * bf, flash, Pool::Activation));
            saved.push_back(r.alloc(kBatch * kHeads * kSeq * f32, flash, Pool::Activation));
            // c_proj: cast, mm, the residual add in fp32 (saved: ln_2's input).
            cast = fwBuf(h * h * bf, base + 14, Pool::Temporary);
            uint64_t proj = fwBuf(nh * bf, base + 15, Pool::Temporary);
            fwDel(cast, base + 16);
            x = fwBuf(nh * f32, base + 20, Pool::Activation);
            saved.push_back(x);
            fwDel(proj, base + 21);
            // ln_2 as ln_1.
            saved.push_back(fwBuf(n * f32, base + 30, Pool::Activation));
            saved.push_back(fwBuf(n * f32, base + 30, Pool::Activation));
            saved.push_back(fwBuf(nh * bf, base + 31, Pool::Activation));
            // c_fc: cast, addmm (saved: gelu's input), gelu (saved: c_proj's input). The c_proj cast
            // has c_fc's cast's size and dtype: Inductor reuses that buffer (no allocator event).
            cast = fwBuf(4 * h * h * bf, base + 40, Pool::Temporary);
            saved.push_back(fwBuf(4 * nh * bf, base + 41, Pool::Activation));
            saved.push_back(fwBuf(4 * nh * bf, base + 45, Pool::Activation));
            uint64_t mlp = fwBuf(nh * bf, base + 50, Pool::Temporary);
            fwDel(cast, base + 51);
            x = fwBuf(nh * f32, base + 55, Pool::Activation);
            saved.push_back(x);
            fwDel(mlp, base + 56);
        }
        // ln_f, the tied head in bf16 (logits saved for the loss's backward), cross entropy's
        // max and log-sum-exp (saved), the mean loss: the user's output.
        const int head = 430 + int(kLayers) * 120;
        saved.push_back(fwBuf(n * f32, head, Pool::Activation));
        saved.push_back(fwBuf(n * f32, head, Pool::Activation));
        saved.push_back(fwBuf(nh * bf, head + 1, Pool::Activation));
        uint64_t cast = fwBuf(kVocab * h * bf, head + 4, Pool::Temporary);
        saved.push_back(fwBuf(n * kVocab * bf, head + 5, Pool::Activation));
        fwDel(cast, head + 6);
        saved.push_back(fwBuf(n * f32, head + 9, Pool::Activation));
        saved.push_back(fwBuf(n * f32, head + 9, Pool::Activation));
        const uint64_t newLoss = fwBuf(f32, head + 12, Pool::Activation);
        // `loss` is rebound: the previous step's goes.
        r.free(loss, loopAt(298));
        loss = newLoss;
    }

    void backward(int step)
    {
        const int64_t nh = n * h;
        // loss.backward(): _make_grads' ones_like on the calling thread, then the engine.
        const Frames makeGrads = kCppAlloc + Frames{{kTorch + "autograd/__init__.py", "_make_grads", 220},
                                                    {kTorch + "autograd/__init__.py", "backward", 336},
                                                    {kTorch + "_tensor.py", "backward", 581}} +
                                 loopAt(306);
        uint64_t seed = r.alloc(f32, makeGrads, Pool::Temporary);
        // The saved list in the backward's order: the head's first, then the layers last to first.
        std::vector<uint64_t> list = saved;
        auto takeSaved = [&](size_t k, int line) { bwDel(list[k], line); };
        // saved[0] is the embeddings' output; per layer from 1 + 13 l: [ln1 mean, rstd, out, qkv,
        // attn out, lse, x, ln2 mean, rstd, out, fc, gelu, x'] (ln_1's input is the entry before).
        const size_t perLayer = 13, headAt = 1 + perLayer * size_t(kLayers);
        if (step == 0) {
            const Frames bench = Frames{{kTorch + "_inductor/runtime/triton_heuristics.py", "clone_args", 768},
                                        {kTorch + "_inductor/runtime/triton_heuristics.py", "bench", 735},
                                        {kTorch + "_inductor/runtime/triton_heuristics.py", "benchmark_all_configs", 789},
                                        {kTorch + "_inductor/runtime/triton_heuristics.py", "autotune_to_one_config", 809},
                                        {kTorch + "_inductor/runtime/triton_heuristics.py", "run", 1046}} +
                                 bwPython(120);
            const uint64_t clone = r.alloc(n * kVocab * bf, kCppAlloc + bench, Pool::Temporary);
            r.free(clone, kCppFree + bench);
        }
        // The loss's backward: the logits' gradient (bf16) from the saved logits, max and lse.
        uint64_t dLogits = bwBuf(n * kVocab * bf, 121, Pool::Temporary);
        r.free(seed, kCppFree + bwPython(121));
        takeSaved(headAt + 3, 122);
        takeSaved(headAt + 4, 122);
        takeSaved(headAt + 5, 122);
        // lm_head (tied): the weight's gradient in bf16, kept until the embedding's is added; the
        // input's gradient through the recomputed weight cast.
        uint64_t dWteHead = bwBuf(kVocab * h * bf, 125, Pool::Temporary);
        if (step == 0)
            workspaceBw = r.alloc(8519680, kCublas + bwPython(125), Pool::Workspace); // the engine thread's own handle
        uint64_t cast = bwBuf(kVocab * h * bf, 127, Pool::Temporary);
        uint64_t dHidden = bwBuf(nh * bf, 128, Pool::Temporary);
        bwDel(cast, 129);
        bwDel(dLogits, 129);
        takeSaved(headAt + 2, 130);
        // ln_f: the residual stream's gradient (fp32), the norm's weight and bias gradients.
        uint64_t dx = bwBuf(nh * f32, 133, Pool::Temporary);
        bwDel(dHidden, 134);
        gradient(params.size() - 2, 136);
        gradient(params.size() - 1, 136);
        takeSaved(headAt + 0, 137);
        takeSaved(headAt + 1, 137);
        takeSaved(headAt - 1, 137); // ln_f's input: the last layer's output
        for (int64_t l = kLayers - 1; l >= 0; --l) {
            const size_t s = 1 + perLayer * size_t(l);
            const int base = 200 + int(kLayers - 1 - l) * 90;
            // MLP c_proj: weight gradient (bf16 mm, then fp32: the gradient), bias gradient; the
            // input's gradient through the recomputed cast.
            uint64_t wbf = bwBuf(4 * h * h * bf, base, Pool::Temporary);
            gradient(layerParam(l, MlpW), base + 1);
            bwDel(wbf, base + 2);
            gradient(layerParam(l, MlpB), base + 2);
            cast = bwBuf(4 * h * h * bf, base + 4, Pool::Temporary);
            uint64_t dGelu = bwBuf(4 * nh * bf, base + 5, Pool::Temporary);
            bwDel(cast, base + 6);
            takeSaved(s + 11, base + 6);
            // gelu's backward from its saved input, then c_fc as c_proj (the cast buffer reused).
            uint64_t dFc = bwBuf(4 * nh * bf, base + 9, Pool::Temporary);
            bwDel(dGelu, base + 10);
            takeSaved(s + 10, base + 10);
            wbf = bwBuf(4 * h * h * bf, base + 12, Pool::Temporary);
            gradient(layerParam(l, FcW), base + 13);
            bwDel(wbf, base + 14);
            gradient(layerParam(l, FcB), base + 14);
            cast = bwBuf(4 * h * h * bf, base + 16, Pool::Temporary);
            uint64_t dLn2 = bwBuf(nh * bf, base + 17, Pool::Temporary);
            bwDel(cast, base + 18);
            bwDel(dFc, base + 18);
            takeSaved(s + 9, base + 18);
            // ln_2's backward: the residual stream's gradient, the norm's gradients.
            uint64_t dx2 = bwBuf(nh * f32, base + 21, Pool::Temporary);
            bwDel(dLn2, base + 22);
            bwDel(dx, base + 22);
            dx = dx2;
            gradient(layerParam(l, Ln2W), base + 24);
            gradient(layerParam(l, Ln2B), base + 24);
            takeSaved(s + 7, base + 25);
            takeSaved(s + 8, base + 25);
            takeSaved(s + 6, base + 25);
            // attention c_proj.
            wbf = bwBuf(h * h * bf, base + 28, Pool::Temporary);
            gradient(layerParam(l, ProjW), base + 29);
            bwDel(wbf, base + 30);
            gradient(layerParam(l, ProjB), base + 30);
            cast = bwBuf(h * h * bf, base + 32, Pool::Temporary);
            uint64_t dAttn = bwBuf(nh * bf, base + 33, Pool::Temporary);
            bwDel(cast, base + 34);
            // The flash attention backward fallback: dq, dk, dv made by the operator, catted for c_attn.
            const Frames flashBw = atenFallback("at::native::_scaled_dot_product_flash_attention_backward_cuda(at::Tensor const&, ...)") +
                                   bwPython(base + 36);
            uint64_t dq = r.alloc(nh * bf, flashBw, Pool::Temporary);
            uint64_t dk = r.alloc(nh * bf, flashBw, Pool::Temporary);
            uint64_t dv = r.alloc(nh * bf, flashBw, Pool::Temporary);
            bwDel(dAttn, base + 37);
            takeSaved(s + 4, base + 37);
            takeSaved(s + 5, base + 37);
            takeSaved(s + 3, base + 37);
            uint64_t dQkv = bwBuf(3 * nh * bf, base + 40, Pool::Temporary);
            bwDel(dq, base + 41);
            bwDel(dk, base + 41);
            bwDel(dv, base + 41);
            wbf = bwBuf(3 * h * h * bf, base + 43, Pool::Temporary);
            gradient(layerParam(l, AttnW), base + 44);
            bwDel(wbf, base + 45);
            gradient(layerParam(l, AttnB), base + 45);
            cast = bwBuf(3 * h * h * bf, base + 47, Pool::Temporary);
            uint64_t dLn1 = bwBuf(nh * bf, base + 48, Pool::Temporary);
            bwDel(cast, base + 49);
            bwDel(dQkv, base + 49);
            takeSaved(s + 2, base + 49);
            uint64_t dx1 = bwBuf(nh * f32, base + 52, Pool::Temporary);
            bwDel(dLn1, base + 53);
            bwDel(dx, base + 53);
            dx = dx1;
            gradient(layerParam(l, Ln1W), base + 55);
            gradient(layerParam(l, Ln1B), base + 55);
            takeSaved(s + 0, base + 56);
            takeSaved(s + 1, base + 56);
            takeSaved(s - 1, base + 56); // ln_1's input: the previous layer's output, or the embeddings'
        }
        // Embeddings: wpe's gradient (summed over the batch); wte's: embedding_dense_backward into a
        // zeroed fp32 buffer plus the head's gradient.
        gradient(1, 582);
        gradient(0, 585);
        bwDel(dWteHead, 586);
        bwDel(dx, 586);
    }

    // A parameter's gradient: an output of the backward graph, stolen into .grad by AccumulateGrad.
    void gradient(size_t k, int line) { params[k].grad = bwBuf(params[k].bytes(), line, Pool::Gradient); }

    void optimizerStep(int step)
    {
        // torch.optim.AdamW (foreach): per group, _init_group makes exp_avg and exp_avg_sq on the
        // first step (the step counts stay on the host); _multi_tensor_adamw's torch._foreach_sqrt
        // makes one temporary per parameter, freed at the end of the group.
        r.annotate("Optimizer.step#AdamW.step", true);
        const Frames opt = loopAt(314);
        for (bool decay : {true, false}) {
            std::vector<Param*> group;
            for (Param& p : params)
                if (p.matrix() == decay)
                    group.push_back(&p);
            if (step == 0) {
                const Frames init = kCppAlloc + optimFrames(kTorch + "optim/adamw.py", "_init_group", 150, 209, opt);
                for (Param* p : group) {
                    p->expAvg = r.alloc(p->bytes(), init, Pool::OptimizerState);
                    p->expAvgSq = r.alloc(p->bytes(), init, Pool::OptimizerState);
                }
            }
            const Frames sqrt = kCppAlloc + optimFrames(kTorch + "optim/adamw.py", "_multi_tensor_adamw", 612, 224, opt);
            std::vector<uint64_t> tmp;
            for (Param* p : group)
                tmp.push_back(r.alloc(p->bytes(), sqrt, Pool::Temporary));
            const Frames done = kCppFree + optimFrames(kTorch + "optim/adamw.py", "_multi_tensor_adamw", 630, 224, opt);
            for (uint64_t t : tmp)
                r.free(t, done);
        }
        r.annotate("Optimizer.step#AdamW.step", false);
    }

    void zeroGrad()
    {
        r.annotate("Optimizer.zero_grad#AdamW.zero_grad", true);
        const Frames zg = kCppFree + Frames{{kTorch + "optim/optimizer.py", "zero_grad", 964}} + loopAt(316);
        for (Param& p : params) {
            r.free(p.grad, zg);
            p.grad = 0;
        }
        r.annotate("Optimizer.zero_grad#AdamW.zero_grad", false);
    }
};

} // namespace

SynthResult compiledTraining(int scale) { return CompiledTraining(scale).run(); }

} // namespace poolscope::synth_detail
