// The axes other than the tokens: what was recorded, precision, the weights and what follows them
// (sharding, trainable parameters, optimizer, a different model), and activation checkpointing.
// Each reads tensors, not totals alone: sharding keeps every tensor and divides each by N, freezing
// parameters drops whole gradients and keeps the rest as they were, a lower precision halves every
// weight and adds no collectives.
#include "core/compare/axes.h"

#include "core/util/units.h"
#include "core/whatif/scenario.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace poolscope {

std::string ratioText(double r)
{
    char buf[32];
    if (std::abs(r - std::round(r)) < 0.005 * std::max(1.0, r))
        std::snprintf(buf, sizeof buf, "x%.0f", std::round(r));
    else
        std::snprintf(buf, sizeof buf, "x%.2f", r);
    std::string s = buf;
    // "x0.50" -> "x0.5"
    if (s.find('.') != std::string::npos) {
        while (s.back() == '0')
            s.pop_back();
        if (s.back() == '.')
            s.pop_back();
    }
    return s;
}

bool nearRatio(double x, double y, double tolerance)
{
    return y != 0 && std::abs(x / y - 1.0) <= tolerance;
}

namespace {

enum class Relation : uint8_t { Empty, Same, Scaled, Fewer, More, Different };

// How B's tensors of one kind relate to A's.
struct TensorRelation {
    Relation kind = Relation::Empty;
    double factor = 1.0; // B over A in bytes
    size_t countA = 0, countB = 0;
    int64_t bytesA = 0, bytesB = 0;
};

int64_t total(const std::vector<int64_t>& v)
{
    int64_t t = 0;
    for (int64_t x : v)
        t += x;
    return t;
}

// Whether every size of `small` appears in `big` (as a multiset, at the allocator's 512-byte granularity).
bool subMultiset(const std::vector<int64_t>& small, const std::vector<int64_t>& big)
{
    size_t j = 0;
    for (int64_t s : small) {
        const int64_t key = mirrorKey(s);
        while (j < big.size() && mirrorKey(big[j]) < key)
            ++j;
        if (j == big.size() || mirrorKey(big[j]) != key)
            return false;
        ++j;
    }
    return true;
}

TensorRelation relate(const std::vector<int64_t>& a, const std::vector<int64_t>& b)
{
    TensorRelation r;
    r.countA = a.size();
    r.countB = b.size();
    r.bytesA = total(a);
    r.bytesB = total(b);
    if (a.empty() && b.empty())
        return r;
    r.factor = r.bytesA > 0 ? double(r.bytesB) / double(r.bytesA) : 0.0;
    // Totals within 2 %: the same tensors, give or take what the classifier put elsewhere.
    if (r.bytesA > 0 && nearRatio(double(r.bytesB), double(r.bytesA))) {
        r.kind = Relation::Same;
        return r;
    }
    if (a.size() == b.size() && r.bytesA > 0) {
        // Each tensor scaled alike: ceil(n / N) elements of a sharded tensor, or a narrower element.
        bool scaled = true;
        for (size_t i = 0; i < a.size() && scaled; ++i)
            scaled = std::abs(double(b[i]) - double(a[i]) * r.factor) <= 64.0 + 0.002 * double(a[i]);
        if (scaled) {
            r.kind = Relation::Scaled;
            return r;
        }
    }
    if (b.size() < a.size() && subMultiset(b, a))
        r.kind = Relation::Fewer;
    else if (b.size() > a.size() && subMultiset(a, b))
        r.kind = Relation::More;
    else
        r.kind = Relation::Different;
    return r;
}

// N when `factor` is 1/N (or N) for a whole N >= 2; 0 otherwise.
int wholeDivisor(double factor)
{
    if (factor <= 0)
        return 0;
    const double n = factor < 1 ? 1.0 / factor : factor;
    const double rounded = std::round(n);
    return rounded >= 2 && std::abs(n - rounded) <= 0.02 * rounded ? int(rounded) : 0;
}

// The tensors of `a` not in `b` (as multisets at the allocator's granularity), sorted.
std::vector<int64_t> without(const std::vector<int64_t>& a, const std::vector<int64_t>& b)
{
    std::vector<int64_t> out;
    size_t j = 0;
    for (int64_t x : a) {
        while (j < b.size() && mirrorKey(b[j]) < mirrorKey(x))
            ++j;
        if (j < b.size() && mirrorKey(b[j]) == mirrorKey(x))
            ++j;
        else
            out.push_back(x);
    }
    return out;
}

// One or two parameters that differ, each scaled by the token ratio, within a tenth of the
// parameter bytes: a table sized by the sequence (learned positions), not another model.
std::optional<std::string> tokenSizedParameters(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::optional<double> ratio)
{
    if (!ratio)
        return std::nullopt;
    const auto onlyA = without(a, b), onlyB = without(b, a);
    if (onlyA.empty() || onlyA.size() != onlyB.size() || onlyA.size() > 2)
        return std::nullopt;
    int64_t differing = 0, all = 0;
    for (size_t i = 0; i < onlyA.size(); ++i) {
        if (!nearRatio(double(onlyB[i]) / double(onlyA[i]), *ratio))
            return std::nullopt;
        differing += onlyA[i];
    }
    for (int64_t x : a)
        all += x;
    if (differing * 10 > all)
        return std::nullopt;
    return std::string(onlyA.size() == 1 ? "a parameter follows it too (" : "two parameters follow it too (") + formatBytes(onlyA[0]) +
           " -> " + formatBytes(onlyB[0]) + "): a table sized by the sequence length, such as learned positions";
}

std::string tensorsText(size_t count, int64_t bytes)
{
    return std::to_string(count) + " tensors, " + formatBytes(bytes);
}

bool hasPhase(const RunProfile& p, Phase phase)
{
    for (const PhaseBlock& b : p.blocks)
        if (b.phase == phase)
            return true;
    return false;
}

// --- recorded window -----------------------------------------------------------------------

std::vector<Phase> backbone(const RunProfile& p)
{
    std::vector<Phase> out;
    for (const PhaseBlock& x : p.blocks)
        if (x.phase == Phase::Forward || x.phase == Phase::Backward)
            out.push_back(x.phase);
    return out;
}

std::string windowText(const RunProfile& p)
{
    std::string s = blockSequence(p.blocks);
    const int stepBlocks = int(std::count_if(p.blocks.begin(), p.blocks.end(), [](const PhaseBlock& b) { return b.phase == Phase::OptimizerStep; }));
    if (p.steps > stepBlocks)
        s += " (" + std::to_string(p.steps) + " optimizer steps by their annotations)";
    return s;
}

void inferWindow(const RunProfile& a, const RunProfile& b, AxisInference& out)
{
    // Forward and backward passes always allocate; an optimizer step may not (plain SGD), so steps
    // are counted from blocks or annotation windows, and compared only where both runs show some.
    const std::vector<Phase> pa = backbone(a), pb = backbone(b);
    // A run cut short by an OOM recorded a prefix of what the other did: the OOM is the outcome, not
    // a different window.
    const RunProfile* cut = a.endsInOom && !b.endsInOom ? &a : b.endsInOom && !a.endsInOom ? &b : nullptr;
    if (cut) {
        const auto& shortSeq = cut == &a ? pa : pb;
        const auto& longSeq = cut == &a ? pb : pa;
        if (shortSeq.size() <= longSeq.size() && std::equal(shortSeq.begin(), shortSeq.end(), longSeq.begin())) {
            const std::string where = cut->blocks.empty() ? "" : " in its " + blockSequence({cut->blocks.back()});
            out.cutShort = std::string(cut == &a ? "A" : "B") + " ran out of memory" + where + " (event " + std::to_string(cut->oomIndex) +
                           "), so " + (cut == &a ? "B" : "A") + "'s later moments have no partner";
            return;
        }
    }
    CompareAxis axis;
    axis.name = "recorded_window";
    axis.phrase = "the recorded window";
    const bool stepsDiffer = a.steps > 0 && b.steps > 0 ? a.steps != b.steps
                                                          : (a.steps > 0) != (b.steps > 0) && (a.steps > 0 ? b : a).stateBytes > 0;
    if (pa != pb || stepsDiffer) {
        axis.a = windowText(a);
        axis.b = windowText(b);
        axis.evidence = "A records " + axis.a + "; B records " + axis.b +
                        ": the runs recorded different phases or steps, so they cannot be compared moment for moment";
        out.axes.push_back(std::move(axis));
        return;
    }
    if (!a.stateSizes.empty() && !b.stateSizes.empty() && a.stateCreatedInTrace != b.stateCreatedInTrace) {
        const bool aFirst = a.stateCreatedInTrace && !a.statePreexisting;
        axis.a = aFirst ? "the first optimizer step" : "a later optimizer step";
        axis.b = aFirst ? "a later optimizer step" : "the first optimizer step";
        axis.evidence = std::string("the optimizer state is created inside ") + (aFirst ? "A" : "B") + "'s trace (its first step) but existed before " +
                        (aFirst ? "B" : "A") +
                        "'s recording began: the runs recorded different steps, so they cannot be compared moment for moment";
        out.axes.push_back(std::move(axis));
    }
}

// --- precision ------------------------------------------------------------------------------

// The share of the linear tensors' paired bytes whose element size changed the way autocast
// changes it: halved relative to the tokens when autocast is in B, doubled when it is in A. The
// tokens' own ratio comes from the integer inputs, else from the tensors that kept their size.
double elementSizeShare(const SitePairing& sites, bool autocastInB)
{
    const int64_t total = SitePairing::total(sites.linear);
    if (total == 0)
        return 0;
    double tokens = 0;
    if (!sites.input.empty()) {
        tokens = sites.input.front().ratio;
    } else {
        for (const RatioCluster& c : sites.linear)
            if (c.bytes * 20 >= total && (tokens == 0 || (autocastInB ? c.ratio > tokens : c.ratio < tokens)))
                tokens = c.ratio;
    }
    int64_t changed = 0;
    for (const RatioCluster& c : sites.linear)
        if (nearRatio(c.ratio, tokens * (autocastInB ? 0.5 : 2.0)))
            changed += c.bytes;
    return double(changed) / double(total);
}

// Frames and the classifier's cast_cache pool say autocast outright. Cast-shaped allocations alone
// could be activations of a weight's half size by coincidence: they count when paired tensors also
// changed their element size as autocast changes it.
bool autocastIn(const RunProfile& p, const CastEvidence& casts, const SitePairing& sites, bool isB)
{
    return p.autocastFrameAllocations > 0 || p.castCacheBytes > 0 || (casts.autocast() && elementSizeShare(sites, isB) >= 0.05);
}

std::string autocastEvidence(const RunProfile& p, const CastEvidence& casts)
{
    std::vector<std::string> parts;
    if (p.autocastFrameAllocations > 0)
        parts.push_back(std::to_string(p.autocastFrameAllocations) + " allocations under autocast frames");
    if (casts.autocast())
        parts.push_back(std::to_string(casts.count) + " allocations in the first forward pass of exactly half a parameter's bytes (" +
                        formatBytes(casts.bytes) + ", " + std::to_string(casts.distinctSizes) +
                        " sizes) that the other run does not make: 16-bit copies of fp32 weights");
    if (p.castCacheBytes > 0)
        parts.push_back("a cast_cache pool of " + formatBytes(p.castCacheBytes));
    std::string s;
    for (const auto& x : parts)
        s += (s.empty() ? "" : ", ") + x;
    return s;
}

// How the paired tensors' sizes split: under a precision change with the tokens fixed, some halve
// (or double) and the rest, computed in fp32 either way or integer, keep their size.
std::string elementSizeEvidence(const SitePairing& sites)
{
    std::vector<RatioCluster> all = sites.linear;
    all.insert(all.end(), sites.quadratic.begin(), sites.quadratic.end());
    all.insert(all.end(), sites.input.begin(), sites.input.end());
    const int64_t total = SitePairing::total(all);
    if (total == 0)
        return {};
    int64_t half = 0, same = 0, twice = 0;
    for (const RatioCluster& c : all) {
        if (nearRatio(c.ratio, 0.5))
            half += c.bytes;
        else if (nearRatio(c.ratio, 1.0))
            same += c.bytes;
        else if (nearRatio(c.ratio, 2.0))
            twice += c.bytes;
    }
    auto pct = [&](int64_t x) { return std::to_string(int(std::lround(100.0 * double(x) / double(total)))) + "%"; };
    std::string s = "paired batch-dependent tensors: ";
    if (half * 200 > total)
        s += pct(half) + " of their bytes halved, ";
    if (twice * 200 > total)
        s += pct(twice) + " doubled, ";
    s += pct(same) + " kept their size";
    return s;
}

PrecisionChange inferPrecision(const RunProfile& a, const RunProfile& b, const TensorRelation& params, const SitePairing& sites)
{
    PrecisionChange pc;
    const bool autoA = autocastIn(a, sites.castsA, sites, false), autoB = autocastIn(b, sites.castsB, sites, true);
    // Every weight at half (or twice) its bytes, as many weights, and no collective to shard them:
    // the element size changed (ZeRO-3 over 2 ranks would gather the full weights back).
    int weights = 0;
    if (params.kind == Relation::Scaled && (nearRatio(params.factor, 0.5) || nearRatio(params.factor, 2.0))) {
        const RunProfile& smaller = params.factor < 1 ? b : a;
        if (smaller.collectiveAllocations == 0 && smaller.transientParameterBytes == 0)
            weights = params.factor < 1 ? -1 : 1;
    }
    if (autoA == autoB && weights == 0)
        return pc;
    auto label = [&](bool autocast, bool narrow) {
        std::string s = narrow ? "16-bit" : "fp32";
        if (autocast)
            s = narrow ? "16-bit + autocast" : "autocast (16-bit)";
        return s;
    };
    const bool narrowA = weights > 0, narrowB = weights < 0;
    CompareAxis axis;
    axis.name = "precision";
    axis.a = label(autoA, narrowA);
    axis.b = label(autoB, narrowB);
    axis.phrase = "precision " + axis.a + " -> " + axis.b;
    std::vector<std::string> ev;
    if (autoA != autoB) {
        const RunProfile& with = autoB ? b : a;
        ev.push_back(std::string("autocast appears in ") + (autoB ? "B" : "A") + " only: " + autocastEvidence(with, autoB ? sites.castsB : sites.castsA));
    }
    if (weights != 0) {
        axis.ratio = params.factor;
        ev.push_back("every parameter tensor is " + std::string(weights < 0 ? "half" : "twice") + " its bytes in A (" +
                     tensorsText(params.countA, params.bytesA) + " -> " + formatBytes(params.bytesB) +
                     ") with no collective or gathered weights: the element size changed");
    }
    if (auto sizes = elementSizeEvidence(sites); !sizes.empty())
        ev.push_back(sizes);
    for (const auto& e : ev)
        axis.evidence += (axis.evidence.empty() ? "" : "; ") + e;
    // Lower in B when B gained autocast or narrower weights.
    pc.direction = (autoB && !autoA) || weights < 0 ? -1 : 1;
    pc.axis = std::move(axis);
    return pc;
}

// --- weights, gradients, optimizer state ---------------------------------------------------

std::string bytesPerGradient(const RunProfile& p)
{
    if (p.stateBytes == 0)
        return "no state";
    if (p.gradientBytes == 0)
        return formatBytes(p.stateBytes);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f x the gradients", double(p.stateBytes) / double(p.gradientBytes));
    return buf;
}

std::string optimizerLabel(const RunProfile& p)
{
    if (p.optimizer != OptimizerKind::Keep)
        return std::string(optimizerName(p.optimizer));
    return bytesPerGradient(p);
}

void inferWeights(const RunProfile& a, const RunProfile& b, const TensorRelation& params, bool precisionExplainsWeights,
                  AxisInference& out)
{
    const TensorRelation grads = relate(a.gradientSizes, b.gradientSizes);
    const TensorRelation state = relate(a.stateSizes, b.stateSizes);
    bool stateExplained = false, gradsExplained = precisionExplainsWeights, paramsSharded = false;

    // Sharding: B's (or A's) tensors each 1/N, by stage. Stage 1 moves only the state, which a
    // lower-state optimizer does too: then the collectives or the same named optimizer decide.
    if (!precisionExplainsWeights) {
        const bool bSmaller = state.kind == Relation::Scaled ? state.factor < 1 : grads.kind == Relation::Scaled ? grads.factor < 1 : params.factor < 1;
        const RunProfile& sharded = bSmaller ? b : a;
        const RunProfile& whole = bSmaller ? a : b;
        int n = 0, stage = 0;
        const int nState = state.kind == Relation::Scaled ? wholeDivisor(state.factor) : 0;
        const int nGrad = grads.kind == Relation::Scaled ? wholeDivisor(grads.factor) : 0;
        const int nParam = params.kind == Relation::Scaled ? wholeDivisor(params.factor) : 0;
        const bool stateOk = state.kind == Relation::Empty || nState > 0;
        if (nParam > 0 && (nGrad == nParam || grads.kind == Relation::Empty) && (nState == nParam || state.kind == Relation::Empty)) {
            n = nParam;
            stage = 3;
        } else if (params.kind == Relation::Same && nGrad > 0 && stateOk && (nState == 0 || nState == nGrad)) {
            n = nGrad;
            stage = 2;
        } else if (params.kind == Relation::Same && (grads.kind == Relation::Same || grads.kind == Relation::Empty) && nState > 0) {
            n = nState;
            stage = 1;
        }
        if (n > 0) {
            const bool collectives = sharded.collectiveAllocations > 0 && whole.collectiveAllocations == 0;
            const bool sameOptimizer = a.optimizer != OptimizerKind::Keep && a.optimizer == b.optimizer;
            const bool decided = stage >= 2 || collectives || sameOptimizer;
            CompareAxis axis;
            axis.name = decided ? "sharding" : "sharding_or_optimizer";
            const std::string shardedText = "ZeRO-" + std::to_string(stage) + " over " + std::to_string(n) + " ranks";
            axis.a = bSmaller ? "unsharded" : shardedText;
            axis.b = bSmaller ? shardedText : "unsharded";
            axis.ratio = bSmaller ? 1.0 / n : double(n);
            std::string what = stage == 3 ? "parameter, gradient and optimizer-state" : stage == 2 ? "gradient and optimizer-state" : "optimizer-state";
            axis.evidence = "every " + what + " tensor of " + (bSmaller ? "B" : "A") + " is 1/" + std::to_string(n) + " of its size in " +
                            (bSmaller ? "A" : "B") + " (as many tensors: " + std::to_string(stage == 1 ? state.countA : stage == 2 ? grads.countA : params.countA) +
                            ")" + (stage < 3 ? "; the parameters are unchanged" : "");
            if (collectives)
                axis.evidence += "; " + std::to_string(sharded.collectiveAllocations) + " allocations under collective frames (all_gather, "
                                                                                          "reduce_scatter) in the sharded run only";
            if (sameOptimizer)
                axis.evidence += "; both runs step " + std::string(optimizerName(a.optimizer)) + ", which keeps the same state per parameter";
            if (decided) {
                axis.phrase = "sharding " + axis.a + " -> " + axis.b;
            } else {
                axis.phrase = "optimizer state " + ratioText(*axis.ratio) + " per tensor (ZeRO-1 over " + std::to_string(n) +
                              " ranks or a lower-state optimizer: the traces cannot tell)";
                axis.evidence += "; no collective frames and no optimizer name tell a sharded state from a smaller one (8-bit or one buffer)";
            }
            out.axes.push_back(std::move(axis));
            stateExplained = true;
            gradsExplained = stage >= 2;
            paramsSharded = stage == 3;
        }
    }

    // Trainable parameters: gradients for fewer (or more) tensors, each as large as before.
    const bool paramsKept = params.kind == Relation::Same || params.kind == Relation::Empty ||
                            (params.kind == Relation::More && params.bytesB - params.bytesA < params.bytesA / 10) ||
                            (params.kind == Relation::Fewer && params.bytesA - params.bytesB < params.bytesA / 10);
    if (!gradsExplained && grads.bytesB > 0 && grads.bytesA > 0 && paramsKept &&
        (grads.kind == Relation::Fewer || grads.kind == Relation::More || grads.kind == Relation::Different)) {
        CompareAxis axis;
        axis.name = "trainable_parameters";
        axis.a = std::to_string(grads.countA) + " tensors with gradients";
        axis.b = std::to_string(grads.countB) + " tensors with gradients";
        axis.ratio = grads.factor;
        axis.phrase = "trainable parameters " + ratioText(grads.factor);
        axis.evidence = "gradients " + tensorsText(grads.countA, grads.bytesA) + " -> " + tensorsText(grads.countB, grads.bytesB) +
                        (grads.kind == Relation::Different ? "" : std::string(", each remaining tensor as large as before")) +
                        ", with the parameters " + (params.kind == Relation::Same ? "unchanged" : "nearly unchanged (" + formatBytes(params.bytesA) + " -> " + formatBytes(params.bytesB) + ")");
        if (state.bytesA > 0 && state.bytesB > 0)
            axis.evidence += "; optimizer state follows (" + ratioText(state.factor) + ")";
        out.axes.push_back(std::move(axis));
        gradsExplained = true;
    }

    // Optimizer: the named class, else the state per gradient byte (0: plain SGD, 1: momentum or
    // Lion, 2: Adam; 8-bit and factored states below 1).
    const bool stepA = a.steps > 0 || a.stateBytes > 0, stepB = b.steps > 0 || b.stateBytes > 0;
    if (!stateExplained && stepA && stepB) {
        const bool named = a.optimizer != OptimizerKind::Keep && b.optimizer != OptimizerKind::Keep;
        const bool namesDiffer = named && a.optimizer != b.optimizer;
        const double perA = a.gradientBytes > 0 ? double(a.stateBytes) / double(a.gradientBytes) : -1;
        const double perB = b.gradientBytes > 0 ? double(b.stateBytes) / double(b.gradientBytes) : -1;
        bool stateDiffers = perA >= 0 && perB >= 0 ? std::abs(perA - perB) > 0.1 * std::max({perA, perB, 0.1})
                                                   : state.kind != Relation::Same && state.kind != Relation::Empty &&
                                                         !(gradsExplained && nearRatio(state.factor, grads.factor, 0.05));
        if (gradsExplained && grads.bytesA > 0 && grads.bytesB > 0 && perA >= 0 && perB >= 0)
            stateDiffers = std::abs(perA - perB) > 0.1 * std::max({perA, perB, 0.1});
        if (namesDiffer || (stateDiffers && !(named && a.optimizer == b.optimizer && state.kind == Relation::Same))) {
            CompareAxis axis;
            axis.name = "optimizer";
            axis.a = optimizerLabel(a);
            axis.b = optimizerLabel(b);
            if (state.bytesA > 0)
                axis.ratio = state.factor;
            axis.phrase = "optimizer " + axis.a + " -> " + axis.b;
            axis.evidence = "optimizer state " + formatBytes(a.stateBytes) + " (" + bytesPerGradient(a) + ") -> " + formatBytes(b.stateBytes) +
                            " (" + bytesPerGradient(b) + ")";
            if (namesDiffer)
                axis.evidence += "; " + a.optimizerEvidence + " in A, " + b.optimizerEvidence + " in B";
            out.axes.push_back(std::move(axis));
        }
    }

    // A different model: parameter tensors that no knob above explains. A table sized by the tokens
    // (learned absolute positions: s x h) follows the sequence axis instead.
    if (!precisionExplainsWeights && !paramsSharded && params.kind != Relation::Same && params.kind != Relation::Empty && !paramsKept) {
        CompareAxis* tokens = nullptr;
        for (auto& x : out.axes)
            if (x.name == "sequence" || x.name == "tokens")
                tokens = &x;
        if (auto table = tokenSizedParameters(a.parameterSizes, b.parameterSizes, tokens ? tokens->ratio : std::nullopt)) {
            tokens->evidence += "; " + *table;
        } else {
            CompareAxis axis;
            axis.name = "model";
            axis.a = tensorsText(params.countA, params.bytesA);
            axis.b = tensorsText(params.countB, params.bytesB);
            axis.ratio = params.factor;
            axis.phrase = "the model (parameters " + formatBytes(params.bytesA) + " -> " + formatBytes(params.bytesB) + ")";
            axis.evidence = "parameter tensors " + axis.a + " -> " + axis.b + ": not the same tensors, nor each scaled alike";
            out.axes.push_back(std::move(axis));
        }
    }
}

// --- activation checkpointing ----------------------------------------------------------------

bool recomputes(const RunProfile& p)
{
    // A stray line shared by forward and backward code is not recomputation: a checkpointed model
    // recomputes at least one allocation per layer.
    return p.checkpointFrameAllocations > 0 || p.recomputeAllocations >= std::max(8, p.layers);
}

void inferCheckpointing(const RunProfile& a, const RunProfile& b, AxisInference& out)
{
    if (!hasPhase(a, Phase::Backward) || !hasPhase(b, Phase::Backward))
        return;
    const bool ra = recomputes(a), rb = recomputes(b);
    if (ra == rb)
        return;
    const RunProfile& on = rb ? b : a;
    CompareAxis axis;
    axis.name = "checkpointing";
    axis.a = ra ? "on" : "off";
    axis.b = rb ? "on" : "off";
    axis.phrase = "activation checkpointing " + axis.a + " -> " + axis.b;
    axis.evidence = std::string(rb ? "B" : "A") + " recomputes in backward: " + std::to_string(on.recomputeAllocations) + " allocations (" +
                    formatBytes(on.recomputeBytes) + ") made in backward by the forward's own code lines" +
                    (on.checkpointFrameAllocations > 0 ? ", " + std::to_string(on.checkpointFrameAllocations) + " under torch.utils.checkpoint frames" : "") +
                    "; the other run none";
    if (a.savedPerLayer > 0 && b.savedPerLayer > 0) {
        axis.ratio = double(b.savedPerLayer) / double(a.savedPerLayer);
        axis.evidence += "; saved for backward per layer " + formatBytes(a.savedPerLayer) + " -> " + formatBytes(b.savedPerLayer);
    }
    out.axes.push_back(std::move(axis));
}

} // namespace

AxisInference inferAxes(const RunProfile& a, const RunProfile& b, const SitePairing& sites)
{
    AxisInference out;
    inferWindow(a, b, out);
    const TensorRelation params = relate(a.parameterSizes, b.parameterSizes);
    PrecisionChange precision = inferPrecision(a, b, params, sites);
    if (precision.axis)
        out.axes.push_back(*precision.axis);
    const bool weightsByPrecision = precision.axis && precision.axis->ratio.has_value();
    inferTokenAxes(sites, precision.direction, out);
    inferWeights(a, b, params, weightsByPrecision, out);
    inferCheckpointing(a, b, out);

    if (a.initialAllocated != b.initialAllocated && std::abs(a.initialAllocated - b.initialAllocated) >= 64 * kMiB)
        out.caveats.push_back(formatBytes(std::abs(b.initialAllocated - a.initialAllocated)) + (b.initialAllocated > a.initialAllocated ? " more" : " less") +
                              " was allocated in B before recording began (" + formatBytes(a.initialAllocated) + " -> " +
                              formatBytes(b.initialAllocated) + "): the runs did not start from the same state");
    if (sites.unpairedSites > 0 && sites.pairedSites > 0)
        out.notes.push_back(std::to_string(sites.pairedSites) + " call sites paired (" + std::to_string(sites.pairedAllocations) +
                            " allocations); " + std::to_string(sites.unpairedSites) +
                            " made a different number of allocations in the two runs or exist in one only, and were left out");
    return out;
}

} // namespace poolscope
