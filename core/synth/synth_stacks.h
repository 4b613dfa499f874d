#pragma once
#include "core/synth/synth.h"

#include <optional>
#include <string_view>

namespace poolscope {

// Short dumps in the shape the stacks of real jobs leave, each with the true pool of every allocation
// (SynthResult::truth), as fixtures for the classifier's rules and the verdict's honesty:
//   Vllm:           an inference engine's start-up and decode steps (weights from create_weights and
//                   the loader, a profiling forward, the paged KV cache from CacheEngine, persistent
//                   runner buffers, CUDA graphs captured into a private pool (1,0)), Python frames;
//   Megatron:       a Megatron-LM pretrain_gpt.py job from a git checkout, as Megatron-Core's source
//                   makes it (synth_megatron.cpp): layers built, param_data and fp32 grad_data made,
//                   the parameters moved in, the distributed optimizer's fp32 main parameters, two
//                   train_steps (custom_backward, dummy wgrads dropped by DDP's hook, TE FusedAdam's
//                   moments at the first step), C++ and Python frames;
//   DataParallelOom: DataParallel on device 0 (torch_geometric's scatter, replicate, a forward in
//                   parallel_apply's worker) running out of memory, then the exception's teardown
//                   (deleteNode under tb_dealloc, tb_dealloc alone), with C++ frames;
//   NoHistory:      an OOM observer's dump: one snapshot entry and the final segments, some blocks
//                   with the stack their history kept (weights, activations), some without (older
//                   than recording), and a cuBLAS workspace of the default size without frames;
//   NoHistoryBare:  the same blocks with no stack at all (segments only).
// The classes of issue 22 (synth_classes.cpp), each a pool the frames do not name:
//   KvGenerate:     generate() under no_grad with the user's own KV cache class, torch.cat-ing
//                   each layer's keys and values per token (the old ones freed in the next forward),
//                   for two batches (the first's cache let go of when generate() returns);
//   GradsMoved:     a model moved with .to() while its parameters held .grad, then an evaluation
//                   forward and an OOM (nn.Module._apply moves each gradient from a line of its own);
//   WorkspacePython: a Windows capture (Python frames only) of a sampling loop whose first matmul
//                   makes cuBLAS's default workspace under linear.py's frames;
//   JvpForward:     a training step whose forward calls torch.autograd.functional.jvp (outputs
//                   made by the engine inside the forward and kept by it), then backward, AdamW;
//   HandOptimizer:  two steps with the user's own Adam (a torch.optim.Optimizer subclass): moments
//                   made in its constructor, m and v replaced and p.data rebuilt twice in step;
//   ScriptAttention: a script-level attention (no nn.Module) whose exp output the engine frees in
//                   backward.
// Data-parallel training stacks (synth_distributed.cpp), one rank each, gradients and optimizer
// state in blocks that are not one per parameter:
//   DeepSpeedZero2: deepspeed.initialize with ZeRO stage 2 (bf16 flat parameter group, this rank's
//                   fp32 master partition, the contiguous IPG bucket made per backward, the
//                   gradient partition kept in averaged_gradients, its fp32 copy in step, FusedAdam's
//                   moments on the partition), two steps;
//   Fsdp:           FSDP FULL_SHARD with one FlatParameter unit per layer (shards made before the
//                   first forward, the unsharded parameter gathered and freed per unit in forward
//                   and backward, each unit's unsharded gradient reduce-scattered into a shard,
//                   AdamW's moments on the shards), two steps;
//   DdpBuckets:     DDP with gradient_as_bucket_view (bucket buffers made in the constructor and
//                   rebuilt at the second forward; each engine-made gradient copied into its view
//                   and dropped), AdamW, three steps;
//   PeftLora:       a frozen bf16 base from from_pretrained with PEFT LoRA adapters on q and v and
//                   transformers' gradient checkpointing (each layer's input kept, recomputed in
//                   backward): gradients and AdamW state for the adapters only, two steps.
// torch.compile'd stacks (synth_compiled.cpp), each pass one Inductor-generated call(args):
//   Compiled:       a nanoGPT-style training step of a compiled GPT under bf16 autocast (AOTAutograd's
//                   forward returning the saved activations, its backward on the engine's thread
//                   freeing them and making the gradients AccumulateGrad steals), AdamW, three steps;
//   CudaGraphs:     transformers' static-cache generate() whose decoding forward is compiled with
//                   mode="reduce-overhead": a warm-up and a recording in the CUDA graph tree's
//                   private pool, then replays.
// Training stacks whose step is not one forward then one backward of one model (synth_multipass.cpp):
//   PipelineOneFOneB: torch.distributed.pipelining's Schedule1F1B on a middle stage (receive buffers
//                   per micro-batch, several micro-batches' forwards alive, input gradients kept in
//                   the buffers' .grad until the next step), AdamW, two steps;
//   DpoReference:   trl's DPOTrainer with a frozen reference model (its forward under no_grad between
//                   the policy's forward and backward; no gradient or state for it), two steps;
//   Gan:            the DCGAN example's loop: two models, two Adams, D and G steps alternating.
// Quantised fine-tuning (synth_quantized.cpp), state and weights not of a parameter's size:
//   BnbAdam8bit:    an fp32 model trained with bitsandbytes' AdamW8bit (uint8 state1/state2 and
//                   fp32 absmax per 2048-element block for parameters of 4096 elements or more,
//                   two fp32 states under that, the quantisation maps), three steps;
//   BnbPagedAdam8bit: the same with PagedAdamW8bit (the states of parameters of 1e5 elements or
//                   more come from cudaMallocManaged, outside the snapshot; their absmax remain);
//   Qlora:          an NF4 base (Params4bit: packed uint8 and its double-quantised absmax),
//                   norms, embedding and head cast to fp32 by prepare_model_for_kbit_training,
//                   LoRA adapters on q and v, gradient checkpointing, weights dequantised per matmul
//                   in forward and again in backward, paged AdamW 8-bit on the adapters, two steps.
// Fully sharded data parallelism (synth_sharded.cpp), the parameters whole only around their use:
//   Fsdp2:          PyTorch fully_shard (per-parameter DTensor shards from to_empty, bf16 param_dtype
//                   and fp32 reduce_dtype: each layer's shards cast and all-gathered into one flat
//                   buffer and copied out per parameter, freed after the layer's forward and
//                   gathered again in backward, gradients reduce-scattered into fp32 shards, AdamW
//                   state on the shards), two steps;
//   DeepSpeedZero3: a model built under zero.Init (each weight partitioned as it is made),
//                   ZeRO stage 3 (the partitions defragmented into one bf16 buffer, the fp32 master
//                   partition, the IPG bucket and the fp32 gradient partition, each weight gathered
//                   per module in forward and backward and released, FusedAdam on the partition),
//                   two steps.
// Calibration (synth_calibration.cpp), nothing trains:
//   GptqCalibration: GPTQ's reference llama_sequential in the user's own files: the samples'
//                   hidden states in two buffers, one decoder layer on the device at a time, an
//                   (in x in) fp32 Hessian per linear accumulated by forward hooks, fasterquant's
//                   Cholesky factors and block temporaries, the quantised weights written back.
// Evaluation (synth_evaluation.cpp):
//   EvalAccumulation: transformers' Trainer, two AdamW steps, then predict() without
//                   eval_accumulation_steps: every batch's logits concatenated on the device to
//                   the ones before, until a concatenation runs out of memory.
// Weights kept twice (synth_ema.cpp):
//   DitEma:         a diffusion transformer trained as facebookresearch/DiT's train.py does: an EMA
//                   copy moved to the device before the model (deepcopy(model).to()), a frozen
//                   VAE encoding each batch under no_grad, AdamW, the EMA updated in place; three steps.
//   DiffusersEma:   diffusers' train_text_to_image.py --use_ema: the UNet from from_pretrained, a
//                   frozen fp16 VAE, EMAModel's shadow parameters moved to the device after the
//                   model, and its step's two temporaries per parameter after each optimizer step.
//   EmaDeepcopy:    the model moved first, then ema = deepcopy(model) on the device (timm's
//                   ModelEmaV3, ultralytics' ModelEMA): Parameter.__deepcopy__'s clones.
// The optimizer inside the backward (synth_optim_in_backward.cpp):
//   OptimizerInBackward: torchtune's optimizer_in_bwd: one AdamW per parameter stepped by its
//                   post-accumulate-grad hook, the gradient let go of at once, the state made in
//                   the first backward; three steps.
// A loop that runs the forward and backward inside optimizer.step (synth_lightning.cpp):
//   LightningClosure: PyTorch Lightning's automatic optimization: AdamW.step(closure) runs
//                   training_step, zero_grad and loss.backward() under Optimizer.step's frames and
//                   record_function range, then updates; three steps.
// Reinforcement learning from the model's own samples (synth_rollout.cpp):
//   GrpoRollout:    TRL's GRPOTrainer generating with transformers' generate() (a DynamicCache grown
//                   per token under no_grad, let go of when generate() returns), then the policy's
//                   forward with grad on the completions, backward, AdamW; bf16, three steps.
// Inference with the models moved in one at a time (synth_offload.cpp):
//   DiffusersOffload: a Stable Diffusion pipeline after enable_model_cpu_offload(): accelerate's hooks
//                   move the text encoder, then the UNet, then the VAE onto the device as each is
//                   called, offloading the one before; the VAE's decode runs out of memory.
// Sizes are small (a few hundred MiB in all); `scale` multiplies the layer width.
enum class StackScenario : uint8_t {
    Vllm,
    Megatron,
    DataParallelOom,
    NoHistory,
    NoHistoryBare,
    KvGenerate,
    GradsMoved,
    WorkspacePython,
    JvpForward,
    HandOptimizer,
    ScriptAttention,
    DeepSpeedZero2,
    Fsdp,
    DdpBuckets,
    PeftLora,
    Compiled,
    CudaGraphs,
    PipelineOneFOneB,
    DpoReference,
    Gan,
    BnbAdam8bit,
    BnbPagedAdam8bit,
    Qlora,
    Fsdp2,
    DeepSpeedZero3,
    GptqCalibration,
    EvalAccumulation,
    DitEma,
    DiffusersEma,
    EmaDeepcopy,
    OptimizerInBackward,
    LightningClosure,
    GrpoRollout,
    DiffusersOffload
};
// The last scenario: tests that run every scenario loop up to it.
inline constexpr StackScenario kLastStackScenario = StackScenario::DiffusersOffload;
// The issue-22 class scenarios, in order (tests run each through the ablations).
inline constexpr StackScenario kClassScenarios[] = {StackScenario::KvGenerate,      StackScenario::GradsMoved,
                                                    StackScenario::WorkspacePython, StackScenario::JvpForward,
                                                    StackScenario::HandOptimizer,   StackScenario::ScriptAttention};

// The data-parallel scenarios, in order.
inline constexpr StackScenario kDistributedScenarios[] = {StackScenario::DeepSpeedZero2, StackScenario::Fsdp, StackScenario::DdpBuckets,
                                                          StackScenario::PeftLora};

// The multi-pass training scenarios, in order.
inline constexpr StackScenario kMultiPassScenarios[] = {StackScenario::PipelineOneFOneB, StackScenario::DpoReference, StackScenario::Gan};

// The torch.compile scenarios, in order.
inline constexpr StackScenario kCompiledScenarios[] = {StackScenario::Compiled, StackScenario::CudaGraphs};

// The quantised fine-tuning scenarios, in order.
inline constexpr StackScenario kQuantizedScenarios[] = {StackScenario::BnbAdam8bit, StackScenario::BnbPagedAdam8bit, StackScenario::Qlora};
// The calibration scenarios, in order.
inline constexpr StackScenario kCalibrationScenarios[] = {StackScenario::GptqCalibration};
// The evaluation scenarios, in order.
inline constexpr StackScenario kEvaluationScenarios[] = {StackScenario::EvalAccumulation};

// The scenarios whose optimizer steps inside the backward.
inline constexpr StackScenario kInBackwardScenarios[] = {StackScenario::OptimizerInBackward};
// The loop inside optimizer.step's closure.
inline constexpr StackScenario kClosureScenarios[] = {StackScenario::LightningClosure};
// Generation inside a training step.
inline constexpr StackScenario kRolloutScenarios[] = {StackScenario::GrpoRollout};
// Models moved onto the device per call (offloading).
inline constexpr StackScenario kOffloadScenarios[] = {StackScenario::DiffusersOffload};

// The scenarios that keep a model's weights twice.
inline constexpr StackScenario kEmaScenarios[] = {StackScenario::DitEma, StackScenario::DiffusersEma, StackScenario::EmaDeepcopy};

// The fully sharded scenarios, in order.
inline constexpr StackScenario kShardedScenarios[] = {StackScenario::Fsdp2, StackScenario::DeepSpeedZero3};

// vllm, megatron, dp-oom, no-history, no-history-bare, kv-generate, grads-moved, workspace-python,
// jvp-forward, hand-optimizer, script-attention, deepspeed-zero2, fsdp, ddp-buckets, peft-lora,
// compiled, cudagraphs, pipeline-1f1b, dpo-reference, gan,
// bnb-adam8bit, bnb-paged-adam8bit, qlora, fsdp2, deepspeed-zero3
std::optional<StackScenario> parseStackScenario(std::string_view name);
std::string_view stackScenarioName(StackScenario s);

SynthResult synthesizeScenario(StackScenario scenario, int scale = 1);

} // namespace poolscope
