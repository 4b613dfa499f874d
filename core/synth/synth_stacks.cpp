#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"

#include <stdexcept>
#include <unordered_map>

// The frames below follow the allocation sites of each stack's own source (vLLM cache_engine.py,
// model_runner.py, linear.py; torch parallel/replicate.py, parallel_apply.py; torch_geometric
// nn/data_parallel.py), innermost first. Megatron's scenario is synth_megatron.cpp.

namespace poolscope {
namespace {

using namespace synth_detail;

constexpr int kLayers = 4;

// --- vLLM ----------------------------------------------------------------------------------------

SynthResult vllm(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale;
    const std::string v = kSite + "vllm/";
    const Frames engine = {{v + "engine/llm_engine.py", "__init__", 311}, {v + "entrypoints/llm.py", "__init__", 177}, {"/srv/serve.py", "<module>", 12}};
    const Frames loadModel = Frames{{v + "model_executor/model_loader/loader.py", "load_model", 402},
                                    {v + "worker/model_runner.py", "load_model", 1012},
                                    {v + "worker/worker.py", "load_model", 183},
                                    {v + "executor/gpu_executor.py", "_init_executor", 41}} +
                             engine;
    // Weights: each layer's linear layers create their parameters (torch.empty in create_weights)
    // inside the model's constructors; the loader then reads each checkpoint tensor into a
    // temporary and copies it into place.
    std::vector<uint64_t> weights;
    for (int l = 0; l < kLayers; ++l)
        for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{3 * h, h}, {h, h}, {8 * h, h}, {h, 4 * h}}) {
            const Frames where = Frames{{v + "model_executor/layers/linear.py", "create_weights", 188},
                                        {v + "model_executor/layers/linear.py", "__init__", 301},
                                        {v + "model_executor/models/llama.py", "__init__", 152},
                                        {v + "model_executor/models/llama.py", "__init__", 262},
                                        {v + "model_executor/model_loader/loader.py", "_initialize_model", 171}} +
                                 loadModel;
            weights.push_back(r.alloc(rows * cols * 2, where, Pool::Parameter));
            const Frames read = Frames{{kSite + "safetensors/torch.py", "load_file", 313},
                                       {v + "model_executor/model_loader/weight_utils.py", "safetensors_weights_iterator", 420},
                                       {v + "model_executor/models/llama.py", "load_weights", 540}} +
                                loadModel;
            const uint64_t tmp = r.alloc(rows * cols * 2, read, Pool::Temporary);
            r.free(tmp, read);
        }
    // The profiling forward that sizes the KV cache: activations made and dropped.
    const Frames profile = Frames{{v + "worker/model_runner.py", "execute_model", 1543},
                                  {v + "worker/model_runner.py", "profile_run", 1251},
                                  {v + "worker/worker.py", "determine_num_available_blocks", 209},
                                  {v + "executor/gpu_executor.py", "determine_num_available_blocks", 70},
                                  {v + "engine/llm_engine.py", "_initialize_kv_caches", 402}} +
                           engine;
    const Frames layerForward = Frames{{v + "model_executor/models/llama.py", "forward", 230}} + kModuleCall +
                                Frames{{v + "model_executor/models/llama.py", "forward", 338}} + kModuleCall;
    const Frames cublas = Frames{{"??", "at::cuda::getCurrentCUDABlasHandle()", 0}, {"??", "at::cuda::blas::gemm<c10::BFloat16>(char, char, long, long, long, ...)", 0}} +
                          Frames{{v + "model_executor/layers/linear.py", "apply", 135}} + layerForward;
    r.alloc(8519680, kCppAlloc + cublas + profile, Pool::Workspace);
    for (int l = 0; l < kLayers; ++l) {
        const uint64_t act = r.alloc(2048 * 8 * h * 2, layerForward + profile, Pool::Temporary);
        r.free(act, layerForward + profile);
    }
    // The paged KV cache, one tensor per layer, from what gpu_memory_utilization leaves.
    const Frames cache = Frames{{v + "worker/cache_engine.py", "_allocate_kv_cache", 96},
                                {v + "worker/cache_engine.py", "__init__", 62},
                                {v + "worker/worker.py", "_init_cache_engine", 252},
                                {v + "worker/worker.py", "initialize_cache", 236},
                                {v + "executor/gpu_executor.py", "initialize_cache", 90},
                                {v + "engine/llm_engine.py", "_initialize_kv_caches", 418}} +
                         engine;
    for (int l = 0; l < kLayers; ++l)
        r.alloc(2 * 512 * 16 * h * 2, cache, Pool::KvCache);
    // Persistent input buffers of the model runner.
    const Frames runner = Frames{{v + "v1/worker/gpu_model_runner.py", "_make_buffer", 312},
                                 {v + "v1/worker/gpu_model_runner.py", "__init__", 247},
                                 {v + "v1/worker/gpu_worker.py", "init_device", 161}} +
                          engine;
    r.alloc(8192 * 4, runner, Pool::Input);
    r.alloc(8192 * 8, runner, Pool::Input);
    r.alloc(256 * 1024 * 4, Frames{{v + "v1/worker/block_table.py", "__init__", 33}, {v + "v1/worker/gpu_input_batch.py", "__init__", 84}} + runner,
            Pool::Input);
    // CUDA graphs, captured per batch size into their private pool: the captured forward's
    // intermediates stay in the pool, its output buffer stays allocated.
    const Frames capture = layerForward + Frames{{v + "worker/model_runner.py", "capture", 1731},
                                                 {v + "worker/model_runner.py", "capture_model", 1412},
                                                 {v + "worker/worker.py", "_warm_up_model", 291},
                                                 {v + "worker/worker.py", "initialize_cache", 240},
                                                 {v + "executor/gpu_executor.py", "initialize_cache", 90},
                                                 {v + "engine/llm_engine.py", "_initialize_kv_caches", 418}} +
                          engine;
    r.graphPool(true);
    for (int64_t bs : {8, 4, 2, 1}) {
        const uint64_t mid = r.alloc(bs * 64 * h * 2, capture, Pool::Other);
        r.alloc(bs * 1024 * h * 2, capture, Pool::Other); // the graph's static output
        r.free(mid, capture);
    }
    r.graphPool(false);
    // Decode steps run eagerly for a large batch: activations dropped per layer; the logits kept by
    // the engine until the next step has sampled from them.
    const Frames step = Frames{{v + "worker/model_runner.py", "execute_model", 1602},
                               {v + "worker/worker_base.py", "execute_model", 303},
                               {v + "executor/gpu_executor.py", "execute_model", 130},
                               {v + "engine/llm_engine.py", "step", 1321},
                               {v + "entrypoints/llm.py", "_run_engine", 911},
                               {v + "entrypoints/llm.py", "generate", 402},
                               {"/srv/serve.py", "<module>", 14}};
    const Frames caller = {{v + "engine/llm_engine.py", "step", 1330},
                           {v + "entrypoints/llm.py", "_run_engine", 911},
                           {v + "entrypoints/llm.py", "generate", 402},
                           {"/srv/serve.py", "<module>", 14}};
    uint64_t logits = 0;
    for (int s = 0; s < 3; ++s) {
        for (int l = 0; l < kLayers; ++l) {
            const uint64_t act = r.alloc(256 * 8 * h * 2, layerForward + step, Pool::Temporary);
            r.free(act, layerForward + step);
        }
        const uint64_t next = r.alloc(256 * 32000 * 4,
                                      Frames{{v + "model_executor/layers/logits_processor.py", "_get_logits", 98}} + kModuleCall + step,
                                      Pool::Activation);
        if (logits)
            r.free(logits, caller);
        logits = next;
    }
    return r.finish();
}

// --- DataParallel, out of memory -----------------------------------------------------------------

SynthResult dataParallelOom(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale;
    const std::string pyg = kSite + "torch_geometric/";
    const Frames train = {{"/home/user/gnn/train.py", "train", 41}, {"/home/user/gnn/train.py", "<module>", 88}};
    // The model's weights on device 0 predate recording.
    std::vector<uint64_t> weights;
    r.record(false);
    for (int l = 0; l < kLayers; ++l)
        weights.push_back(r.alloc(h * h * 4, {}, Pool::Parameter));
    r.record(true);
    const Frames dpForward = Frames{{pyg + "nn/data_parallel.py", "forward", 74}} + kModuleCall + train;
    // torch_geometric's DataParallel.scatter builds each device's Batch and moves it there.
    const Frames scatter = kCppAlloc +
                           Frames{{"??", "at::_ops::_to_copy::call(...)", 0},
                                  {"python_variable_methods.cpp", "torch::autograd::THPVariable_to(_object*, _object*, _object*)", 0},
                                  {pyg + "data/data.py", "<lambda>", 361},
                                  {pyg + "data/storage.py", "apply", 201},
                                  {pyg + "data/data.py", "to", 362},
                                  {pyg + "nn/data_parallel.py", "scatter", 96}} +
                           dpForward;
    std::vector<uint64_t> inputs;
    for (int k = 0; k < 3; ++k)
        inputs.push_back(r.alloc(int64_t(20000) * h * 4, scatter, Pool::Input));
    // replicate: the module's parameters broadcast to every device, this one included.
    const Frames replicate = kCppAlloc + Frames{{"??", "torch::cuda::broadcast_coalesced(...)", 0},
                                                {kTorch + "nn/parallel/comm.py", "broadcast_coalesced", 67},
                                                {kTorch + "nn/parallel/_functions.py", "forward", 23},
                                                {kTorch + "autograd/function.py", "apply", 553},
                                                {kTorch + "nn/parallel/replicate.py", "_broadcast_coalesced_reshape", 70},
                                                {kTorch + "nn/parallel/replicate.py", "replicate", 110},
                                                {kTorch + "nn/parallel/data_parallel.py", "replicate", 190}} +
                             dpForward;
    std::vector<uint64_t> replicas;
    for (int l = 0; l < kLayers; ++l)
        replicas.push_back(r.alloc(h * h * 4, replicate, Pool::Parameter));
    // The replica's forward in parallel_apply's worker thread: activations kept for backward, then
    // an op that makes a large buffer and fails on the next request.
    const Frames worker = {{kTorch + "nn/parallel/parallel_apply.py", "_worker", 83},
                           {"/usr/lib/python3.10/threading.py", "run", 953},
                           {"/usr/lib/python3.10/threading.py", "_bootstrap_inner", 1016},
                           {"/usr/lib/python3.10/threading.py", "_bootstrap", 973}};
    const Frames layer = kCppAlloc + Frames{{"??", "at::_ops::addmm::call(...)", 0},
                                            {"python_nn_functions.cpp", "torch::autograd::THPVariable_linear(_object*, _object*, _object*)", 0},
                                            {kTorch + "nn/modules/linear.py", "forward", 114}} +
                         kModuleCall + Frames{{"/home/user/gnn/model.py", "forward", 57}} + kModuleCall + worker;
    std::vector<uint64_t> saved;
    for (int l = 0; l < kLayers; ++l) {
        saved.push_back(r.alloc(int64_t(20000) * h * 4, layer, Pool::Activation));
        const uint64_t scratch = r.alloc(int64_t(20000) * h * 4, layer, Pool::Temporary);
        r.free(scratch, layer);
    }
    const uint64_t held = r.alloc(int64_t(20000) * 4 * h * 4, layer, Pool::Temporary); // a local of the failing forward
    r.oom(int64_t(20000) * 16 * h * 4, layer);
    // Teardown: parallel_apply's worker catches the exception; freeing its traceback drops the
    // frames' locals (tb_dealloc) and, with the outputs, the autograd graph (deleteNode releases
    // the saved tensors). The training loop's except block then drops the batch and the replicas.
    const Frames tracebackFree = kCppFree + Frames{{"python_variable.cpp", "THPVariable_subclass_dealloc(_object*)", 0},
                                                   {"??", "_Py_Dealloc", 0},
                                                   {"??", "frame_dealloc", 0},
                                                   {"??", "tb_dealloc", 0},
                                                   {kTorch + "nn/parallel/parallel_apply.py", "_worker", 86}} +
                                 Frames(worker.begin() + 1, worker.end());
    const Frames graphFree = kCppFree + Frames{{"??", "torch::autograd::SavedVariable::reset_data()", 0},
                                               {"??", "torch::autograd::generated::AddmmBackward0::release_variables()", 0},
                                               {"??", "torch::autograd::deleteNode(torch::autograd::Node*)", 0},
                                               {"python_variable.cpp", "THPVariable_subclass_dealloc(_object*)", 0},
                                               {"??", "tb_dealloc", 0},
                                               {kTorch + "nn/parallel/parallel_apply.py", "_worker", 86}} +
                             Frames(worker.begin() + 1, worker.end());
    r.free(held, tracebackFree);
    for (uint64_t a : saved)
        r.free(a, graphFree);
    const Frames except = kCppFree + Frames{{"python_variable.cpp", "THPVariable_subclass_dealloc(_object*)", 0},
                                            {"/home/user/gnn/train.py", "train", 47},
                                            {"/home/user/gnn/train.py", "<module>", 88}};
    for (uint64_t a : inputs)
        r.free(a, except);
    for (uint64_t a : replicas)
        r.free(a, except);
    return r.finish();
}

// --- No history ----------------------------------------------------------------------------------

SynthResult noHistory(int scale, bool stacks)
{
    Recorder r;
    r.record(false);
    const int64_t h = 512 * scale;
    const std::string d = kSite + "diffusers/";
    // Blocks older than recording: no stack, as history recording started after them.
    r.keepStacks(false);
    for (int l = 0; l < kLayers; ++l)
        r.alloc(h * h * 2 * 9, {}, Pool::Parameter);
    r.alloc(8519680, {}, Pool::Workspace);
    // What recording saw: weights moved to the device, and the forward's activations.
    r.keepStacks(stacks);
    const Frames toDevice = {{kTorch + "nn/modules/module.py", "convert", 1150},
                             {kTorch + "nn/modules/module.py", "_apply", 802},
                             {kTorch + "nn/modules/module.py", "_apply", 802},
                             {kTorch + "nn/modules/module.py", "to", 1160},
                             {"/home/user/edit/main.py", "main", 31},
                             {"/home/user/edit/main.py", "<module>", 90}};
    for (int l = 0; l < kLayers; ++l)
        r.alloc(h * h * 2, toDevice, Pool::Parameter);
    const Frames forward = Frames{{d + "models/attention_processor.py", "__call__", 1262}, {d + "models/attention_processor.py", "forward", 522}} +
                           kModuleCall + Frames{{"/home/user/edit/main.py", "main", 44}, {"/home/user/edit/main.py", "<module>", 90}};
    for (int k = 0; k < 2 * kLayers; ++k)
        r.alloc(32 * 32 * h * 2, forward, Pool::Activation);
    if (stacks) {
        r.record(true);
        r.snapshotEntry(); // what an OOM observer's dump of an old PyTorch holds
    }
    return r.finish();
}

} // namespace

std::optional<StackScenario> parseStackScenario(std::string_view name)
{
    for (StackScenario s : {StackScenario::Vllm, StackScenario::Megatron, StackScenario::DataParallelOom, StackScenario::NoHistory,
                            StackScenario::NoHistoryBare, StackScenario::KvGenerate, StackScenario::GradsMoved,
                            StackScenario::WorkspacePython, StackScenario::JvpForward, StackScenario::HandOptimizer,
                            StackScenario::ScriptAttention, StackScenario::DeepSpeedZero2, StackScenario::Fsdp, StackScenario::DdpBuckets, StackScenario::PeftLora,
                            StackScenario::Compiled, StackScenario::CudaGraphs,
                            StackScenario::PipelineOneFOneB, StackScenario::DpoReference, StackScenario::Gan,
                            StackScenario::BnbAdam8bit, StackScenario::BnbPagedAdam8bit, StackScenario::Qlora,
                            StackScenario::Fsdp2, StackScenario::DeepSpeedZero3,
                            StackScenario::GptqCalibration, StackScenario::EvalAccumulation, StackScenario::DitEma, StackScenario::DiffusersEma, StackScenario::EmaDeepcopy, StackScenario::OptimizerInBackward,
                            StackScenario::LightningClosure, StackScenario::GrpoRollout, StackScenario::DiffusersOffload})
        if (stackScenarioName(s) == name)
            return s;
    return std::nullopt;
}

std::string_view stackScenarioName(StackScenario s)
{
    switch (s) {
    case StackScenario::Vllm: return "vllm";
    case StackScenario::Megatron: return "megatron";
    case StackScenario::DataParallelOom: return "dp-oom";
    case StackScenario::NoHistory: return "no-history";
    case StackScenario::NoHistoryBare: return "no-history-bare";
    case StackScenario::KvGenerate: return "kv-generate";
    case StackScenario::GradsMoved: return "grads-moved";
    case StackScenario::WorkspacePython: return "workspace-python";
    case StackScenario::JvpForward: return "jvp-forward";
    case StackScenario::HandOptimizer: return "hand-optimizer";
    case StackScenario::ScriptAttention: return "script-attention";
    case StackScenario::DeepSpeedZero2: return "deepspeed-zero2";
    case StackScenario::Fsdp: return "fsdp";
    case StackScenario::DdpBuckets: return "ddp-buckets";
    case StackScenario::PeftLora: return "peft-lora";
    case StackScenario::Compiled: return "compiled";
    case StackScenario::CudaGraphs: return "cudagraphs";
    case StackScenario::PipelineOneFOneB: return "pipeline-1f1b";
    case StackScenario::DpoReference: return "dpo-reference";
    case StackScenario::Gan: return "gan";
    case StackScenario::BnbAdam8bit: return "bnb-adam8bit";
    case StackScenario::BnbPagedAdam8bit: return "bnb-paged-adam8bit";
    case StackScenario::Qlora: return "qlora";
    case StackScenario::Fsdp2: return "fsdp2";
    case StackScenario::DeepSpeedZero3: return "deepspeed-zero3";
    case StackScenario::GptqCalibration: return "gptq-calibration";
    case StackScenario::EvalAccumulation: return "trainer-eval-accumulation";
    case StackScenario::DitEma: return "dit-ema";
    case StackScenario::DiffusersEma: return "diffusers-ema";
    case StackScenario::EmaDeepcopy: return "ema-deepcopy";
    case StackScenario::OptimizerInBackward: return "torchtune-optimizer-in-backward";
    case StackScenario::LightningClosure: return "lightning-closure";
    case StackScenario::GrpoRollout: return "grpo-rollout";
    case StackScenario::DiffusersOffload: return "diffusers-offload";
    }
    return "";
}

SynthResult synthesizeScenario(StackScenario scenario, int scale)
{
    if (scale < 1 || scale > 64)
        throw std::invalid_argument("scale must be between 1 and 64");
    switch (scenario) {
    case StackScenario::Vllm: return vllm(scale);
    case StackScenario::Megatron: return megatronPretrain(scale);
    case StackScenario::DataParallelOom: return dataParallelOom(scale);
    case StackScenario::NoHistory: return noHistory(scale, true);
    case StackScenario::NoHistoryBare: return noHistory(scale, false);
    case StackScenario::KvGenerate:
    case StackScenario::GradsMoved:
    case StackScenario::WorkspacePython:
    case StackScenario::JvpForward:
    case StackScenario::HandOptimizer:
    case StackScenario::ScriptAttention: return synthesizeClassScenario(scenario, scale);
    case StackScenario::DeepSpeedZero2:
    case StackScenario::Fsdp:
    case StackScenario::DdpBuckets:
    case StackScenario::PeftLora: return synthesizeDistributedScenario(scenario, scale);
    case StackScenario::Compiled: return compiledTraining(scale);
    case StackScenario::CudaGraphs: return cudaGraphDecode(scale);
    case StackScenario::PipelineOneFOneB:
    case StackScenario::DpoReference:
    case StackScenario::Gan: return synthesizeMultiPassScenario(scenario, scale);
    case StackScenario::BnbAdam8bit:
    case StackScenario::BnbPagedAdam8bit:
    case StackScenario::Qlora: return synthesizeQuantizedScenario(scenario, scale);
    case StackScenario::Fsdp2:
    case StackScenario::DeepSpeedZero3: return synthesizeShardedScenario(scenario, scale);
    case StackScenario::GptqCalibration: return gptqCalibration(scale);
    case StackScenario::EvalAccumulation: return trainerEvalAccumulation(scale);
    case StackScenario::DitEma: return ditEmaTraining(scale);
    case StackScenario::DiffusersEma: return diffusersEmaTraining(scale);
    case StackScenario::EmaDeepcopy: return deepcopyEmaTraining(scale);
    case StackScenario::OptimizerInBackward: return optimizerInBackward(scale);
    case StackScenario::LightningClosure: return lightningClosure(scale);
    case StackScenario::GrpoRollout: return grpoRollout(scale);
    case StackScenario::DiffusersOffload: return diffusersOffload(scale);
    }
    throw std::invalid_argument("unknown scenario");
}

} // namespace poolscope
