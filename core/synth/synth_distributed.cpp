// Data-parallel training stacks as short dumps with known pools: one rank of a DeepSpeed ZeRO-2
// job, of an FSDP (FULL_SHARD, FlatParameter) job and of a DDP job with gradients as bucket views.
// Each keeps its gradients and optimizer state in blocks that are not one block per parameter (a
// flat partition, a shard, a bucket), so the classifier has to read them from the run's structure:
// what exists before the first forward, what the backward makes and the step reads, what lives
// across steps. The allocation sites follow each library's own source, innermost frame first:
//   DeepSpeed runtime/zero/stage_1_and_2.py (DeepSpeedZeroOptimizer: __init__ flattens each param
//     group into bit16_groups_flat and clones this rank's fp32 partition, single_partition_of_fp32_groups;
//     backward() makes the contiguous IPG bucket ipg_buffer = torch.empty(reduce_bucket_size);
//     reduce_independent_p_g_buckets_and_remove_grads copies each gradient into it and rebinds
//     grad.data; copy_grads_in_partition makes grads_in_partition; independent_gradient_partition_
//     epilogue keeps them in averaged_gradients and releases the IPG buffer; step() flattens
//     averaged_gradients into the fp32 single_grad_partition; FusedAdam makes exp_avg/exp_avg_sq
//     on the fp32 partition (ops/adam/fused_adam.py step, torch.zeros_like));
//   torch distributed/fsdp/_flat_param.py (flatten_tensors_into_flat_param's torch.cat, _get_shard's
//     clone, _alloc_padded_unsharded_flat_param / _free_unsharded_flat_param through
//     distributed/utils.py _alloc_storage / _free_storage), fsdp/_runtime_utils.py (_pre_forward_unshard,
//     _post_forward_reshard, _pre_backward_hook, _post_backward_hook -> _reduce_grad: new_sharded_grad =
//     torch.empty_like(chunks[0]), reduce_scatter, _saved_grad_shard);
//   torch csrc/distributed/c10d/reducer.cpp (Reducer::initialize_buckets: bucket.gradients =
//     at::empty({offset}); mark_variable_ready_dense: bucket_view.copy_(grad), grad = bucket_view when
//     gradient_as_bucket_view; rebuild_buckets at the second forward), nn/parallel/distributed.py
//     (_ddp_init_helper, _sync_module_states -> _broadcast_coalesced, _pre_forward).
// Line numbers are those of the versions read (DeepSpeed 0.14, torch 2.4); only the file and
// function names matter to a rule, and only public library names are used.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"
#include "core/synth/synth_train_step.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <vector>

namespace poolscope::synth_detail {
namespace {

// --- DeepSpeed ZeRO-2 ----------------------------------------------------------------------------

// One rank (0 of 4) of deepspeed.initialize(model, config={zero_optimization: {stage: 2,
// contiguous_gradients: true, overlap_comm: false}, bf16, optimizer: Adam}): two steps.
SynthResult deepspeedZero2(int scale)
{
    Recorder r;
    const std::string ds = kSite + "deepspeed/";
    const std::string z = ds + "runtime/zero/stage_1_and_2.py";
    const std::string engine = ds + "runtime/engine.py";
    const Net net = makeNet(512 * scale, 1024, 2, 2);
    const int64_t world = 4, rank = 0, bf = 2, f32 = 4;
    const int64_t numel = net.numel(), partition = numel / world;
    const int64_t bucket = numel * 10 / 36; // reduce_bucket_size (elements): a little over a layer
    const Frames init = Frames{{ds + "__init__.py", "initialize", 193}} + kMain;
    const Frames engineInit = Frames{{engine, "__init__", 262}} + init;
    // engine._configure_distributed_model: module.to(device), one block per parameter.
    std::vector<uint64_t> params;
    const Frames toDevice = Frames{{kTorch + "nn/modules/module.py", "convert", 1357},
                                   {kTorch + "nn/modules/module.py", "_apply", 957},
                                   {kTorch + "nn/modules/module.py", "_apply", 930},
                                   {kTorch + "nn/modules/module.py", "to", 1371},
                                   {engine, "_configure_distributed_model", 1178}} +
                            engineInit;
    for (size_t w = 0; w < net.weightNumel.size(); ++w)
        params.push_back(r.alloc(net.weightBytes(w), toDevice, Pool::Parameter));
    // DeepSpeedZeroOptimizer.__init__ (via engine._configure_zero_optimizer).
    const Frames zinit = Frames{{engine, "_configure_zero_optimizer", 1551}, {engine, "_configure_optimizer", 1256}, {engine, "__init__", 307}} + init;
    auto zAt = [&](const std::string& fn, int line) { return Frames{{z, fn, line}, {z, "__init__", 318}} + zinit; };
    // "move all the parameters to cpu": param.cpu_data = param.data.cpu();
    // param.data = torch.empty(1).to(param.device) -- each weight's block goes, a 1-element one comes.
    std::vector<uint64_t> stubs;
    for (uint64_t& p : params) {
        r.free(p, zAt("__init__", 321));
        stubs.push_back(r.alloc(4, zAt("__init__", 322), Pool::Parameter));
    }
    // bit16_groups_flat.append(flattened_buffer.to(device)): the whole group, flat, in bf16.
    r.alloc(numel * bf, zAt("__init__", 366), Pool::Parameter);
    // _update_model_bit16_weights: p.data = q.data (views of the flat buffer); the stubs go.
    for (uint64_t s : stubs)
        r.free(s, zAt("_update_model_bit16_weights", 520));
    // weights_partition = parallel_partitioned_bit16_groups[i][partition_id].to(device).clone().float()
    const uint64_t cloned = r.alloc(partition * bf, zAt("__init__", 394), Pool::Temporary);
    r.alloc(partition * f32, zAt("__init__", 394), Pool::OptimizerState); // single_partition_of_fp32_groups
    r.free(cloned, zAt("__init__", 394));
    // initialize_optimizer_states: a zero fp32 gradient partition set as .grad, dropped again.
    const Frames states = Frames{{z, "initialize_optimizer_states", 553}, {z, "__init__", 503}} + zinit;
    const uint64_t zeroGrad = r.alloc(partition * f32, states, Pool::Gradient);
    r.free(zeroGrad, Frames{{z, "initialize_optimizer_states", 567}, {z, "__init__", 503}} + zinit);

    // The training loop: loss = engine(batch); engine.backward(loss); engine.step().
    const Frames forward = Frames{{engine, "forward", 1899}} + kModuleCall + Frames{{kUser + "run.py", "main", 48}, {kUser + "run.py", "<module>", 77}};
    const Frames backwardEntry = Frames{{engine, "backward", 2033}, {kUser + "run.py", "main", 50}, {kUser + "run.py", "<module>", 77}};
    const Frames zBackward = Frames{{z, "backward", 2053}, {engine, "backward", 2020}, {kUser + "run.py", "main", 50}, {kUser + "run.py", "<module>", 77}};
    const Frames lossBackward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                       {kTorch + "autograd/__init__.py", "backward", 267},
                                       {kTorch + "_tensor.py", "backward", 521},
                                       {ds + "runtime/fp16/loss_scaler.py", "backward", 63},
                                       {z, "backward", 2067}} +
                                Frames(zBackward.begin() + 1, zBackward.end());
    // The gradient hook runs in the engine's thread: its Python frames over the engine's C++ ones.
    auto hook = [&](const std::string& fn, int line) {
        return Frames{{z, fn, line},
                      {z, "reduce_ready_partitions_and_remove_grads", 1494},
                      {z, "reduce_partition_and_remove_grads", 903},
                      {"??", "torch::autograd::PyFunctionTensorPostAccGradHooks::operator()(at::Tensor const&)", 0}} +
               kEngine;
    };
    auto epilogue = [&](const std::string& fn, int line) {
        return Frames{{z, fn, line},
                      {z, "independent_gradient_partition_epilogue", 815},
                      {z, "overlapping_partition_gradients_reduce_epilogue", 893},
                      {engine, "allreduce_gradients", 1960}} +
               backwardEntry;
    };
    const Frames engineStep = {{engine, "_take_model_step", 2142}, {engine, "step", 2226}, {kUser + "run.py", "main", 52}, {kUser + "run.py", "<module>", 77}};
    auto zStep = [&](int line) { return Frames{{z, "step", line}} + engineStep; };

    // This rank's partition is the first quarter of the flat group: layer 0's three weights.
    std::vector<bool> inPartition(net.weightNumel.size(), false);
    {
        int64_t at = 0;
        for (size_t w = 0; w < net.weightNumel.size(); ++w) {
            inPartition[w] = at >= rank * partition && at < (rank + 1) * partition;
            at += net.weightNumel[w];
        }
    }
    std::vector<uint64_t> moments;
    for (int step = 0; step < 2; ++step) {
        // engine.backward -> backward(): the contiguous IPG bucket, torch.empty(reduce_bucket_size,
        // dtype=bf16), made after the forward, before loss.backward() (startBackward below).
        uint64_t ipg = 0, gradsInPartition = 0;
        int64_t inBucket = 0;
        std::vector<size_t> bucketParams;
        auto reduceIpg = [&](const Frames& where) {
            // average_tensor -> allreduce_no_retain -> allreduce_bucket: tensor = self.flatten(bucket),
            // dist.reduce to the owner, copied back; then copy_grads_in_partition for this rank's.
            const Frames flat = Frames{{z, "allreduce_bucket", 1690}, {z, "allreduce_and_copy", 1722}, {z, "allreduce_no_retain", 1740},
                                       {z, "average_tensor", 1131}, {z, "reduce_ipg_grads", 1347}} +
                                where;
            const uint64_t tmp = r.alloc(inBucket * bf, flat, Pool::Temporary);
            r.free(tmp, flat);
            for (size_t w : bucketParams)
                if (inPartition[w] && !gradsInPartition)
                    gradsInPartition = r.alloc(partition * bf, Frames{{z, "copy_grads_in_partition", 1267}, {z, "reduce_ipg_grads", 1377}} + where,
                                               Pool::Gradient);
            bucketParams.clear();
            inBucket = 0;
        };
        Hooks hk;
        hk.startBackward = [&] { ipg = r.alloc(bucket * bf, zBackward, Pool::Gradient); };
        hk.gradReady = [&](size_t w, uint64_t grad) {
            const Frames ipgFrames = hook("reduce_independent_p_g_buckets_and_remove_grads", 950);
            if (inBucket + net.weightNumel[w] > bucket)
                reduceIpg(Frames(ipgFrames.begin(), ipgFrames.end()));
            // new_grad_tensor.copy_(grad.view(-1)); grad.data = new_grad_tensor.data.view_as(grad)
            r.free(grad, hook("reduce_independent_p_g_buckets_and_remove_grads", 973));
            inBucket += net.weightNumel[w];
            bucketParams.push_back(w);
        };
        forwardBackward(r, net, forward, lossBackward, hk);
        // The epilogue: the last bucket reduced, averaged_gradients keep grads_in_partition's views,
        // _release_ipg_buffers drops the bucket, zero_grad(set_to_none=True) the other views.
        reduceIpg(epilogue("reduce_ipg_grads", 797));
        r.free(ipg, epilogue("_release_ipg_buffers", 545));
        // step(): the fp32 gradient of the partition, flatten(averaged_gradients).to(fp32).
        const uint64_t flat = r.alloc(partition * bf, zStep(1880), Pool::Temporary);
        const uint64_t fp32Grad = r.alloc(partition * f32, zStep(1880), Pool::Gradient);
        r.free(flat, zStep(1880));
        r.free(gradsInPartition, zStep(1889)); // averaged_gradients[i] = None
        // The wrapped optimizer's step on single_partition_of_fp32_groups: FusedAdam makes its
        // moments with torch.zeros_like on the first step.
        r.annotate("Optimizer.step#FusedAdam.step", true);
        const Frames adam = Frames{{ds + "ops/adam/fused_adam.py", "step", 169},
                                   {kTorch + "optim/optimizer.py", "wrapper", 484},
                                   {z, "_optimizer_step", 1819},
                                   {z, "step", 1893}} +
                            engineStep;
        if (moments.empty()) {
            moments.push_back(r.alloc(partition * f32, adam, Pool::OptimizerState)); // exp_avg
            moments.push_back(r.alloc(partition * f32, adam, Pool::OptimizerState)); // exp_avg_sq
        }
        r.annotate("Optimizer.step#FusedAdam.step", false);
        // single_partition_of_fp32_groups[i].grad = None; bit16 partition copied in place and
        // all-gathered into bit16_groups_flat (no new blocks).
        r.free(fp32Grad, zStep(1899));
    }
    return r.finish();
}

// --- FSDP (FULL_SHARD, FlatParameter) ------------------------------------------------------------

// One rank (0 of 4) of FSDP(model, auto_wrap_policy=one unit per layer, device_id=rank) in fp32,
// with AdamW over the shards; two steps.
SynthResult fsdp(int scale)
{
    Recorder r;
    const std::string f = kTorch + "distributed/fsdp/";
    const Net net = makeNet(512 * scale, 1024, 4, 4);
    const int64_t world = 4;
    const Frames wrap = Frames{{f + "fully_sharded_data_parallel.py", "__init__", 509}} + kMain;
    // Per unit (a layer, wrapped by _recursive_wrap): _init_param_handle_from_module moves the
    // layer to the device, FlatParamHandle flattens its parameters with torch.cat, shard() keeps
    // this rank's chunk (clone) and frees the full flat parameter and the originals.
    const Frames unitInit = Frames{{f + "_init_utils.py", "_init_param_handle_from_module", 605},
                                   {f + "fully_sharded_data_parallel.py", "__init__", 483},
                                   {f + "wrap.py", "_wrap", 494},
                                   {f + "wrap.py", "_recursive_wrap", 562}} +
                            wrap;
    std::vector<uint64_t> shards;
    std::vector<int64_t> unitNumel;
    for (size_t l = 0; l < net.layers(); ++l) {
        std::vector<uint64_t> originals;
        const Frames move = Frames{{kTorch + "nn/modules/module.py", "convert", 1357},
                                   {kTorch + "nn/modules/module.py", "_apply", 957},
                                   {kTorch + "nn/modules/module.py", "to", 1371},
                                   {f + "_init_utils.py", "_move_module_to_device", 934}} +
                            unitInit;
        int64_t n = 0;
        for (size_t w = 3 * l; w < 3 * l + 3; ++w) {
            originals.push_back(r.alloc(net.weightBytes(w), move, Pool::Parameter));
            n += net.weightNumel[w];
        }
        unitNumel.push_back(n);
        const Frames handle = Frames{{f + "_flat_param.py", "_init_flat_param_and_metadata", 680}, {f + "_flat_param.py", "__init__", 560},
                                     {f + "_init_utils.py", "_init_param_handle_from_params", 630}} +
                              unitInit;
        const uint64_t full = r.alloc(n * 4, Frames{{f + "_flat_param.py", "flatten_tensors_into_flat_param", 810}} + handle, Pool::Parameter);
        const Frames shard = Frames{{f + "_flat_param.py", "_get_shard", 975}, {f + "_flat_param.py", "_init_shard_metadata", 905},
                                    {f + "_flat_param.py", "shard", 915}, {f + "_init_utils.py", "_init_param_handle_from_params", 633}} +
                             unitInit;
        shards.push_back(r.alloc(n / world * 4, shard, Pool::Parameter));
        r.free(full, shard); // flat_param.set_(sharded_flat_param)
        for (uint64_t o : originals)
            r.free(o, Frames{{f + "_flat_param.py", "_use_sharded_views", 1878}, {f + "_flat_param.py", "shard", 931}} + unitInit);
    }
    // The training loop; the root's forward runs _lazy_init on the first call.
    const Frames loopAt = {{kUser + "run.py", "main", 48}, {kUser + "run.py", "<module>", 77}};
    const Frames rootForward = Frames{{f + "fully_sharded_data_parallel.py", "forward", 849}} + kModuleCall + loopAt;
    const Frames backward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                   {kTorch + "autograd/__init__.py", "backward", 267},
                                   {kTorch + "_tensor.py", "backward", 521},
                                   {kUser + "run.py", "main", 50},
                                   {kUser + "run.py", "<module>", 77}};
    // A unit's forward: FSDP's forward around the layer, inside the model's forward.
    auto unitForward = [&](const std::string& file, const std::string& fn, int line) {
        return Frames{{file, fn, line}, {f + "fully_sharded_data_parallel.py", "forward", 849}} + kModuleCall + inModel(60, rootForward);
    };
    auto allocStorage = [&](const Frames& caller) {
        return Frames{{kTorch + "distributed/utils.py", "_alloc_storage", 186},
                      {f + "_flat_param.py", "_alloc_padded_unsharded_flat_param", 1404},
                      {f + "_flat_param.py", "unshard", 1371},
                      {f + "_runtime_utils.py", "_unshard", 300}} +
               caller;
    };
    auto freeStorage = [&](const Frames& caller) {
        return Frames{{kTorch + "distributed/utils.py", "_free_storage", 168},
                      {f + "_flat_param.py", "_free_unsharded_flat_param", 1700},
                      {f + "_flat_param.py", "reshard", 1667},
                      {f + "_runtime_utils.py", "_reshard", 335}} +
               caller;
    };
    // Backward hooks run in the engine's thread: their Python frames over the engine's C++ ones.
    auto inHook = [&](const std::string& fn, int line) {
        return Frames{{f + "_runtime_utils.py", fn, line}, {"??", "torch::autograd::PyFunctionPreHook::operator()(...)", 0}} + kEngine;
    };
    std::vector<uint64_t> unsharded(net.layers(), 0), grads(net.layers(), 0), perWeight(net.weightNumel.size(), 0);
    bool lazyInit = true;
    for (int step = 0; step < 2; ++step) {
        // optimizer.zero_grad(set_to_none=True): the sharded gradients go.
        for (uint64_t& g : grads)
            if (g) {
                r.free(g, Frames{{kTorch + "optim/optimizer.py", "zero_grad", 980}} + kMain);
                g = 0;
            }
        if (lazyInit) {
            // _lazy_init -> init_flat_param_attributes: _full_param_padded = torch.empty(padded
            // unsharded numel), its storage freed at once (_free_storage) until an all-gather needs it.
            const Frames attrs = Frames{{f + "_flat_param.py", "init_flat_param_attributes", 1078},
                                        {f + "_runtime_utils.py", "_share_state_and_init_handle_attrs", 200},
                                        {f + "_runtime_utils.py", "_lazy_init", 139},
                                        {f + "_runtime_utils.py", "_root_pre_forward", 530}} +
                                 rootForward;
            for (int64_t n : unitNumel) {
                const uint64_t padded = r.alloc(n * 4, attrs, Pool::Parameter);
                r.free(padded, Frames{{kTorch + "distributed/utils.py", "_free_storage", 168}} + attrs);
            }
            lazyInit = false;
        }
        Hooks hk;
        hk.preForward = [&](size_t l) {
            unsharded[l] = r.alloc(unitNumel[l] * 4,
                                   allocStorage(unitForward(f + "_runtime_utils.py", "_pre_forward_unshard", 484)), Pool::Parameter);
        };
        hk.postForward = [&](size_t l) {
            r.free(unsharded[l], freeStorage(unitForward(f + "_runtime_utils.py", "_post_forward_reshard", 530)));
            unsharded[l] = 0;
        };
        hk.preBackward = [&](size_t l) {
            unsharded[l] = r.alloc(unitNumel[l] * 4, allocStorage(inHook("_pre_backward_hook", 700)), Pool::Parameter);
        };
        // Each weight's gradient is a view's: MmBackward's output, gathered by the unit's
        // SplitWithSizesBackward into one unsharded gradient of the FlatParameter.
        hk.makeGrad = [&](size_t w) { return r.alloc(net.weightBytes(w), engineAlloc("MmBackward0"), Pool::Gradient); };
        hk.gradReady = [&](size_t w, uint64_t g) { perWeight[w] = g; };
        hk.postBackward = [&](size_t l) {
            const uint64_t flat = r.alloc(unitNumel[l] * 4, engineAlloc("SplitWithSizesBackward0"), Pool::Gradient);
            for (size_t w = 3 * l; w < 3 * l + 3; ++w) {
                r.free(perWeight[w], kEngineFree);
                perWeight[w] = 0;
            }
            // _post_backward_hook (on the FlatParameter's AccumulateGrad): reshard, then _reduce_grad:
            // new_sharded_grad = torch.empty_like(chunks[0]); reduce_scatter; _saved_grad_shard.
            r.free(unsharded[l], freeStorage(inHook("_post_backward_reshard", 760)));
            unsharded[l] = 0;
            grads[l] = r.alloc(unitNumel[l] / world * 4,
                               Frames{{f + "_runtime_utils.py", "_get_reduce_scatter_tensors", 887}, {f + "_runtime_utils.py", "_reduce_grad", 808}} +
                                   inHook("_post_backward_hook", 744),
                               Pool::Gradient);
            r.free(flat, inHook("_post_backward_hook", 752)); // the unsharded gradient dropped
        };
        forwardBackward(r, net, unitForward(kUser + "model.py", "forward", 30), backward, hk);
        // optimizer.step(): AdamW over the FlatParameters (shards), moments on the first step.
        std::vector<int64_t> shardBytes;
        for (size_t l = 0; l < net.layers(); ++l)
            shardBytes.push_back(unitNumel[l] / world * 4);
        adamwStep(r, shardBytes, step == 0, kMain);
        (void)shards;
    }
    return r.finish();
}

// --- DDP with gradients as bucket views ----------------------------------------------------------

// DistributedDataParallel(model.to(rank), gradient_as_bucket_view=True) in fp32 with AdamW; three
// steps (the buckets are rebuilt at the second forward, in the order the first backward readied
// the gradients).
SynthResult ddpBuckets(int scale)
{
    Recorder r;
    const std::string d = kTorch + "nn/parallel/distributed.py";
    const Net net = makeNet(512 * scale, 1024, 4, 4);
    std::vector<uint64_t> params;
    for (size_t w = 0; w < net.weightNumel.size(); ++w)
        params.push_back(r.alloc(net.weightBytes(w), moveFrames(kApplyParam), Pool::Parameter));
    const Frames ddpInit = Frames{{d, "__init__", 822}} + kMain;
    // _sync_module_states -> _sync_params_and_buffers -> dist._broadcast_coalesced: the states
    // flattened into one buffer (up to 250 MiB), broadcast from rank 0 and copied back.
    const Frames broadcast = kCppAlloc + Frames{{"??", "torch::utils::flatten_dense_tensors(c10::ArrayRef<at::Tensor>)", 0},
                                                {"??", "c10d::broadcast_coalesced(...)", 0},
                                                {kTorch + "distributed/utils.py", "_sync_params_and_buffers", 311},
                                                {kTorch + "distributed/utils.py", "_sync_module_states", 297},
                                                {d, "__init__", 819}} +
                             kMain;
    const uint64_t flat = r.alloc(net.numel() * 4, broadcast, Pool::Temporary);
    r.free(flat, broadcast);
    // Reducer::initialize_buckets: parameters in reverse order, bucket limits 1 MiB for the first
    // (dist._DEFAULT_FIRST_BUCKET_BYTES) then 25 MiB (bucket_cap_mb); a bucket closes once it
    // reaches its limit. bucket.gradients = at::empty({offset}): one flat buffer per bucket.
    std::vector<int64_t> bucketBytes;
    {
        int64_t size = 0, limit = int64_t(1) << 20;
        for (size_t w = net.weightNumel.size(); w-- > 0;) {
            size += net.weightBytes(w);
            if (size >= limit) {
                bucketBytes.push_back(size);
                size = 0;
                limit = int64_t(25) << 20;
            }
        }
        if (size > 0)
            bucketBytes.push_back(size);
    }
    auto buckets = [&](const Frames& caller) {
        const Frames at = kCppAlloc + Frames{{"??", "c10d::Reducer::initialize_buckets(std::vector<std::vector<unsigned long>>)", 0}} + caller;
        std::vector<uint64_t> out;
        for (int64_t b : bucketBytes)
            out.push_back(r.alloc(b, at, Pool::Gradient));
        return out;
    };
    std::vector<uint64_t> bucket = buckets(Frames{{"??", "c10d::Reducer::Reducer(...)", 0},
                                                  {"??", "pybind11::cpp_function::dispatcher(_object*, _object*, _object*)", 0},
                                                  {d, "_ddp_init_helper", 1262},
                                                  {d, "__init__", 827}} +
                                           kMain);
    const Frames loopAt = {{kUser + "run.py", "main", 48}, {kUser + "run.py", "<module>", 77}};
    const Frames forward = Frames{{d, "_run_ddp_forward", 1413}, {d, "forward", 1593}} + kModuleCall + loopAt;
    const Frames backward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                   {kTorch + "autograd/__init__.py", "backward", 267},
                                   {kTorch + "_tensor.py", "backward", 521},
                                   {kUser + "run.py", "main", 50},
                                   {kUser + "run.py", "<module>", 77}};
    // The reducer's autograd hook copies each gradient into its bucket view and rebinds .grad to
    // the view: the engine's block goes (C++ frames only: the hook is the reducer's own).
    const Frames markReady = kCppFree + Frames{{"??", "c10d::Reducer::mark_variable_ready_dense(unsigned long)", 0},
                                               {"??", "c10d::Reducer::mark_variable_ready(unsigned long)", 0},
                                               {"??", "c10d::Reducer::autograd_hook(unsigned long)", 0}} +
                             kEngine;
    for (int step = 0; step < 3; ++step) {
        if (step == 1) {
            // _pre_forward: reducer._rebuild_buckets() after the first iteration frees the old
            // buckets (buckets_.clear()) and makes them again in the ready order.
            const Frames rebuild = Frames{{"??", "c10d::Reducer::rebuild_buckets()", 0}, {d, "_pre_forward", 1493}, {d, "forward", 1590}} + kModuleCall + loopAt;
            for (uint64_t b : bucket)
                r.free(b, kCppFree + rebuild);
            bucket = buckets(rebuild);
        }
        Hooks hk;
        hk.gradReady = [&](size_t, uint64_t g) { r.free(g, markReady); };
        forwardBackward(r, net, inModel(30, forward), backward, hk);
        adamwStep(r, weightBytes(net), step == 0, kMain);
        // optimizer.zero_grad(): .grad = None drops the views; the buckets stay with the reducer.
    }
    return r.finish();
}


} // namespace

SynthResult synthesizeDistributedScenario(StackScenario scenario, int scale)
{
    switch (scenario) {
    case StackScenario::DeepSpeedZero2: return deepspeedZero2(scale);
    case StackScenario::Fsdp: return fsdp(scale);
    case StackScenario::DdpBuckets: return ddpBuckets(scale);
    case StackScenario::PeftLora: return peftLora(scale); // synth_finetune.cpp
    default: break;
    }
    throw std::invalid_argument("not a distributed-training scenario");
}

} // namespace poolscope::synth_detail
