#pragma once
#include "core/model/frames.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope {

// The operators whose allocations the generator records, each with the C++ frames PyTorch's
// dispatcher shows for it (stacks='all').
enum class SynthOp : uint8_t {
    ToDevice,
    Embedding,
    Add,
    LayerNorm,
    Linear,
    CublasWorkspace,
    Bmm,
    Softmax,
    Dropout,
    Gelu,
    LogSoftmax,
    OnesLike,
    ZerosLike,
    Clone,
    ForeachSqrt,
    ForeachMul,
    AllGather,
    ReduceScatter,
    AutocastCast, // a weight cast by at::autocast::cached_cast inside the matmul's own call
    Count
};

// The frames of a cast autocast makes inside the operator it wraps (at::autocast::cached_cast),
// innermost first, down to the wrapper.
inline const char* const kAutocastCastFrames[] = {
    "at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, ...)",
    "at::_ops::_to_copy::call(at::Tensor const&, std::optional<c10::ScalarType>, ...)",
    "at::autocast::cached_cast(c10::ScalarType, at::Tensor const&, c10::DeviceType)",
    "at::autocast::WrapFunction_<(at::autocast::CastPolicy)0, (c10::DeviceType)1, at::Tensor (at::Tensor const&, "
    "at::Tensor const&)>::call(...)"};

// Where in the program an allocation or free happens: the Python frames around the operator.
enum class SynthSite : uint8_t {
    Batch,          // train.py: batch.to(device)
    GptEmbedding,   // GPT.forward: wte / wpe / sum
    BlockLn1,       // Block.forward: ln_1 and the attention residual
    Attention,      // Attention.forward
    AttentionProj,  // Attention.forward: c_proj (inside nn.Linear)
    AttentionQkv,   // Attention.forward: c_attn (inside nn.Linear)
    BlockLn2,       // Block.forward: ln_2 and the MLP residual
    MlpFc,          // MLP.forward: c_fc / c_proj (inside nn.Linear)
    MlpAct,         // MLP.forward: gelu / dropout
    GptHead,        // GPT.forward: ln_f and lm_head
    Loss,           // train.py: F.cross_entropy
    BackwardEngine, // the autograd engine thread: no Python frames
    AccumulateGrad, // the engine storing a parameter's gradient
    RecomputeHook,  // checkpoint recompute inside backward (Python on the engine thread)
    OptimizerInit,  // optimizer _init_group: lazy state
    OptimizerUpdate,// optimizer _multi_tensor_*: foreach temporaries
    ZeroGrad,       // optimizer.zero_grad(set_to_none=True)
    ShardGather,    // ZeRO-3 all-gather / reduce-scatter (DeepSpeed-like)
    LeakCache,      // train.py: cache[step] = hidden.detach().clone() (issue 24's planted leaks)
    LeakHook,       // model.py: a forward hook appending output.clone() to a list
    WarmupBuffer,   // model.py: a causal mask made lazily in the first forward
    MemoryBank,     // train.py: bank.push(features.detach().clone()), a bounded queue
    Count
};

class SynthStacks {
public:
    // optimizerModule: "adamw" (torch/optim/adamw.py) or a path under site-packages ("lion_pytorch/lion_pytorch");
    // kernel: the function that runs the update ("_multi_tensor_adamw"), called from `entry` ("adamw").
    SynthStacks(FrameTable& frames, std::string optimizerModule, std::string kernel, std::string entry, bool checkpointing);
    StackId alloc(SynthOp op, SynthSite site);
    StackId free(SynthSite site);
    // The engine's AccumulateGrad / backward node frames for an operator's backward.
    StackId backwardAlloc(SynthOp op);

private:
    struct Spec {
        std::string file;
        std::string name;
        int64_t line;
    };
    StackId build(const std::vector<Spec>& innermostFirst);
    std::vector<Spec> python(SynthSite site) const;
    // An operator's Python frames at a site: the site's, with the library frames that operator's own call adds.
    std::vector<Spec> python(SynthOp op, SynthSite site) const;
    std::vector<Spec> opFrames(SynthOp op) const;

    FrameTable& m_frames;
    std::string m_optimizerFile;
    std::string m_optimizerKernel;
    std::string m_optimizerEntry;
    bool m_checkpointing;
    std::unordered_map<uint32_t, StackId> m_cache;
};

} // namespace poolscope
