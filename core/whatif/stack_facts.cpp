#include "core/whatif/stack_facts.h"
#include "core/model/torch_paths.h"
#include "core/redact/code_names.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace poolscope {
namespace {

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// at::_ops names carry the overload: div_Tensor, where_self, sum_dim_IntList, max_dim.
bool opIs(std::string_view op, std::string_view base)
{
    if (op == base)
        return true;
    if (op.size() <= base.size() + 1 || !op.starts_with(base) || op[base.size()] != '_')
        return false;
    const std::string_view rest = op.substr(base.size() + 1);
    return std::isupper((unsigned char)rest.front()) || rest == "self" || rest == "dim" || rest.starts_with("dim_") ||
           rest == "int" || rest == "names" || rest == "out";
}

template <size_t N>
bool opIn(std::string_view op, const std::array<std::string_view, N>& bases)
{
    for (std::string_view b : bases)
        if (opIs(op, b))
            return true;
    return false;
}

std::string lower(std::string_view s)
{
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return out;
}

// Operators that only hand out memory for another operator (the output of empty_like inside
// zeros_like, of resize_ inside where): the operator that asked is further out.
bool isAllocatingHelper(std::string_view op)
{
    static constexpr std::array<std::string_view, 27> kHelpers = {
        "empty", "empty_strided", "empty_like", "empty_memory_format", "resize_", "new_empty", "new_empty_strided",
        "as_strided", "view", "_unsafe_view", "reshape", "contiguous", "clone", "copy_", "zero_", "fill_", "set_",
        "_reshape_alias", "expand", "unsqueeze", "squeeze", "transpose", "permute", "select", "slice", "detach", "alias"};
    return op == "t" || opIn(op, kHelpers);
}

// torch/csrc/autograd's autocast lists (autocast_mode.cpp): what runs in 16 bits and what in fp32.
OpPrecision precisionOf(std::string_view op)
{
    static constexpr std::array<std::string_view, 20> kLower = {
        "bmm", "mm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "einsum", "conv1d", "conv2d", "conv3d",
        "convolution", "_convolution", "cudnn_convolution", "conv_transpose2d", "prelu", "addmv", "addr", "chain_matmul",
        "_scaled_dot_product_efficient_attention"};
    static constexpr std::array<std::string_view, 34> kFp32 = {
        "_softmax", "softmax", "_log_softmax", "log_softmax", "exp", "log", "pow", "sum", "log1p", "prod", "norm",
        "linalg_vector_norm", "rsqrt", "reciprocal", "layer_norm", "native_layer_norm", "group_norm", "native_group_norm",
        "cross_entropy_loss", "nll_loss", "nll_loss_forward", "nll_loss2d_forward", "mse_loss", "l1_loss", "cumsum",
        "cumprod", "softplus", "erfinv", "acos", "asin", "cosh", "sinh", "tan", "expm1"};
    if (opIs(op, "_to_copy") || opIs(op, "to") || op == "_autocast_to_reduced_precision" || op == "_autocast_to_full_precision")
        return OpPrecision::Cast;
    if (opIn(op, kLower) || op.starts_with("_scaled_dot_product") || op.starts_with("_flash_attention") ||
        op.starts_with("_efficient_attention"))
        return OpPrecision::Lower;
    if (opIn(op, kFp32))
        return OpPrecision::Fp32;
    return OpPrecision::Promote;
}

// The score pipeline's operators: Q.K^T, the scale, the mask, the (hand-written) softmax.
bool isScoreOp(std::string_view op)
{
    static constexpr std::array<std::string_view, 13> kScore = {"bmm", "baddbmm", "matmul", "div", "where", "masked_fill",
                                                                "exp", "sub", "max", "amax", "_softmax", "softmax",
                                                                "_masked_softmax"};
    return opIn(op, kScore);
}

bool isScoreNode(std::string_view node)
{
    for (std::string_view s : {"SoftmaxBackward", "DivBackward", "ExpBackward", "WhereBackward", "MaskedFillBackward",
                               "MaxBackward", "AmaxBackward", "SubBackward", "KthvalueBackward", "MaskedSoftmaxBackward"})
        if (node.starts_with(s))
            return true;
    return false;
}

bool isMaskOp(std::string_view op)
{
    static constexpr std::array<std::string_view, 11> kMask = {"ge", "gt", "le", "lt", "eq", "triu", "tril", "ones",
                                                               "full", "logical_not", "bitwise_not"};
    return opIn(op, kMask);
}

bool isPythonSource(std::string_view file)
{
    return file.ends_with(".py") || file.ends_with(".pyx") || (!file.empty() && file.front() == '<');
}

// Python's standard library wherever it is installed (<prefix>/lib/python3.X/, Windows'
// PythonXY\Lib\ or a conda environment's Lib\): as redact's library paths read it, so that a renamed
// copy, whose standard-library paths are cut to /lib/python3/, reads alike.
bool isStandardLibrary(std::string_view file)
{
    if (contains(file, "/lib/python3"))
        return true;
    const auto relative = libraryRelativePath(file);
    return relative && relative->starts_with("/lib/python3/");
}

bool isLibraryFile(std::string_view file)
{
    return contains(file, "site-packages/") || contains(file, "dist-packages/") || isTorchSource(file) ||
           isStandardLibrary(file) || file.front() == '<';
}

// Attention code by its Python name: the function or the file.
bool namesAttention(std::string_view name)
{
    const std::string l = lower(name);
    if (contains(l, "log_softmax") || contains(l, "logsoftmax"))
        return false;
    return contains(l, "attention") || contains(l, "attn") || contains(l, "sdpa") || contains(l, "softmax") ||
           contains(l, "scaled_dot_product") || contains(l, "self_att");
}

// "_softmax" / "SoftmaxBackward0" -> "softmax"; "mul_Tensor" -> "mul"; "native_layer_norm" -> "nativelayernorm".
std::string normalisedOp(std::string_view name, bool node)
{
    if (node) {
        const size_t b = name.find("Backward");
        name = name.substr(0, b);
    } else {
        // Strip the overload: the first '_' followed by an upper-case letter, or a known suffix.
        for (size_t i = 1; i + 1 < name.size(); ++i)
            if (name[i] == '_' && (std::isupper((unsigned char)name[i + 1]) || name.substr(i + 1) == "self" ||
                                   name.substr(i + 1) == "dim" || name.substr(i + 1).starts_with("dim_"))) {
                name = name.substr(0, i);
                break;
            }
    }
    std::string out;
    for (char c : name)
        if (c != '_')
            out += char(std::tolower((unsigned char)c));
    return out;
}

StackOpFacts factsOf(const FrameTable& frames, StackId id)
{
    StackOpFacts f;
    std::string_view firstOp, semanticOp;
    for (FrameId fid : frames.stack(id)) {
        const Frame& fr = frames.frame(fid);
        const std::string_view name = fr.name;
        if (fr.isPython()) {
            const std::string file = forwardSlashes(fr.filename); // Windows records backslashes
            // The interpreter's own C files carry line numbers too (Objects/methodobject.c:537).
            if (!isPythonSource(file))
                continue;
            f.flags |= StackOpFacts::Python;
            const bool library = isLibraryFile(file);
            if (!f.userFrame && !file.empty() && !library)
                f.userFrame = fid;
            // A public library's names only (torch.nn.functional's scaled_dot_product_attention and
            // softmax, flash_attn, xformers, transformers' attention modules): what the user called
            // their own code decides nothing (a renamed dump must get the same answer). The user's
            // attention is found by its structure (law_attention.cpp).
            if (library && namesAttention(name))
                f.flags |= StackOpFacts::AttentionCode;
            const std::string l = lower(name);
            if (library && (l == "softmax" || l == "_softmax" || l == "run_softmax"))
                f.flags |= StackOpFacts::SoftmaxOp;
            if (library && (l == "log_softmax" || l == "cross_entropy" || l == "nll_loss"))
                f.flags |= StackOpFacts::LogSoftmax;
            // Installed optimizers only (torch/optim, bitsandbytes/optim, apex/optimizers): a user's
            // file called optimizer.py is a name, and the run facts' optimizer-step passes
            // (annotations, the step's structure) say where the user's own step runs.
            if (library && (contains(file, "/optim/") || contains(file, "/optimizers/") ||
                                               contains(file, "/optimizer/")))
                f.flags |= StackOpFacts::Optimizer;
            if (library && (contains(l, "dequant") || contains(file, "bitsandbytes")))
                f.flags |= StackOpFacts::Dequantize;
            if (semanticOp.empty()) {
                // Python-only stacks (stacks='python'): torch's own functions name the operator.
                if (isTorchSource(file) && (l == "einsum" || l == "linear" || l == "matmul" || l == "softmax" ||
                                                         l == "log_softmax" || l == "layer_norm" || l == "embedding"))
                    semanticOp = name;
                // torch.nn.Linear's and the convolutions' forward (F.linear, F.conv2d are C functions:
                // the module's own line is the last Python frame), and torch.nn.functional's Python
                // functions of elementwise ops (they run in the type they are given) and of the loss.
                // Only where no C++ frame named an operator (Python-only stacks).
                else if (!firstOp.empty())
                    ;
                else if (l == "forward" && contains(file, "/torch/nn/modules/linear.py"))
                    semanticOp = "linear";
                else if (l == "forward" && contains(file, "/torch/nn/modules/conv.py"))
                    semanticOp = "convolution";
                else if (contains(file, "/torch/nn/functional.py") &&
                         (l == "dropout" || l == "gelu" || l == "silu" || l == "relu" || l == "cross_entropy"))
                    semanticOp = l == "cross_entropy" ? "cross_entropy_loss" : name;
            }
            continue;
        }
        if (contains(name, "at::autocast::")) {
            f.flags |= StackOpFacts::Autocast;
            if (contains(name, "cached_cast"))
                f.flags |= StackOpFacts::CachedCast;
            const size_t p = name.find("CastPolicy)");
            if (p != std::string_view::npos && p + 11 < name.size() && std::isdigit((unsigned char)name[p + 11]) &&
                f.autocastPolicy < 0)
                f.autocastPolicy = name[p + 11] - '0';
        }
        if (contains(name, "AccumulateGrad"))
            f.flags |= StackOpFacts::AccumulateGrad | StackOpFacts::Backward;
        if (contains(name, "torch::autograd::Engine::") || contains(name, "torch::autograd::generated::"))
            f.flags |= StackOpFacts::Backward;
        if (const size_t g = name.find("autograd::generated::"); g != std::string_view::npos) {
            std::string_view node = name.substr(g + 21);
            if (node.starts_with("details::"))
                continue;
            node = node.substr(0, std::min(node.find("::"), node.find('(')));
            if (f.opKey.empty())
                f.opKey = normalisedOp(node.substr(0, node.find("_apply")), true);
            if (isScoreNode(node))
                f.flags |= StackOpFacts::ScoreBackward;
            if (node.starts_with("IndexBackward") || node.starts_with("IndexSelectBackward") || node.starts_with("EmbeddingBackward") ||
                node.starts_with("EmbeddingDenseBackward"))
                f.flags |= StackOpFacts::IndexBackward;
            if (node.starts_with("Softmax") || node.starts_with("_Softmax"))
                f.flags |= StackOpFacts::SoftmaxOp;
        }
        if (contains(name, "bitsandbytes") || contains(name, "dequantize"))
            f.flags |= StackOpFacts::Dequantize;
        const std::string_view op = atenOpName(name);
        if (op.empty())
            continue;
        if (firstOp.empty())
            firstOp = op;
        if (semanticOp.empty() && !isAllocatingHelper(op))
            semanticOp = op;
        if (opIs(op, "_softmax") || opIs(op, "softmax") || opIs(op, "_masked_softmax"))
            f.flags |= StackOpFacts::SoftmaxOp;
        if (opIs(op, "_log_softmax") || opIs(op, "log_softmax") || opIs(op, "cross_entropy_loss") || opIs(op, "nll_loss_forward"))
            f.flags |= StackOpFacts::LogSoftmax;
        if (opIs(op, "embedding") || opIs(op, "index_select") || opIs(op, "embedding_dense_backward"))
            f.flags |= StackOpFacts::Embedding;
        if (opIs(op, "linear") || opIs(op, "addmm") || opIs(op, "mm"))
            f.flags |= StackOpFacts::LinearOp;
        // arange's overloads: arange, arange_start, arange_start_step, and their _out forms (what
        // torch.arange(start, end) reaches through PyTorch 2.1's CUDA kernel).
        if (op == "arange" || op.starts_with("arange_") || opIs(op, "range"))
            f.flags |= StackOpFacts::Arange;
        if (opIs(op, "native_dropout") || opIs(op, "dropout") || opIs(op, "bernoulli") || opIs(op, "fused_dropout"))
            f.flags |= StackOpFacts::Dropout;
    }
    if (!semanticOp.empty() && f.opKey.empty())
        f.opKey = normalisedOp(semanticOp, false);
    if (!semanticOp.empty()) {
        if (f.precision != OpPrecision::Cast)
            f.precision = precisionOf(semanticOp);
        if (isScoreOp(semanticOp) && !f.has(StackOpFacts::LinearOp))
            f.flags |= StackOpFacts::ScoreOp;
        if (isMaskOp(semanticOp))
            f.flags |= StackOpFacts::MaskOp;
        if (opIs(semanticOp, "embedding") || opIs(semanticOp, "index_select"))
            f.flags |= StackOpFacts::Embedding;
        // torch.nn.functional.dropout's Python frame (Python-only stacks): its mask and output.
        if (opIs(semanticOp, "dropout"))
            f.flags |= StackOpFacts::Dropout;
    } else if (!firstOp.empty()) {
        f.precision = precisionOf(firstOp);
    }
    // Inside an operator under autocast the policy decides the output's type, whatever the kernel.
    if (f.autocastPolicy == 0 && f.precision != OpPrecision::Cast)
        f.precision = OpPrecision::Lower;
    else if ((f.autocastPolicy == 1 || f.autocastPolicy == 2 || f.autocastPolicy == 3) && f.precision != OpPrecision::Cast)
        f.precision = OpPrecision::Fp32;
    if (!f.userFrame)
        f.userFrame = frames.userFrame(id);
    return f;
}

} // namespace

std::string_view atenOpName(std::string_view name)
{
    constexpr std::string_view kOps = "at::_ops::";
    const size_t p = name.find(kOps);
    if (p == std::string_view::npos)
        return {};
    std::string_view rest = name.substr(p + kOps.size());
    const size_t end = rest.find("::");
    if (end == std::string_view::npos)
        return {};
    return rest.substr(0, end);
}

std::vector<StackOpFacts> stackFacts(const FrameTable& frames)
{
    std::vector<StackOpFacts> out(frames.stackCount());
    for (size_t s = 0; s < out.size(); ++s)
        out[s] = factsOf(frames, StackId(uint32_t(s)));
    return out;
}

} // namespace poolscope
