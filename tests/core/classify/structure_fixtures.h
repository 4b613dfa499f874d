#pragma once
// Small hand-made histories for the classes of issue 22, each with the true pool of every allocation.
// Frames follow the real allocation sites (torch/nn/modules/module.py _apply, torch/autograd
// functional.py jvp, ...), but every file and function of the user's own code has a name no rule
// knows, so what decides is the run's structure. Python frames only, as stacks='python' records.
#include "core/classify/pool.h"
#include "core/model/trace.h"
#include "core/model/trace_builder.h"

#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace poolscope::testing {

struct Fixture {
    std::shared_ptr<const Trace> trace;
    std::vector<Pool> truth; // per allocation of device 0
};

class FixtureRecorder {
public:
    using F = std::tuple<std::string, std::string, int64_t>;
    StackId stack(const std::vector<F>& frames)
    {
        std::vector<FrameId> ids;
        for (const auto& [file, name, line] : frames)
            ids.push_back(m_trace->frames.internFrame(file, name, line));
        return m_trace->frames.internStack(ids);
    }
    uint64_t alloc(int64_t bytes, StackId st, Pool truth)
    {
        const uint64_t addr = m_next;
        m_next += uint64_t((bytes + 511) / 512 * 512);
        push(Action::Alloc, addr, bytes, st);
        m_truth[m_dev.events.count() - 1] = truth;
        m_size[addr] = bytes;
        return addr;
    }
    void free(uint64_t addr, StackId st = {})
    {
        push(Action::FreeRequested, addr, m_size[addr], st);
        push(Action::FreeCompleted, addr, m_size[addr], st);
    }
    // The allocator's OOM entry (addr holds the device's free bytes, as PyTorch records them).
    void oom(int64_t bytes, int64_t deviceFree = 0) { push(Action::Oom, uint64_t(deviceFree), bytes, {}); }
    size_t eventCount() const { return m_dev.events.count(); }
    void annotate(const std::string& name, bool start) { m_trace->annotations.push_back(Annotation{name, start, 0, m_time += 3}); }
    Fixture finish()
    {
        finalizeDevice(m_dev, m_trace->warnings);
        Fixture f;
        for (const Allocation& a : m_dev.allocations)
            f.truth.push_back(a.allocEvent >= 0 ? m_truth[size_t(a.allocEvent)] : Pool::Unknown);
        m_trace->devices.push_back(std::move(m_dev));
        f.trace = m_trace;
        return f;
    }

private:
    void push(Action a, uint64_t addr, int64_t bytes, StackId st)
    {
        m_dev.events.push(a, addr, bytes, 0, m_time += 7, st);
    }
    std::shared_ptr<Trace> m_trace = std::make_shared<Trace>();
    DeviceTrace m_dev;
    std::unordered_map<size_t, Pool> m_truth;
    std::unordered_map<uint64_t, int64_t> m_size;
    uint64_t m_next = 0x7f0000000000;
    int64_t m_time = 1748730219000000;
};

inline const std::string kT = "/usr/lib/python3/site-packages/torch/";
inline const std::vector<FixtureRecorder::F> kCall = {{kT + "nn/modules/module.py", "_wrapped_call_impl", 1736},
                                                      {kT + "nn/modules/module.py", "_call_impl", 1747}};

template <typename... V>
std::vector<FixtureRecorder::F> frames(std::initializer_list<FixtureRecorder::F> inner, const V&... outer)
{
    std::vector<FixtureRecorder::F> out(inner);
    (out.insert(out.end(), outer.begin(), outer.end()), ...);
    return out;
}

// A model of `n` weights built by the user's own module (constructor frames), as a list of sizes.
inline std::vector<uint64_t> buildModel(FixtureRecorder& r, const std::vector<int64_t>& sizes)
{
    std::vector<uint64_t> w;
    for (size_t k = 0; k < sizes.size(); ++k)
        w.push_back(r.alloc(sizes[k],
                            r.stack({{kT + "nn/init.py", "kaiming_uniform_", 459},
                                     {"/home/u/qzx/blk.py", "__init__", int64_t(20 + k % 3)},
                                     {"/home/u/qzx/run_a.py", "<module>", 12}}),
                            Pool::Parameter));
    return w;
}

// 1. A model moved with .to() while its parameters held .grad (nn.Module._apply moves each .grad
//    from its own line), in a recording of the move.
inline Fixture movedWithGradients()
{
    FixtureRecorder r;
    const std::vector<int64_t> sizes = {4 << 20, 4 << 20, 16 << 10, 12 << 20, 12 << 20, 48 << 10, 4 << 20};
    auto at = [&](int64_t line) {
        return r.stack({{kT + "nn/modules/module.py", "convert", 1357},
                        {kT + "nn/modules/module.py", "_apply", line},
                        {kT + "nn/modules/module.py", "_apply", 930},
                        {kT + "nn/modules/module.py", "to", 1371},
                        {"/home/u/qzx/evalr.py", "go", 359}});
    };
    for (int64_t s : sizes) {
        r.alloc(s, at(957), Pool::Parameter);
        r.alloc(s, at(998), Pool::Gradient);
    }
    r.alloc(2048, at(1022), Pool::Parameter); // a buffer
    r.alloc(2048, at(1022), Pool::Parameter);
    return r.finish();
}

// 2. A generate() loop without backward whose cache is the user's own class: each forward makes the
//    cache one token longer (torch.cat) and lets go of the previous one.
inline Fixture homeMadeKvCache()
{
    FixtureRecorder r;
    buildModel(r, {8 << 20, 8 << 20, 8 << 20, 32 << 20});
    const auto fwd = [&](int64_t line) { return r.stack(frames({{"/home/u/qzx/blk.py", "forward", line}}, kCall, std::vector<FixtureRecorder::F>{{"/home/u/qzx/gen.py", "loop", 40}})); };
    const auto caller = r.stack({{"/home/u/qzx/gen.py", "loop", 44}});
    std::vector<uint64_t> cache;
    for (int step = 0; step < 6; ++step) {
        std::vector<uint64_t> next;
        for (int layer = 0; layer < 4; ++layer)
            next.push_back(r.alloc(int64_t(step + 1) << 20, fwd(77), Pool::KvCache));
        for (uint64_t old : cache)
            r.free(old, fwd(78));
        const uint64_t tmp = r.alloc(3 << 20, fwd(80), Pool::Temporary);
        r.free(tmp, fwd(81));
        const uint64_t logits = r.alloc(2 << 20, fwd(90), Pool::Activation);
        r.free(logits, caller);
        cache = next;
    }
    return r.finish();
}

// 3. A cuBLAS workspace seen with Python frames only (linear.py forward), beside a weight of the
//    same size made in a constructor.
inline Fixture workspaceUnderPythonFrames()
{
    FixtureRecorder r;
    buildModel(r, {8519680, 4 << 20});
    const auto fwd = r.stack(frames({{kT + "nn/modules/linear.py", "forward", 125}}, kCall, std::vector<FixtureRecorder::F>{{"/home/u/qzx/sample.py", "denoise", 30}}));
    const auto caller = r.stack({{"/home/u/qzx/sample.py", "denoise", 33}});
    for (int step = 0; step < 3; ++step) {
        if (step == 0)
            r.alloc(8519680, fwd, Pool::Workspace);
        const uint64_t out = r.alloc(1 << 20, fwd, Pool::Activation);
        r.free(out, caller);
    }
    return r.finish();
}

// 4. Training with torch.autograd.functional.jvp inside the forward, then the training backward.
inline Fixture jvpInsideForward()
{
    FixtureRecorder r;
    const auto w = buildModel(r, {4 << 20, 4 << 20});
    const std::vector<FixtureRecorder::F> outerFwd = {{"/home/u/qzx/dif.py", "forward", 50}};
    const auto jvp = r.stack(frames({{kT + "autograd/__init__.py", "grad", 496}, {kT + "autograd/functional.py", "_autograd_grad", 192},
                                     {kT + "autograd/functional.py", "jvp", 405}, {"/home/u/qzx/dif.py", "t_dir", 61}},
                                    outerFwd, kCall, std::vector<FixtureRecorder::F>{{"/home/u/qzx/train.py", "fit", 9}}));
    const auto fwd = r.stack(frames({{"/home/u/qzx/dif.py", "forward", 55}}, kCall, std::vector<FixtureRecorder::F>{{"/home/u/qzx/train.py", "fit", 9}}));
    const auto bwd = r.stack({{kT + "autograd/graph.py", "_engine_run_backward", 768}, {kT + "_tensor.py", "backward", 581},
                              {"/home/u/qzx/train.py", "fit", 11}});
    const auto engine = StackId{};
    const uint64_t a = r.alloc(6 << 20, jvp, Pool::Activation);
    const uint64_t b = r.alloc(6 << 20, fwd, Pool::Activation);
    const uint64_t g0 = r.alloc(4 << 20, bwd, Pool::Gradient);
    r.free(a, engine);
    r.free(b, engine);
    const uint64_t g1 = r.alloc(4 << 20, bwd, Pool::Gradient);
    (void)w;
    (void)g0;
    (void)g1;
    return r.finish();
}

// 5. The author's own Adam: moments made in its constructor at two lines per parameter, and a step
//    that rebuilds each parameter by assigning p.data and replaces each moment out of place.
inline Fixture handWrittenOptimizer()
{
    FixtureRecorder r;
    const std::vector<int64_t> sizes = {20 << 20, 1 << 20, 1 << 20, 3 << 20, 3 << 20, 20 << 20};
    std::vector<uint64_t> p = buildModel(r, sizes), m, v;
    auto ctor = [&](int64_t line) { return r.stack({{"/home/u/qzx/opt_q.py", "__init__", line}, {"/home/u/qzx/run_a.py", "main", 35}}); };
    for (int64_t s : sizes) {
        m.push_back(r.alloc(s, ctor(27), Pool::OptimizerState));
        v.push_back(r.alloc(s, ctor(28), Pool::OptimizerState));
    }
    const auto fwd = r.stack(frames({{"/home/u/qzx/blk.py", "forward", 70}}, kCall, std::vector<FixtureRecorder::F>{{"/home/u/qzx/run_a.py", "main", 40}}));
    const auto bwd = r.stack({{kT + "_tensor.py", "backward", 581}, {"/home/u/qzx/run_a.py", "main", 41}});
    const auto stepAt = [&](int64_t line) { return r.stack({{"/home/u/qzx/opt_q.py", "step", line}, {"/home/u/qzx/run_a.py", "main", 42}}); };
    for (int step = 0; step < 2; ++step) {
        // A forward saves many tensors: the step comes long after the constructor, as in a real run.
        std::vector<uint64_t> acts;
        for (int k = 0; k < 40; ++k)
            acts.push_back(r.alloc(30 << 16, fwd, Pool::Activation));
        std::vector<uint64_t> g;
        for (int64_t s : sizes)
            g.push_back(r.alloc(s, bwd, Pool::Gradient));
        for (uint64_t act : acts)
            r.free(act, StackId{});
        r.annotate("Optimizer.step#QAdam.step", true);
        for (size_t k = 0; k < sizes.size(); ++k) {
            const uint64_t nm = r.alloc(sizes[k], stepAt(50), Pool::OptimizerState);
            r.free(m[k], stepAt(50));
            m[k] = nm;
            const uint64_t nv = r.alloc(sizes[k], stepAt(51), Pool::OptimizerState);
            r.free(v[k], stepAt(51));
            v[k] = nv;
            const uint64_t np = r.alloc(sizes[k], stepAt(53), Pool::Parameter);
            r.free(p[k], stepAt(53));
            p[k] = np;
        }
        r.annotate("Optimizer.step#QAdam.step", false);
        for (uint64_t x : g)
            r.free(x, r.stack({{"/home/u/qzx/run_a.py", "main", 43}}));
    }
    return r.finish();
}

// 6. Attention written as a plain function (no nn.Module, no forward), its exp output saved for
//    backward and released by the autograd engine in backward.
inline Fixture scriptLevelAttention()
{
    FixtureRecorder r;
    const auto attn = r.stack({{kT + "functional.py", "softmax_like", 10}, {"/home/u/qzx/att.py", "attend", 14}, {"/home/u/qzx/att.py", "<module>", 30}});
    const auto bwd = r.stack({{kT + "autograd/graph.py", "_engine_run_backward", 768}, {kT + "_tensor.py", "backward", 581},
                              {"/home/u/qzx/att.py", "<module>", 33}});
    const uint64_t e = r.alloc(512 << 20, attn, Pool::Activation);
    const uint64_t s = r.alloc(64 << 20, attn, Pool::Activation);
    const uint64_t g = r.alloc(64 << 20, bwd, Pool::Temporary);
    r.free(e, StackId{});
    r.free(s, StackId{});
    r.free(g, StackId{});
    return r.finish();
}

} // namespace poolscope::testing
