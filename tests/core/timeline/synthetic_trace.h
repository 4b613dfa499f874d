#pragma once
// A small, self-consistent training-step trace generator for timeline tests and the replot
// benchmark: a first-fit allocator over 2 MiB / 20 MiB / rounded segments, so addresses, blocks and
// segment events agree with each other the way a real dump's do. Its stacks carry the frames real
// dumps carry for each pool (nn.Module._apply, forward, AccumulateGrad, _init_group), so the real
// classifier names them: tests view it through a Document like any dump, and `truth` keeps the pool
// the generator meant, to check that against. Synthetic: not a model of PyTorch.
#include "core/engine/document.h"
#include "core/model/trace.h"
#include "core/model/trace_builder.h"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace poolscope::testing {

struct SynthOptions {
    size_t targetEvents = 20000;
    int layers = 8;
    int64_t paramBytes = int64_t(64) << 20;  // per layer
    int64_t activationBytes = int64_t(24) << 20;
    bool withTime = true;
    bool oomAtEnd = true;
    int64_t deviceTotal = int64_t(24) << 30;
    uint64_t seed = 1;
};

struct SynthResult {
    std::shared_ptr<Trace> trace;
    std::vector<Pool> truth; // per allocation of device 0: the pool the generator meant
};

// The trace classified by the shipped rules, every timeline built: what the window would hold.
inline std::shared_ptr<const Document> documentOf(const SynthResult& r)
{
    DocumentOptions options;
    options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    return Document::fromTrace(r.trace, options);
}

class SynthAllocator {
public:
    explicit SynthAllocator(DeviceTrace& d, Trace& t, SynthOptions o) : m_d(d), m_t(t), m_o(o), m_rng(o.seed) {}

    uint64_t alloc(int64_t size, Pool pool, StackId stack)
    {
        const int64_t rounded = size < 512 ? 512 : (size + 511) / 512 * 512;
        uint64_t addr = 0;
        if (!takeFree(rounded, addr)) {
            const int64_t segSize = rounded <= (int64_t(1) << 20) ? int64_t(2) << 20
                                    : rounded < (int64_t(10) << 20) ? int64_t(20) << 20
                                                                    : (rounded + (int64_t(2) << 20) - 1) / (int64_t(2) << 20) * (int64_t(2) << 20);
            const uint64_t base = m_nextSegment;
            m_nextSegment += uint64_t(segSize) + (uint64_t(1) << 21);
            m_segments[base] = segSize;
            m_free[base] = segSize;
            push(Action::SegmentAlloc, base, segSize, StackId{});
            takeFree(rounded, addr);
        }
        m_live[addr] = {size, rounded, stack};
        push(Action::Alloc, addr, size, stack);
        m_poolAtEvent[EventIndex(m_d.events.count() - 1)] = pool;
        return addr;
    }
    // Free events carry the stack of the code that frees (`where`; the allocation's own by default),
    // as real ones do: an activation is released from backward's frames, not from forward's.
    void free(uint64_t addr, StackId where = StackId{})
    {
        auto it = m_live.find(addr);
        const StackId stack = where.valid() ? where : it->second.stack;
        push(Action::FreeRequested, addr, it->second.size, stack);
        push(Action::FreeCompleted, addr, it->second.size, stack);
        giveBack(addr, it->second.rounded);
        m_live.erase(it);
    }
    void oom(int64_t size)
    {
        int64_t reserved = 0;
        for (auto& [b, s] : m_segments)
            reserved += s;
        push(Action::Oom, uint64_t(std::max<int64_t>(0, m_o.deviceTotal - reserved - (int64_t(500) << 20))), size, StackId{});
    }
    void tick(int64_t us) { m_time += us; }
    int64_t time() const { return m_time; }

    // Final segments: live blocks active, gaps inactive.
    void finish()
    {
        for (auto& [base, size] : m_segments) {
            Segment s;
            s.address = base;
            s.totalSize = size;
            s.isLarge = size > (int64_t(2) << 20);
            uint64_t at = base;
            for (auto it = m_live.lower_bound(base); it != m_live.end() && it->first < base + uint64_t(size); ++it) {
                if (it->first > at)
                    s.blocks.push_back(Block{at, int64_t(it->first - at), 0, BlockState::Inactive, StackId{}});
                s.blocks.push_back(Block{it->first, it->second.rounded, it->second.size, BlockState::ActiveAllocated, it->second.stack});
                s.allocatedSize += it->second.rounded;
                at = it->first + uint64_t(it->second.rounded);
            }
            if (at < base + uint64_t(size))
                s.blocks.push_back(Block{at, int64_t(base + uint64_t(size) - at), 0, BlockState::Inactive, StackId{}});
            m_d.segments.push_back(std::move(s));
        }
    }
    const std::map<EventIndex, Pool>& poolAtEvent() const { return m_poolAtEvent; }
    size_t events() const { return m_d.events.count(); }

private:
    struct Live {
        int64_t size, rounded;
        StackId stack;
    };
    void push(Action a, uint64_t addr, int64_t size, StackId stack)
    {
        m_time += 1 + int64_t(m_rng() % 5);
        m_d.events.push(a, addr, size, 0, m_o.withTime ? m_time : kNoTime, stack);
    }
    bool takeFree(int64_t rounded, uint64_t& addr)
    {
        for (auto it = m_free.begin(); it != m_free.end(); ++it) {
            if (it->second < rounded)
                continue;
            addr = it->first;
            const int64_t rest = it->second - rounded;
            m_free.erase(it);
            if (rest > 0)
                m_free[addr + uint64_t(rounded)] = rest;
            return true;
        }
        return false;
    }
    void giveBack(uint64_t addr, int64_t size)
    {
        auto [it, ok] = m_free.emplace(addr, size);
        auto next = std::next(it);
        auto seg = std::prev(m_segments.upper_bound(addr));
        const uint64_t segEnd = seg->first + uint64_t(seg->second);
        if (next != m_free.end() && it->first + uint64_t(it->second) == next->first && next->first < segEnd) {
            it->second += next->second;
            m_free.erase(next);
        }
        if (it != m_free.begin()) {
            auto prev = std::prev(it);
            if (prev->first >= seg->first && prev->first + uint64_t(prev->second) == it->first) {
                prev->second += it->second;
                m_free.erase(it);
            }
        }
    }

    DeviceTrace& m_d;
    Trace& m_t;
    SynthOptions m_o;
    std::mt19937_64 m_rng;
    int64_t m_time = 1'700'000'000'000'000;
    uint64_t m_nextSegment = 0x7f0000000000;
    std::map<uint64_t, int64_t> m_segments;
    std::map<uint64_t, int64_t> m_free;
    std::map<uint64_t, Live> m_live;
    std::map<EventIndex, Pool> m_poolAtEvent;
};

inline SynthResult synthesize(const SynthOptions& o)
{
    auto trace = std::make_shared<Trace>();
    trace->path = "synthetic.pickle";
    trace->devices.emplace_back();
    DeviceTrace& d = trace->devices.back();
    SynthAllocator a(d, *trace, o);
    auto stack = [&](std::initializer_list<std::pair<const char*, const char*>> inner) {
        std::vector<FrameId> frames{trace->frames.internFrame("??", "at::native::empty_cuda", 0)};
        int line = 10;
        for (const auto& [file, fn] : inner)
            frames.push_back(trace->frames.internFrame(file, fn, line += 10));
        frames.push_back(trace->frames.internFrame("train.py", "main", 42));
        return trace->frames.internStack(frames);
    };
    const StackId paramStack = stack({{"torch/nn/modules/module.py", "_apply"}, {"torch/nn/modules/module.py", "to"}});
    const StackId actStack = stack({{"model.py", "forward"}, {"torch/nn/modules/module.py", "_call_impl"}});
    const StackId tmpStack = stack({{"torch/nn/functional.py", "softmax"}, {"model.py", "forward"}});
    const StackId gradStack = stack({{"??", "torch::autograd::AccumulateGrad::apply"}, {"torch/autograd/graph.py", "_engine_run_backward"}});
    const StackId bwdTmpStack = stack({{"??", "torch::autograd::generated::SoftmaxBackward0::apply"}, {"torch/autograd/graph.py", "_engine_run_backward"}});
    const StackId optStack = stack({{"torch/optim/adamw.py", "_init_group"}, {"torch/optim/adamw.py", "step"}});
    const StackId optTmpStack = stack({{"torch/optim/adamw.py", "_multi_tensor_adamw"}, {"torch/optim/adamw.py", "step"}});
    std::mt19937_64 rng(o.seed);
    auto jitter = [&](int64_t bytes) { return bytes / 2 + int64_t(rng() % uint64_t(std::max<int64_t>(1, bytes))); };

    std::vector<uint64_t> params, grads, states;
    for (int l = 0; l < o.layers; ++l)
        params.push_back(a.alloc(jitter(o.paramBytes), Pool::Parameter, paramStack));
    auto annotate = [&](const char* name, bool start) {
        trace->annotations.push_back(Annotation{name, start, 0, o.withTime ? a.time() : kNoTime});
    };
    bool firstStep = true;
    while (a.events() < o.targetEvents) {
        annotate("## forward ##", true);
        std::vector<uint64_t> acts;
        for (int l = 0; l < o.layers && a.events() < o.targetEvents; ++l) {
            for (int k = 0; k < 3; ++k)
                acts.push_back(a.alloc(jitter(o.activationBytes), Pool::Activation, actStack));
            const uint64_t t = a.alloc(jitter(o.activationBytes / 4), Pool::Temporary, tmpStack);
            a.free(t);
        }
        annotate("## forward ##", false);
        annotate("## backward ##", true);
        while (!acts.empty()) {
            if (grads.size() < params.size())
                grads.push_back(a.alloc(jitter(o.paramBytes), Pool::Gradient, gradStack));
            const uint64_t t = a.alloc(jitter(o.activationBytes / 8), Pool::Temporary, bwdTmpStack);
            a.free(acts.back(), bwdTmpStack);
            acts.pop_back();
            a.free(t);
        }
        annotate("## backward ##", false);
        annotate("Optimizer.step#AdamW.step", true);
        if (firstStep)
            for (size_t p = 0; p < params.size() * 2; ++p)
                states.push_back(a.alloc(jitter(o.paramBytes), Pool::OptimizerState, optStack));
        firstStep = false;
        for (size_t p = 0; p < params.size(); ++p)
            a.free(a.alloc(jitter(o.paramBytes / 4), Pool::Temporary, optTmpStack));
        annotate("Optimizer.step#AdamW.step", false);
        for (uint64_t g : grads)
            a.free(g);
        grads.clear();
        a.tick(1000);
    }
    if (o.oomAtEnd)
        a.oom(int64_t(4) << 30);
    a.finish();
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    trace->warnings = warnings;

    SynthResult r;
    r.truth.resize(d.allocations.size(), Pool::Unknown);
    for (size_t i = 0; i < d.allocations.size(); ++i) {
        auto it = a.poolAtEvent().find(d.allocations[i].allocEvent);
        r.truth[i] = it == a.poolAtEvent().end() ? Pool::Unknown : it->second;
    }
    r.trace = std::move(trace);
    return r;
}

} // namespace poolscope::testing
