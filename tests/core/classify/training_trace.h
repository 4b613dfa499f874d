#pragma once
// A training-loop trace builder for classifier tests: it writes the events, frames, annotations and
// final segments a PyTorch training loop leaves in a snapshot, and remembers the pool it meant for
// every allocation. Frames imitate real dumps (innermost first; C++ frames with filename "??"; with
// stacks='python' the autograd engine's events have no frames at all). Addresses are never reused,
// so the truth can be keyed by address. Synthetic, small, deterministic.
#include "core/classify/pool.h"
#include "core/model/trace.h"
#include "core/model/trace_builder.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace poolscope::testing {

enum class StackMode { All, PythonOnly };

struct TrainingOptions {
    int steps = 2;
    int layers = 6;
    int microBatches = 1;
    int64_t paramBytes = int64_t(8) << 20; // a layer's weight; layers vary it
    int64_t activationBytes = int64_t(4) << 20;
    StackMode stacks = StackMode::All;
    bool withTime = true;    // time_us on events
    bool annotations = true; // Optimizer.step / zero_grad windows (needs withTime)
    bool adam = true;        // two state buffers per parameter; false: SGD with momentum (one)
    bool checkpointing = false;
    bool paramsBeforeRecording = true; // else nn.Module.to() in the trace
    bool steadyState = false;          // recording starts after a step: state and grads predate it
    bool workspace = true;             // a cuBLAS workspace
    bool forwardOnly = false;          // inference: forward passes, no backward, no step
    bool distinctLayerFrames = false;  // each layer's forward on its own source line (many frames)
};

struct TrainingTrace {
    std::shared_ptr<Trace> trace;
    std::map<uint64_t, Pool> truthByAddress;
    std::vector<Pool> truth; // per allocation of devices[0], after finalizeDevice
};

class TrainingTraceBuilder {
public:
    explicit TrainingTraceBuilder(TrainingOptions o);
    TrainingTrace build();

private:
    struct Live {
        int64_t size;
        Pool pool;
    };
    struct Param {
        uint64_t weight = 0, grad = 0, state1 = 0, state2 = 0;
        int64_t size = 0;
    };
    FrameId frame(const char* file, const char* name, int line = 0);
    StackId stack(std::vector<FrameId> innermostFirst);
    StackId python(std::vector<FrameId> pythonInnermostFirst, std::vector<FrameId> cpp = {});
    StackId engine(const char* node);

    uint64_t alloc(int64_t size, Pool pool, StackId st);
    void free(uint64_t addr, StackId st);
    uint64_t preexisting(int64_t size, Pool pool);
    void annotate(const std::string& name, bool start);
    void step(int s, bool recordZeroGrad);
    void forward(std::vector<uint64_t>& saved, std::vector<uint64_t>& checkpointInputs);
    void backward(std::vector<uint64_t>& saved, std::vector<uint64_t>& checkpointInputs, bool firstMicroBatch);
    void optimizerStep();

    TrainingOptions m_o;
    std::shared_ptr<Trace> m_trace;
    DeviceTrace* m_dev = nullptr;
    uint64_t m_nextAddress = 0x7f0000000000;
    int64_t m_time = 1700000000000000;
    std::map<uint64_t, Live> m_live;
    std::map<uint64_t, Live> m_preexistingLive;
    std::map<uint64_t, Pool> m_truth;
    std::vector<Param> m_params;
    bool m_stateExists = false;
    uint64_t m_workspace = 0;
    // Frames used everywhere.
    FrameId m_malloc, m_train, m_module, m_callImpl, m_wrappedCall, m_forward, m_opMm;
};

inline std::string torchFile(const char* rel) { return std::string("/env/lib/python3.11/site-packages/torch/") + rel; }

inline TrainingTraceBuilder::TrainingTraceBuilder(TrainingOptions o) : m_o(o)
{
    m_trace = std::make_shared<Trace>();
    m_trace->path = "synthetic-training";
    m_trace->devices.emplace_back();
    m_dev = &m_trace->devices.back();
    m_malloc = frame("CUDACachingAllocator.cpp",
                     "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)");
    m_train = frame("/home/user/project/train.py", "train", 57);
    m_module = frame("/home/user/project/model.py", "forward", 31);
    m_callImpl = frame(torchFile("nn/modules/module.py").c_str(), "_call_impl", 1750);
    m_wrappedCall = frame(torchFile("nn/modules/module.py").c_str(), "_wrapped_call_impl", 1739);
    m_forward = frame("/home/user/project/model.py", "forward", 88);
    m_opMm = frame("??", "at::native::structured_mm_out_cuda::impl(at::Tensor const&, at::Tensor const&, at::Tensor const&)");
}

inline FrameId TrainingTraceBuilder::frame(const char* file, const char* name, int line)
{
    return m_trace->frames.internFrame(file, name, line);
}

inline StackId TrainingTraceBuilder::stack(std::vector<FrameId> innermostFirst)
{
    return m_trace->frames.internStack(innermostFirst);
}

// A stack as a dump records it: with stacks='all' the allocator's and the operator's C++ frames come
// first (innermost), then the Python frames, then the interpreter's own frames.
inline StackId TrainingTraceBuilder::python(std::vector<FrameId> py, std::vector<FrameId> cpp)
{
    std::vector<FrameId> s;
    if (m_o.stacks == StackMode::All) {
        s.push_back(m_malloc);
        s.insert(s.end(), cpp.begin(), cpp.end());
    }
    s.insert(s.end(), py.begin(), py.end());
    s.push_back(m_train);
    s.push_back(frame("/home/user/project/train.py", "<module>", 120));
    if (m_o.stacks == StackMode::All)
        s.push_back(frame("??", "_start"));
    return stack(s);
}

// The autograd engine runs on its own thread: no Python frames, so with stacks='python' no frames.
inline StackId TrainingTraceBuilder::engine(const char* node)
{
    if (m_o.stacks == StackMode::PythonOnly)
        return StackId{};
    return stack({m_malloc, m_opMm, frame("??", node),
                  frame("??", "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, "
                              "torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)"),
                  frame("??", "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
                  frame("??", "start_thread")});
}

inline uint64_t TrainingTraceBuilder::alloc(int64_t size, Pool pool, StackId st)
{
    const uint64_t addr = m_nextAddress;
    m_nextAddress += uint64_t((size + 511) / 512 * 512) + (uint64_t(1) << 21);
    const int64_t rounded = (size + 511) / 512 * 512;
    m_dev->events.push(Action::SegmentAlloc, addr, rounded, 0, m_o.withTime ? m_time : kNoTime, st);
    m_time += 3;
    m_dev->events.push(Action::Alloc, addr, size, 0, m_o.withTime ? m_time : kNoTime, st);
    m_time += 7;
    m_live[addr] = Live{size, pool};
    m_truth[addr] = pool;
    return addr;
}

inline void TrainingTraceBuilder::free(uint64_t addr, StackId st)
{
    int64_t size = 0;
    if (auto it = m_live.find(addr); it != m_live.end()) {
        size = it->second.size;
        m_live.erase(it);
    } else if (auto pit = m_preexistingLive.find(addr); pit != m_preexistingLive.end()) {
        size = pit->second.size;
        m_preexistingLive.erase(pit);
    } else {
        return;
    }
    const int64_t t = m_o.withTime ? m_time : kNoTime;
    m_dev->events.push(Action::FreeRequested, addr, size, 0, t, st);
    m_dev->events.push(Action::FreeCompleted, addr, size, 0, t + 1, st);
    m_dev->events.push(Action::SegmentFree, addr, (size + 511) / 512 * 512, 0, t + 2, st);
    m_time += 10;
}

inline uint64_t TrainingTraceBuilder::preexisting(int64_t size, Pool pool)
{
    const uint64_t addr = m_nextAddress;
    m_nextAddress += uint64_t((size + 511) / 512 * 512) + (uint64_t(1) << 21);
    m_preexistingLive[addr] = Live{size, pool};
    m_truth[addr] = pool;
    return addr;
}

inline void TrainingTraceBuilder::annotate(const std::string& name, bool start)
{
    if (!m_o.annotations || !m_o.withTime)
        return;
    m_trace->annotations.push_back(Annotation{name, start, 0, m_time});
    m_time += 2;
}

inline void TrainingTraceBuilder::forward(std::vector<uint64_t>& saved, std::vector<uint64_t>& checkpointInputs)
{
    const FrameId ckpt = frame(torchFile("utils/checkpoint.py").c_str(), "checkpoint", 495);
    const FrameId mm = frame("??", "torch::autograd::THPVariable_matmul(_object*, _object*, _object*)");
    for (int l = 0; l < m_o.layers; ++l) {
        auto fwd = [&] {
            const FrameId layerForward = m_o.distinctLayerFrames ? frame("/home/user/project/model.py", "forward", 100 + l) : m_forward;
            std::vector<FrameId> py{layerForward, m_callImpl, m_wrappedCall, m_module, m_callImpl, m_wrappedCall};
            if (m_o.checkpointing)
                py.push_back(ckpt);
            return python(py, {m_opMm, mm});
        }();
        if (m_o.workspace && !m_workspace)
            m_workspace = alloc(int64_t(32) << 20, Pool::Workspace,
                                python({m_forward, m_callImpl}, {frame("??", "at::cuda::getCurrentCUDABlasHandle()"), m_opMm}));
        const int64_t act = m_o.activationBytes + int64_t(l % 3) * (int64_t(1) << 20);
        const uint64_t tmp = alloc(act / 2, Pool::Temporary, fwd);
        if (m_o.checkpointing) {
            checkpointInputs.push_back(alloc(act / 4, Pool::Activation, fwd));
            const uint64_t inner = alloc(act, Pool::Temporary, fwd); // not saved: recomputed in backward
            free(inner, fwd);
        } else {
            saved.push_back(alloc(act, Pool::Activation, fwd));
            saved.push_back(alloc(act / 8 + 4096, Pool::Activation, fwd));
        }
        free(tmp, fwd);
    }
}

inline void TrainingTraceBuilder::backward(std::vector<uint64_t>& saved, std::vector<uint64_t>& checkpointInputs, bool firstMicroBatch)
{
    const FrameId tensorBackward = frame(torchFile("_tensor.py").c_str(), "backward", 626);
    const FrameId autogradBackward = frame(torchFile("autograd/__init__.py").c_str(), "backward", 347);
    const FrameId makeGrads = frame(torchFile("autograd/__init__.py").c_str(), "_make_grads", 220);
    // loss.backward() starts on the Python side: the seed gradient has Python frames.
    const uint64_t seed = alloc(4, Pool::Temporary, python({makeGrads, autogradBackward, tensorBackward}));
    const StackId mmNode = engine("torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)");
    const StackId mulNode = engine("torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)");
    const FrameId unpack = frame(torchFile("utils/checkpoint.py").c_str(), "unpack_hook", 1124);
    std::vector<uint64_t> flowing;
    for (int l = m_o.layers - 1; l >= 0; --l) {
        const int64_t act = m_o.activationBytes + int64_t(l % 3) * (int64_t(1) << 20);
        std::vector<uint64_t> recomputed;
        if (m_o.checkpointing) {
            // Recomputation runs the module's forward inside the engine: forward frames below the
            // checkpoint's unpack hook (the engine's C++ frames are not visible from Python).
            const StackId re = python({m_forward, m_callImpl, m_wrappedCall, unpack});
            recomputed.push_back(alloc(act, Pool::Activation, re));
            recomputed.push_back(alloc(act / 8 + 4096, Pool::Activation, re));
        }
        const uint64_t g = alloc(act, Pool::Temporary, mulNode); // gradient of the layer's input
        flowing.push_back(g);
        Param& p = m_params[size_t(l)];
        if (firstMicroBatch && !p.grad)
            p.grad = alloc(p.size, Pool::Gradient, mmNode); // AccumulateGrad steals the fresh buffer
        if (!m_o.checkpointing) {
            free(saved.back(), mulNode);
            saved.pop_back();
            free(saved.back(), mulNode);
            saved.pop_back();
        } else {
            for (auto r : recomputed)
                free(r, mulNode);
            free(checkpointInputs.back(), mulNode);
            checkpointInputs.pop_back();
        }
        if (flowing.size() > 2) {
            free(flowing.front(), mulNode);
            flowing.erase(flowing.begin());
        }
    }
    for (auto g : flowing)
        free(g, mulNode);
    free(seed, python({autogradBackward, tensorBackward}));
}

inline void TrainingTraceBuilder::optimizerStep()
{
    const char* name = m_o.adam ? "Optimizer.step#AdamW.step" : "Optimizer.step#SGD.step";
    annotate(name, true);
    const FrameId wrapper = frame(torchFile("optim/optimizer.py").c_str(), "wrapper", 493);
    const FrameId stepFn = frame(torchFile(m_o.adam ? "optim/adamw.py" : "optim/sgd.py").c_str(), "step", 209);
    const FrameId initGroup = frame(torchFile(m_o.adam ? "optim/adamw.py" : "optim/sgd.py").c_str(), "_init_group", 151);
    const FrameId single = frame(torchFile(m_o.adam ? "optim/adamw.py" : "optim/sgd.py").c_str(),
                                 m_o.adam ? "_single_tensor_adamw" : "_single_tensor_sgd", 400);
    const FrameId zerosLike = frame("??", "at::native::zeros_like(at::Tensor const&, std::optional<c10::ScalarType>)");
    const FrameId mul = frame("??", "at::native::mul(at::Tensor const&, at::Tensor const&)");
    for (auto& p : m_params) {
        if (!m_stateExists) {
            const StackId init = python({initGroup, stepFn, wrapper}, {zerosLike});
            if (m_o.adam) {
                p.state1 = alloc(p.size, Pool::OptimizerState, init);
                p.state2 = alloc(p.size, Pool::OptimizerState, init);
            } else {
                p.state1 = alloc(p.size, Pool::OptimizerState, python({single, stepFn, wrapper}, {mul}));
            }
        }
        const StackId upd = python({single, stepFn, wrapper}, {mul});
        const uint64_t denom = alloc(p.size, Pool::Temporary, upd);
        free(denom, upd);
    }
    m_stateExists = true;
    annotate(name, false);
}

inline void TrainingTraceBuilder::step(int s, bool recordZeroGrad)
{
    (void)s;
    const FrameId zeroGrad = frame(torchFile("optim/optimizer.py").c_str(), "zero_grad", 957);
    if (recordZeroGrad && !m_o.forwardOnly) {
        annotate("Optimizer.zero_grad#AdamW.zero_grad", true);
        for (auto& p : m_params)
            if (p.grad) {
                free(p.grad, python({zeroGrad}));
                p.grad = 0;
            }
        annotate("Optimizer.zero_grad#AdamW.zero_grad", false);
    }
    const FrameId prepare = frame("/env/lib/python3.11/site-packages/transformers/trainer.py", "_prepare_input", 3100);
    const FrameId to = frame("python_variable_methods.cpp", "torch::autograd::THPVariable_to(_object*, _object*, _object*)");
    for (int m = 0; m < m_o.microBatches; ++m) {
        const uint64_t batch = alloc(int64_t(1) << 20, Pool::Input, python({prepare}, {to}));
        std::vector<uint64_t> saved, ckpt;
        forward(saved, ckpt);
        const uint64_t loss = alloc(2048, Pool::Activation, python({frame("/home/user/project/train.py", "compute_loss", 44)}));
        if (m_o.forwardOnly) {
            // Inference keeps the outputs until the next batch; nothing is saved for backward.
            for (auto a : saved)
                m_truth[a] = Pool::Activation;
            continue;
        }
        backward(saved, ckpt, m == 0);
        free(loss, python({}));
        free(batch, python({}));
    }
    if (!m_o.forwardOnly)
        optimizerStep();
}

inline TrainingTrace TrainingTraceBuilder::build()
{
    const FrameId apply = frame(torchFile("nn/modules/module.py").c_str(), "_apply", 928);
    const FrameId to = frame(torchFile("nn/modules/module.py").c_str(), "to", 1343);
    for (int l = 0; l < m_o.layers; ++l) {
        Param p;
        p.size = m_o.paramBytes * (1 + l % 3) + (l % 2 ? 4096 : 0);
        if (m_o.paramsBeforeRecording || m_o.steadyState)
            p.weight = preexisting(p.size, Pool::Parameter);
        else
            p.weight = alloc(p.size, Pool::Parameter, python({apply, to}));
        m_params.push_back(p);
    }
    if (m_o.steadyState && !m_o.forwardOnly) {
        // Recording began after a step: the optimizer state and the gradients predate it, without
        // stacks (recording was off when they were allocated); zero_grad frees the gradients.
        for (auto& p : m_params) {
            p.grad = preexisting(p.size, Pool::Gradient);
            p.state1 = preexisting(p.size, Pool::OptimizerState);
            if (m_o.adam)
                p.state2 = preexisting(p.size, Pool::OptimizerState);
        }
        m_stateExists = true;
    }
    for (int s = 0; s < m_o.steps; ++s)
        step(s, s > 0 || m_o.steadyState);

    // Final segments: one per live block, each with its active block. Blocks allocated before
    // recording have no stack.
    auto addSegment = [&](uint64_t addr, int64_t size) {
        Segment seg;
        seg.address = addr;
        seg.totalSize = (size + 511) / 512 * 512;
        seg.allocatedSize = seg.totalSize;
        seg.activeSize = seg.totalSize;
        seg.requestedSize = size;
        Block b;
        b.address = addr;
        b.size = seg.totalSize;
        b.requestedSize = size;
        b.state = BlockState::ActiveAllocated;
        seg.blocks.push_back(b);
        m_dev->segments.push_back(std::move(seg));
    };
    for (const auto& [addr, l] : m_live)
        addSegment(addr, l.size);
    for (const auto& [addr, l] : m_preexistingLive)
        addSegment(addr, l.size);
    finalizeDevice(*m_dev, m_trace->warnings);

    TrainingTrace out;
    out.trace = m_trace;
    out.truthByAddress = m_truth;
    for (const auto& a : m_dev->allocations) {
        auto it = m_truth.find(a.address);
        out.truth.push_back(it == m_truth.end() ? Pool::Unknown : it->second);
    }
    return out;
}

inline TrainingTrace makeTrainingTrace(const TrainingOptions& o)
{
    return TrainingTraceBuilder(o).build();
}

} // namespace poolscope::testing
