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
//   Megatron:       a Megatron-style training step (tensor-parallel layers built, moved into the
//                   _ParamAndGradBuffer's param_data, grad_data beside it, fp32 main parameters from
//                   the distributed optimizer, forward, backward, an Adam step), Python frames;
//   DataParallelOom: DataParallel on device 0 (torch_geometric's scatter, replicate, a forward in
//                   parallel_apply's worker) running out of memory, then the exception's teardown
//                   (deleteNode under tb_dealloc, tb_dealloc alone), with C++ frames;
//   NoHistory:      an OOM observer's dump: one snapshot entry and the final segments, some blocks
//                   with the stack their history kept (weights, activations), some without (older
//                   than recording), and a cuBLAS workspace of the default size without frames;
//   NoHistoryBare:  the same blocks with no stack at all (segments only).
// Sizes are small (a few hundred MiB in all); `scale` multiplies the layer width.
enum class StackScenario : uint8_t { Vllm, Megatron, DataParallelOom, NoHistory, NoHistoryBare };

std::optional<StackScenario> parseStackScenario(std::string_view name); // vllm, megatron, dp-oom, no-history, no-history-bare
std::string_view stackScenarioName(StackScenario s);

SynthResult synthesizeScenario(StackScenario scenario, int scale = 1);

} // namespace poolscope
