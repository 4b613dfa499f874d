#include "core/synth/synth.h"

#include "core/model/trace_builder.h"
#include "core/synth/synth_generator.h"

#include <algorithm>
#include <stdexcept>

namespace poolscope {

std::optional<SynthAttention> parseSynthAttention(std::string_view s)
{
    if (s == "softmax")
        return SynthAttention::Softmax;
    if (s == "inline")
        return SynthAttention::Inline;
    if (s == "manual")
        return SynthAttention::Manual;
    if (s == "recompute")
        return SynthAttention::Recompute;
    return std::nullopt;
}

std::optional<SynthMlp> parseSynthMlp(std::string_view s)
{
    if (s == "gelu")
        return SynthMlp::Gelu;
    if (s == "swiglu")
        return SynthMlp::SwiGlu;
    return std::nullopt;
}

std::optional<SynthDtype> parseSynthDtype(std::string_view s)
{
    if (s == "autocast")
        return SynthDtype::Autocast;
    if (s == "fp32" || s == "float32")
        return SynthDtype::Fp32;
    if (s == "bf16" || s == "bfloat16")
        return SynthDtype::Bf16;
    if (s == "mixed" || s == "amp")
        return SynthDtype::Mixed;
    return std::nullopt;
}

std::optional<SynthOptimizer> parseSynthOptimizer(std::string_view s)
{
    if (s == "adamw")
        return SynthOptimizer::AdamW;
    if (s == "adam")
        return SynthOptimizer::Adam;
    if (s == "sgd")
        return SynthOptimizer::Sgd;
    if (s == "sgd-momentum" || s == "sgd_momentum" || s == "momentum")
        return SynthOptimizer::SgdMomentum;
    if (s == "lion")
        return SynthOptimizer::Lion;
    if (s == "adafactor")
        return SynthOptimizer::Adafactor;
    return std::nullopt;
}

std::string_view synthOptimizerClass(SynthOptimizer o)
{
    switch (o) {
    case SynthOptimizer::AdamW: return "AdamW";
    case SynthOptimizer::Adam: return "Adam";
    case SynthOptimizer::Sgd:
    case SynthOptimizer::SgdMomentum: return "SGD";
    case SynthOptimizer::Lion: return "Lion";
    case SynthOptimizer::Adafactor: return "Adafactor";
    }
    return "Optimizer";
}

namespace {

void validate(const SynthModel& m)
{
    auto require = [](bool ok, const char* what) {
        if (!ok)
            throw std::invalid_argument(what);
    };
    require(m.layers >= 1 && m.layers <= 4096, "layers must be between 1 and 4096");
    require(m.hidden >= 1 && m.heads >= 1 && m.hidden % m.heads == 0, "hidden must be a positive multiple of heads");
    require(m.seq >= 1 && m.microBatch >= 1 && m.vocab >= 1, "seq, batch and vocab must be positive");
    require(m.steps >= 1, "steps must be at least 1");
    require(m.dataParallel >= 1 && m.zeroStage >= 0 && m.zeroStage <= 3, "ranks must be >= 1 and the ZeRO stage 0..3");
    require(!m.capacity || *m.capacity > 0, "capacity must be positive");
    require(m.trainable > 0 && m.trainable <= 1, "the trainable fraction must be in (0, 1]");
    require(m.targetEntries >= 0 && m.targetEntries <= (int64_t(1) << 31), "entries out of range");
    require(m.accumulate >= 1 && m.accumulate <= 64 && m.ffn >= 0, "accumulate must be 1..64 and ffn non-negative");
    const bool variant = m.attention != SynthAttention::Softmax || m.mlp != SynthMlp::Gelu || m.ffn > 0 ||
                         m.dtype == SynthDtype::Autocast;
    require(!variant || (!m.checkpointing && m.zeroStage < 3),
            "the attention, MLP and autocast variants run without checkpointing and without ZeRO-3");
    // Sizes stay far below int64 limits: a layer's attention scores must fit comfortably.
    const double scores = double(m.microBatch) * double(m.heads) * double(m.seq) * double(m.seq);
    const double params = 12.0 * double(m.hidden) * double(m.hidden) * m.layers + double(m.vocab) * double(m.hidden);
    require(scores < 1e15 && params < 1e15, "model too large to simulate");
}

int64_t shard(int64_t numel, int ranks) { return (numel + ranks - 1) / ranks; }

// One block's parameters (rows, cols; cols 0: a vector): ln_1, c_attn, c_proj, ln_2, then the MLP
// (c_fc and c_proj of width ffn, or SwiGLU's w1, w3, w2 and w2's bias).
std::vector<std::pair<int64_t, int64_t>> layerShapes(const SynthModel& m)
{
    const int64_t h = m.hidden, f = m.ffn > 0 ? m.ffn : 4 * h;
    std::vector<std::pair<int64_t, int64_t>> v = {{h, 0}, {h, 0}, {3 * h, h}, {3 * h, 0}, {h, h}, {h, 0}, {h, 0}, {h, 0}};
    if (m.mlp == SynthMlp::SwiGlu)
        v.insert(v.end(), {{f, h}, {f, h}, {h, f}, {h, 0}});
    else
        v.insert(v.end(), {{f, h}, {f, 0}, {h, f}, {h, 0}});
    return v;
}

} // namespace

int frozenLayers(const SynthModel& m)
{
    return int(double(m.layers) * (1.0 - m.trainable) + 0.5);
}

SynthSizes synthSizes(const SynthModel& m)
{
    validate(m);
    SynthSizes z;
    const int64_t ea = m.dtype == SynthDtype::Fp32 || m.dtype == SynthDtype::Autocast ? 4 : 2;
    const int64_t ep = m.dtype == SynthDtype::Bf16 ? 2 : 4;
    z.activationElementSize = ea;
    const int64_t h = m.hidden, s = m.seq, b = m.microBatch, a = m.heads;
    const int64_t sbh = s * b * h, scores = a * s * s * b;
    // Korthikanti et al.: 34 sbh + 5 a s^2 b bytes with 16-bit activations and 1-byte dropout masks:
    // 16 sbh elements (layer input, ln_1 out, q/k/v, context, residual, ln_2 out, fc 4h, gelu 4h),
    // two sbh masks, softmax output and dropout output (a s^2 b each) and their mask.
    z.activationBytesPerLayer = ea * 16 * sbh + 2 * sbh + ea * 2 * scores + scores;
    std::vector<std::pair<int64_t, int64_t>> shapes; // rows, cols (cols 0: vector)
    std::vector<bool> frozen;
    shapes.push_back({m.vocab, h});
    shapes.push_back({m.positions > 0 ? m.positions : m.seq, h});
    frozen.assign(2, false);
    for (int l = 0; l < m.layers; ++l) {
        const auto layer = layerShapes(m);
        shapes.insert(shapes.end(), layer.begin(), layer.end());
        frozen.resize(shapes.size(), l < frozenLayers(m));
    }
    shapes.push_back({h, 0});
    shapes.push_back({h, 0});
    frozen.resize(shapes.size(), false);
    const int nd = m.dataParallel;
    for (size_t i = 0; i < shapes.size(); ++i) {
        const auto [rows, cols] = shapes[i];
        const int64_t numel = cols ? rows * cols : rows;
        z.parameterElements += numel;
        z.parameterBytes += (m.zeroStage >= 3 ? shard(numel, nd) : numel) * ep;
        if (frozen[i] || (m.normsOnly && cols > 0))
            continue;
        z.gradientBytes += (m.zeroStage >= 2 ? shard(numel, nd) : numel) * ep;
        const int64_t stateNumel = m.zeroStage >= 1 ? shard(numel, nd) : numel;
        switch (m.optimizer) {
        case SynthOptimizer::AdamW:
        case SynthOptimizer::Adam: z.optimizerStateBytes += 2 * stateNumel * ep; break;
        case SynthOptimizer::SgdMomentum:
        case SynthOptimizer::Lion: z.optimizerStateBytes += stateNumel * ep; break;
        case SynthOptimizer::Sgd: break;
        case SynthOptimizer::Adafactor: z.optimizerStateBytes += (cols ? rows + cols : rows) * ep; break;
        }
    }
    return z;
}

SynthResult synthesize(const SynthModel& model)
{
    validate(model);
    synth_detail::Generator g(model);
    return g.run();
}

namespace synth_detail {

namespace {

struct OptimizerNames {
    const char* module;
    const char* kernel;
    const char* entry;
};

OptimizerNames optimizerNames(SynthOptimizer o)
{
    switch (o) {
    case SynthOptimizer::AdamW: return {"adamw", "_multi_tensor_adamw", "adamw"};
    case SynthOptimizer::Adam: return {"adam", "_multi_tensor_adam", "adam"};
    case SynthOptimizer::Sgd:
    case SynthOptimizer::SgdMomentum: return {"sgd", "_multi_tensor_sgd", "sgd"};
    case SynthOptimizer::Lion: return {"lion_pytorch/lion_pytorch", "update_fn", "step"};
    case SynthOptimizer::Adafactor: return {"_adafactor", "_multi_tensor_adafactor", "adafactor"};
    }
    return {"adamw", "_multi_tensor_adamw", "adamw"};
}

} // namespace

Generator::Generator(const SynthModel& model)
    : m_model(model), m_sizes(synthSizes(model)), m_sim(model.allocator, model.capacity),
      m_stacks(m_result.trace.frames, optimizerNames(model.optimizer).module, optimizerNames(model.optimizer).kernel,
               optimizerNames(model.optimizer).entry, model.checkpointing),
      m_time(model.startTimeUs)
{
    m_ea = m_sizes.activationElementSize;
    m_ep = model.dtype == SynthDtype::Bf16 ? 2 : 4;
    m_dev.device = 0;
    m_result.sizes = m_sizes;
}

void Generator::push(Action a, uint64_t addr, int64_t size, StackId stack)
{
    m_rng = m_rng * 6364136223846793005ull + 1442695040888963407ull;
    m_time += 1 + int64_t((m_rng >> 33) % 7);
    m_dev.events.push(a, addr, size, 0, m_time, stack);
    m_eventPool.push_back(Pool::Unknown);
}

void Generator::drainSegments(StackId stack)
{
    for (const SimEvent& e : m_sim.events()) {
        switch (e.kind) {
        case SimEventKind::SegmentAlloc:
            push(Action::SegmentAlloc, e.addr, e.size, stack);
            m_segmentStack[e.addr] = stack;
            break;
        case SimEventKind::SegmentFree: push(Action::SegmentFree, e.addr, e.size, stack); break;
        case SimEventKind::SegmentMap:
            push(Action::SegmentMap, e.addr, e.size, stack);
            m_segmentStack.emplace(e.addr, stack);
            break;
        case SimEventKind::SegmentUnmap: push(Action::SegmentUnmap, e.addr, e.size, stack); break;
        case SimEventKind::FreeCompleted: push(Action::FreeCompleted, e.addr, e.size, stack); break;
        case SimEventKind::Oom: break;
        }
    }
    m_sim.clearEvents();
}

Tensor Generator::alloc(int64_t bytes, StackId stack, Pool pool)
{
    const AllocResult r = m_sim.malloc(bytes, 0);
    if (!m_recording) {
        m_sim.clearEvents();
        if (!r.ok)
            throw std::invalid_argument("the model's parameters alone exceed the capacity");
        m_preexisting[r.addr] = pool;
        m_live[r.addr] = Live{bytes, StackId{}};
        return Tensor{r.addr};
    }
    drainSegments(stack);
    if (!r.ok) {
        // What the OOM observer's dump shows: the oom entry last, with the device's free bytes.
        push(Action::Oom, uint64_t(r.deviceFree), r.roundedSize, stack);
        m_result.oom = true;
        m_result.oomIndex = EventIndex(m_dev.events.count() - 1);
        throw OomStop{};
    }
    push(Action::Alloc, r.addr, bytes, stack);
    m_eventPool.back() = pool;
    m_live[r.addr] = Live{bytes, stack};
    return Tensor{r.addr};
}

void Generator::release(Tensor& t, StackId stack)
{
    if (!t.live())
        return;
    auto it = m_live.find(t.addr);
    const int64_t requested = it == m_live.end() ? 0 : it->second.requested;
    if (m_recording) {
        push(Action::FreeRequested, t.addr, requested, stack);
        push(Action::FreeCompleted, t.addr, requested, stack);
    }
    m_sim.free(t.addr);
    if (it != m_live.end())
        m_live.erase(it);
    t.addr = 0;
}

void Generator::releaseAll(std::vector<Tensor>& ts, StackId stack)
{
    for (auto& t : ts)
        release(t, stack);
    ts.clear();
}

void Generator::temp(int64_t bytes, SynthOp op, SynthSite site)
{
    Tensor t = alloc(bytes, m_stacks.alloc(op, site), op == SynthOp::CublasWorkspace ? Pool::Workspace : Pool::Temporary);
    release(t, m_stacks.free(site));
}

void Generator::annotate(const std::string& name, bool start)
{
    if (!m_recording)
        return; // record_function annotations before recording began are not in the dump
    tick(3);
    m_result.trace.annotations.push_back(Annotation{name, start, 0, m_time});
    tick(3);
}

void Generator::allocateParameters()
{
    // model.to("cuda") before _record_memory_history: the parameters exist, nothing recorded them.
    const int64_t h = m_model.hidden;
    const int nd = m_model.dataParallel;
    auto add = [&](int64_t rows, int64_t cols) {
        Param p;
        p.rows = rows;
        p.cols = cols;
        p.numel = cols ? rows * cols : rows;
        p.frozen = m_model.normsOnly && cols > 0; // only the norms' weights train
        const int64_t local = m_model.zeroStage >= 3 ? shard(p.numel, nd) : p.numel;
        p.addr = alloc(local * m_ep, StackId{}, Pool::Parameter).addr;
        m_params.push_back(std::move(p));
        return m_params.size() - 1;
    };
    m_headParams.push_back(add(m_model.vocab, h));
    m_headParams.push_back(add(m_model.positions > 0 ? m_model.positions : m_model.seq, h));
    for (int l = 0; l < m_model.layers; ++l) {
        std::vector<size_t> ids;
        for (const auto& [r, c] : layerShapes(m_model)) {
            ids.push_back(add(r, c));
            m_params.back().frozen = m_params.back().frozen || l < frozenLayers(m_model);
        }
        m_layerParams.push_back(std::move(ids));
    }
    m_headParams.push_back(add(h, 0));
    m_headParams.push_back(add(h, 0));
}

void Generator::step(int index)
{
    const std::string cls(synthOptimizerClass(m_model.optimizer));
    annotate("Optimizer.zero_grad#" + cls + ".zero_grad", true);
    // set_to_none=False zeroes them in place (foreach zero_): nothing is allocated or freed.
    if (!m_model.zeroGradKeeps)
        for (auto& p : m_params) {
            Tensor g{p.grad};
            release(g, m_stacks.free(SynthSite::ZeroGrad));
            p.grad = 0;
        }
    annotate("Optimizer.zero_grad#" + cls + ".zero_grad", false);

    // Gradient accumulation: K micro-steps, each adding into the gradients of the ones before.
    for (int micro = 0; micro < std::max(1, m_model.accumulate); ++micro) {
        // The next batch arrives before the previous one is dropped (the loop variable is rebound).
        const int64_t tokens = m_model.seq * m_model.microBatch * 8;
        std::vector<Tensor> batch;
        batch.push_back(alloc(tokens, m_stacks.alloc(SynthOp::ToDevice, SynthSite::Batch), Pool::Input));
        batch.push_back(alloc(tokens, m_stacks.alloc(SynthOp::ToDevice, SynthSite::Batch), Pool::Input));
        releaseAll(m_batch, m_stacks.free(SynthSite::Batch));
        m_batch = std::move(batch);

        annotate("## forward ##", true);
        if (micro == 0)
            warmupBuffer(index);
        forward();
        annotate("## forward ##", false);
        annotate("## backward ##", true);
        backward();
        annotate("## backward ##", false);
        if (micro == 0)
            leakAfterBackward(index);
    }
    annotate("Optimizer.step#" + cls + ".step", true);
    optimizerStep(index == 0);
    annotate("Optimizer.step#" + cls + ".step", false);
    ++m_result.stepsRun;
}

void Generator::forwardOnlyPass()
{
    // The batch, then the forward; the previous pass's graph (everything alive but the weights and
    // this batch) goes once the new output is made, when the loop rebinds `out`.
    const int64_t tokens = m_model.seq * m_model.microBatch * 8;
    std::vector<Tensor> batch;
    batch.push_back(alloc(tokens, m_stacks.alloc(SynthOp::ToDevice, SynthSite::Batch), Pool::Input));
    releaseAll(m_batch, m_stacks.free(SynthSite::Batch));
    m_batch = std::move(batch);
    std::vector<uint64_t> kept;
    for (const Param& p : m_params)
        kept.push_back(p.addr);
    for (const Tensor& t : m_batch)
        kept.push_back(t.addr);
    std::vector<Tensor> previous;
    for (const auto& [addr, live] : m_live)
        if (std::find(kept.begin(), kept.end(), addr) == kept.end())
            previous.push_back(Tensor{addr});
    std::sort(previous.begin(), previous.end(), [](const Tensor& x, const Tensor& y) { return x.addr < y.addr; });
    annotate("## forward ##", true);
    forward();
    annotate("## forward ##", false);
    releaseAll(previous, m_stacks.free(SynthSite::BackwardEngine));
    ++m_result.stepsRun;
}

Pool Generator::poolOfFree(uint64_t addr) const
{
    auto it = m_preexisting.find(addr);
    return it == m_preexisting.end() ? Pool::Unknown : it->second;
}

SynthResult Generator::run()
{
    allocateParameters();
    m_saved.assign(size_t(m_model.layers), LayerActs{});
    m_layerInput.assign(size_t(m_model.layers) + 1, Tensor{});
    m_variantSaved.assign(size_t(m_model.layers), {});
    auto one = [&](int i) {
        if (m_model.forwardOnly)
            forwardOnlyPass();
        else
            step(i);
    };
    for (int i = 0; i < m_model.warmupSteps; ++i)
        one(i); // before _record_memory_history: what it leaves alive exists before recording
    m_recording = true;
    if (m_model.targetEntries > 0) {
        m_dev.events.reserve(size_t(m_model.targetEntries) + (size_t(1) << 16));
        m_eventPool.reserve(size_t(m_model.targetEntries) + (size_t(1) << 16));
    }
    m_live.reserve(1 << 14);
    try {
        const int64_t target = m_model.targetEntries;
        for (int i = 0; target > 0 ? int64_t(m_dev.events.count()) < target : i < m_model.steps; ++i)
            one(m_model.warmupSteps + i);
    } catch (const OomStop&) {
    }
    finishTrace();
    return std::move(m_result);
}

void Generator::finishTrace()
{
    // The final segments, as _snapshot() reports them at the end (or at the OOM).
    for (const SimSegmentInfo& s : m_sim.segments()) {
        Segment seg;
        seg.device = 0;
        seg.address = s.addr;
        seg.stream = s.stream;
        seg.isLarge = !s.small;
        seg.isExpandable = s.expandable;
        if (auto it = m_segmentStack.find(s.addr); it != m_segmentStack.end())
            seg.stack = it->second;
        for (const SimBlockInfo& b : s.blocks) {
            if (!b.mapped)
                break; // the unmapped tail of an expandable segment is not memory
            Block blk;
            blk.address = b.addr;
            blk.size = b.size;
            blk.requestedSize = b.allocated || b.pendingFree ? b.requested : 0;
            blk.state = b.allocated ? BlockState::ActiveAllocated : b.pendingFree ? BlockState::ActivePendingFree : BlockState::Inactive;
            if (auto it = m_live.find(b.addr); it != m_live.end() && (b.allocated || b.pendingFree))
                blk.stack = it->second.stack;
            seg.totalSize += b.size;
            if (b.allocated)
                seg.allocatedSize += b.size;
            if (b.allocated || b.pendingFree) {
                seg.activeSize += b.size;
                seg.requestedSize += b.requested;
            }
            seg.blocks.push_back(blk);
        }
        if (seg.totalSize > 0)
            m_dev.segments.push_back(std::move(seg));
    }
    m_result.peakReserved = m_sim.stats().peakReserved;
    Trace& t = m_result.trace;
    t.format = SourceFormat::SnapshotPickle;
    t.formatDetail = "synthetic (poolscope synth)";
    t.allocatorSettings["PYTORCH_CUDA_ALLOC_CONF"] = m_model.allocator.expandableSegments ? "expandable_segments:True" : "";
    t.allocatorSettings["expandable_segments"] = m_model.allocator.expandableSegments ? "True" : "False";
    t.allocatorSettings["max_split_size"] =
        std::to_string(m_model.allocator.maxSplitSize == kNoSplitLimit ? -1 : m_model.allocator.maxSplitSize);
    finalizeDevice(m_dev, t.warnings);
    m_result.truth.reserve(m_dev.allocations.size());
    for (const Allocation& a : m_dev.allocations)
        m_result.truth.push_back(a.allocEvent >= 0 ? m_eventPool[size_t(a.allocEvent)] : poolOfFree(a.address));
    t.devices.push_back(std::move(m_dev));
}

} // namespace synth_detail
} // namespace poolscope
