// Fully sharded data-parallel stacks as short dumps with known pools: one rank of a PyTorch FSDP2
// job (torch.distributed.fsdp.fully_shard, per-parameter DTensor shards, MixedPrecisionPolicy
// param_dtype=bf16 / reduce_dtype=fp32) and of a DeepSpeed ZeRO stage 3 job (zero.Init, bf16). In
// both the parameters exist whole only around their module's use: what is kept across steps is
// 1/world of them, and the gradients and optimizer state are shards of that size, so a block with
// a parameter's size lives a few events and a kept block has a fraction of one. The allocation
// sites follow each library's own source (read from stored copies; the functions are what count,
// the line numbers are those of the versions read and only indicative):
//   torch/distributed/fsdp/_fully_shard/_fsdp_param.py (torch main, 010ae4a):
//     FSDPParam._init_sharded_param: padded_sharded_param = param_data.new_zeros(padded_sharded_size)
//       (on the meta device under the FSDP2 recipe; nn.Module.to_empty then makes each DTensor's
//       local shard, and reset_sharded_param at lazy init keeps it when no padding is needed);
//     init_all_gather_outputs: torch.empty(numel * world_size) per parameter at the first copy-out,
//     alloc_all_gather_outputs / free_unsharded_param: alloc_storage / free_storage (storage
//     resize_) of those per-parameter outputs: the unsharded parameters exist from pre_forward to
//     reshard;
//   _fsdp_collectives.py (010ae4a): foreach_all_gather: _get_param_all_gather_inputs' fast path
//     (param_dtype set) flat_foreach_copy_input = torch.empty(sum of shard numels, param_dtype)
//     (the bf16 cast of the shards), then all_gather_output = all_gather_comm.allocate(
//     (all_gather_input_numel * world_size,)) (DefaultAllocMixin: torch.empty), one flat buffer per
//     group; foreach_all_gather_copy_out: split_with_sizes_copy into the per-parameter outputs;
//     foreach_reduce: reduce_scatter_input = allocate(sum of padded unsharded numels, reduce_dtype),
//     chunk_cat of the unsharded gradients (bf16 -> fp32), unsharded_grads.clear() (the engine's
//     gradients go), reduce_output = allocate(input numel / world_size, reduce_dtype) in the
//     reduce-scatter stream; each sharded_param.grad is a view of reduce_output (orig_dtype fp32:
//     no cast);
//   _fsdp_param_group.py (002a76f): pre_forward -> unshard -> wait_for_unshard (in forward the
//     all-gather result is kept in comm_ctx.all_gather_state and freed by the next group's
//     wait_for_unshard, "implicit prefetching"; in backward freed right after the copy-out);
//     post_forward -> reshard; pre_backward -> unshard, _backward_prefetch (the previous group's
//     all-gather issued early); post_backward: reshard, comm_ctx.reduce_scatter_state = None (the
//     previous group's reduce-scatter input freed), foreach_reduce, the new input kept;
//   _fsdp_state.py: _post_forward of the root frees the last all-gather result;
//     _root_post_backward_final_callback frees the last reduce-scatter input.
//   deepspeed/runtime/zero/partition_parameters.py: zero.Init's wrapped tensor constructors make
//     each parameter whole on the device (bf16), _post_init_method -> partition -> _partition_param:
//     partitioned_tensor = torch.empty(partition_size) (ds_tensor), free_param(param) (param.data =
//     torch.empty(0)); all_gather_coalesced for one parameter: param_buffer = torch.empty(
//     ceil(ds_numel / world) * world), param.data a view of it;
//   deepspeed/runtime/zero/stage3.py (DeepSpeed master, 007cca6): DeepSpeedZeroOptimizer_Stage3.
//     __init__ -> _create_fp16_partitions_with_defragmentation -> defragment (every ds_tensor copied
//     to the host and freed, then device_buffer = cpu_buffer.to(device): lp_param_buffer, all
//     partitions flat); _setup_for_real_optimizer -> _create_fp32_partitions (converted =
//     fp16_flat.to(device, fp32); converted.clone().detach(): the fp32 master partition),
//     initialize_optimizer_states (gradient_buffer = torch.zeros(largest_numel, fp32) set as .grad
//     and dropped), the IPG bucket (bucket.buffer = torch.empty(reduce_bucket_size)),
//     grad_partitions_flat_buffer = torch.zeros(sum of partition numels, gradient_accumulation_dtype);
//     create_reduce_and_remove_grad_hooks (param.all_gather(), then param.partition(), per
//     parameter); reduce_independent_p_g_buckets_and_remove_grads -> __add_grad_to_ipg_bucket (a
//     gradient that fits is copied into the bucket and the engine's block let go of) and
//     __reduce_and_partition_ipg_grads -> __avg_scatter_grads -> reduce_scatter_coalesced (one
//     tensor of a size world divides: no copy) -> partition_grads (copied into
//     grad_partitions_flat_buffer, param.grad = None); independent_gradient_partition_epilogue;
//     step: _prepare_fp32_grad_for_sub_group (single_grad_partition = self.flatten(
//     averaged_gradients).to(fp32)), _optimizer_step (FusedAdam's exp_avg / exp_avg_sq on the fp32
//     partition at the first step), _release_sub_group (the fp32 gradient dropped);
//   deepspeed/runtime/zero/partitioned_param_coordinator.py: fetch_sub_module -> __all_gather_params
//     (pre-forward and pre-backward module hooks, parameter_offload.py), release_sub_module ->
//     __release_param -> param.partition() (post-forward and post-backward hooks).
// Pools (as FSDP1 and ZeRO-2 in synth_distributed.cpp): the shards, the flat bf16 partitions and
// every all-gathered (unsharded) parameter are parameter; the engine's unsharded gradients, the
// reduce-scatter input and output, the IPG bucket, the flat gradient partition and the fp32
// gradient are gradient; the fp32 master partition and the moments are optimizer state; the bf16
// cast of the shards and the fp32 conversion's intermediate are temporary.
// Streams are not modelled: FSDP2 makes its all-gather buffers in its copy-in stream and the
// reduce-scatter output in its reduce-scatter stream, ZeRO-3 its partitions in
// reduce_and_partition_stream; here everything is on stream 0.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"
#include "core/synth/synth_train_step.h"

#include <stdexcept>
#include <vector>

namespace poolscope::synth_detail {
namespace {

const Frames kLoop = {{kUser + "run.py", "main", 48}, {kUser + "run.py", "<module>", 77}};
const Frames kBackwardLoop = {{kUser + "run.py", "main", 50}, {kUser + "run.py", "<module>", 77}};

// A module hook's frames: the hook, then nn.Module._call_impl running it, inside the model's forward.
Frames moduleHook(const Frames& hook, int callImplLine, const Frames& modelForward)
{
    return hook + Frames{{kTorch + "nn/modules/module.py", "_call_impl", callImplLine}, {kTorch + "nn/modules/module.py", "_wrapped_call_impl", 1518}} +
           modelForward;
}

// --- PyTorch FSDP2 (fully_shard) -----------------------------------------------------------------

// One rank (0 of 4) of the FSDP2 recipe: the model built on the meta device, fully_shard(layer,
// mp_policy=MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)) per layer and on the root,
// model.to_empty(device="cuda"), reset_parameters() in place; AdamW (foreach) over the DTensor
// shards; zero_grad, forward, backward, step, two steps.
SynthResult fsdp2(int scale)
{
    Recorder r;
    const std::string f = kTorch + "distributed/fsdp/_fully_shard/";
    const std::string coll = f + "_fsdp_collectives.py", pg = f + "_fsdp_param_group.py", fp = f + "_fsdp_param.py", st = f + "_fsdp_state.py";
    const Net net = makeNet(512 * scale, 1024, 2, 4); // bf16 compute, fp32 sharded parameters
    const int64_t world = 4, bf = 2, f32 = 4;
    const size_t layers = net.layers(), weights = net.weightNumel.size();
    auto shardNumel = [&](size_t w) { return net.weightNumel[w] / world; }; // dim-0 chunks, no padding here
    auto groupNumel = [&](size_t l) { return net.weightNumel[3 * l] + net.weightNumel[3 * l + 1] + net.weightNumel[3 * l + 2]; };

    // model.to_empty(device="cuda"): nn.Module._apply(lambda t: torch.empty_like(t, device=device))
    // over the DTensor parameters fully_shard made on meta: each gets its local shard, fp32.
    const Frames toEmpty = Frames{{kTorch + "nn/modules/module.py", "<lambda>", 1208},
                                  {kTorch + "nn/modules/module.py", "_apply", 928},
                                  {kTorch + "nn/modules/module.py", "_apply", 901},
                                  {kTorch + "nn/modules/module.py", "to_empty", 1208},
                                  {kUser + "run.py", "main", 36}, {kUser + "run.py", "<module>", 77}};
    for (size_t w = 0; w < weights; ++w)
        r.alloc(shardNumel(w) * f32, kCppAlloc + toEmpty, Pool::Parameter);

    const Frames modelForward = Frames{{kUser + "model.py", "forward", 60}} + kModuleCall + kLoop;
    // The hooks fully_shard registers on each layer (FSDPState._pre_forward / _post_forward).
    auto preForward = [&](const Frames& inner) {
        return moduleHook(inner + Frames{{pg, "pre_forward", 331}, {st, "_pre_forward", 235}}, 1571, modelForward);
    };
    auto postForward = [&](const Frames& inner) {
        return moduleHook(inner + Frames{{pg, "post_forward", 343}, {st, "_post_forward", 268}}, 1603, modelForward);
    };
    // Backward hooks run on the engine's thread: a tensor pre-hook on the layer's output
    // (FSDPState._pre_backward) and RegisterPostBackwardFunction.backward on its inputs.
    auto preBackward = [&](const Frames& inner) {
        return inner + Frames{{pg, "pre_backward", 366}, {st, "_pre_backward", 300},
                              {"??", "torch::autograd::PyFunctionTensorPreHook::operator()(std::vector<at::Tensor>&&)", 0}} +
               kEngine;
    };
    auto postBackward = [&](const Frames& inner) {
        return inner + Frames{{pg, "post_backward", 384}, {pg, "backward", 720}, {kTorch + "autograd/function.py", "apply", 306},
                              {"??", "torch::autograd::PyNode::apply(std::vector<at::Tensor>&&)", 0}} +
               kEngine;
    };
    const Frames unshardAt = {{coll, "foreach_all_gather", 385}, {pg, "unshard", 274}};
    const Frames copyInAt = Frames{{coll, "_get_param_all_gather_inputs", 455}, {coll, "foreach_all_gather", 364}, {pg, "unshard", 274}};
    const Frames allocOutAt = Frames{{coll, "allocate", 56}} + unshardAt;
    // foreach_all_gather: the shards cast to bf16 into one flat input, the flat output of the whole
    // group; the input goes when foreach_all_gather returns (its list held the views).
    struct Gather {
        uint64_t output = 0;
    };
    auto unshard = [&](size_t l, const std::function<Frames(const Frames&)>& where) {
        const uint64_t in = r.alloc(groupNumel(l) / world * bf, kCppAlloc + where(copyInAt), Pool::Temporary);
        Gather g;
        g.output = r.alloc(groupNumel(l) * bf, kCppAlloc + where(allocOutAt), Pool::Parameter);
        r.free(in, kCppFree + where(unshardAt));
        return g;
    };
    // foreach_all_gather_copy_out: each parameter's all-gather output (its unsharded bf16 data).
    std::vector<uint64_t> unsharded(weights, 0);
    auto copyOut = [&](size_t l, bool first, const std::function<Frames(const Frames&)>& where) {
        for (size_t w = 3 * l; w < 3 * l + 3; ++w) {
            const Frames at = first ? Frames{{fp, "init_all_gather_outputs", 582}, {coll, "foreach_all_gather_copy_out", 506}}
                                    : Frames{{fp, "alloc_storage", 1054}, {fp, "alloc_all_gather_outputs", 794}, {coll, "foreach_all_gather_copy_out", 512}};
            unsharded[w] = r.alloc(net.weightNumel[w] * bf, kCppAlloc + where(at + Frames{{pg, "wait_for_unshard", 300}}), Pool::Parameter);
        }
    };
    auto reshard = [&](size_t l, const std::function<Frames(const Frames&)>& where) {
        for (size_t w = 3 * l; w < 3 * l + 3; ++w) {
            r.free(unsharded[w], kCppFree + where(Frames{{fp, "free_storage", 1060}, {fp, "free_unsharded_param", 799}, {fp, "to_sharded", 650},
                                                          {pg, "_to_sharded", 500}, {pg, "reshard", 320}}));
            unsharded[w] = 0;
        }
    };

    std::vector<uint64_t> sharded(layers, 0), perWeight(weights, 0), moments;
    bool firstGather = true;
    for (int step = 0; step < 2; ++step) {
        // optimizer.zero_grad(): set_to_none drops each DTensor .grad; a group's reduce-scatter
        // output goes with its last view.
        for (uint64_t& g : sharded)
            if (g) {
                r.free(g, kCppFree + Frames{{kTorch + "optim/optimizer.py", "zero_grad", 980}, {kUser + "run.py", "main", 46}, {kUser + "run.py", "<module>", 77}});
                g = 0;
            }
        Gather pendingForward;   // comm_ctx.all_gather_state: freed by the next group's wait_for_unshard
        Gather prefetched;       // the backward prefetch of the previous layer
        uint64_t pendingRsInput = 0; // comm_ctx.reduce_scatter_state
        Hooks hk;
        hk.preForward = [&](size_t l) {
            auto where = [&](const Frames& inner) { return preForward(inner); };
            const Gather g = unshard(l, where);
            if (pendingForward.output)
                r.free(pendingForward.output, kCppFree + preForward(Frames{{pg, "wait_for_unshard", 285}}));
            copyOut(l, firstGather, where);
            pendingForward = g;
        };
        hk.postForward = [&](size_t l) {
            reshard(l, [&](const Frames& inner) { return postForward(inner); });
            if (l + 1 == layers) {
                // The root's _post_forward: the last all-gather result let go of.
                r.free(pendingForward.output,
                       kCppFree + Frames{{st, "_post_forward", 280}, {kTorch + "nn/modules/module.py", "_call_impl", 1603},
                                         {kTorch + "nn/modules/module.py", "_wrapped_call_impl", 1518}} + kLoop);
                pendingForward = {};
                firstGather = false;
            }
        };
        hk.preBackward = [&](size_t l) {
            auto where = [&](const Frames& inner) { return preBackward(inner); };
            Gather g = prefetched.output ? prefetched : unshard(l, where);
            prefetched = {};
            copyOut(l, false, where);
            r.free(g.output, kCppFree + preBackward(Frames{{pg, "wait_for_unshard", 316}}));
            if (l > 0) // _backward_prefetch: the layer before's all-gather issued now
                prefetched = unshard(l - 1, [&](const Frames& inner) {
                    return preBackward(inner + Frames{{pg, "_prefetch_unshard", 470}, {pg, "_backward_prefetch", 455}});
                });
        };
        // AccumulateGrad on each unsharded parameter: its gradient, bf16, the parameter's shape.
        hk.makeGrad = [&](size_t w) { return r.alloc(net.weightNumel[w] * bf, accumulateGrad(), Pool::Gradient); };
        hk.gradReady = [&](size_t w, uint64_t g) { perWeight[w] = g; };
        hk.postBackward = [&](size_t l) {
            reshard(l, [&](const Frames& inner) { return postBackward(inner); });
            if (pendingRsInput)
                r.free(pendingRsInput, kCppFree + postBackward({}));
            const Frames reduce = {{coll, "foreach_reduce", 590}};
            pendingRsInput = r.alloc(groupNumel(l) * f32, kCppAlloc + postBackward(Frames{{coll, "allocate", 56}} + reduce), Pool::Gradient);
            for (size_t w = 3 * l; w < 3 * l + 3; ++w) { // unsharded_grads.clear()
                r.free(perWeight[w], kCppFree + postBackward(reduce));
                perWeight[w] = 0;
            }
            sharded[l] = r.alloc(groupNumel(l) / world * f32, kCppAlloc + postBackward(Frames{{coll, "allocate", 56}, {coll, "foreach_reduce", 614}}),
                                 Pool::Gradient);
        };
        hk.endBackward = [&] {
            r.free(pendingRsInput, kCppFree + Frames{{st, "_root_post_backward_final_callback", 330},
                                                     {"??", "torch::autograd::Engine::exec_post_processing(...)", 0}} +
                                       kEngine);
            pendingRsInput = 0;
        };
        const Frames backward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                       {kTorch + "autograd/__init__.py", "backward", 267},
                                       {kTorch + "_tensor.py", "backward", 521}} +
                                kBackwardLoop;
        forwardBackward(r, net, modelForward, backward, hk);

        // optimizer.step(): AdamW over the DTensor shards (fp32): exp_avg and exp_avg_sq per
        // parameter at the first step (zeros_like: the local shard's size), the foreach update's
        // scratch per parameter.
        const Frames stepAt = {{kUser + "run.py", "main", 52}, {kUser + "run.py", "<module>", 77}};
        r.annotate("Optimizer.step#AdamW.step", true);
        if (step == 0)
            for (size_t w = 0; w < weights; ++w) {
                const Frames init = optimFrames(kTorch + "optim/adamw.py", "_init_group", 120, 196, stepAt);
                moments.push_back(r.alloc(shardNumel(w) * f32, kCppAlloc + init, Pool::OptimizerState));
                moments.push_back(r.alloc(shardNumel(w) * f32, kCppAlloc + init, Pool::OptimizerState));
            }
        const Frames foreach = optimFrames(kTorch + "optim/adamw.py", "_multi_tensor_adamw", 640, 210, stepAt);
        std::vector<uint64_t> scratch;
        for (size_t w = 0; w < weights; ++w)
            scratch.push_back(r.alloc(shardNumel(w) * f32, kCppAlloc + foreach, Pool::Temporary));
        for (uint64_t s : scratch)
            r.free(s, kCppFree + foreach);
        r.annotate("Optimizer.step#AdamW.step", false);
    }
    return r.finish();
}

// --- DeepSpeed ZeRO stage 3 ----------------------------------------------------------------------

// One rank (0 of 4) of a model built under deepspeed.zero.Init and deepspeed.initialize(model,
// config={zero_optimization: {stage: 3, contiguous_gradients: true, reduce_bucket_size: "auto"
// (hidden_size^2, as the HF integration sets it), stage3_param_persistence_threshold: "auto"
// (10 * hidden_size: no weight here stays gathered)}, bf16, optimizer: Adam (FusedAdam)}): two steps.
SynthResult deepspeedZero3(int scale)
{
    Recorder r;
    const std::string ds = kSite + "deepspeed/";
    const std::string z = ds + "runtime/zero/stage3.py", pp = ds + "runtime/zero/partition_parameters.py",
                      coord = ds + "runtime/zero/partitioned_param_coordinator.py", off = ds + "runtime/zero/parameter_offload.py",
                      engine = ds + "runtime/engine.py", nvtx = ds + "utils/nvtx.py";
    const Net net = makeNet(512 * scale, 1024, 2, 2); // bf16 parameters and compute
    const int64_t world = 4, bf = 2, f32 = 4;
    const size_t layers = net.layers(), weights = net.weightNumel.size();
    const int64_t numel = net.numel(), bucketNumel = net.h * net.h;
    auto partition = [&](size_t w) { return net.weightNumel[w] / world; }; // ceil(ds_numel / world); no padding here

    // with deepspeed.zero.Init(): model = Model(). Each Linear's weight is made whole on the device
    // by Init's wrapped constructor, and partitioned by _post_init_method once the module is built.
    const Frames build = {{kUser + "model.py", "__init__", 14}, {pp, "wrapper", 459}, {kUser + "run.py", "main", 30}, {kUser + "run.py", "<module>", 77}};
    std::vector<uint64_t> dsTensor(weights, 0);
    for (size_t w = 0; w < weights; ++w) {
        const uint64_t whole = r.alloc(net.weightNumel[w] * bf,
                                       kCppAlloc + Frames{{pp, "wrapped_fn", 244}, {kTorch + "nn/modules/linear.py", "__init__", 98}, {pp, "wrapper", 459}} + build,
                                       Pool::Parameter);
        const Frames part = Frames{{pp, "_partition", 1540}, {pp, "partition", 1079}, {pp, "_post_init_method", 1010}, {pp, "wrapper", 463}} + build;
        dsTensor[w] = r.alloc(partition(w) * bf, kCppAlloc + Frames{{pp, "_partition_param", 1613}} + part, Pool::Parameter);
        r.free(whole, kCppFree + Frames{{pp, "free_param", 110}, {pp, "_partition_param", 1650}} + part);
    }

    // deepspeed.initialize -> DeepSpeedZeroOptimizer_Stage3.__init__.
    const Frames init = {{ds + "__init__.py", "initialize", 193}, {kUser + "run.py", "main", 38}, {kUser + "run.py", "<module>", 77}};
    const Frames zinit = Frames{{z, "__init__", 0}, {engine, "_configure_zero_optimizer", 1650}, {engine, "_configure_optimizer", 1256}, {engine, "__init__", 307}} + init;
    auto zAt = [&](const Frames& inner, int initLine) {
        Frames f = inner + zinit;
        f[inner.size()].line = initLine;
        return f;
    };
    // defragment: every partition copied to the host and let go of, then one device buffer of all
    // of them (lp_param_buffer, bf16).
    const Frames defrag = {{z, "defragment", 312}, {z, "_create_fp16_partitions_with_defragmentation", 480}};
    for (uint64_t& t : dsTensor) {
        r.free(t, kCppFree + zAt(defrag, 292));
        t = 0;
    }
    r.alloc(numel / world * bf, kCppAlloc + zAt(Frames{{z, "defragment", 321}, {z, "_create_fp16_partitions_with_defragmentation", 480}}, 292),
            Pool::Parameter);
    // _create_fp32_partitions: converted = flat.to(device, fp32); converted.clone().detach().
    const Frames fp32At = {{z, "_create_fp32_partitions", 690}, {z, "_setup_for_real_optimizer", 367}};
    const uint64_t converted = r.alloc(numel / world * f32, kCppAlloc + zAt(fp32At, 340), Pool::Temporary);
    r.alloc(numel / world * f32, kCppAlloc + zAt(Frames{{z, "_create_fp32_partitions", 692}, {z, "_setup_for_real_optimizer", 367}}, 340),
            Pool::OptimizerState);
    r.free(converted, kCppFree + zAt(Frames{{z, "_setup_for_real_optimizer", 367}}, 340));
    // initialize_optimizer_states: a zero fp32 gradient of the largest sub-group, set as .grad and
    // dropped again.
    const Frames states = {{z, "initialize_optimizer_states", 790}, {z, "_setup_for_real_optimizer", 374}};
    const uint64_t zeroGrad = r.alloc(numel / world * f32, kCppAlloc + zAt(states, 340), Pool::Gradient);
    r.free(zeroGrad, kCppFree + zAt(Frames{{z, "initialize_optimizer_states", 838}, {z, "_setup_for_real_optimizer", 374}}, 340));
    // The IPG bucket (bf16, reduce_bucket_size) and the flat gradient partition (fp32), kept.
    r.alloc(bucketNumel * bf, kCppAlloc + zAt(Frames{{z, "_setup_for_real_optimizer", 384}}, 340), Pool::Gradient);
    const uint64_t gradPartitions =
        r.alloc(numel / world * f32, kCppAlloc + zAt(Frames{{z, "_setup_for_real_optimizer", 391}}, 340), Pool::Gradient);
    (void)gradPartitions;
    // create_reduce_and_remove_grad_hooks: param.all_gather(), the hook registered, param.partition().
    const Frames hooks = {{z, "create_reduce_and_remove_grad_hooks", 935}};
    for (size_t w = 0; w < weights; ++w) {
        const uint64_t whole = r.alloc(
            net.weightNumel[w] * bf,
            kCppAlloc + zAt(Frames{{pp, "_allgather_params_coalesced", 1835}, {pp, "_all_gather", 1300}, {pp, "all_gather", 1060}} + hooks, 408),
            Pool::Parameter);
        r.free(whole, kCppFree + zAt(Frames{{pp, "free_param", 110}, {pp, "_partition_param", 1575}, {pp, "_partition", 1540}, {pp, "partition", 1079},
                                            {z, "create_reduce_and_remove_grad_hooks", 972}},
                                     408));
    }

    // The training loop: loss = engine(batch); engine.backward(loss); engine.step().
    const Frames forward = Frames{{engine, "forward", 1899}} + kModuleCall + kLoop;
    const Frames modelForward = Frames{{kUser + "model.py", "forward", 60}} + kModuleCall + forward;
    const Frames fetch = {{pp, "all_gather_coalesced", 1180}, {nvtx, "wrapped_fn", 18}, {coord, "__all_gather_params_", 470},
                          {coord, "__all_gather_params", 440}, {coord, "fetch_sub_module", 318}, {nvtx, "wrapped_fn", 18}};
    const Frames release = {{pp, "free_param", 110}, {pp, "_partition_param", 1575}, {pp, "_partition", 1540}, {pp, "partition", 1079},
                            {coord, "__release_param", 505}, {coord, "release_sub_module", 360}, {nvtx, "wrapped_fn", 18}};
    // Module hooks (parameter_offload.py) around each layer's forward; in backward, autograd
    // Functions applied to its outputs (PreBackwardFunctionForModule) and inputs
    // (PostBackwardFunctionModule), run on the engine's thread.
    auto fwdPre = [&](const Frames& inner) {
        return moduleHook(inner + Frames{{off, "pre_sub_module_forward_function", 480}, {off, "_pre_forward_module_hook", 366}}, 1571, modelForward);
    };
    auto fwdPost = [&](const Frames& inner) {
        return moduleHook(inner + Frames{{off, "post_sub_module_forward_function", 500}, {off, "_post_forward_module_hook", 395}}, 1603, modelForward);
    };
    auto onEngine = [&](const Frames& inner, const std::string& hook, const std::string& fn) {
        return inner + Frames{{off, hook, 520}, {off, fn, 420}, {off, "backward", 72}, {kTorch + "autograd/function.py", "apply", 306},
                              {"??", "torch::autograd::PyNode::apply(std::vector<at::Tensor>&&)", 0}} +
               kEngine;
    };
    std::vector<uint64_t> gathered(weights, 0);
    auto gather = [&](size_t l, const Frames& where) {
        for (size_t w = 3 * l; w < 3 * l + 3; ++w) // param_buffer, ceil(ds_numel / world) * world
            gathered[w] = r.alloc(partition(w) * world * bf, kCppAlloc + where, Pool::Parameter);
    };
    auto releaseLayer = [&](size_t l, const Frames& where) {
        for (size_t w = 3 * l; w < 3 * l + 3; ++w) {
            r.free(gathered[w], kCppFree + where);
            gathered[w] = 0;
        }
    };
    // The gradient hook (register_grad_hook: after AccumulateGrad), on the engine's thread.
    auto gradHook = [&](const Frames& inner) {
        return inner + Frames{{z, "reduce_independent_p_g_buckets_and_remove_grads", 1080}, {z, "reduce_ready_partitions_and_remove_grads", 1460},
                              {z, "reduce_partition_and_remove_grads", 960}, {nvtx, "wrapped_fn", 18},
                              {"??", "torch::autograd::PyFunctionTensorPostAccGradHooks::operator()(at::Tensor const&)", 0}} +
               kEngine;
    };
    std::vector<uint64_t> moments;
    for (int step = 0; step < 2; ++step) {
        // The IPG bucket's params: a gradient that fits is copied into the bucket (its engine block
        // let go of at once); one larger than the bucket stays the engine's block until reduced.
        std::vector<uint64_t> pendingGrads; // engine blocks waiting in the bucket
        int64_t inBucket = 0;
        auto reduceBucket = [&](const Frames& where) {
            // __reduce_and_partition_ipg_grads -> __avg_scatter_grads -> reduce_scatter_coalesced: one
            // tensor whose size world divides is reduced in place (no flat copy); partition_grads
            // copies this rank's part into grad_partitions_flat_buffer and sets param.grad = None.
            for (uint64_t g : pendingGrads)
                r.free(g, kCppFree + Frames{{z, "partition_grads", 1930}, {z, "__reduce_and_partition_ipg_grads", 1180}} + where);
            pendingGrads.clear();
            inBucket = 0;
        };
        Hooks hk;
        hk.preForward = [&](size_t l) { gather(l, fwdPre(fetch)); };
        hk.postForward = [&](size_t l) { releaseLayer(l, fwdPost(release)); };
        hk.preBackward = [&](size_t l) {
            gather(l, onEngine(fetch, "pre_sub_module_backward_function", "_run_before_backward_function"));
        };
        hk.postBackward = [&](size_t l) {
            releaseLayer(l, onEngine(release, "post_sub_module_backward_function", "_run_after_backward_function"));
        };
        hk.gradReady = [&](size_t w, uint64_t grad) {
            const int64_t n = net.weightNumel[w];
            if (inBucket + n > bucketNumel && inBucket > 0)
                reduceBucket(gradHook({}));
            if (inBucket + n <= bucketNumel) // new_grad_tensor.copy_(param.grad); param.grad.data = new_grad_tensor
                r.free(grad, kCppFree + gradHook(Frames{{z, "__add_grad_to_ipg_bucket", 1115}}));
            else
                pendingGrads.push_back(grad);
            inBucket += n;
        };
        // AccumulateGrad: each gathered parameter's gradient, bf16, the whole parameter's size.
        hk.makeGrad = [&](size_t w) { return r.alloc(net.weightNumel[w] * bf, accumulateGrad(), Pool::Gradient); };
        // independent_gradient_partition_epilogue, once every hook fired: the last bucket reduced.
        hk.endBackward = [&] {
            reduceBucket(gradHook(Frames{{z, "independent_gradient_partition_epilogue", 850}, {z, "update_hook_state_and_maybe_run_epilogue", 905}}));
        };
        const Frames backward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                       {kTorch + "autograd/__init__.py", "backward", 267},
                                       {kTorch + "_tensor.py", "backward", 521},
                                       {z, "backward", 2290},
                                       {engine, "backward", 2020}} +
                                kBackwardLoop;
        forwardBackward(r, net, modelForward, backward, hk);
        (void)layers;

        // engine.step() -> DeepSpeedZeroOptimizer_Stage3.step: the partition's gradients flattened to
        // fp32 (the master's .grad), FusedAdam on the fp32 partition (moments at the first step), the
        // fp32 gradient dropped, the bf16 partitions rewritten in place.
        const Frames engineStep = {{engine, "_take_model_step", 2142}, {engine, "step", 2226}, {kUser + "run.py", "main", 52}, {kUser + "run.py", "<module>", 77}};
        auto zStep = [&](const Frames& inner, int line) { return inner + Frames{{z, "step", line}} + engineStep; };
        const uint64_t fp32Grad =
            r.alloc(numel / world * f32, kCppAlloc + zStep(Frames{{z, "_prepare_fp32_grad_for_sub_group", 2120}, {z, "_prepare_sub_group", 2090}}, 2290),
                    Pool::Gradient);
        r.annotate("Optimizer.step#FusedAdam.step", true);
        if (moments.empty()) {
            const Frames adam =
                zStep(Frames{{ds + "ops/adam/fused_adam.py", "step", 169}, {kTorch + "optim/optimizer.py", "wrapper", 484}, {z, "_optimizer_step", 1000}}, 2297);
            moments.push_back(r.alloc(numel / world * f32, kCppAlloc + adam, Pool::OptimizerState)); // exp_avg
            moments.push_back(r.alloc(numel / world * f32, kCppAlloc + adam, Pool::OptimizerState)); // exp_avg_sq
        }
        r.annotate("Optimizer.step#FusedAdam.step", false);
        r.free(fp32Grad, kCppFree + zStep(Frames{{z, "_release_sub_group", 2160}}, 2305));
    }
    return r.finish();
}

} // namespace

SynthResult synthesizeShardedScenario(StackScenario scenario, int scale)
{
    switch (scenario) {
    case StackScenario::Fsdp2: return fsdp2(scale);
    case StackScenario::DeepSpeedZero3: return deepspeedZero3(scale);
    default: break;
    }
    throw std::invalid_argument("not a fully sharded scenario");
}

} // namespace poolscope::synth_detail
