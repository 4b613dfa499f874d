#include "core/whatif/plan.h"

#include "core/util/units.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace poolscope {

// Defined in plan_units.cpp: the transforms that follow the layers (sharding units, checkpoints).
void applySharding(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, Plan& plan);
void applyCheckpointing(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, Plan& plan);
// Defined in plan_training.cpp and plan_precision.cpp.
void applyTrainable(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, const FrameTable* frames, Plan& plan);
void applyAccumulate(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, Plan& plan);
void applyAutocast(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, const FrameTable* frames, ElementGuess guess,
                   Plan& plan);

namespace {

int64_t isqrt(int64_t n)
{
    if (n <= 0)
        return 0;
    auto r = int64_t(std::sqrt(double(n)));
    while (r * r > n)
        --r;
    while ((r + 1) * (r + 1) <= n)
        ++r;
    return r;
}

bool adamLike(OptimizerKind k)
{
    return k == OptimizerKind::AdamW || k == OptimizerKind::Adam || k == OptimizerKind::Adam8bit || k == OptimizerKind::Adafactor;
}

int64_t sumSizes(const Plan& plan, const TraceModel& m, Pool pool, bool aliveAtEndOnly, const DeviceTrace& dev)
{
    int64_t s = 0;
    for (size_t a = 0; a < plan.size.size(); ++a)
        if (m.pool[a] == pool && (!aliveAtEndOnly || dev.allocations[a].aliveAtEnd()))
            s += plan.size[a];
    for (const auto& e : plan.extras)
        if (e.pool == pool && (!aliveAtEndOnly || e.freeAt == kNoEvent))
            s += e.size;
    return s;
}

// b^i * s^j for each law.
Ratio lawRatio(SizeLaw law, const Scenario& sc)
{
    Ratio r;
    for (int i = 0; i < batchExponent(law); ++i)
        r = r * sc.batchScale;
    for (int j = 0; j < seqExponent(law); ++j)
        r = r * sc.seqScale;
    return r;
}

void applyBatch(const TraceModel& m, const Scenario& sc, Plan& plan)
{
    constexpr size_t kLaws = 6;
    std::array<Ratio, kLaws> ratio;
    bool any = false;
    for (size_t l = 0; l < kLaws; ++l) {
        ratio[l] = lawRatio(SizeLaw(l), sc);
        any |= !ratio[l].isOne();
    }
    for (size_t a = 0; a < plan.size.size(); ++a) {
        plan.size[a] = ratio[size_t(m.law[a])].apply(plan.size[a]);
        if (m.pool[a] == Pool::Activation)
            plan.size[a] = sc.activationScale.apply(plan.size[a]);
    }
    if (!any)
        return;
    // A micro-batch is whole sequences: where the trace shows b, say when the knob asks for a part of
    // one (x0.5 of b = 1, or accumulation over more micro-steps than sequences).
    if (m.dims.batch > 0 && !sc.batchScale.isOne()) {
        const Ratio b = Ratio{m.dims.batch, 1} * sc.batchScale;
        if (b.num % b.den != 0 || b.num < b.den) {
            const std::string recorded = "the recorded micro-batch is " + std::to_string(m.dims.batch) +
                                         (m.dims.batch == 1 ? " sequence of " : " sequences of ") + std::to_string(m.dims.seq) + " tokens";
            const std::string ask = "x" + sc.batchScale.text() + " asks for " + b.text() + " sequences, which no run can have";
            plan.notes.push_back(recorded + " (" + m.dims.seqFrom + "): " + ask + "; the prediction scales the per-token tensors as if it could");
            plan.caveats.push_back(recorded + "; " + ask);
        }
    }
    if (m.linearBytes + m.quadraticBytes == 0) {
        plan.notes.push_back("nothing in this trace follows the batch: micro-batch and sequence changes have no effect here");
        return;
    }
    const Ratio linear = ratio[size_t(SizeLaw::Linear)], quadratic = ratio[size_t(SizeLaw::Quadratic)];
    std::string note = "batch-dependent allocations (" + formatBytes(m.linearBytes + m.quadraticBytes) +
                       " allocated over the trace): x b*s ones x" + linear.text();
    if (m.quadraticBytes > 0)
        note += ", attention scores (" + formatBytes(m.quadraticBytes) + ") x" + quadratic.text();
    if (!sc.seqScale.isOne() && m.dims.seq > 0)
        note += ", causal masks x" + ratio[size_t(SizeLaw::SeqSquared)].text() + " and position tensors x" +
                ratio[size_t(SizeLaw::Seq)].text();
    note += "; parameters, gradients, optimizer state and what is made from the weights stay";
    plan.notes.push_back(note);
}

void applyOptimizer(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, Plan& plan)
{
    const OptimizerKind target = sc.optimizer;
    if (target == OptimizerKind::Keep || target == m.recordedOptimizer)
        return;
    const int64_t before = sumSizes(plan, m, Pool::OptimizerState, true, dev);
    if (!m.hasStep && m.stateBytes == 0) {
        plan.notes.push_back("no optimizer step and no optimizer state in this trace: changing the optimizer changes nothing here");
        return;
    }
    if (!stateIsWholeParameterCopies(m) && rebuildOptimizerState(dev, m, target, plan)) {
        // An 8-bit state (uint8 moments, fp32 absmax, maps): replaced, not scaled block by block.
    } else if (m.stateBytesPerParam == 0) {
        // The recorded optimizer kept no state (plain SGD): the new one creates it lazily at the first step.
        const EventIndex at = m.firstStepEvent;
        for (size_t a = 0; a < plan.size.size(); ++a) {
            const Allocation& al = dev.allocations[a];
            if (m.pool[a] != Pool::Parameter || al.allocEvent > at ||
                (al.freeCompletedEvent != kNoEvent && al.freeCompletedEvent <= at))
                continue;
            if (const int64_t bytes = optimizerStateBytes(target, m.requestedSize[a] / 4); bytes > 0)
                plan.extras.push_back({at, kNoEvent, bytes, al.stream, Pool::OptimizerState});
        }
    } else if (m.recordedOptimizer == OptimizerKind::Adafactor) {
        // Factored state cannot be unfolded into shapes: scale by the bytes-per-parameter ratio.
        const int64_t perParam = optimizerStateBytes(target, 1 << 20) / (1 << 20);
        for (size_t a = 0; a < plan.size.size(); ++a)
            if (m.pool[a] == Pool::OptimizerState)
                plan.size[a] = Ratio{perParam, std::max(1, m.stateBytesPerParam)}.apply(plan.size[a]);
        plan.notes.push_back("the recorded Adafactor state is factored: the new state is scaled by bytes per parameter");
    } else {
        // Every state tensor mirrors a parameter: AdamW keeps two (exp_avg, exp_avg_sq), momentum one.
        const int64_t elemBytes = m.recordedOptimizer == OptimizerKind::Adam8bit ? 1 : 4;
        const int64_t perParam = std::max(1, m.stateBytesPerParam / int(elemBytes));
        for (size_t a = 0; a < plan.size.size(); ++a) {
            if (m.pool[a] != Pool::OptimizerState)
                continue;
            const int64_t numel = m.requestedSize[a] / elemBytes;
            if (numel <= 2) // the per-parameter `step` counters
                plan.size[a] = adamLike(target) ? plan.size[a] : 0;
            else
                plan.size[a] = optimizerStateBytes(target, numel) / perParam;
        }
    }
    const int64_t wsOld = optimizerWorkspaceBytesPerParam(m.recordedOptimizer);
    const int64_t wsNew = optimizerWorkspaceBytesPerParam(target);
    if (wsOld > 0) {
        for (size_t a = 0; a < plan.size.size(); ++a)
            if (m.stepWorkspace[a])
                plan.size[a] = Ratio{wsNew, wsOld}.apply(plan.size[a]);
    } else if (wsNew > 0) {
        plan.notes.push_back("the recorded optimizer step allocated no scratch; the new one's (" + std::to_string(wsNew) +
                             " B per parameter in foreach implementations) is not added");
    }
    const int64_t after = sumSizes(plan, m, Pool::OptimizerState, true, dev);
    plan.notes.push_back("optimizer " + std::string(optimizerName(m.recordedOptimizer == OptimizerKind::Keep ? OptimizerKind::AdamW : m.recordedOptimizer)) +
                         (m.recordedOptimizer == OptimizerKind::Keep ? " (assumed)" : "") + " -> " + std::string(optimizerName(target)) +
                         ": optimizer state at the end " + formatBytes(before) + " -> " + formatBytes(after) +
                         "; step scratch " + std::to_string(wsOld) + " -> " + std::to_string(wsNew) + " B per parameter");
}

void applyOffload(const TraceModel& m, const Scenario& sc, Plan& plan)
{
    if (!sc.offloadOptimizer)
        return;
    int64_t moved = 0;
    for (size_t a = 0; a < plan.size.size(); ++a)
        if (m.pool[a] == Pool::OptimizerState || m.stepWorkspace[a]) {
            moved += plan.size[a];
            plan.size[a] = 0;
        }
    for (auto& e : plan.extras)
        if (e.pool == Pool::OptimizerState) {
            moved += e.size;
            e.size = 0;
        }
    plan.notes.push_back("optimizer offloaded: its state and step scratch (" + formatBytes(moved) +
                         " allocated over the trace) leave the GPU; the step runs on the CPU");
}

} // namespace

int64_t optimizerStateBytes(OptimizerKind kind, int64_t numel)
{
    if (numel <= 0)
        return 0;
    switch (kind) {
    case OptimizerKind::AdamW:
    case OptimizerKind::Adam:
        return 8 * numel;
    case OptimizerKind::Sgd:
        return 0;
    case OptimizerKind::SgdMomentum:
    case OptimizerKind::Lion:
        return 4 * numel;
    case OptimizerKind::Adafactor: {
        if (numel < 4096)
            return 4 * numel;
        const int64_t rows = isqrt(numel);
        return (rows + (numel + rows - 1) / rows) * 4;
    }
    case OptimizerKind::Adam8bit:
        if (numel < 4096)
            return 8 * numel;
        // Two uint8 states and an fp32 absmax per 2048-element block for each (bitsandbytes
        // Optimizer2State.init_state: blocks = ceil(n / 2048)).
        return 2 * numel + 2 * ((numel + 2047) / 2048) * 4;
    case OptimizerKind::Keep:
        break;
    }
    return 0;
}

int64_t optimizerWorkspaceBytesPerParam(OptimizerKind kind)
{
    // torch.optim's foreach Adam/AdamW allocate sqrt(exp_avg_sq) for every parameter at once. Lion
    // and Adafactor implementations step one parameter at a time: their scratch is one tensor, not a
    // list, and SGD's foreach updates run in place.
    switch (kind) {
    case OptimizerKind::AdamW:
    case OptimizerKind::Adam:
        return 4;
    default:
        return 0;
    }
}

Plan buildPlan(const DeviceTrace& dev, const TraceModel& model, const Scenario& scenario, const FrameTable* frames, ElementGuess guess)
{
    Plan plan;
    const size_t n = dev.allocations.size();
    plan.size.resize(n);
    for (size_t a = 0; a < n; ++a)
        plan.size[a] = dev.allocations[a].size;
    plan.earlyFree.assign(n, kNoEvent);
    if (scenario.isIdentity())
        return plan;
    plan.identity = false;
    // Gradient accumulation runs each pass on 1/K of the micro-batch.
    Scenario perPass = scenario;
    perPass.batchScale = scenario.batchScale * Ratio{1, std::max(1, scenario.accumulate)};
    applyBatch(model, perPass, plan);
    applyAutocast(dev, model, scenario, frames, guess, plan);
    applyOptimizer(dev, model, scenario, plan);
    applyTrainable(dev, model, scenario, frames, plan);
    applyAccumulate(dev, model, scenario, plan);
    applySharding(dev, model, scenario, plan);
    applyOffload(model, scenario, plan);
    applyCheckpointing(dev, model, scenario, plan);
    return plan;
}

} // namespace poolscope
