// The axes other than the tokens: what was recorded, precision, the weights and what follows them
// (sharding, trainable parameters, optimizer, a different model), and activation checkpointing.
// Each reads tensors, not totals alone: sharding keeps every tensor and divides each by N, freezing
// parameters drops whole gradients and keeps the rest as they were, a lower precision halves every
// weight and adds no collectives.
#include "core/compare/axes.h"

#include "core/compare/tensor_relation.h"

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
        // State per gradient byte: the optimizer's buffers per trainable parameter, whatever the
        // precision or the trainable fraction (both scale gradients and state alike).
        const double perA = a.gradientBytes > 0 ? double(a.stateBytes) / double(a.gradientBytes) : -1;
        const double perB = b.gradientBytes > 0 ? double(b.stateBytes) / double(b.gradientBytes) : -1;
        const bool stateDiffers = perA >= 0 && perB >= 0 ? std::abs(perA - perB) > 0.1 * std::max({perA, perB, 0.1})
                                                         : state.kind != Relation::Same && state.kind != Relation::Empty && !precisionExplainsWeights;
        if (namesDiffer || stateDiffers) {
            CompareAxis axis;
            axis.name = "optimizer";
            axis.a = namesDiffer ? optimizerLabel(a) : bytesPerGradient(a);
            axis.b = namesDiffer ? optimizerLabel(b) : bytesPerGradient(b);
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
    // A run in which nothing was called a parameter (weights the classifier could not place, a dump
    // without them) cannot say the model changed: said, not made an axis.
    if (params.kind != Relation::Same && params.kind != Relation::Empty && (params.countA == 0 || params.countB == 0)) {
        out.notes.push_back(std::string(params.countA == 0 ? "A" : "B") +
                            " shows no parameter tensors (none allocated before or during its first forward is classified as one): "
                            "whether the model changed cannot be read from the weights");
        return;
    }
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

// --- grad mode --------------------------------------------------------------------------------

void inferGradMode(const RunProfile& a, const RunProfile& b, AxisInference& out)
{
    if (a.gradMode == 0 || b.gradMode == 0 || a.gradMode == b.gradMode)
        return;
    CompareAxis axis;
    axis.name = "grad_mode";
    axis.a = a.gradMode > 0 ? "grad on" : "no_grad";
    axis.b = b.gradMode > 0 ? "grad on" : "no_grad";
    axis.phrase = "grad mode " + axis.a + " -> " + axis.b;
    axis.evidence = "A: " + a.gradModeEvidence + "; B: " + b.gradModeEvidence;
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
    inferGradMode(a, b, out);

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
