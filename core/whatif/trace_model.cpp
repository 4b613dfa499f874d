#include "core/whatif/trace_model.h"

#include "core/util/units.h"

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
        return "linear";
    case SizeLaw::Quadratic:
        return "quadratic";
    }
    return "?";
}

// Defined in trace_model_layers.cpp: forward passes, their layers and the backward that follows.
void findForwardPasses(const DeviceTrace& dev, const Classification& c, TraceModel& m);
// Defined in trace_model_replay.cpp.
void findReplayInputs(const Trace& trace, const DeviceTrace& dev, TraceModel& m);

namespace {

// e (bytes per element: 1, 2, 4, 8) times k (small multiples: fused q/k/v, gates, pairs).
constexpr std::array<int64_t, 12> kWidthFactors = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
constexpr size_t kMaxSizes = 256;
constexpr int64_t kMinQuotientDim = 64;
constexpr size_t kMinScoreTensors = 8;

// Pools whose bytes follow the weights or a library's or engine's own budget, never the tokens.
bool isWeightPool(Pool p)
{
    return p == Pool::Parameter || p == Pool::CastCache || p == Pool::Gradient || p == Pool::OptimizerState ||
           p == Pool::Workspace || p == Pool::KvCache;
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
    // Only weights: a small lone "parameter" is as likely an input batch or a buffer kept since
    // before recording, whose sizes would explain anything.
    std::unordered_map<int64_t, int64_t> sizeCount;
    for (size_t a = 0; a < m.allocationCount; ++a)
        if (m.pool[a] == Pool::Parameter) {
            ++sizeCount[requested[a]];
            paramSizes.insert(requested[a]);
        }
    int64_t total = 0;
    for (auto& [size, count] : sizeCount)
        total += size * count;
    // (bytes, count) of parameter sizes seen at least twice, or big enough to be a weight (a tied
    // embedding is one tensor) rather than an input batch kept since before recording.
    std::vector<std::pair<int64_t, int64_t>> repeated;
    for (auto& [size, count] : sizeCount)
        if (count >= 2 || size * 200 >= total)
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

// Parameters a buffer of `size` bytes could be a copy of: the same bytes (gradients, master
// copies), a 16-bit cast of an fp32 weight (autocast), a 16- or 32-bit dequantisation of a 4-bit
// packed weight (bitsandbytes). Other ratios collide with activations too often to be worth it.
int64_t mirroredParameters(int64_t size, const std::unordered_map<int64_t, int64_t>& paramCount)
{
    int64_t n = 0;
    auto add = [&](int64_t v) {
        if (auto it = paramCount.find(v); it != paramCount.end())
            n += it->second;
    };
    add(size);
    add(size * 2);
    for (int64_t k : {4, 8})
        if (size % k == 0)
            add(size / k);
    return n;
}

// What the sizes say, kept between deciding which allocations follow the batch and, once the
// layers are known, which of those are attention scores.
struct SizeEvidence {
    std::unordered_set<int64_t> dims;
    std::vector<std::pair<int64_t, int64_t>> sizes; // (bytes of one allocation, bytes in all), largest first
};

SizeEvidence classifyLaws(const DeviceTrace& dev, const Classification& c, TraceModel& m)
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
    std::unordered_map<int64_t, int64_t> paramCount;
    for (size_t a = 0; a < m.allocationCount; ++a)
        if (m.pool[a] == Pool::Parameter)
            ++paramCount[requested[a]];
    // Fixed, or batch-dependent (decided below whether linear or quadratic).
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
        m.law[a] = fixed ? SizeLaw::Fixed : SizeLaw::Linear;
        if ((p == Pool::Temporary || p == Pool::Other || p == Pool::Unknown) && birth == Phase::OptimizerStep)
            m.stepWorkspace[a] = 1;
    }
    // Parameter-shaped buffers follow the model, not the batch: autocast's weight casts (one per
    // weight per forward), weight gradients in backward. An activation can have a weight's size by
    // coincidence (tokens = 2h makes b*s*h*2 bytes an h x h fp32 weight), but not as many of them
    // within one phase run as there are such weights.
    const bool haveRuns = c.phases.run.size() == dev.eventCount();
    std::map<std::pair<uint32_t, int64_t>, int64_t> perRun;
    auto runOf = [&](const Allocation& al) { return haveRuns && !al.preexisting() ? c.phases.run[size_t(al.allocEvent)] : 0u; };
    for (size_t a = 0; a < m.allocationCount; ++a)
        if (m.law[a] != SizeLaw::Fixed && mirroredParameters(requested[a], paramCount) > 0)
            ++perRun[{runOf(dev.allocations[a]), requested[a]}];
    std::unordered_map<int64_t, int64_t> bytesBySize;
    for (size_t a = 0; a < m.allocationCount; ++a) {
        if (m.law[a] == SizeLaw::Fixed)
            continue;
        const int64_t mirrors = mirroredParameters(requested[a], paramCount);
        if (mirrors > 0 && perRun[{runOf(dev.allocations[a]), requested[a]}] <= mirrors)
            m.law[a] = SizeLaw::Fixed;
        else
            bytesBySize[dev.allocations[a].size] += dev.allocations[a].size;
    }
    SizeEvidence ev;
    ev.dims = dims;
    ev.sizes.assign(bytesBySize.begin(), bytesBySize.end());
    std::sort(ev.sizes.begin(), ev.sizes.end(), [](auto& x, auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
    if (ev.sizes.size() > kMaxSizes)
        ev.sizes.resize(kMaxSizes);
    return ev;
}

// A score matrix exists once per attention layer: a family seen a few times is something else
// (logits over a vocabulary no weight shows, shifted logits of s-1 tokens, a one-off buffer).
bool oncePerLayer(const std::vector<size_t>& family, const TraceModel& m)
{
    if (family.size() < kMinScoreTensors)
        return false;
    std::vector<int64_t> savedPerPass(m.passes.size(), 0);
    for (size_t a : family)
        if (m.saved[a] && m.pass[a] >= 0)
            ++savedPerPass[size_t(m.pass[a])];
    return m.layersPerPass == 0 ||
           std::any_of(savedPerPass.begin(), savedPerPass.end(), [&](int64_t n) { return n >= m.layersPerPass; });
}

// The s^2 term by sizes: allocations of T x e x W bytes whose width W no model dimension explains
// (a*s for the score matrix). Empty when the sizes cannot tell (a*s a small multiple of h).
std::vector<size_t> scoreTensorsBySize(const DeviceTrace& dev, const SizeEvidence& ev, TraceModel& m)
{
    const auto& dims = ev.dims;
    const auto& sizes = ev.sizes;
    if (dims.size() <= 1 || sizes.empty())
        return {};
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
    if (bestT == 0)
        return {};
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
    if (modeWidth == 0 || modeBytes * 100 < total)
        return {};
    std::vector<size_t> family;
    for (size_t a = 0; a < m.allocationCount; ++a)
        if (m.law[a] == SizeLaw::Linear && inFamily(dev.allocations[a].size))
            family.push_back(a);
    if (!oncePerLayer(family, m))
        return {};
    m.quadraticWidth = modeWidth;
    return family;
}

// The s^2 term by frames: what softmax allocates (its output, the scores beside it, their dropout
// masks and gradients) when the sizes alone cannot tell. The most common size among them (by bytes)
// is the score matrix; half and double it are its other element sizes (masks, fp32 copies).
std::vector<size_t> scoreTensorsByFrames(const Trace& trace, const DeviceTrace& dev, const TraceModel& m)
{
    std::vector<int8_t> softmaxStack(trace.frames.stackCount(), -1);
    auto underSoftmax = [&](StackId st) {
        if (!st.valid() || st.value >= softmaxStack.size())
            return false;
        int8_t& known = softmaxStack[st.value];
        if (known < 0) {
            known = 0;
            for (FrameId f : trace.frames.stack(st)) {
                std::string name = trace.frames.frame(f).name;
                std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
                if (name.find("softmax") != std::string::npos && name.find("log_softmax") == std::string::npos &&
                    name.find("logsoftmax") == std::string::npos) {
                    known = 1;
                    break;
                }
            }
        }
        return known == 1;
    };
    std::unordered_map<int64_t, int64_t> bytes;
    std::vector<size_t> candidates;
    for (size_t a = 0; a < m.allocationCount; ++a)
        if (m.law[a] == SizeLaw::Linear && underSoftmax(dev.allocations[a].stack)) {
            candidates.push_back(a);
            bytes[dev.allocations[a].size] += dev.allocations[a].size;
        }
    int64_t scores = 0, most = 0;
    for (auto& [size, b] : bytes)
        if (b > most || (b == most && size > scores)) {
            most = b;
            scores = size;
        }
    std::vector<size_t> family;
    for (size_t a : candidates) {
        const int64_t size = dev.allocations[a].size;
        if (size == scores || size * 2 == scores || size == scores * 2)
            family.push_back(a);
    }
    return oncePerLayer(family, m) ? family : std::vector<size_t>{};
}

void findScoreTensors(const Trace& trace, const DeviceTrace& dev, const SizeEvidence& ev, TraceModel& m)
{
    std::vector<size_t> family = scoreTensorsBySize(dev, ev, m);
    if (family.empty()) {
        family = scoreTensorsByFrames(trace, dev, m);
        if (!family.empty())
            m.scoresFromFrames = true;
    }
    if (family.empty()) {
        m.notes.push_back("no attention-score matrices found (no activation is outside tokens x a model dimension, and "
                          "none is softmax's): all taken as linear in the sequence length, as with FlashAttention");
        return;
    }
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
    const SizeEvidence evidence = classifyLaws(dev, c, m);
    poolTotals(dev, m);
    findOptimizer(trace, dev, m);
    findForwardPasses(dev, c, m);
    findScoreTensors(trace, dev, evidence, m);
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
    if (m.quadraticBytes > 0) {
        const int64_t savedTotal = m.linearSavedBytes + m.quadraticSavedBytes;
        m.notes.push_back("attention scores: " + formatBytes(m.quadraticSavedBytes) + " of " + formatBytes(savedTotal) +
                          " saved activations are b*a*s*s tensors (" +
                          (m.scoresFromFrames ? std::string("softmax's, as the frames say; the sizes alone could not tell")
                                              : "sized " + std::to_string(m.quadraticWidth) +
                                                    " bytes per token unit, a width no parameter dimension explains") +
                          "); they scale with s^2, the rest with s");
    }
    return m;
}

} // namespace poolscope
