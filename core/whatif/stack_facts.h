#pragma once
// What one call stack says about the tensor it allocated, read once per stack: the operator that
// made it (the innermost ATen operator past the allocation plumbing, else the Python function),
// the autograd node in backward, autocast's frames, and whether the code around it is attention.
// The size laws and the precision knob judge tensors by these facts, never by a size coincidence.
#include "core/model/frames.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope {

// How autocast treats the operator (at::autocast::CastPolicy), or what it would do to it.
enum class OpPrecision : uint8_t {
    Unknown,  // no operator known (Python-only stacks of unknown functions, no stacks)
    Lower,    // matmul family: bmm, mm, addmm, linear, matmul, einsum, baddbmm, conv: computes in 16 bits
    Fp32,     // autocast runs it in fp32: softmax, log_softmax, exp, pow, sum, norms, losses (not mean)
    Promote,  // elementwise and the rest: the output takes the widest input's type
    Cast,     // a dtype conversion (_to_copy): autocast's casts of weights and inputs
};

struct StackOpFacts {
    enum Flag : uint32_t {
        AttentionCode = 1u << 0,  // a Python frame of attention code (attention, attn, sdpa, flash, softmax)
        SoftmaxOp = 1u << 1,      // softmax itself (C++ _softmax/softmax, or a Python softmax function), not log_softmax
        ScoreOp = 1u << 2,        // an operator the score pipeline uses: bmm/matmul of activations, div, where, masked_fill, exp, sub, max
        ScoreBackward = 1u << 3,  // the autograd node of such an operator (DivBackward0, ExpBackward0, WhereBackward0, ...)
        AccumulateGrad = 1u << 4, // storing a parameter's .grad
        Autocast = 1u << 5,       // at::autocast's wrapper frames
        CachedCast = 1u << 6,     // at::autocast::cached_cast: a cast autocast keeps for the weights
        Dequantize = 1u << 7,     // bitsandbytes / quantised weights expanded
        MaskOp = 1u << 8,         // a comparison or triangle (ge, lt, triu, tril, eq, ones): masks
        Backward = 1u << 9,       // an autograd node or the engine's thread
        Optimizer = 1u << 10,     // torch/optim, an optimizer's step
        Embedding = 1u << 11,     // embedding / index_select / index of a table
        LinearOp = 1u << 12,      // a projection with a weight: linear, addmm, mm (not bmm of two activations)
        Python = 1u << 13,        // any Python frame at all
        LogSoftmax = 1u << 14,    // log_softmax / cross entropy: the loss over the vocabulary
        Arange = 1u << 15,        // arange / range: position ids
        Dropout = 1u << 16,       // dropout / bernoulli: an output and its mask
        IndexBackward = 1u << 17, // a gather's backward node (IndexBackward0, IndexSelectBackward0, EmbeddingBackward0): a table's gradient
    };
    uint32_t flags = 0;
    OpPrecision precision = OpPrecision::Unknown;
    int autocastPolicy = -1;  // the CastPolicy number in at::autocast::WrapFunction_<(CastPolicy)N>, -1 none
    FrameId userFrame;        // innermost Python frame outside torch's own files (the call site)
    // The operator in a form its autograd node shares: "_softmax" and "SoftmaxBackward0" are both
    // "softmax", "mul_Tensor" and "MulBackward0" "mul". Empty when unknown.
    std::string opKey;
    bool has(Flag f) const { return (flags & f) != 0; }
};

// Facts for every stack of `frames`, indexed by StackId::value.
std::vector<StackOpFacts> stackFacts(const FrameTable& frames);

// "at::_ops::bmm::call(...)" -> "bmm"; empty when the frame names no ATen operator.
std::string_view atenOpName(std::string_view frameName);

} // namespace poolscope
