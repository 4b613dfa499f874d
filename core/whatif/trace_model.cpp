#include "core/whatif/trace_model.h"

#include "core/util/units.h"

#include <algorithm>
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
        return "linear";
    case SizeLaw::Quadratic:
        return "quadratic";
    }
    return "?";
}

// Defined in trace_model_layers.cpp: forward passes, their layers and the backward that follows.
void findForwardPasses(const Trace& trace, const DeviceTrace& dev, const Classification& c, TraceModel& m);
// Defined in trace_model_replay.cpp.
void findReplayInputs(const Trace& trace, const DeviceTrace& dev, TraceModel& m);

namespace {

// e (bytes per element: 1, 2, 4, 8) times k (small multiples: fused q/k/v, gates, pairs).
constexpr std::array<int64_t, 12> kWidthFactors = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
constexpr size_t kMaxSizes = 256;
constexpr int64_t kMinQuotientDim = 64;
constexpr size_t kMinScoreTensors = 8;

bool isWeightPool(Pool p)
{
    return p == Pool::Parameter || p == Pool::Gradient || p == Pool::OptimizerState;
}

Phase birthPhase(const Classification& c, size_t a)
{
    return a < c.birthPhase.size() ? c.birthPhase[a] : Phase::Unknown;
}

// Model dimensions: parameter element counts (fp32 or 16-bit) and their quotients (a weight of
// h x 4h over a norm of h gives 4h). Activations are tokens x these (times small factors).
std::unordered_set<int64_t> modelDims(const std::vector<int64_t>& requested, const TraceModel& m,
                                      std::unordered_set<int64_t>& paramSizes)
{
    // Only sizes that repeat (one weight per layer, tied embeddings): a lone "parameter" is as likely
    // an input batch or a buffer kept since before recording, whose sizes would explain anything.
    std::unordered_map<int64_t, int64_t> sizeCount;
    for (size_t a = 0; a < m.allocationCount; ++a)
        if (m.pool[a] == Pool::Parameter) {
            ++sizeCount[requested[a]];
            paramSizes.insert(requested[a]);
        }
    std::vector<std::pair<int64_t, int64_t>> repeated; // (bytes, count) of parameter sizes seen at least twice
    for (auto& [size, count] : sizeCount)
        if (count >= 2)
            repeated.emplace_back(size, count);
    std::sort(repeated.begin(), repeated.end(), [](auto& x, auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
    if (repeated.size() > 64)
        repeated.resize(64);
    std::unordered_set<int64_t> dims{1};
    for (auto& [size, count] : repeated) {
        // Element counts in fp32, 16-bit, 8-bit, and 4-bit packed (two per byte, as bitsandbytes stores them).
        dims.insert(size * 2);
        for (int64_t e : {1, 2, 4})
            if (size % e == 0 && size / e > 1)
                dims.insert(size / e);
        // A matrix over a vector of the same dtype names the matrix's other dimension (h x 4h over h
        // gives 4h). Small ratios are just ratios between weights (2, 4, 8) and, times the
        // element-size factors, would explain any power of two, the score matrix included.
        for (auto& [other, count2] : repeated)
            if (other < size && size % other == 0 && size / other >= kMinQuotientDim)
                dims.insert(size / other);
    }
    return dims;
}

// width = e x k x d for a model dimension d > 1.
bool explainedByDimension(int64_t width, const std::unordered_set<int64_t>& dims)
{
    for (int64_t f : kWidthFactors)
        if (width % f == 0 && width / f > 1 && dims.count(width / f))
            return true;
    return false;
}

// Per-token scalars (dimension 1: losses, norms' statistics) are a plain element of 1 to 8 bytes.
// They do not vote for the token unit (any T would explain a tensor of T elements).
bool explained(int64_t width, const std::unordered_set<int64_t>& dims)
{
    return width <= 8 || explainedByDimension(width, dims);
}

// A parameter-shaped buffer: the parameter itself in another precision (autocast's weight casts,
// fp32 master copies) follows the model, never the batch.
bool mirrorsParameter(int64_t size, const std::unordered_set<int64_t>& paramSizes)
{
    for (int64_t k : {1, 2, 4, 8}) // fp32 <-> 16-bit <-> 8-bit <-> 4-bit copies
        if (paramSizes.count(size * k) || (size % k == 0 && paramSizes.count(size / k)))
            return true;
    return false;
}

void classifyLaws(const Trace& trace, const DeviceTrace& dev, const Classification& c, TraceModel& m)
{
    // Pre-existing allocations carry their block's rounded size; the final segments still know what
    // was requested, which is what a parameter's copies and mirrors are sized after.
    std::unordered_map<uint64_t, int64_t> blockRequested;
    for (const auto& seg : dev.segments)
        for (const auto& b : seg.blocks)
            if (b.state != BlockState::Inactive && b.requestedSize > 0)
                blockRequested.emplace(b.address, b.requestedSize);
    std::vector<int64_t>& requested = m.requestedSize;
    requested.resize(m.allocationCount);
    for (size_t a = 0; a < m.allocationCount; ++a) {
        const Allocation& al = dev.allocations[a];
        auto it = al.preexisting() ? blockRequested.find(al.address) : blockRequested.end();
        requested[a] = it != blockRequested.end() ? it->second : al.size;
    }
    std::unordered_set<int64_t> paramSizes;
    const auto dims = modelDims(requested, m, paramSizes);
    // Fixed, or batch-dependent (decided below whether linear or quadratic).
    std::unordered_map<int64_t, int64_t> bytesBySize;
    for (size_t a = 0; a < m.allocationCount; ++a) {
        const Allocation& al = dev.allocations[a];
        const Pool p = m.pool[a];
        const Phase birth = birthPhase(c, a);
        bool fixed = isWeightPool(p) || birth == Phase::OptimizerStep || birth == Phase::ZeroGrad;
        if (!fixed && a < c.rule.size() && c.rule[a] < c.rules.size()) {
            const std::string& rule = c.rules[c.rule[a]].name;
            fixed = rule.find("workspace") != std::string::npos || rule.find("cufft") != std::string::npos ||
                    rule.find("collective") != std::string::npos;
        }
        if (!fixed && al.preexisting() && p != Pool::Input && p != Pool::Activation)
            fixed = true;
        if (!fixed && mirrorsParameter(requested[a], paramSizes))
            fixed = true;
        m.law[a] = fixed ? SizeLaw::Fixed : SizeLaw::Linear;
        if (!fixed)
            bytesBySize[al.size] += al.size;
        if ((p == Pool::Temporary || p == Pool::Other || p == Pool::Unknown) && birth == Phase::OptimizerStep)
            m.stepWorkspace[a] = 1;
    }
    (void)trace;
    if (dims.size() <= 1 || bytesBySize.empty()) {
        m.notes.push_back("no parameter sizes to compare activations with: every batch-dependent allocation is taken "
                          "as linear in the sequence length (as with FlashAttention)");
        return;
    }
    std::vector<std::pair<int64_t, int64_t>> sizes(bytesBySize.begin(), bytesBySize.end());
    std::sort(sizes.begin(), sizes.end(), [](auto& x, auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
    if (sizes.size() > kMaxSizes)
        sizes.resize(kMaxSizes);

    // T: the token unit that explains the most bytes as T x (model dimension) x (small factor).
    std::unordered_set<int64_t> candidates;
    for (size_t i = 0; i < std::min<size_t>(4, sizes.size()); ++i)
        for (int64_t d : dims)
            for (int64_t f : kWidthFactors)
                if (sizes[i].first % (d * f) == 0)
                    candidates.insert(sizes[i].first / (d * f));
    int64_t bestT = 0, bestScore = -1;
    for (int64_t t : candidates) {
        if (t < 2)
            continue;
        int64_t score = 0;
        for (auto& [size, bytes] : sizes)
            if (size % t == 0 && explainedByDimension(size / t, dims))
                score += bytes;
        if (score > bestScore || (score == bestScore && t > bestT)) {
            bestScore = score;
            bestT = t;
        }
    }
    if (bestT == 0) {
        m.notes.push_back("activation sizes are not tokens x model dimensions: all taken as linear in the sequence length");
        return;
    }
    m.tokenUnit = bestT;
    // The score matrix: the most common width (by bytes) that no dimension explains; its 1-, 2-,
    // 4- and 8-byte variants (masks, half-precision copies) belong to it too.
    std::map<int64_t, int64_t> unexplained;
    int64_t total = 0;
    for (auto& [size, bytes] : sizes) {
        total += bytes;
        if (size % bestT == 0 && !explained(size / bestT, dims))
            unexplained[size / bestT] += bytes;
    }
    int64_t modeWidth = 0, modeBytes = 0;
    for (auto& [w, bytes] : unexplained)
        if (bytes > modeBytes) {
            modeBytes = bytes;
            modeWidth = w;
        }
    auto inFamily = [&](int64_t size) {
        if (modeWidth == 0 || size % bestT != 0)
            return false;
        const int64_t w = size / bestT;
        for (int64_t k : {1, 2, 4, 8})
            if (w == modeWidth * k || w * k == modeWidth)
                return !explained(w, dims);
        return false;
    };
    if (modeWidth == 0 || modeBytes * 100 < total) {
        m.notes.push_back("no attention-score matrices found (every activation is tokens x a model dimension): "
                          "all taken as linear in the sequence length, as with FlashAttention");
        return;
    }
    // A score matrix exists once per attention layer: a width seen a few times is something else
    // (shifted logits of s-1 tokens, a one-off buffer).
    std::vector<size_t> family;
    for (size_t a = 0; a < m.allocationCount; ++a)
        if (m.law[a] == SizeLaw::Linear && inFamily(dev.allocations[a].size))
            family.push_back(a);
    if (family.size() < kMinScoreTensors) {
        m.notes.push_back("no attention-score matrices found (every repeated activation is tokens x a model dimension): "
                          "all taken as linear in the sequence length, as with FlashAttention");
        return;
    }
    m.quadraticWidth = modeWidth;
    for (size_t a : family)
        m.law[a] = SizeLaw::Quadratic;
}

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

} // namespace

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
    m.pass.assign(n, -1);
    m.layer.assign(n, -1);
    m.saved.assign(n, 0);
    m.keptInput.assign(n, 0);
    m.stepWorkspace.assign(n, 0);

    for (const auto& run : c.phases.runs) {
        m.hasBackward |= run.phase == Phase::Backward;
        if (run.phase == Phase::OptimizerStep && !m.hasStep) {
            m.hasStep = true;
            m.firstStepEvent = run.first;
        }
    }
    classifyLaws(trace, dev, c, m);
    poolTotals(dev, m);
    findOptimizer(trace, dev, m);
    findForwardPasses(trace, dev, c, m);
    findReplayInputs(trace, dev, m);

    for (size_t a = 0; a < n; ++a) {
        const int64_t size = dev.allocations[a].size;
        if (m.law[a] == SizeLaw::Linear)
            m.linearBytes += size;
        else if (m.law[a] == SizeLaw::Quadratic)
            m.quadraticBytes += size;
        if (!m.saved[a])
            continue;
        if (m.law[a] == SizeLaw::Linear)
            m.linearSavedBytes += size;
        else if (m.law[a] == SizeLaw::Quadratic)
            m.quadraticSavedBytes += size;
    }
    if (m.quadraticWidth > 0) {
        const int64_t savedTotal = m.linearSavedBytes + m.quadraticSavedBytes;
        m.notes.push_back("attention scores: " + formatBytes(m.quadraticSavedBytes) + " of " + formatBytes(savedTotal) +
                          " saved activations are tensors of " + std::to_string(m.quadraticWidth) +
                          " bytes per token that no parameter dimension explains (b*a*s*s); they scale with s^2, the rest with s");
    }
    return m;
}

} // namespace poolscope
