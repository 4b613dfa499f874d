#include "core/whatif/trace_model.h"

#include "core/util/units.h"
#include "core/whatif/size_laws.h"

#include <algorithm>
#include <cctype>
#include <array>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace poolscope {

std::string_view sizeLawName(SizeLaw law)
{
    switch (law) {
    case SizeLaw::Fixed:
        return "fixed";
    case SizeLaw::Linear:
        return "x b*s";
    case SizeLaw::Quadratic:
        return "x b*s^2";
    case SizeLaw::Batch:
        return "x b";
    case SizeLaw::Seq:
        return "x s";
    case SizeLaw::SeqSquared:
        return "x s^2";
    }
    return "?";
}

// Defined in trace_model_replay.cpp.
void findReplayInputs(const Trace& trace, const DeviceTrace& dev, TraceModel& m);

namespace {

OptimizerKind optimizerFromName(std::string_view name)
{
    auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
    if (has("8bit") || has("8Bit") || has("bitsandbytes"))
        return OptimizerKind::Adam8bit;
    if (has("Adafactor") || has("adafactor"))
        return OptimizerKind::Adafactor;
    if (has("Lion") || has("lion"))
        return OptimizerKind::Lion;
    if (has("AdamW") || has("adamw") || has("FusedAdam"))
        return OptimizerKind::AdamW;
    if (has("Adam") || has("optim/adam.py"))
        return OptimizerKind::Adam;
    if (has("SGD") || has("optim/sgd.py"))
        return OptimizerKind::Sgd;
    return OptimizerKind::Keep;
}

void findOptimizer(const Trace& trace, const DeviceTrace& dev, TraceModel& m)
{
    for (const auto& a : trace.annotations) {
        if (a.device != dev.device || a.name.find("Optimizer.step#") == std::string::npos)
            continue;
        if (auto k = optimizerFromName(a.name.substr(a.name.find('#') + 1)); k != OptimizerKind::Keep) {
            m.recordedOptimizer = k;
            m.optimizerEvidence = "annotation " + a.name;
            break;
        }
    }
    if (m.recordedOptimizer == OptimizerKind::Keep) {
        for (size_t f = 0; f < trace.frames.frameCount(); ++f) {
            const std::string& file = trace.frames.frame(FrameId(uint32_t(f))).filename;
            if (file.find("optim") == std::string::npos && file.find("lion") == std::string::npos)
                continue;
            if (auto k = optimizerFromName(file); k != OptimizerKind::Keep) {
                m.recordedOptimizer = k;
                m.optimizerEvidence = "frames in " + file;
                break;
            }
        }
    }
    // Bytes of state per fp32 parameter, from the pools alive at the end.
    int64_t ratio = 0;
    if (m.parameterBytes > 0 && m.stateBytes > 0) {
        const int64_t perParam4 = (m.stateBytes * 4 * 4 + m.parameterBytes * 2) / (m.parameterBytes * 4); // rounded
        int64_t best = 2;
        for (int64_t v : {2, 4, 8, 12})
            if (std::abs(v - perParam4) < std::abs(best - perParam4))
                best = v;
        ratio = best;
    }
    switch (m.recordedOptimizer) {
    case OptimizerKind::AdamW:
    case OptimizerKind::Adam:
        m.stateBytesPerParam = ratio == 12 ? 12 : 8;
        break;
    case OptimizerKind::Sgd:
        if (ratio >= 4)
            m.recordedOptimizer = OptimizerKind::SgdMomentum;
        m.stateBytesPerParam = ratio >= 4 ? 4 : 0;
        break;
    case OptimizerKind::Lion:
        m.stateBytesPerParam = 4;
        break;
    case OptimizerKind::Adam8bit:
        m.stateBytesPerParam = 2;
        break;
    case OptimizerKind::Adafactor:
        m.stateBytesPerParam = int(std::max<int64_t>(ratio, 1));
        break;
    default:
        m.stateBytesPerParam = int(ratio);
        if (ratio == 8) {
            m.recordedOptimizer = OptimizerKind::AdamW;
            m.optimizerEvidence = "optimizer state = 2 x parameters (Adam-like)";
        } else if (ratio == 4) {
            m.recordedOptimizer = OptimizerKind::SgdMomentum;
            m.optimizerEvidence = "optimizer state = parameters (momentum-like)";
        }
        break;
    }
    if (m.stateBytes > 0 && m.optimizerEvidence.empty())
        m.optimizerEvidence = "optimizer state of " + std::to_string(m.stateBytesPerParam) + " B per parameter";
}

void poolTotals(const DeviceTrace& dev, TraceModel& m)
{
    std::vector<std::pair<EventIndex, int64_t>> grads;
    int64_t params = 0, paramsEver = 0, gradNow = 0;
    for (size_t a = 0; a < m.allocationCount; ++a) {
        const Allocation& al = dev.allocations[a];
        if (m.pool[a] == Pool::Parameter) {
            paramsEver += al.size;
            if (al.aliveAtEnd())
                params += al.size;
        } else if (m.pool[a] == Pool::OptimizerState && al.aliveAtEnd()) {
            m.stateBytes += al.size;
        } else if (m.pool[a] == Pool::Gradient) {
            if (al.preexisting())
                gradNow += al.size;
            else
                grads.emplace_back(al.allocEvent, al.size);
            if (al.freeCompletedEvent != kNoEvent)
                grads.emplace_back(al.freeCompletedEvent, -al.size);
        }
    }
    m.parameterBytes = params > 0 ? params : paramsEver;
    std::sort(grads.begin(), grads.end());
    m.gradientBytes = gradNow;
    for (auto& [ev, delta] : grads) {
        gradNow += delta;
        m.gradientBytes = std::max(m.gradientBytes, gradNow);
    }
}

// Pre-existing allocations carry their block's rounded size; the final segments still know what
// was requested, which is what a parameter's copies and mirrors are sized after.
std::vector<int64_t> requestedSizes(const DeviceTrace& dev)
{
    std::unordered_map<uint64_t, int64_t> blockRequested;
    for (const auto& seg : dev.segments)
        for (const auto& b : seg.blocks)
            if (b.state != BlockState::Inactive && b.requestedSize > 0)
                blockRequested.emplace(b.address, b.requestedSize);
    std::vector<int64_t> requested(dev.allocations.size());
    for (size_t a = 0; a < requested.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        // Only what is still alive at the end is the final block at its address: a pre-existing
        // allocation the trace frees has its free's size, and its address may hold another by then.
        auto it = al.preexisting() && al.freeCompletedEvent == kNoEvent ? blockRequested.find(al.address) : blockRequested.end();
        requested[a] = it != blockRequested.end() ? it->second : al.size;
    }
    return requested;
}

std::string lawNotes(const TraceModel& m)
{
    std::string out;
    const RunDims& d = m.dims;
    if (d.tokens > 0) {
        out = "dimensions: tokens T = " + std::to_string(d.tokens) + " (" + d.tokensFrom + ")";
        if (d.seq > 0)
            out += ", s = " + std::to_string(d.seq) + " (" + d.seqFrom + ")" +
                   (d.batch > 0 ? ", b = " + std::to_string(d.batch) : std::string());
    } else {
        out = "dimensions: no token count found (no parameters to explain the activations' sizes)";
    }
    return out;
}

} // namespace

Phase TraceModel::phaseAt(EventIndex e) const
{
    auto it = std::upper_bound(phaseRuns.begin(), phaseRuns.end(), e,
                               [](EventIndex x, const PhaseTimeline::Run& r) { return x < r.first; });
    if (it == phaseRuns.begin())
        return Phase::Unknown;
    --it;
    return e <= it->last ? it->phase : Phase::Unknown;
}

TraceModel buildTraceModel(const Trace& trace, const DeviceTrace& dev, const Classification& c)
{
    TraceModel m;
    const size_t n = dev.allocations.size();
    m.allocationCount = n;
    m.pool.assign(n, Pool::Unknown);
    if (c.pool.size() == n)
        m.pool = c.pool;
    else
        m.notes.push_back("no classification: every allocation is in the unknown pool");
    m.law.assign(n, SizeLaw::Fixed);
    m.lawEvidence.assign(n, LawEvidence::Default);
    m.precision.assign(n, OpPrecision::Unknown);
    m.weightCast.assign(n, 0);
    m.mask.assign(n, 0);
    m.pass.assign(n, -1);
    m.layer.assign(n, -1);
    m.saved.assign(n, 0);
    m.keptInput.assign(n, 0);
    m.stepWorkspace.assign(n, 0);
    m.requestedSize = requestedSizes(dev);

    m.phaseRuns = c.phases.runs;
    m.autocastFact = c.facts.autocast;
    for (const auto& run : c.phases.runs) {
        m.hasBackward |= run.phase == Phase::Backward;
        if (run.phase == Phase::OptimizerStep && !m.hasStep) {
            m.hasStep = true;
            m.firstStepEvent = run.first;
        }
    }
    // The cascade finds the forward passes and their layers too, between the weights' laws and the tokens'.
    decideSizeLaws(trace, dev, c, stackFacts(trace.frames), m);
    poolTotals(dev, m);
    findOptimizer(trace, dev, m);
    findReplayInputs(trace, dev, m);
    if (m.layersPerPass > 0) {
        // A layer's weights: each parameter size as many times as it occurs per layer (a norm's
        // 2L + 1 copies give two per layer; embeddings and heads, once or twice, none).
        std::unordered_map<int64_t, std::pair<int64_t, int64_t>> bySize; // requested -> (count, block bytes)
        for (size_t a = 0; a < n; ++a)
            if (m.pool[a] == Pool::Parameter) {
                auto& [count, bytes] = bySize[m.requestedSize[a]];
                ++count;
                bytes = std::max(bytes, dev.allocations[a].size);
            }
        for (auto& [size, cb] : bySize)
            m.layerParameterBytes += cb.second * (cb.first / m.layersPerPass);
    }

    for (size_t a = 0; a < n; ++a) {
        const int64_t size = dev.allocations[a].size;
        if (m.law[a] == SizeLaw::Fixed)
            continue;
        (m.law[a] == SizeLaw::Quadratic ? m.quadraticBytes : m.linearBytes) += size;
        if (m.saved[a])
            (m.law[a] == SizeLaw::Quadratic ? m.quadraticSavedBytes : m.linearSavedBytes) += size;
    }
    m.notes.push_back(lawNotes(m));
    if (m.autocastFromStructure)
        m.notes.push_back("autocast: no frame names a cast, but each forward keeps a 16-bit twin (half the bytes) of most weight "
                          "matrices until its backward: the trace ran under autocast, its casts are the weight-cast cache");
    if (m.replacedCount > 0)
        m.notes.push_back("memory from before recording that the trace frees and builds again (" + std::to_string(m.replacedCount) +
                          " blocks, " + formatBytes(m.replacedBytes) +
                          ": the previous step's graph or batch) follows the law of what replaces it, size for size");
    if (m.quadraticBytes > 0) {
        const int64_t savedTotal = m.linearSavedBytes + m.quadraticSavedBytes;
        m.notes.push_back("attention scores: " + formatBytes(m.quadraticBytes) + " allocated over the trace (" +
                          formatBytes(m.quadraticSavedBytes) + " of " + formatBytes(savedTotal) +
                          " saved activations) are b*a*s*s tensors, found by " + m.dims.scoresFrom +
                          " and the operators and attention code that make them; they scale with b*s^2, the rest with b*s");
    } else {
        m.notes.push_back("no attention-score matrices found (no softmax, no width outside tokens x a model dimension): "
                          "all taken as linear in the sequence length, as with FlashAttention");
    }
    if (m.ambiguousBytes > 0) {
        std::string sites;
        for (size_t i = 0; i < m.ambiguous.size() && i < 3; ++i)
            sites += (i ? "; " : "") + m.ambiguous[i].site + " (" + std::to_string(m.ambiguous[i].count) + "x, " +
                     formatBytes(m.ambiguous[i].bytes) + ": taken as " + std::string(sizeLawName(m.ambiguous[i].chosen)) +
                     ", could be " + std::string(sizeLawName(m.ambiguous[i].other)) + ")";
        m.notes.push_back("ambiguous: " + formatBytes(m.ambiguousBytes) +
                          " allocated over the trace fit two laws and nothing in the trace decided. Largest: " + sites);
    }
    return m;
}

} // namespace poolscope
