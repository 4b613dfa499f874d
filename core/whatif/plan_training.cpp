// Transforms of what training keeps for the weights: a trainable fraction or frozen parameters
// (gradients and optimizer state follow the trainable weights; weights and activations stay) and
// gradient accumulation (the micro-batch / K, the gradients held across the K passes).
#include "core/whatif/plan.h"

#include "core/util/units.h"

#include <algorithm>
#include <map>
#include <regex>

namespace poolscope {
namespace {

EventIndex before(EventIndex e) { return e > 0 ? e - 1 : kNoEvent; }

bool followsWeights(const TraceModel& m, size_t a)
{
    // A weight's gradient on its way into .grad (AccumulateGrad's clone source, a 16-bit gradient
    // cast into an fp32 .grad) or the .grad itself.
    return m.pool[a] == Pool::Gradient || (m.lawEvidence[a] == LawEvidence::WeightOrigin && !m.weightCast[a] &&
                                           m.pool[a] != Pool::Parameter && m.pool[a] != Pool::OptimizerState);
}

std::string stackText(const FrameTable& frames, StackId id)
{
    std::string out;
    if (!id.valid() || id.value >= frames.stackCount())
        return out;
    for (FrameId f : frames.stack(id)) {
        const Frame& fr = frames.frame(f);
        out += fr.filename + ":" + fr.name + "\n";
    }
    return out;
}

} // namespace

void applyTrainable(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, const FrameTable* frames, Plan& plan)
{
    if (sc.trainable.isOne() && sc.freeze.empty())
        return;
    const size_t n = plan.size.size();
    int64_t gradBefore = 0, gradAfter = 0, stateBefore = 0, stateAfter = 0;
    if (!sc.trainable.isOne()) {
        // LoRA-like adapters F times each weight's size: each gradient and state buffer F times as large.
        for (size_t a = 0; a < n; ++a) {
            if (!followsWeights(m, a) && m.pool[a] != Pool::OptimizerState && !m.stepWorkspace[a])
                continue;
            int64_t& was = m.pool[a] == Pool::OptimizerState ? stateBefore : gradBefore;
            int64_t& now = m.pool[a] == Pool::OptimizerState ? stateAfter : gradAfter;
            was += plan.size[a];
            plan.size[a] = sc.trainable.apply(plan.size[a]);
            now += plan.size[a];
        }
        for (auto& e : plan.extras)
            if (e.pool == Pool::OptimizerState || e.pool == Pool::Gradient)
                e.size = sc.trainable.apply(e.size);
        plan.notes.push_back("trainable x" + sc.trainable.text() + " (LoRA-like adapters of that share of each weight): " +
                             "gradients " + formatBytes(gradBefore) + " -> " + formatBytes(gradAfter) + ", optimizer state " +
                             formatBytes(stateBefore) + " -> " + formatBytes(stateAfter) +
                             " over the trace; the weights and the activations stay (the adapters' own small activations "
                             "and weights are not added)");
        return;
    }
    // --freeze: the gradients whose frames (or their clone source's) the pattern matches are not made.
    const bool invert = sc.freeze.front() == '!';
    const std::regex re(invert ? sc.freeze.substr(1) : sc.freeze);
    std::map<int64_t, std::pair<int64_t, int64_t>> bySize; // fp32 bytes -> (frozen, all) gradient bytes
    int64_t frozen = 0, kept = 0;
    for (size_t a = 0; a < n; ++a) {
        if (m.pool[a] != Pool::Gradient)
            continue;
        std::string text = frames ? stackText(*frames, dev.allocations[a].stack) : std::string();
        if (frames && m.gradSource[a] >= 0)
            text += stackText(*frames, dev.allocations[size_t(m.gradSource[a])].stack);
        const bool match = std::regex_search(text, re);
        auto& [fz, all] = bySize[m.requestedSize[a]];
        all += m.requestedSize[a];
        if (match == invert) {
            kept += plan.size[a];
            continue;
        }
        fz += m.requestedSize[a];
        frozen += plan.size[a];
        plan.size[a] = 0;
        if (m.gradSource[a] >= 0)
            plan.size[size_t(m.gradSource[a])] = 0;
    }
    // Optimizer state and the step's scratch mirror the parameters' sizes: the frozen share of each
    // size goes (state is made lazily at the step, only for parameters that have a gradient).
    std::map<int64_t, int64_t> dropLeft; // bytes per tensor -> tensors still to drop, per mirrored size
    std::map<int64_t, int64_t> count;
    for (size_t a = 0; a < n; ++a)
        if (m.pool[a] == Pool::OptimizerState || m.stepWorkspace[a])
            ++count[m.requestedSize[a]];
    for (auto& [bytes, c] : count) {
        auto it = bySize.find(bytes);
        if (it == bySize.end() || it->second.second == 0)
            continue;
        dropLeft[bytes] = (c * it->second.first + it->second.second / 2) / it->second.second;
    }
    int64_t stateDropped = 0;
    for (size_t a = 0; a < n; ++a) {
        if (m.pool[a] != Pool::OptimizerState && !m.stepWorkspace[a])
            continue;
        auto it = dropLeft.find(m.requestedSize[a]);
        if (it == dropLeft.end() || it->second <= 0)
            continue;
        --it->second;
        stateDropped += plan.size[a];
        plan.size[a] = 0;
    }
    plan.notes.push_back("frozen by '" + sc.freeze + "' (matched against the frames that made each gradient): gradients " +
                         formatBytes(frozen) + " dropped, " + formatBytes(kept) + " kept; optimizer state and step scratch " +
                         formatBytes(stateDropped) + " dropped over the trace (the same share of each size); weights and activations stay");
    if (frozen == 0)
        plan.notes.push_back("nothing matched '" + sc.freeze + "': gradients are made by AccumulateGrad and the autograd node of "
                             "the operator that used the weight (AddmmBackward0, EmbeddingBackward0, NativeLayerNormBackward0, ...)");
}

void applyAccumulate(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, Plan& plan)
{
    if (sc.accumulate <= 1)
        return;
    const int K = sc.accumulate;
    if (!m.hasBackward) {
        plan.notes.push_back("gradient accumulation over " + std::to_string(K) +
                             " micro-steps: no backward in this trace, so only the micro-batch / " + std::to_string(K) + " applies");
        return;
    }
    // The run predicted is the last micro-step: the gradients made by the earlier ones are held
    // from its forward on, and its own backward adds into them (the node's output lives briefly).
    int64_t moved = 0;
    for (size_t a = 0; a < plan.size.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        if (m.pool[a] != Pool::Gradient || al.preexisting() || plan.size[a] == 0)
            continue;
        EventIndex from = kNoEvent;
        for (const auto& pass : m.passes)
            if (pass.begin <= al.allocEvent)
                from = pass.begin;
        if (from == kNoEvent)
            continue;
        plan.extras.push_back({before(from), al.freeCompletedEvent, plan.size[a], al.stream, Pool::Gradient});
        if (m.gradSource[a] < 0)
            plan.extras.push_back({al.allocEvent, al.allocEvent + 1, plan.size[a], al.stream, Pool::Temporary});
        moved += plan.size[a];
        plan.size[a] = 0;
    }
    plan.notes.push_back("gradient accumulation over " + std::to_string(K) + " micro-steps: micro-batch / " + std::to_string(K) +
                         "; the last micro-step is predicted, its forward and backward running with the " + formatBytes(moved) +
                         " of gradients the earlier ones made (added into in place); optimizer state and the step unchanged");
    plan.recompute = std::to_string(K) + " forward and backward passes per optimizer step, each on 1/" + std::to_string(K) +
                     " of the micro-batch";
}

} // namespace poolscope
