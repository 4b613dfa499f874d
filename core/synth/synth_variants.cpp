#include "core/synth/synth_generator.h"

// Layers written other ways than the default block (synth_steps.cpp), to collide with the what-if
// laws on purpose: attention inline in the block's forward (q @ k.T, / sqrt(d), a causal mask built
// each call and masked_fill, F.softmax), the same with a hand-written softmax (no softmax anywhere),
// a fused function that keeps no probabilities and recomputes the scores in its backward; SwiGLU of
// any width; and torch.autocast's own rules (matmuls bf16, norms/softmax/exp/sum fp32, the rest after
// their input, casts of the weights once per forward and of each fp32 input of a matmul). Frames
// follow real dumps: nothing here is named "attention".

namespace poolscope::synth_detail {
namespace {

const std::string kTorch = "/opt/conda/lib/python3.11/site-packages/torch/";
const std::string kUser = "/home/user/gpt/";

enum Site : int {
    Ln1, Qkv, Mask, Qk, Scale, MaskFill, Softmax, ManualMax, ManualExp, ManualSum, ManualDiv, Drop, Av, Proj, ProjDrop, Fused,
    Res1, Ln2, Fc, Act, Mul, Fc2, Drop2, Res2, FusedBackward, SiteCount
};

struct PyFrame {
    std::string file, name;
    int64_t line;
};

// The Python frames of a site, innermost first, down to the block's forward.
std::vector<PyFrame> sitePython(int site, SynthMlp mlp)
{
    const std::string model = kUser + "model.py", fn = kTorch + "nn/functional.py";
    const PyFrame call{kTorch + "nn/modules/module.py", "_call_impl", 1750};
    auto inAttn = [&](int64_t line) { return std::vector<PyFrame>{{model, "forward", line}, call, {model, "forward", 96}}; };
    auto inMlp = [&](int64_t line) { return std::vector<PyFrame>{{model, "forward", line}, call, {model, "forward", 97}}; };
    auto linear = [&](std::vector<PyFrame> v) {
        v.insert(v.begin(), {{kTorch + "nn/modules/linear.py", "forward", 125}, call});
        return v;
    };
    switch (site) {
    case Ln1: return {{fn, "layer_norm", 2900}, {kTorch + "nn/modules/normalization.py", "forward", 217}, call, {model, "forward", 96}};
    case Ln2: return {{fn, "layer_norm", 2900}, {kTorch + "nn/modules/normalization.py", "forward", 217}, call, {model, "forward", 97}};
    case Qkv: return linear(inAttn(61));
    case Mask: return inAttn(66);
    case Qk: return inAttn(70);
    case Scale: return inAttn(71);
    case MaskFill: return inAttn(72);
    case Softmax: {
        auto v = inAttn(73);
        v.insert(v.begin(), {fn, "softmax", 2140});
        return v;
    }
    case ManualMax: return inAttn(73);
    case ManualExp: return inAttn(74);
    case ManualSum: return inAttn(75);
    case ManualDiv: return inAttn(76);
    case Drop: {
        auto v = inAttn(77);
        v.insert(v.begin(), {fn, "dropout", 1425});
        return v;
    }
    case Av: return inAttn(78);
    case Proj: return linear(inAttn(80));
    case ProjDrop: {
        auto v = inAttn(81);
        v.insert(v.begin(), {fn, "dropout", 1425});
        return v;
    }
    case Fused: {
        auto v = inAttn(70);
        v.insert(v.begin(), {{kUser + "kernels.py", "forward", 41}, {kTorch + "autograd/function.py", "apply", 575}});
        return v;
    }
    case FusedBackward: return {{kUser + "kernels.py", "backward", 63}, {kTorch + "autograd/function.py", "apply", 307}};
    case Res1: return {{model, "forward", 96}};
    case Res2: return {{model, "forward", 97}};
    case Fc: return linear(inMlp(88));
    case Act: {
        auto v = inMlp(89);
        v.insert(v.begin(), {fn, mlp == SynthMlp::SwiGlu ? "silu" : "gelu", mlp == SynthMlp::SwiGlu ? 2380 : 1700});
        return v;
    }
    case Mul: return inMlp(89);
    case Fc2: return linear(inMlp(90));
    case Drop2: {
        auto v = inMlp(91);
        v.insert(v.begin(), {fn, "dropout", 1425});
        return v;
    }
    }
    return {};
}

const char* const kEngine[] = {
    "torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
    "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, "
    "torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)",
    "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"};

} // namespace

bool Generator::variantLayers() const
{
    return m_model.attention != SynthAttention::Softmax || m_model.mlp != SynthMlp::Gelu || m_model.ffn > 0 ||
           m_model.dtype == SynthDtype::Autocast;
}

// op: an ATen operator name ("bmm", "_to_copy"); policy: autocast's CastPolicy wrapping it (-1
// none); backward: the op runs inside autograd node `op` ("MulBackward0") on the engine's thread.
StackId Generator::variantStack(const std::string& op, int site, int policy, bool backward)
{
    const std::string key = op + "|" + std::to_string(site) + "|" + std::to_string(policy) + "|" + (backward ? "b" : "f");
    if (auto it = m_variantStacks.find(key); it != m_variantStacks.end())
        return it->second;
    FrameTable& frames = m_result.trace.frames;
    std::vector<FrameId> ids;
    auto cpp = [&](const std::string& name) { ids.push_back(frames.internFrame("??", name, 0)); };
    cpp("torch::unwind::unwind()");
    cpp("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)");
    cpp("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)");
    if (backward) {
        // The node computes with ordinary operators; which one does not matter to the trace.
        const bool mm = op.rfind("Mm", 0) == 0 || op.rfind("Addmm", 0) == 0 || op.rfind("Bmm", 0) == 0;
        cpp(std::string("at::_ops::") + (mm ? "mm" : "mul_Tensor") + "::call(...)");
        if (op == "AccumulateGrad") {
            cpp("void torch::autograd::AccumulateGrad::accumulateGrad<...>(at::Tensor const&, at::Tensor&, at::Tensor const&, unsigned long, ...)");
            cpp("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)");
        } else if (op == "PyNode") {
            for (const PyFrame& p : sitePython(FusedBackward, m_model.mlp))
                ids.push_back(frames.internFrame(p.file, p.name, p.line));
            cpp("torch::autograd::PyNode::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)");
        } else {
            cpp("torch::autograd::generated::" + op + "::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)");
        }
        for (const char* e : kEngine)
            cpp(e);
        return m_variantStacks[key] = frames.internStack(ids);
    }
    if (op == "_to_copy") {
        for (const char* f : kAutocastCastFrames)
            cpp(f);
    } else {
        cpp("at::(anonymous namespace)::wrapper_CUDA_" + op + "(...)");
        cpp("at::_ops::" + op + "::call(...)");
        if (policy >= 0)
            cpp("at::autocast::WrapFunction_<(at::autocast::CastPolicy)" + std::to_string(policy) +
                ", (c10::DeviceType)1, at::Tensor (at::Tensor const&)>::call(...)");
    }
    for (const PyFrame& p : sitePython(site, m_model.mlp))
        ids.push_back(frames.internFrame(p.file, p.name, p.line));
    ids.push_back(frames.internFrame(kTorch + "nn/modules/module.py", "_call_impl", 1750));
    ids.push_back(frames.internFrame(kUser + "model.py", "forward", 152));
    ids.push_back(frames.internFrame(kUser + "train.py", "train_step", 131));
    ids.push_back(frames.internFrame(kUser + "train.py", "<module>", 240));
    return m_variantStacks[key] = frames.internStack(ids);
}

void Generator::variantForward(int layer)
{
    const int64_t h = m_model.hidden, s = m_model.seq, b = m_model.microBatch, a = m_model.heads;
    const int64_t T = s * b, F = m_model.ffn > 0 ? m_model.ffn : 4 * h;
    const bool autocast = m_model.dtype == SynthDtype::Autocast, castWeights = autocast || m_model.dtype == SynthDtype::Mixed;
    // Element sizes: matmul outputs, fp32-list outputs (norms, softmax, exp, sum), the residual stream.
    const int64_t eLow = m_model.dtype == SynthDtype::Fp32 ? 4 : 2;
    const int64_t eFp32 = autocast ? 4 : eLow;
    const int64_t eRes = autocast ? 4 : m_ea;
    const int lower = autocast ? 0 : -1, fp32 = autocast ? 1 : -1;
    auto& saved = m_variantSaved[size_t(layer)];
    saved.clear();
    auto act = [&](int64_t bytes, const std::string& op, int site, int policy) {
        return alloc(bytes, variantStack(op, site, policy, false), Pool::Activation);
    };
    const auto& lp = m_layerParams[size_t(layer)];
    auto keep = [&](int64_t bytes, const std::string& op, int site, int policy, const std::string& node,
                    std::vector<int> weights = {}) {
        std::vector<size_t> ids;
        for (int w : weights)
            ids.push_back(lp[size_t(w)]);
        // A weight's cast is made by at::autocast::cached_cast (its stack says so) and held by
        // autocast's cache for the rest of the forward: the cast cache (docs/classifier.md), though
        // the matmul saves it for backward too. Everything else kept here is an activation.
        Tensor t = node == "weight" ? alloc(bytes, variantStack(op, site, policy, false), Pool::CastCache) : act(bytes, op, site, policy);
        saved.push_back({t, bytes, node, site, std::move(ids)});
    };
    auto tmp = [&](int64_t bytes, const std::string& op, int site, int policy) {
        return alloc(bytes, variantStack(op, site, policy, false), Pool::Temporary);
    };
    auto drop = [&](Tensor& t, int site) { release(t, m_stacks.free(site == Res2 ? SynthSite::BlockLn2 : SynthSite::BlockLn1)); };
    // A linear layer: autocast casts its weight (kept for backward) and its fp32 input; the matmul
    // saves the cast, so the fp32 source is dropped once cast (its norm's weights get their
    // gradients through the cast's backward).
    auto castFor = [&](int64_t weightBytes, int64_t inputBytes, int site, std::vector<int> inputWeights = {}) {
        if (castWeights)
            keep(weightBytes, "_to_copy", site, -1, "weight");
        if (autocast && inputBytes > 0)
            keep(inputBytes, "_to_copy", site, -1, "ToCopyBackward0", std::move(inputWeights));
    };
    // A norm's output: kept for the matmul after it, or (autocast) only until it is cast.
    auto norm = [&](int site, std::vector<int> weights) {
        if (!autocast) {
            keep(T * h * eFp32, "native_layer_norm", site, fp32, "NativeLayerNormBackward0", std::move(weights));
            return Tensor{};
        }
        return act(T * h * eFp32, "native_layer_norm", site, fp32);
    };

    Tensor ln1 = norm(Ln1, {0, 1});
    castFor(3 * h * h * 2, autocast ? T * h * 2 : 0, Qkv, {0, 1});
    drop(ln1, Qkv);
    keep(3 * T * h * eLow, "addmm", Qkv, lower, "AddmmBackward0", {2, 3});
    const int64_t scores = T * a * s;
    if (m_model.attention == SynthAttention::Recompute) {
        Tensor sc = tmp(scores * eLow, "bmm", Fused, lower);
        Tensor up = autocast ? alloc(scores * 4, variantStack("_to_copy", Fused, -1, false), Pool::Temporary) : Tensor{};
        Tensor ex = tmp(scores * eFp32, "exp", Fused, fp32);
        drop(up, Fused);
        drop(sc, Fused);
        keep(T * a * 4, "logsumexp", Fused, fp32, "PyNode");
        drop(ex, Fused);
        keep(T * h * eLow, "bmm", Fused, lower, "PyNode");
    } else {
        Tensor pos, mask;
        if (m_model.attention != SynthAttention::Softmax) {
            pos = tmp(s * 8, "arange", Mask, -1);
            mask = tmp(s * s, "ge_Tensor", Mask, -1);
            drop(pos, Mask);
        }
        Tensor raw = tmp(scores * eLow, "bmm", Qk, lower);
        Tensor probsIn = raw;
        if (m_model.attention != SynthAttention::Softmax) {
            Tensor scaled = tmp(scores * eLow, "div_Tensor", Scale, -1);
            drop(raw, Scale);
            probsIn = tmp(scores * eLow, "masked_fill_Scalar", MaskFill, -1);
            drop(scaled, MaskFill);
            saved.push_back({mask, s * s, "", MaskFill, {}}); // the mask is kept for backward (it has no gradient)
        }
        // Autocast's fp32 operators cast a 16-bit input to fp32 first (a transient copy).
        auto upcast = [&](int site) {
            return autocast ? alloc(scores * 4, variantStack("_to_copy", site, -1, false), Pool::Temporary) : Tensor{};
        };
        if (m_model.attention == SynthAttention::Manual) {
            Tensor mx = tmp(T * a * eLow, "max_dim", ManualMax, -1);
            Tensor shifted = tmp(scores * eLow, "sub_Tensor", ManualExp, -1);
            Tensor up = upcast(ManualExp);
            keep(scores * eFp32, "exp", ManualExp, fp32, "ExpBackward0");
            drop(up, ManualExp);
            drop(shifted, ManualExp);
            drop(mx, ManualExp);
            keep(T * a * eFp32, "sum_dim_IntList", ManualSum, fp32, "SumBackward1");
            keep(scores * eFp32, "div_Tensor", ManualDiv, -1, "DivBackward0");
        } else {
            Tensor up = upcast(Softmax);
            keep(scores * eFp32, "_softmax", Softmax, fp32, "SoftmaxBackward0");
            drop(up, Softmax);
        }
        drop(probsIn, Softmax);
        keep(scores, "native_dropout", Drop, -1, ""); // the dropout mask
        if (autocast) {
            Tensor out = act(scores * eFp32, "native_dropout", Drop, -1);
            keep(scores * 2, "_to_copy", Av, -1, "ToCopyBackward0");
            drop(out, Av);
        } else {
            keep(scores * eFp32, "native_dropout", Drop, -1, "NativeDropoutBackward0");
        }
        keep(T * h * eLow, "bmm", Av, lower, "BmmBackward0");
    }
    castFor(h * h * 2, 0, Proj);
    Tensor proj = tmp(T * h * eLow, "addmm", Proj, lower);
    keep(T * h, "native_dropout", ProjDrop, -1, "", {4, 5});
    Tensor projDrop = tmp(T * h * eLow, "native_dropout", ProjDrop, -1);
    drop(proj, ProjDrop);
    keep(T * h * eRes, "add_Tensor", Res1, -1, "AddBackward0");
    drop(projDrop, Res1);
    Tensor ln2 = norm(Ln2, {6, 7});
    if (m_model.mlp == SynthMlp::SwiGlu) {
        castFor(F * h * 2, autocast ? T * h * 2 : 0, Fc, {6, 7});
        keep(T * F * eLow, "addmm", Fc, lower, "AddmmBackward0", {8});
        castFor(F * h * 2, autocast ? T * h * 2 : 0, Fc);
        drop(ln2, Fc);
        keep(T * F * eLow, "addmm", Fc, lower, "AddmmBackward0", {9});
        keep(T * F * eLow, "silu", Act, -1, "SiluBackward0");
        keep(T * F * eLow, "mul_Tensor", Mul, -1, "MulBackward0");
    } else {
        castFor(F * h * 2, autocast ? T * h * 2 : 0, Fc, {6, 7});
        drop(ln2, Fc);
        keep(T * F * eLow, "addmm", Fc, lower, "AddmmBackward0", {8, 9});
        keep(T * F * eLow, "gelu", Act, -1, "GeluBackward0");
    }
    castFor(h * F * 2, 0, Fc2);
    Tensor fc2 = tmp(T * h * eLow, "addmm", Fc2, lower);
    keep(T * h, "native_dropout", Drop2, -1, "", {10, 11});
    Tensor mlpDrop = tmp(T * h * eLow, "native_dropout", Drop2, -1);
    drop(fc2, Drop2);
    m_layerInput[size_t(layer) + 1] = act(T * h * eRes, "add_Tensor", Res2, -1);
    drop(mlpDrop, Res2);
}

// The gradients flow back through the saved tensors in reverse: each one's gradient has its bytes
// (the node that made it), the weights' gradients come when their linear layer's turn comes.
Tensor Generator::variantBackward(int layer, Tensor dout)
{
    const StackId fe = m_stacks.free(SynthSite::BackwardEngine);
    const int64_t h = m_model.hidden, s = m_model.seq, b = m_model.microBatch, a = m_model.heads, T = s * b;
    const bool autocast = m_model.dtype == SynthDtype::Autocast;
    const int64_t eLow = m_model.dtype == SynthDtype::Fp32 ? 4 : 2, eFp32 = autocast ? 4 : eLow;
    auto& saved = m_variantSaved[size_t(layer)];
    Tensor grad = dout;
    for (size_t k = saved.size(); k-- > 0;) {
        VariantSaved& v = saved[k];
        if (v.node == "weight" || v.node.empty()) {
            // A weight's cast (its gradient reaches the weight's .grad through the linear's) or a
            // mask: nothing flows back into them. A dropout mask's node still makes its weights' gradients.
            for (size_t w : v.params)
                gradient(m_params[w], m_params[w].cols > 0 ? SynthOp::Linear : SynthOp::LayerNorm);
            release(v.t, fe);
            continue;
        }
        if (v.node == "PyNode" && v.bytes == T * h * eLow) {
            // The fused backward recomputes the scores and their softmax, then their gradient.
            Tensor sc = alloc(T * a * s * eLow, variantStack("PyNode", Fused, -1, true), Pool::Temporary);
            Tensor p = alloc(T * a * s * eFp32, variantStack("PyNode", Fused, -1, true), Pool::Temporary);
            release(sc, fe);
            Tensor dp = alloc(T * a * s * eLow, variantStack("PyNode", Fused, -1, true), Pool::Temporary);
            release(p, fe);
            release(dp, fe);
        }
        Tensor g = alloc(v.bytes, variantStack(v.node, v.site, -1, true), Pool::Temporary);
        for (size_t w : v.params)
            gradient(m_params[w], m_params[w].cols > 0 ? SynthOp::Linear : SynthOp::LayerNorm);
        release(grad, fe);
        release(v.t, fe);
        grad = g;
    }
    saved.clear();
    release(m_layerInput[size_t(layer)], fe);
    // The gradient of the layer's input has the residual stream's bytes.
    Tensor din = alloc(h * T * (autocast ? 4 : m_ea), variantStack("AddBackward0", Res1, -1, true), Pool::Temporary);
    release(grad, fe);
    return din;
}

} // namespace poolscope::synth_detail
