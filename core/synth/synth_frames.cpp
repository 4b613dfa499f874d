#include "core/synth/synth_frames.h"

// Frames modelled on real dumps (torch 2.7, Python 3.11, stacks='all'): the allocator's own frames
// innermost, then the operator's dispatcher frames, then Python, then the interpreter's C frames.

namespace poolscope {
namespace {

const std::string kTorch = "/opt/conda/lib/python3.11/site-packages/torch/";
const std::string kUser = "/home/user/gpt/";

} // namespace

SynthStacks::SynthStacks(FrameTable& frames, std::string optimizerModule, std::string kernel, std::string entry, bool checkpointing)
    : m_frames(frames), m_optimizerFile(kTorch + "optim/" + optimizerModule + ".py"), m_optimizerKernel(std::move(kernel)),
      m_optimizerEntry(std::move(entry)), m_checkpointing(checkpointing)
{
    if (optimizerModule.find('/') != std::string::npos)
        m_optimizerFile = "/opt/conda/lib/python3.11/site-packages/" + optimizerModule + ".py";
}

StackId SynthStacks::build(const std::vector<Spec>& specs)
{
    std::vector<FrameId> ids;
    ids.reserve(specs.size());
    for (const auto& s : specs)
        ids.push_back(m_frames.internFrame(s.file, s.name, s.line));
    return m_frames.internStack(ids);
}

std::vector<SynthStacks::Spec> SynthStacks::opFrames(SynthOp op) const
{
    auto ops = [](const char* name, const char* reg) {
        const std::string n = name;
        return std::vector<Spec>{{reg, "at::(anonymous namespace)::wrapper_CUDA_" + n + "(...)", 0},
                                 {"??", "at::_ops::" + n + "::redispatch(c10::DispatchKeySet, ...)", 0},
                                 {"VariableType_0.cpp", "torch::autograd::VariableType::(anonymous namespace)::" + n + "(c10::DispatchKeySet, ...)", 0},
                                 {"??", "at::_ops::" + n + "::call(...)", 0}};
    };
    switch (op) {
    case SynthOp::ToDevice: {
        auto v = ops("_to_copy", "RegisterCompositeExplicitAutograd.cpp");
        v.insert(v.begin(), {"??", "at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, ...)", 0});
        v.push_back({"??", "at::native::to(at::Tensor const&, c10::Device, c10::ScalarType, bool, bool, std::optional<c10::MemoryFormat>)", 0});
        v.push_back({"python_variable_methods.cpp", "torch::autograd::THPVariable_to(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::Embedding: {
        auto v = ops("index_select", "RegisterCUDA.cpp");
        v.push_back({"??", "at::native::embedding_symint(at::Tensor const&, at::Tensor const&, c10::SymInt, bool, bool)", 0});
        v.push_back({"python_torch_functions_1.cpp", "torch::autograd::THPVariable_embedding(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::Add: {
        auto v = ops("add_Tensor", "RegisterCUDA.cpp");
        v.insert(v.begin(), {"??", "at::TensorIteratorBase::build(at::TensorIteratorConfig&)", 0});
        v.push_back({"python_variable_methods.cpp", "torch::autograd::THPVariable_add(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::LayerNorm: {
        auto v = ops("native_layer_norm", "RegisterCUDA.cpp");
        v.insert(v.begin(), {"??", "at::native::layer_norm_cuda(at::Tensor const&, c10::ArrayRef<long>, ...)", 0});
        v.push_back({"??", "at::native::layer_norm_symint(at::Tensor const&, c10::ArrayRef<c10::SymInt>, ...)", 0});
        v.push_back({"python_torch_functions_0.cpp", "torch::autograd::THPVariable_layer_norm(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::Linear: {
        auto v = ops("addmm", "RegisterCUDA.cpp");
        v.insert(v.begin(), {"??", "at::native::structured_addmm_out_cuda::impl(...)", 0});
        v.push_back({"??", "at::native::linear(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)", 0});
        v.push_back({"python_nn_functions.cpp", "torch::autograd::THPVariable_linear(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::CublasWorkspace:
        return {{"??", "at::cuda::getCUDABlasLtWorkspace()", 0},
                {"??", "void at::cuda::blas::gemm_and_bias<c10::BFloat16>(bool, bool, long, long, long, ...)", 0},
                {"??", "at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, ...)", 0},
                {"RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA_addmm(...)", 0},
                {"??", "at::_ops::addmm::call(...)", 0},
                {"??", "at::native::linear(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)", 0},
                {"python_nn_functions.cpp", "torch::autograd::THPVariable_linear(_object*, _object*, _object*)", 0}};
    case SynthOp::Bmm: {
        auto v = ops("bmm", "RegisterCUDA.cpp");
        v.push_back({"??", "at::native::matmul(at::Tensor const&, at::Tensor const&)", 0});
        v.push_back({"python_variable_methods.cpp", "torch::autograd::THPVariable_matmul(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::Softmax: {
        auto v = ops("_softmax", "RegisterCUDA.cpp");
        v.push_back({"??", "at::native::softmax(at::Tensor const&, long, std::optional<c10::ScalarType>)", 0});
        v.push_back({"python_variable_methods.cpp", "torch::autograd::THPVariable_softmax(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::Dropout: {
        auto v = ops("native_dropout", "RegisterCUDA.cpp");
        v.insert(v.begin(), {"??", "at::native::dropout_cuda(at::CUDAGeneratorImpl*, at::Tensor const&, double, bool)", 0});
        v.push_back({"python_torch_functions_1.cpp", "torch::autograd::THPVariable_dropout(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::Gelu: {
        auto v = ops("gelu", "RegisterCUDA.cpp");
        v.push_back({"python_nn_functions.cpp", "torch::autograd::THPVariable_gelu(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::LogSoftmax: {
        auto v = ops("_log_softmax", "RegisterCUDA.cpp");
        v.push_back({"??", "at::native::cross_entropy_loss_symint(at::Tensor const&, at::Tensor const&, ...)", 0});
        v.push_back({"python_nn_functions.cpp", "torch::autograd::THPVariable_cross_entropy_loss(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::OnesLike:
        return {{"??", "at::native::ones_like(at::Tensor const&, ...)", 0}, {"??", "at::_ops::ones_like::call(...)", 0},
                {"??", "torch::autograd::(anonymous namespace)::_make_grads(...)", 0}};
    case SynthOp::ZerosLike:
        return {{"??", "at::native::zeros_like(at::Tensor const&, std::optional<c10::ScalarType>, ...)", 0},
                {"RegisterCompositeExplicitAutograd.cpp", "c10::impl::wrap_kernel_functor_unboxed_<...zeros_like...>::call(...)", 0},
                {"??", "at::_ops::zeros_like::call(at::Tensor const&, ...)", 0},
                {"python_torch_functions_0.cpp", "torch::autograd::THPVariable_zeros_like(_object*, _object*, _object*)", 0}};
    case SynthOp::Clone:
        return {{"??", "at::native::clone(at::Tensor const&, std::optional<c10::MemoryFormat>)", 0},
                {"??", "at::_ops::clone::call(at::Tensor const&, std::optional<c10::MemoryFormat>)", 0},
                {"python_variable_methods.cpp", "torch::autograd::THPVariable_clone(_object*, _object*, _object*)", 0}};
    case SynthOp::ForeachSqrt:
        return {{"??", "at::native::foreach_tensor_sqrt_cuda(c10::ArrayRef<at::Tensor>)", 0},
                {"RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA___foreach_sqrt(c10::ArrayRef<at::Tensor>)", 0},
                {"??", "at::_ops::_foreach_sqrt::call(c10::ArrayRef<at::Tensor>)", 0},
                {"python_torch_functions_2.cpp", "torch::autograd::THPVariable__foreach_sqrt(_object*, _object*, _object*)", 0}};
    case SynthOp::ForeachMul:
        return {{"??", "at::native::foreach_tensor_mul_scalar_kernel_cuda(c10::ArrayRef<at::Tensor>, c10::Scalar const&)", 0},
                {"??", "at::_ops::_foreach_mul_Scalar::call(c10::ArrayRef<at::Tensor>, c10::Scalar const&)", 0},
                {"python_torch_functions_2.cpp", "torch::autograd::THPVariable__foreach_mul(_object*, _object*, _object*)", 0}};
    // A collective is called from Python (torch.distributed's wrapper, under ZeRO's or FSDP's hook):
    // its Python frame is in every capture that keeps Python frames, the engine's thread included.
    case SynthOp::AllGather:
        return {{"??", "c10d::ProcessGroupNCCL::_allgather_base(at::Tensor&, at::Tensor&, c10d::AllgatherOptions const&)", 0},
                {"init.cpp", "c10d::(anonymous namespace)::_allgather_base_(...)", 0},
                {kTorch + "distributed/distributed_c10d.py", "all_gather_into_tensor", 3806}};
    case SynthOp::ReduceScatter:
        return {{"??", "c10d::ProcessGroupNCCL::_reduce_scatter_base(at::Tensor&, at::Tensor&, c10d::ReduceScatterOptions const&)", 0},
                {"init.cpp", "c10d::(anonymous namespace)::_reduce_scatter_base_(...)", 0},
                {kTorch + "distributed/distributed_c10d.py", "reduce_scatter_tensor", 4298}};
    case SynthOp::AutocastCast: {
        // The cast autocast makes, and caches, for the matmul it wraps (as the variant layers' casts).
        std::vector<Spec> v;
        for (const char* f : kAutocastCastFrames)
            v.push_back({"??", f, 0});
        v.push_back({"??", "at::_ops::linear::call(...)", 0});
        v.push_back({"python_nn_functions.cpp", "torch::autograd::THPVariable_linear(_object*, _object*, _object*)", 0});
        return v;
    }
    case SynthOp::Count:
        break;
    }
    return {};
}

std::vector<SynthStacks::Spec> SynthStacks::python(SynthSite site) const
{
    const std::string module = kTorch + "nn/modules/module.py";
    const std::string model = kUser + "model.py";
    const std::string train = kUser + "train.py";
    const std::vector<Spec> tail = {{train, "main", 212},
                                    {"??", "_PyEval_EvalFrameDefault", 0},
                                    {train, "<module>", 240},
                                    {"??", "_PyEval_EvalFrameDefault", 0},
                                    {"??", "PyEval_EvalCode", 0},
                                    {"??", "Py_RunMain", 0},
                                    {"??", "Py_BytesMain", 0},
                                    {"??", "__libc_start_main", 0},
                                    {"??", "_start", 0}};
    // nn.Module.__call__ as the interpreter shows it between two forward() frames.
    const std::vector<Spec> call = {{"??", "_PyEval_EvalFrameDefault", 0},
                                    {"??", "method_vectorcall.llvm.12275804309777372242", 0},
                                    {module, "_call_impl", 1750},
                                    {"??", "_PyEval_EvalFrameDefault", 0},
                                    {"??", "method_vectorcall.llvm.12275804309777372242", 0},
                                    {module, "_wrapped_call_impl", 1739},
                                    {"??", "_PyEval_EvalFrameDefault", 0},
                                    {"??", "_PyObject_Call_Prepend", 0},
                                    {"??", "slot_tp_call", 0}};
    std::vector<Spec> v;
    auto add = [&](const std::vector<Spec>& part) { v.insert(v.end(), part.begin(), part.end()); };
    auto gpt = [&](int64_t line) {
        // GPT.forward -> train_step; blocks run through checkpoint() when checkpointing.
        v.push_back({model, "forward", line});
        add(call);
        v.push_back({train, "train_step", 131});
        add(tail);
    };
    auto block = [&](int64_t line) {
        v.push_back({model, "forward", line});
        add(call);
        if (m_checkpointing) {
            v.push_back({kTorch + "utils/checkpoint.py", "checkpoint", 495});
            v.push_back({kTorch + "_compile.py", "inner", 32});
        }
        gpt(152);
    };
    auto linear = [&] {
        v.push_back({kTorch + "nn/modules/linear.py", "forward", 125});
        add(call);
    };
    switch (site) {
    case SynthSite::Batch:
        v.push_back({kUser + "data.py", "to_device", 41});
        v.push_back({train, "train_step", 127});
        add(tail);
        break;
    case SynthSite::GptEmbedding:
        v.push_back({kTorch + "nn/functional.py", "embedding", 2551});
        v.push_back({kTorch + "nn/modules/sparse.py", "forward", 190});
        add(call);
        gpt(147);
        break;
    case SynthSite::BlockLn1:
        v.push_back({kTorch + "nn/functional.py", "layer_norm", 2900});
        v.push_back({kTorch + "nn/modules/normalization.py", "forward", 217});
        add(call);
        block(96);
        break;
    case SynthSite::AttentionQkv:
        linear();
        v.push_back({model, "forward", 61});
        add(call);
        block(96);
        break;
    case SynthSite::Attention:
        v.push_back({kTorch + "nn/functional.py", "softmax", 2140});
        v.push_back({model, "forward", 65});
        add(call);
        block(96);
        break;
    case SynthSite::AttentionProj:
        linear();
        v.push_back({model, "forward", 68});
        add(call);
        block(96);
        break;
    case SynthSite::BlockLn2:
        v.push_back({kTorch + "nn/functional.py", "layer_norm", 2900});
        v.push_back({kTorch + "nn/modules/normalization.py", "forward", 217});
        add(call);
        block(97);
        break;
    case SynthSite::MlpFc:
        linear();
        v.push_back({model, "forward", 80});
        add(call);
        block(97);
        break;
    case SynthSite::MlpAct:
        v.push_back({kTorch + "nn/functional.py", "gelu", 1700});
        v.push_back({model, "forward", 81});
        add(call);
        block(97);
        break;
    case SynthSite::GptHead:
        linear();
        gpt(155);
        break;
    case SynthSite::Loss:
        v.push_back({kTorch + "nn/functional.py", "cross_entropy", 3479});
        v.push_back({train, "train_step", 133});
        add(tail);
        break;
    case SynthSite::RecomputeHook:
        v.push_back({model, "forward", 96});
        add(call);
        v.push_back({kTorch + "utils/checkpoint.py", "recompute_fn", 1127});
        v.push_back({kTorch + "utils/checkpoint.py", "unpack_hook", 1176});
        break;
    case SynthSite::OptimizerInit:
        v.push_back({m_optimizerFile, "_init_group", 113});
        v.push_back({m_optimizerFile, "step", 209});
        v.push_back({kTorch + "optim/optimizer.py", "_use_grad", 79});
        v.push_back({kTorch + "optim/optimizer.py", "wrapper", 493});
        v.push_back({train, "train_step", 146});
        add(tail);
        break;
    case SynthSite::OptimizerUpdate:
        v.push_back({m_optimizerFile, m_optimizerKernel, 580});
        v.push_back({kTorch + "optim/optimizer.py", "maybe_fallback", 154});
        v.push_back({m_optimizerFile, m_optimizerEntry, 352});
        v.push_back({m_optimizerFile, "step", 215});
        v.push_back({kTorch + "optim/optimizer.py", "_use_grad", 79});
        v.push_back({kTorch + "optim/optimizer.py", "wrapper", 493});
        v.push_back({train, "train_step", 146});
        add(tail);
        break;
    case SynthSite::ZeroGrad:
        v.push_back({kTorch + "optim/optimizer.py", "zero_grad", 980});
        v.push_back({kTorch + "_compile.py", "inner", 32});
        v.push_back({train, "train_step", 124});
        add(tail);
        break;
    case SynthSite::ShardGather:
        v.push_back({kTorch + "distributed/distributed_c10d.py", "all_gather_into_tensor", 3705});
        v.push_back({kUser + "zero.py", "gather_params", 58});
        v.push_back({model, "forward", 96});
        add(call);
        gpt(152);
        break;
    case SynthSite::LeakCache:
        v.push_back({train, "train_step", 138});
        add(tail);
        break;
    case SynthSite::LeakHook:
        // Forward hooks run inside nn.Module._call_impl, after the module's forward returned.
        v.push_back({model, "capture_output", 40});
        v.push_back({module, "_call_impl", 1790});
        v.push_back({"??", "_PyEval_EvalFrameDefault", 0});
        v.push_back({module, "_wrapped_call_impl", 1739});
        gpt(152);
        break;
    case SynthSite::WarmupBuffer:
        v.push_back({model, "_causal_mask", 120});
        gpt(149);
        break;
    case SynthSite::MemoryBank:
        v.push_back({kUser + "bank.py", "push", 22});
        v.push_back({train, "train_step", 140});
        add(tail);
        break;
    case SynthSite::BackwardEngine:
    case SynthSite::AccumulateGrad:
    case SynthSite::Count:
        break;
    }
    return v;
}

std::vector<SynthStacks::Spec> SynthStacks::python(SynthOp op, SynthSite site) const
{
    std::vector<Spec> v = python(site);
    const bool library = !v.empty() && v.front().file.starts_with(kTorch);
    // The library's frames innermost (and the interpreter's between them), down to the user's line.
    auto dropLibraryFrames = [](std::vector<Spec>& frames) {
        while (!frames.empty() && (frames.front().file.starts_with(kTorch) || frames.front().file == "??"))
            frames.erase(frames.begin());
    };
    if (op == SynthOp::ToDevice && library &&
        (site == SynthSite::AttentionQkv || site == SynthSite::AttentionProj || site == SynthSite::MlpFc ||
         site == SynthSite::GptHead)) {
        // An explicit weight cast (`w = self.c_attn.weight.to(torch.bfloat16)`) is Tensor.to, a C method,
        // on a line of the user's own before the layer's call: nn.Linear.forward never calls .to(). Under
        // linear.py only autocast casts (at::autocast::cached_cast), and a Python-only capture of this
        // model must not look like one.
        dropLibraryFrames(v);
        if (!v.empty())
            --v.front().line;
    } else if (op == SynthOp::Bmm && site == SynthSite::Attention && library) {
        // q @ k.T and attn @ v are Tensor.__matmul__, a C method: the user's line is their innermost
        // Python frame, not F.softmax's, whose call on the same line is another call.
        v.erase(v.begin());
    } else if (op == SynthOp::Dropout && (site == SynthSite::Attention || site == SynthSite::AttentionProj || site == SynthSite::MlpAct)) {
        // self.attn_dropout(att) / self.resid_dropout(...): nn.Dropout.forward calls F.dropout, which
        // calls _VF.dropout (torch/nn/modules/dropout.py:70 -> torch/nn/functional.py:1425, as a real
        // traceback shows them), on the user's line: never inside F.softmax, nn.Linear or F.gelu.
        dropLibraryFrames(v);
        const std::vector<Spec> dropout = {{kTorch + "nn/functional.py", "dropout", 1425},
                                           {kTorch + "nn/modules/dropout.py", "forward", 70},
                                           {"??", "_PyEval_EvalFrameDefault", 0},
                                           {"??", "method_vectorcall.llvm.12275804309777372242", 0},
                                           {kTorch + "nn/modules/module.py", "_call_impl", 1750},
                                           {"??", "_PyEval_EvalFrameDefault", 0},
                                           {"??", "method_vectorcall.llvm.12275804309777372242", 0},
                                           {kTorch + "nn/modules/module.py", "_wrapped_call_impl", 1739},
                                           {"??", "_PyEval_EvalFrameDefault", 0},
                                           {"??", "_PyObject_Call_Prepend", 0},
                                           {"??", "slot_tp_call", 0}};
        v.insert(v.begin(), dropout.begin(), dropout.end());
    }
    return v;
}

namespace {

const std::vector<std::pair<const char*, const char*>> kAllocFrames = {
    {"??", "torch::unwind::unwind()"},
    {"??", "torch::CapturedTraceback::gather(bool, bool, bool)"},
    {"memory_snapshot.cpp", "torch::cuda::(anonymous namespace)::gather_with_cpp()"},
    {"CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"},
    {"", "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)"},
    {"", "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
    {"", "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)"},
    {"??", "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)"}};

const std::vector<std::pair<const char*, const char*>> kFreeFrames = {
    {"??", "torch::unwind::unwind()"},
    {"??", "torch::CapturedTraceback::gather(bool, bool, bool)"},
    {"memory_snapshot.cpp", "torch::cuda::(anonymous namespace)::gather_with_cpp()"},
    {"CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*)"},
    {"", "c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)"},
    {"??", "c10::StorageImpl::~StorageImpl()"},
    {"??", "c10::intrusive_ptr<c10::StorageImpl, c10::detail::intrusive_target_default_null_type<c10::StorageImpl> >::reset_()"},
    {"??", "c10::TensorImpl::~TensorImpl()"},
    {"??", "c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reset_()"},
    {"??", "at::Tensor::~Tensor()"}};

const std::vector<std::pair<const char*, const char*>> kEngineFrames = {
    {"", "torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"},
    {"??", "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)"},
    {"??", "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"},
    {"??", "torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)"},
    {"??", "torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)"},
    {"thread48.o", "execute_native_thread_routine"}};

const char* backwardNode(SynthOp op)
{
    switch (op) {
    case SynthOp::Linear: return "AddmmBackward0";
    case SynthOp::LayerNorm: return "NativeLayerNormBackward0";
    case SynthOp::Bmm: return "BmmBackward0";
    case SynthOp::Softmax: return "SoftmaxBackward0";
    case SynthOp::Dropout: return "NativeDropoutBackward0";
    case SynthOp::Gelu: return "GeluBackward0";
    case SynthOp::LogSoftmax: return "LogSoftmaxBackward0";
    case SynthOp::Embedding: return "EmbeddingBackward0";
    case SynthOp::Add: return "AddBackward0";
    default: return "MulBackward0";
    }
}

} // namespace

StackId SynthStacks::alloc(SynthOp op, SynthSite site)
{
    const uint32_t key = (uint32_t(op) << 8) | uint32_t(site);
    if (auto it = m_cache.find(key); it != m_cache.end())
        return it->second;
    std::vector<Spec> v;
    for (const auto& [f, n] : kAllocFrames)
        v.push_back({f, n, 0});
    for (auto& s : opFrames(op))
        v.push_back(std::move(s));
    if (site == SynthSite::RecomputeHook) {
        for (auto& s : python(site))
            v.push_back(std::move(s));
        v.push_back({"??", "torch::autograd::PySavedVariableHooks::call_unpack_hook()", 0});
        v.push_back({"??", "torch::autograd::SavedVariable::unpack(std::shared_ptr<torch::autograd::Node>) const", 0});
        v.push_back({"??", std::string("torch::autograd::generated::") + backwardNode(op) + "::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)", 0});
        for (const auto& [f, n] : kEngineFrames)
            v.push_back({f, n, 0});
    } else {
        for (auto& s : python(op, site))
            v.push_back(std::move(s));
    }
    return m_cache[key] = build(v);
}

StackId SynthStacks::backwardAlloc(SynthOp op)
{
    const uint32_t key = 0x10000u | uint32_t(op);
    if (auto it = m_cache.find(key); it != m_cache.end())
        return it->second;
    std::vector<Spec> v;
    for (const auto& [f, n] : kAllocFrames)
        v.push_back({f, n, 0});
    if (op == SynthOp::Clone) {
        // A gradient the engine cannot steal is cloned into .grad by AccumulateGrad.
        v.push_back({"??", "at::native::clone(at::Tensor const&, std::optional<c10::MemoryFormat>)", 0});
        v.push_back({"??", "at::_ops::clone::call(at::Tensor const&, std::optional<c10::MemoryFormat>)", 0});
        v.push_back({"??", "void torch::autograd::AccumulateGrad::accumulateGrad<...>(at::Tensor const&, at::Tensor&, at::Tensor const&, unsigned long, ...)", 0});
        v.push_back({"??", "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)", 0});
    } else {
        // The node runs ordinary operators through the dispatcher.
        for (auto& s : opFrames(op == SynthOp::Linear ? SynthOp::Bmm : op))
            v.push_back(std::move(s));
        v.push_back({"??", std::string("at::_ops::") + (op == SynthOp::Linear ? "mm" : "mul_Tensor") + "::call(...)", 0});
        v.push_back({"??", std::string("torch::autograd::generated::details::") + (op == SynthOp::Linear ? "mm_mat2_backward" : "grad_input") + "(...)", 0});
        v.push_back({"??", std::string("torch::autograd::generated::") + backwardNode(op) + "::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)", 0});
    }
    for (const auto& [f, n] : kEngineFrames)
        v.push_back({f, n, 0});
    return m_cache[key] = build(v);
}

StackId SynthStacks::free(SynthSite site)
{
    const uint32_t key = 0x20000u | uint32_t(site);
    if (auto it = m_cache.find(key); it != m_cache.end())
        return it->second;
    std::vector<Spec> v;
    for (const auto& [f, n] : kFreeFrames)
        v.push_back({f, n, 0});
    if (site == SynthSite::BackwardEngine || site == SynthSite::AccumulateGrad) {
        v.push_back({"??", "torch::autograd::SavedVariable::reset_data()", 0});
        v.push_back({"??", "torch::autograd::generated::AddmmBackward0::release_variables()", 0});
        for (const auto& [f, n] : kEngineFrames)
            v.push_back({f, n, 0});
    } else {
        // The last reference dropped by the interpreter.
        v.push_back({"python_variable.cpp", "THPVariable_subclass_dealloc(_object*)", 0});
        v.push_back({"??", "_Py_Dealloc", 0});
        for (auto& s : python(site))
            v.push_back(std::move(s));
    }
    return m_cache[key] = build(v);
}

} // namespace poolscope
