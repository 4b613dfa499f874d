#pragma once
// A synthetic transformer training trace for the what-if tests, recorded the way PyTorch records
// one: every request goes through the caching-allocator simulation, its segment events precede the
// alloc entry, and the final segments are the simulator's own. Parameters (and, in steady state,
// last step's optimizer state) exist before recording begins. Sizes follow the model exactly:
// linear in the tokens b*s, attention scores in b*a*s*s, weights in h. The test knows the truth
// (pool and phase of every allocation) and builds the Classification itself, so engine tests do
// not depend on the classifier's rules.
#include "core/allocator/caching_allocator.h"
#include "core/classify/classifier.h"
#include "core/model/trace.h"
#include "core/model/trace_builder.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace poolscope::testing {

struct TransformerSpec {
    int layers = 6;
    int64_t hidden = 640; // h (2^7 * 5: a*s = 1024 is no multiple of it)
    int64_t heads = 8;    // a
    int64_t seq = 128;    // s
    int64_t batch = 4;    // b
    int64_t vocab = 2000;
    bool backward = true;   // a training step; false: one forward pass (activations kept, as with grad enabled)
    bool adamw = true;      // AdamW (two state tensors per parameter); false: SGD without momentum
    bool stateBefore = false; // optimizer state already exists when recording starts (a later step)
};

struct TransformerTrace {
    std::shared_ptr<Trace> trace;
    Classification classification;
    int64_t parameterBytes = 0;
    int64_t inputBytes = 0; // U = b*s*h*4
};

class TransformerTraceBuilder {
public:
    explicit TransformerTraceBuilder(TransformerSpec spec) : m_spec(spec), m_sim(AllocatorConfig{}) {}

    TransformerTrace build()
    {
        m_trace = std::make_shared<Trace>();
        m_trace->path = "synthetic-transformer";
        m_trace->devices.emplace_back();
        m_dev = &m_trace->devices.back();
        const int64_t h = m_spec.hidden, T = m_spec.batch * m_spec.seq, U = T * h * 4;
        const int64_t scores = m_spec.batch * m_spec.heads * m_spec.seq * m_spec.seq;

        // Before recording: the model on the device (and last step's state, in steady state).
        const std::vector<int64_t> layerWeights = {h * 3 * h * 4, h * h * 4, h * 4 * h * 4, 4 * h * h * 4, h * 4, h * 4};
        m_params.push_back(alloc(m_spec.vocab * h * 4, Pool::Parameter, "embedding"));
        for (int l = 0; l < m_spec.layers; ++l)
            for (int64_t w : layerWeights)
                m_params.push_back(alloc(w, Pool::Parameter, "init_weights"));
        m_params.push_back(alloc(h * 4, Pool::Parameter, "final_norm"));
        for (uint64_t p : m_params)
            m_out.parameterBytes += m_size[p];
        if (m_spec.stateBefore && m_spec.adamw)
            for (uint64_t p : m_params)
                for (int k = 0; k < 2; ++k)
                    m_state.push_back(alloc(m_size[p], Pool::OptimizerState, "adamw_state"));
        m_recording = true;

        // Forward: each layer keeps its activations for backward.
        begin(Phase::Forward);
        std::vector<std::vector<uint64_t>> saved(size_t(m_spec.layers));
        uint64_t x = alloc(U, Pool::Activation, "embed_out");
        for (int l = 0; l < m_spec.layers; ++l) {
            auto& keep = saved[size_t(l)];
            keep.push_back(alloc(U, Pool::Activation, "norm1"));
            keep.push_back(alloc(3 * U, Pool::Activation, "qkv"));
            keep.push_back(alloc(scores * 4, Pool::Activation, "attn_scores"));
            keep.push_back(alloc(scores * 4, Pool::Activation, "attn_softmax"));
            keep.push_back(alloc(scores, Pool::Activation, "attn_dropout_mask"));
            keep.push_back(alloc(U, Pool::Activation, "attn_out"));
            const uint64_t o = alloc(U, Pool::Temporary, "out_proj");
            keep.push_back(alloc(U, Pool::Activation, "residual1"));
            free(o);
            keep.push_back(alloc(U, Pool::Activation, "norm2"));
            keep.push_back(alloc(4 * U, Pool::Activation, "ff1"));
            keep.push_back(alloc(4 * U, Pool::Activation, "gelu"));
            const uint64_t f2 = alloc(U, Pool::Temporary, "ff2");
            keep.push_back(alloc(U, Pool::Activation, "residual2"));
            free(f2);
        }
        const uint64_t nf = alloc(U, Pool::Activation, "final_norm_out");
        const uint64_t logits = alloc(T * m_spec.vocab * 4, Pool::Activation, "logits");
        const uint64_t loss = alloc(4, Pool::Activation, "loss");
        end();
        m_out.inputBytes = U;
        if (m_spec.backward)
            backwardAndStep(saved, x, nf, logits, loss, layerWeights);

        // The final segments, as the snapshot would hold them.
        for (const auto& s : m_sim.segments()) {
            Segment seg;
            seg.address = s.addr;
            seg.stream = s.stream;
            seg.isLarge = !s.small;
            for (const auto& b : s.blocks) {
                seg.totalSize += b.size;
                Block blk;
                blk.address = b.addr;
                blk.size = b.size;
                blk.requestedSize = b.requested;
                blk.state = b.allocated ? BlockState::ActiveAllocated : b.pendingFree ? BlockState::ActivePendingFree : BlockState::Inactive;
                if (b.allocated) {
                    seg.allocatedSize += b.size;
                    auto it = m_stackOf.find(b.addr);
                    if (it != m_stackOf.end())
                        blk.stack = it->second;
                }
                seg.blocks.push_back(blk);
            }
            m_dev->segments.push_back(std::move(seg));
        }
        finalizeDevice(*m_dev, m_trace->warnings);
        classification();
        m_out.trace = m_trace;
        return std::move(m_out);
    }

private:
    void backwardAndStep(std::vector<std::vector<uint64_t>>& saved, uint64_t x, uint64_t nf, uint64_t logits, uint64_t loss,
                         const std::vector<int64_t>& layerWeights)
    {
        const int64_t U = m_spec.batch * m_spec.seq * m_spec.hidden * 4;
        begin(Phase::Backward);
        std::vector<uint64_t> grads;
        free(loss);
        const uint64_t dlogits = alloc(m_size[logits], Pool::Temporary, "dlogits");
        free(logits);
        free(dlogits);
        free(nf);
        grads.push_back(alloc(m_size[m_params.back()], Pool::Gradient, "accumulate_grad"));
        for (int l = m_spec.layers - 1; l >= 0; --l) {
            const uint64_t dx = alloc(U, Pool::Temporary, "grad_input");
            const uint64_t dff = alloc(4 * U, Pool::Temporary, "grad_ff");
            for (int64_t w : layerWeights)
                grads.push_back(alloc(w, Pool::Gradient, "accumulate_grad"));
            free(dff);
            for (uint64_t a : saved[size_t(l)])
                free(a);
            free(dx);
        }
        free(x);
        grads.push_back(alloc(m_size[m_params.front()], Pool::Gradient, "accumulate_grad"));
        end();
        begin(Phase::OptimizerStep);
        if (m_spec.adamw) {
            if (m_state.empty())
                for (uint64_t p : m_params)
                    for (int k = 0; k < 2; ++k)
                        m_state.push_back(alloc(m_size[p], Pool::OptimizerState, "adamw_state"));
            // foreach AdamW: sqrt(exp_avg_sq) for every parameter at once, then freed.
            std::vector<uint64_t> scratch;
            for (uint64_t p : m_params)
                scratch.push_back(alloc(m_size[p], Pool::Temporary, "foreach_sqrt"));
            for (uint64_t s : scratch)
                free(s);
        }
        end();
        begin(Phase::ZeroGrad);
        for (uint64_t g : grads)
            free(g);
        end();
    }

    uint64_t alloc(int64_t size, Pool pool, const char* site)
    {
        const FrameId f = m_trace->frames.internFrame("model.py", site, int64_t(m_sites.emplace(site, m_sites.size() + 1).first->second));
        const StackId st = m_trace->frames.internStack(std::vector<FrameId>{f});
        const AllocResult r = m_sim.malloc(size, 0);
        if (m_recording) {
            for (const SimEvent& e : m_sim.events())
                if (e.kind == SimEventKind::SegmentAlloc || e.kind == SimEventKind::SegmentFree)
                    push(e.kind == SimEventKind::SegmentAlloc ? Action::SegmentAlloc : Action::SegmentFree, e.addr, e.size, st);
            m_truth[EventIndex(m_dev->events.count())] = pool;
            push(Action::Alloc, r.addr, size, st);
        } else {
            m_preTruth[r.addr] = pool;
        }
        m_sim.clearEvents();
        m_size[r.addr] = size;
        m_stackOf[r.addr] = st;
        return r.addr;
    }

    void free(uint64_t addr)
    {
        m_sim.free(addr);
        m_sim.clearEvents();
        push(Action::FreeRequested, addr, m_size[addr], StackId{});
        push(Action::FreeCompleted, addr, m_size[addr], StackId{});
        m_stackOf.erase(addr);
    }

    void push(Action a, uint64_t addr, int64_t size, StackId st)
    {
        m_time += 10;
        m_dev->events.push(a, addr, size, 0, m_time, st);
    }

    void begin(Phase p)
    {
        m_runs.push_back({p, EventIndex(m_dev->events.count()), 0});
    }
    void end() { m_runs.back().last = EventIndex(m_dev->events.count()) - 1; }

    void classification()
    {
        Classification& c = m_out.classification;
        const auto& allocs = m_dev->allocations;
        const size_t n = m_dev->eventCount();
        c.pool.resize(allocs.size());
        c.birthPhase.assign(allocs.size(), Phase::Unknown);
        c.freePhase.assign(allocs.size(), Phase::Unknown);
        c.phases.phase.assign(n, Phase::Unknown);
        c.phases.source.assign(n, PhaseSource::Frames);
        c.phases.run.assign(n, 0);
        for (size_t r = 0; r < m_runs.size(); ++r) {
            c.phases.runs.push_back(m_runs[r]);
            for (EventIndex i = m_runs[r].first; i <= m_runs[r].last; ++i) {
                c.phases.phase[size_t(i)] = m_runs[r].phase;
                c.phases.run[size_t(i)] = uint32_t(r);
            }
        }
        for (size_t a = 0; a < allocs.size(); ++a) {
            const Allocation& al = allocs[a];
            c.pool[a] = al.preexisting() ? m_preTruth.at(al.address) : m_truth.at(al.allocEvent);
            if (!al.preexisting())
                c.birthPhase[a] = c.phases.phase[size_t(al.allocEvent)];
        }
        // The run facts the classifier's last step adds from the pools (addPoolFacts): the what-if
        // reads the parameters, gradients and optimizer state from them.
        for (size_t a = 0; a < allocs.size(); ++a) {
            if (c.pool[a] == Pool::Parameter)
                c.facts.parameters.push_back({uint32_t(a), allocs[a].size, UINT32_MAX});
            else if (c.pool[a] == Pool::Gradient)
                c.facts.gradients.push_back(uint32_t(a));
            else if (c.pool[a] == Pool::OptimizerState)
                c.facts.optimizerState.push_back(uint32_t(a));
        }
    }

    TransformerSpec m_spec;
    CachingAllocatorSim m_sim;
    std::shared_ptr<Trace> m_trace;
    DeviceTrace* m_dev = nullptr;
    bool m_recording = false;
    int64_t m_time = 1700000000000000;
    std::map<std::string, int64_t> m_sites;
    std::map<uint64_t, int64_t> m_size;
    std::map<uint64_t, StackId> m_stackOf;
    std::map<EventIndex, Pool> m_truth;
    std::map<uint64_t, Pool> m_preTruth;
    std::vector<uint64_t> m_params, m_state;
    std::vector<PhaseTimeline::Run> m_runs;
    TransformerTrace m_out;
};

inline TransformerTrace transformerTrace(TransformerSpec spec) { return TransformerTraceBuilder(spec).build(); }

} // namespace poolscope::testing
