// A Megatron-LM pretraining job as a short dump with known pools: one rank of pretrain_gpt.py run
// from a git checkout (/workspace/Megatron-LM, not site-packages), --bf16
// --use-distributed-optimizer, --transformer-impl local, gradient accumulation fusion, TE's FusedAdam
// (distrib_optimizer.py imports it first), one micro-batch per step, two train_steps. The allocation
// sites follow Megatron-Core's own source (megatron/core, read for this), innermost frame first:
//   tensor_parallel/layers.py  ColumnParallelLinear / RowParallelLinear.__init__: the weight (and bias)
//     made on the device, torch.empty(out, in, dtype=params_dtype), in the layers' constructors;
//     LinearWithGradAccumulationAndAsyncCommunication.backward (an autograd.Function: Python on the
//     engine's thread): grad_input = grad_output.matmul(weight); with gradient_accumulation_fusion the
//     wgrad GEMM adds into weight.main_grad and a dummy grad_weight = torch.empty(main_grad.shape,
//     dtype=input.dtype) is returned, which AccumulateGrad makes param.grad; grad_bias = sum(0).
//   distributed/distributed_data_parallel.py  __init__ -> _allocate_buffers_for_parameters ->
//     _ParamAndGradBuffer (param_and_grad_buffer.py): param_data = torch.zeros(numel, param_dtype)
//     (with the distributed optimizer only), then grad_data = torch.zeros(numel, grad_dtype) (fp32
//     under bf16: accumulate_allreduce_grads_in_fp32); then, for param in params[::-1], param.data
//     becomes a view of param_data, the values are copied and `del old_param_data` lets the
//     original block go; param.main_grad is a view of grad_data. numel pads each parameter's start
//     to 64 elements and the bucket's end to lcm(dp, 128). _make_backward_post_hook's hook:
//     main_grad.add_(grad) unless grad_added_to_main_grad, then param.grad = None.
//   optimizer/distrib_optimizer.py  _build_model_and_main_param_groups: for each parameter in the
//     buffer's order (param_index_map: reverse of the model's), shard_model_param.clone().float():
//     a 16-bit clone let go of at once and the kept fp32 main parameter.
//   pipeline_parallel/schedules.py  forward_backward_no_pipelining -> forward_step (forward_step_func,
//     then loss_func) -> backward_step -> custom_backward (deallocate_pipeline_outputs=True:
//     grad_output = torch.ones_like(output), Variable._execution_engine.run_backward: no torch
//     autograd Python frame).
//   optimizer/optimizer.py  MixedPrecisionOptimizer.step -> step_with_ready_grads -> the inner
//     optimizer's step: transformer_engine/pytorch/optimizers/fused_adam.py step -> initialize_state
//     -> _initialize_state: torch.empty_like(param, dtype=fp32) for exp_avg and exp_avg_sq, lazily at
//     the first step, per main parameter (multi_tensor_apply: no foreach scratch).
//   cuBLAS: one workspace per handle (the forward's thread, the autograd engine's thread), 8,519,680 B
//     before Hopper (CublasHandlePool.cpp getNewWorkspace through the caching allocator).
// Line numbers are those of the versions read; only public library names are used (the user's own
// file is pretrain_gpt.py, which rules must not know).
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"

#include <vector>

namespace poolscope::synth_detail {
namespace {

const std::string kCheckout = "/workspace/Megatron-LM/";
const std::string kMeg = kCheckout + "megatron/";
const std::string kScript = kCheckout + "pretrain_gpt.py";

struct Param {
    uint64_t addr = 0;
    int64_t numel = 0;
};

int64_t padTo(int64_t n, int64_t d) { return (n + d - 1) / d * d; }

} // namespace

SynthResult megatronPretrain(int scale)
{
    Recorder r;
    const std::string& m = kMeg;
    const int64_t h = 512 * scale, t = 4 * 1024, bf = 2, f32 = 4;
    constexpr int kLayers = 4;
    const Frames pretrain = {{m + "training/training.py", "pretrain", 211}, {kScript, "<module>", 301}};
    const Frames setup = Frames{{m + "training/training.py", "setup_model_and_optimizer", 512}} + pretrain;
    const Frames getModel = Frames{{m + "training/training.py", "get_model", 402}} + setup;

    // --- the model: each layer's norms and linear layers make their parameters on the device -------
    std::vector<Param> params; // in the model's order (named_parameters)
    auto make = [&](int64_t numel, const Frames& where) {
        params.push_back({r.alloc(numel * bf, where, Pool::Parameter), numel});
        return params.size() - 1;
    };
    const Frames buildLayer = Frames{{m + "core/transformer/transformer_block.py", "_build_layers", 288},
                                     {m + "core/transformer/transformer_block.py", "__init__", 211},
                                     {m + "core/models/gpt/gpt_model.py", "__init__", 101},
                                     {kScript, "model_provider", 88}} +
                              getModel;
    auto inLayer = [&](const std::string& file, int line) {
        return Frames{{m + file, "__init__", line}, {m + "core/transformer/transformer_layer.py", "__init__", 118}} + buildLayer;
    };
    auto linear = [&](int64_t out, int64_t in, const std::string& owner, int ownerLine) {
        const Frames where = inLayer(owner, ownerLine);
        const size_t w = make(out * in, Frames{{m + "core/tensor_parallel/layers.py", "__init__", 734}} + where);
        make(out, Frames{{m + "core/tensor_parallel/layers.py", "__init__", 761}} + where);
        return w;
    };
    auto norm = [&](int line) {
        const Frames where = Frames{{m + "core/fusions/fused_layer_norm.py", "__init__", 112}} +
                             Frames{{m + "core/transformer/transformer_layer.py", "__init__", line}} + buildLayer;
        make(h, where);
        make(h, Frames{{m + "core/fusions/fused_layer_norm.py", "__init__", 114}} + Frames(where.begin() + 1, where.end()));
    };
    struct Layer {
        size_t qkv, proj, fc1, fc2;
    };
    std::vector<Layer> layers;
    for (int l = 0; l < kLayers; ++l) {
        Layer L{};
        norm(101);
        L.qkv = linear(3 * h, h, "core/transformer/attention.py", 92);
        L.proj = linear(h, h, "core/transformer/attention.py", 104);
        norm(131);
        L.fc1 = linear(4 * h, h, "core/transformer/mlp.py", 61);
        L.fc2 = linear(h, 4 * h, "core/transformer/mlp.py", 78);
        layers.push_back(L);
    }
    {
        const Frames where = Frames{{m + "core/fusions/fused_layer_norm.py", "__init__", 112},
                                    {m + "core/transformer/transformer_block.py", "_build_layers", 301},
                                    {m + "core/transformer/transformer_block.py", "__init__", 211},
                                    {m + "core/models/gpt/gpt_model.py", "__init__", 101},
                                    {kScript, "model_provider", 88}} +
                             getModel;
        make(h, where); // final_layernorm
        make(h, where);
    }

    // --- Megatron's DistributedDataParallel: param_data, grad_data, the parameters moved in --------
    const Frames buffer = Frames{{m + "core/distributed/distributed_data_parallel.py", "_allocate_buffers_for_parameters", 181},
                                 {m + "core/distributed/distributed_data_parallel.py", "__init__", 252},
                                 {m + "training/training.py", "<listcomp>", 530},
                                 {m + "training/training.py", "get_model", 530}} +
                          setup;
    int64_t numel = 0;
    for (size_t k = params.size(); k-- > 0;)
        numel = padTo(numel, 64) + params[k].numel; // _pad_start_of_param_if_needed, params[::-1]
    numel = padTo(numel, 128);                      // _pad_end_of_bucket_if_needed (dp = 1)
    r.alloc(numel * bf, Frames{{m + "core/distributed/param_and_grad_buffer.py", "__init__", 621}} + buffer, Pool::Parameter);
    r.alloc(numel * f32, Frames{{m + "core/distributed/param_and_grad_buffer.py", "__init__", 628}} + buffer, Pool::Gradient);
    for (size_t k = params.size(); k-- > 0;)
        r.free(params[k].addr, Frames{{m + "core/distributed/param_and_grad_buffer.py", "__init__", 672}} + buffer);

    // --- the distributed optimizer's fp32 main parameters, in the buffer's order -------------------
    const Frames mainParams = Frames{{m + "core/optimizer/distrib_optimizer.py", "_build_model_and_main_param_groups", 371},
                                     {m + "core/optimizer/distrib_optimizer.py", "__init__", 522},
                                     {m + "core/optimizer/__init__.py", "_get_megatron_optimizer_based_on_param_groups", 301},
                                     {m + "core/optimizer/__init__.py", "get_megatron_optimizer", 452}} +
                              setup;
    std::vector<int64_t> mainNumel; // the inner optimizer's parameters, in its order
    for (size_t k = params.size(); k-- > 0;) {
        const uint64_t clone = r.alloc(params[k].numel * bf, mainParams, Pool::Temporary);
        r.alloc(params[k].numel * f32, mainParams, Pool::OptimizerState);
        r.free(clone, mainParams);
        mainNumel.push_back(params[k].numel);
    }

    // --- train_step, twice ------------------------------------------------------------------------
    const Frames trainStep = {{m + "training/training.py", "train_step", 703},
                              {m + "training/training.py", "train", 1204},
                              {m + "training/training.py", "pretrain", 280},
                              {kScript, "<module>", 301}};
    const Frames schedule = Frames{{m + "core/pipeline_parallel/schedules.py", "forward_backward_no_pipelining", 452}} + trainStep;
    const Frames forwardStep = Frames{{kScript, "forward_step", 151}, {m + "core/pipeline_parallel/schedules.py", "forward_step", 272}} + schedule;
    const Frames model = Frames{{m + "core/models/gpt/gpt_model.py", "forward", 240}} + kModuleCall +
                         Frames{{m + "core/transformer/module.py", "forward", 180}} + kModuleCall +
                         Frames{{m + "core/distributed/data_parallel_base.py", "forward", 22}} + kModuleCall + forwardStep;
    const Frames block = Frames{{m + "core/transformer/transformer_block.py", "forward", 402}} + kModuleCall + model;
    auto inLayerForward = [&](const std::string& file, int line) {
        return Frames{{m + file, "forward", line}} + kModuleCall + Frames{{m + "core/transformer/transformer_layer.py", "forward", 301}} +
               kModuleCall + block;
    };
    // A linear layer's forward: the autograd Function's forward under apply.
    auto linearForward = [&](const std::string& owner, int line) {
        return Frames{{m + "core/tensor_parallel/layers.py", "forward", 452},
                      {kTorch + "autograd/function.py", "apply", 575},
                      {m + "core/tensor_parallel/layers.py", "linear_with_grad_accumulation_and_async_allreduce", 612},
                      {m + "core/tensor_parallel/layers.py", "forward", 980}} +
               kModuleCall + inLayerForward(owner, line);
    };
    auto normForward = [&](int line) {
        return Frames{{m + "core/fusions/fused_layer_norm.py", "forward", 171}} + kModuleCall +
               Frames{{m + "core/transformer/transformer_layer.py", "forward", line}} + kModuleCall + block;
    };
    const Frames cublas = kCppAlloc + Frames{{"??", "at::cuda::getCurrentCUDABlasHandle()", 0},
                                             {"??", "at::cuda::blas::gemm<c10::BFloat16>(char, char, long, long, long, ...)", 0}};
    // The engine's thread running a Python autograd.Function's backward, and DDP's hook on a
    // parameter's AccumulateGrad letting its .grad go.
    auto pyBackward = [&](const std::string& file, int line) {
        return kCppAlloc + Frames{{file, "backward", line}, {kTorch + "autograd/function.py", "apply", 306},
                                  {"??", "torch::autograd::PyNode::apply(std::vector<at::Tensor>&&)", 0}} +
               kEngine;
    };
    const Frames hookFree = kCppFree + Frames{{m + "core/distributed/distributed_data_parallel.py", "hook", 421},
                                              {"??", "torch::autograd::PyFunctionTensorPostAccGradHooks::apply_with_saved(...)", 0}} +
                            kEngine;
    const std::string layersPy = m + "core/tensor_parallel/layers.py";
    const std::string normPy = m + "core/fusions/fused_layer_norm.py";

    struct Saved {
        uint64_t addr;
        int64_t bytes;
        int weight = -1; // a linear layer's input: the index of its weight (its bias follows)
        int norm = -1;   // a norm's input: the index of its weight (its bias follows)
    };
    bool forwardWorkspace = false, backwardWorkspace = false;
    for (int step = 0; step < 2; ++step) {
        // get_batch (get_batch_on_this_tp_rank): tokens, labels, loss_mask, position_ids moved in.
        const Frames batch = kCppAlloc +
                             Frames{{"??", "at::_ops::_to_copy::call(at::Tensor const&, ...)", 0},
                                    {"python_variable_methods.cpp", "torch::autograd::THPVariable_cuda(_object*, _object*, _object*)", 0},
                                    {m + "training/utils.py", "get_batch_on_this_tp_rank", 288},
                                    {kScript, "get_batch", 102}} +
                             forwardStep;
        std::vector<uint64_t> inputs;
        for (int64_t bytes : {t * 8, t * 8, t * 4, t * 8})
            inputs.push_back(r.alloc(bytes, batch, Pool::Input));
        std::vector<Saved> saved;
        auto keep = [&](int64_t bytes, const Frames& where, int weight = -1, int normIdx = -1) {
            saved.push_back(Saved{r.alloc(bytes, where, Pool::Activation), bytes, weight, normIdx});
        };
        // The layers' first input: the embedding's output in a real GPT (not modelled), made here.
        keep(t * h * bf, model);
        size_t p = 0; // the parameter index of the current layer's first norm
        for (int l = 0; l < kLayers; ++l) {
            const Layer& L = layers[size_t(l)];
            const Frames ln1 = normForward(281), ln2 = normForward(318);
            keep(t * f32, ln1); // mean and invvar
            keep(t * f32, ln1);
            keep(t * h * bf, ln1, int(L.qkv), int(p)); // the norm's output: qkv's input (the norm saves its own input)
            if (!forwardWorkspace) {
                r.alloc(8519680, cublas + linearForward("core/transformer/attention.py", 356), Pool::Workspace);
                forwardWorkspace = true;
            }
            keep(3 * t * h * bf, linearForward("core/transformer/attention.py", 356)); // qkv, kept by core attention
            const Frames core = Frames{{m + "core/transformer/dot_product_attention.py", "forward", 160}} + kModuleCall +
                                inLayerForward("core/transformer/attention.py", 401);
            const uint64_t scores = r.alloc(4 * t * h * bf, core, Pool::Temporary);
            keep(t * h * bf, core, int(L.proj)); // the context: proj's input
            r.free(scores, core);
            const uint64_t projOut = r.alloc(t * h * bf, linearForward("core/transformer/attention.py", 430), Pool::Temporary);
            keep(t * h * bf, inLayerForward("core/fusions/fused_bias_dropout.py", 28)); // bias-dropout-add: the residual
            r.free(projOut, inLayerForward("core/fusions/fused_bias_dropout.py", 28));
            keep(t * f32, ln2);
            keep(t * f32, ln2);
            keep(t * h * bf, ln2, int(L.fc1), int(p + 6)); // fc1's input
            keep(4 * t * h * bf, linearForward("core/transformer/mlp.py", 121)); // fc1's output, the GELU's input
            keep(4 * t * h * bf, inLayerForward("core/fusions/fused_bias_gelu.py", 40), int(L.fc2)); // fc2's input
            const uint64_t fc2Out = r.alloc(t * h * bf, linearForward("core/transformer/mlp.py", 140), Pool::Temporary);
            keep(t * h * bf, inLayerForward("core/fusions/fused_bias_dropout.py", 28));
            r.free(fc2Out, inLayerForward("core/fusions/fused_bias_dropout.py", 28));
            p += 12;
        }
        // final_layernorm, the per-token loss and loss_func's scalar.
        const Frames finalNorm = Frames{{m + "core/fusions/fused_layer_norm.py", "forward", 171}} + kModuleCall + block;
        keep(t * f32, finalNorm);
        keep(t * f32, finalNorm);
        keep(t * h * bf, finalNorm, -1, int(p));
        keep(t * f32, Frames{{m + "core/models/common/language_module/language_module.py", "compute_language_model_loss", 52}} + model);
        const Frames loss = Frames{{kScript, "loss_func", 121}, {m + "core/pipeline_parallel/schedules.py", "forward_step", 291}} + schedule;
        const uint64_t masked = r.alloc(t * f32, loss, Pool::Temporary);
        keep(4, loss);
        r.free(masked, loss);
        for (uint64_t in : inputs) // forward_step's batch goes out of scope
            r.free(in, schedule);

        // backward_step -> custom_backward: the seed, then the engine's thread.
        const Frames backwardCall = Frames{{m + "core/pipeline_parallel/schedules.py", "custom_backward", 143},
                                           {m + "core/pipeline_parallel/schedules.py", "backward_step", 351}} +
                                    schedule;
        const uint64_t seed = r.alloc(4, backwardCall, Pool::Temporary);
        uint64_t flowing = r.alloc(4, engineAlloc("MulBackward0"), Pool::Temporary);
        r.free(seed, kEngineFree);
        for (size_t k = saved.size(); k-- > 0;) {
            const Saved& s = saved[k];
            // The gradient of what this saved block fed, made before the block is let go of.
            Frames where = engineAlloc("NativeLayerNormBackward0");
            if (s.weight >= 0) {
                where = pyBackward(layersPy, 531);
                if (!backwardWorkspace) {
                    r.alloc(8519680, cublas + Frames(where.begin() + int(kCppAlloc.size()), where.end()), Pool::Workspace);
                    backwardWorkspace = true;
                }
            } else if (s.norm >= 0) {
                where = pyBackward(normPy, 88);
            }
            const uint64_t g = r.alloc(s.bytes, where, Pool::Temporary);
            if (s.weight >= 0) {
                // The dummy wgrad (the GEMM added into main_grad) and grad_bias: AccumulateGrad makes
                // each param.grad, DDP's hook lets it go.
                for (size_t q : {size_t(s.weight), size_t(s.weight) + 1}) {
                    const uint64_t grad = r.alloc(params[q].numel * bf, pyBackward(layersPy, q == size_t(s.weight) ? 566 : 574), Pool::Gradient);
                    r.free(grad, hookFree);
                }
            }
            if (s.norm >= 0)
                for (size_t q : {size_t(s.norm), size_t(s.norm) + 1}) {
                    const uint64_t grad = r.alloc(params[q].numel * bf, pyBackward(normPy, 90), Pool::Gradient);
                    r.free(grad, hookFree);
                }
            r.free(s.addr, engineRelease(s.weight >= 0 || s.norm >= 0 ? "PyNode" : "MmBackward0"));
            r.free(flowing, kEngineFree);
            flowing = g;
        }
        r.free(flowing, kEngineFree);

        // optimizer.step(): main grads are views of the fp32 grad_data (.float() is a no-op), the
        // norm for clipping, then FusedAdam: exp_avg and exp_avg_sq per main parameter at the first step.
        const Frames megStep = Frames{{m + "core/optimizer/optimizer.py", "step_with_ready_grads", 478},
                                      {kTorch + "utils/_contextlib.py", "decorate_context", 116},
                                      {m + "core/optimizer/optimizer.py", "step", 521},
                                      {kTorch + "utils/_contextlib.py", "decorate_context", 116},
                                      {m + "training/training.py", "train_step", 722}} +
                               Frames(trainStep.begin() + 1, trainStep.end());
        const Frames clip = Frames{{m + "core/optimizer/clip_grads.py", "get_grad_norm_fp32", 104},
                                   {m + "core/optimizer/optimizer.py", "get_grad_norm", 151},
                                   {m + "core/optimizer/optimizer.py", "clip_grad_norm", 170},
                                   {m + "core/optimizer/optimizer.py", "step", 512},
                                   {kTorch + "utils/_contextlib.py", "decorate_context", 116},
                                   {m + "training/training.py", "train_step", 722}} +
                            Frames(trainStep.begin() + 1, trainStep.end());
        const uint64_t norm2 = r.alloc(4, clip, Pool::Temporary);
        r.free(norm2, clip);
        if (step == 0) {
            const std::string te = kSite + "transformer_engine/pytorch/optimizers/fused_adam.py";
            const Frames adam = Frames{{te, "step", 598}, {kTorch + "optim/optimizer.py", "wrapper", 484}} + megStep;
            for (int64_t n : mainNumel) {
                r.alloc(n * f32, Frames{{te, "_initialize_state", 361}, {te, "initialize_state", 390}} + adam, Pool::OptimizerState);
                r.alloc(n * f32, Frames{{te, "_initialize_state", 361}, {te, "initialize_state", 391}} + adam, Pool::OptimizerState);
            }
        }
    }
    SynthResult out = r.finish();
    out.stepsRun = 2;
    return out;
}

} // namespace poolscope::synth_detail
