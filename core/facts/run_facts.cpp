#include "core/facts/run_facts.h"

#include "core/facts/graph_kept.h"

#include "core/classify/classifier.h"
#include "core/classify/phases.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <unordered_map>

namespace poolscope {

int RunFacts::passAt(EventIndex e) const
{
    auto it = std::upper_bound(passes.begin(), passes.end(), e, [](EventIndex v, const Pass& p) { return v < p.first; });
    if (it == passes.begin())
        return -1;
    --it;
    return e <= it->last ? int(it - passes.begin()) : -1;
}

namespace {

// Without backward, a forward under no_grad or inference_mode lets go of each layer's scratch as it
// goes and keeps what the program holds (its outputs, a cache: a key and a value per layer against
// a dozen other blocks each layer makes); with grad on, the graph keeps what every operator saved,
// and where the program holds an output of each call (a list of logits) all of it outlives the call
// (the share: kGraphKeptShare, graph_kept.h).
constexpr size_t kMinKeptCalls = 2;       // forwards followed by another forward
constexpr size_t kMinMadeInCalls = 32;    // blocks those forwards made

// A window of two calls (a ring buffer's, a dump taken after the second): the first call's graph
// outlives the second call, and the second's lasts to the dump's end, which is all the window can
// show of it. Read as kept graphs only where both keep that share of what they made and keep the
// same blocks, size for size: a first call that brought weights or a cache in keeps blocks the second
// does not make again.
bool twoCallsKeepAlike(const DeviceTrace& dev, const RunFacts& f, const Pass& first, const Pass& second)
{
    std::unordered_map<int64_t, int64_t> alike; // size -> kept by the first call minus kept by the second
    size_t made[2] = {0, 0}, kept[2] = {0, 0};
    for (const Allocation& a : dev.allocations) {
        if (a.preexisting())
            continue;
        const int k = f.passAt(a.allocEvent);
        if (k < 0 || (&f.passes[size_t(k)] != &first && &f.passes[size_t(k)] != &second))
            continue;
        const int call = &f.passes[size_t(k)] == &first ? 0 : 1;
        ++made[call];
        const bool outlived = call == 0 ? a.aliveAfter(second.last) : a.aliveAtEnd();
        if (!outlived)
            continue;
        ++kept[call];
        alike[a.size] += call == 0 ? 1 : -1;
    }
    if (made[0] + made[1] < kMinMadeInCalls || !keepsGraphShare(kept[0], made[0]) || !keepsGraphShare(kept[1], made[1]))
        return false;
    size_t differ = 0;
    for (const auto& [size, n] : alike)
        differ += size_t(std::abs(n));
    return differ * 10 <= kept[0] + kept[1]; // the same blocks but for a few (an input, a scalar)
}

bool graphsOutliveTheirCalls(const DeviceTrace& dev, const RunFacts& f)
{
    std::vector<const Pass*> forwards;
    for (const Pass& p : f.passes)
        if (p.phase == Phase::Forward)
            forwards.push_back(&p);
    if (forwards.size() == kMinKeptCalls)
        return twoCallsKeepAlike(dev, f, *forwards[0], *forwards[1]);
    if (forwards.size() < kMinKeptCalls + 1)
        return false;
    size_t made = 0, kept = 0;
    std::vector<std::pair<size_t, size_t>> byCall(f.passes.size()); // per pass: made, kept
    for (const Allocation& a : dev.allocations) {
        if (a.preexisting())
            continue;
        const int k = f.passAt(a.allocEvent);
        if (k < 0 || f.passes[size_t(k)].phase != Phase::Forward)
            continue;
        // The next forward after the one that made it.
        auto next = std::upper_bound(forwards.begin(), forwards.end(), a.allocEvent, [](EventIndex e, const Pass* p) { return e < p->first; });
        if (next == forwards.end())
            continue;
        const bool outlived = a.aliveAfter((*next)->last);
        ++made;
        kept += outlived ? 1 : 0;
        auto& call = byCall[size_t(k)];
        ++call.first;
        call.second += outlived ? 1 : 0;
    }
    if (made < kMinMadeInCalls || !keepsGraphShare(kept, made))
        return false;
    // Every call whose output the program holds keeps its graph, not a few: a call that keeps what it
    // made while the others keep nothing moved something in that stays (a model's weights brought onto
    // the device by its first call, as accelerate's offload hooks do; a cache made lazily), which is
    // no graph. Most of the calls must keep that share of what they made.
    size_t calls = 0, keeping = 0;
    for (const auto& [callMade, callKept] : byCall)
        if (callMade > 0) {
            ++calls;
            keeping += keepsGraphShare(callKept, callMade) ? 1 : 0;
        }
    return keeping >= kMinKeptCalls && keeping * 2 > calls;
}

} // namespace

RunFacts buildRunFacts(const DeviceTrace& dev, const PhaseTimeline& tl, bool history)
{
    RunFacts f;
    f.history = history;
    const auto& ev = dev.events;
    // A pass: a run of a model phase in which frames or an annotation named the phase at least once.
    // Runs the caller's code only inherited (a training loop between passes) are not passes.
    for (size_t r = 0; r < tl.runs.size(); ++r) {
        const auto& run = tl.runs[r];
        if (run.phase == Phase::Unknown || run.phase == Phase::Teardown)
            continue;
        bool own = false;
        for (EventIndex e = run.first; e <= run.last && !own; ++e)
            own = tl.source[size_t(e)] == PhaseSource::Frames || tl.source[size_t(e)] == PhaseSource::Annotation ||
                  tl.source[size_t(e)] == PhaseSource::Structure;
        if (!own)
            continue;
        // Consecutive runs of one phase split by the caller's code stay separate passes (one model
        // call each); those split only by engine events are one.
        f.passes.push_back(Pass{run.phase, run.first, run.last, uint32_t(r)});
    }
    for (const Pass& p : f.passes) {
        switch (p.phase) {
        case Phase::Forward:
            ++f.forwardPasses;
            if (f.firstForward == kNoEvent)
                f.firstForward = p.first;
            break;
        case Phase::Backward:
            ++f.backwardPasses;
            if (f.firstBackward == kNoEvent)
                f.firstBackward = p.first;
            break;
        case Phase::OptimizerStep:
            ++f.optimizerSteps;
            if (f.firstOptimizerStep == kNoEvent)
                f.firstOptimizerStep = p.first;
            break;
        default:
            break;
        }
    }
    // Steps: a step begins with the first forward after a backward or an optimizer step.
    bool open = false, sawBackwardOrStep = false;
    for (const Pass& p : f.passes) {
        if (p.phase == Phase::Forward && (!open || sawBackwardOrStep)) {
            f.steps.push_back(StepFacts{p.first, p.last, p.first, kNoEvent, kNoEvent});
            open = true;
            sawBackwardOrStep = false;
            continue;
        }
        if (!open) {
            f.steps.push_back(StepFacts{p.first, p.last, kNoEvent, kNoEvent, kNoEvent});
            open = true;
        }
        StepFacts& s = f.steps.back();
        s.last = p.last;
        if (p.phase == Phase::Backward && s.firstBackward == kNoEvent)
            s.firstBackward = p.first;
        if (p.phase == Phase::OptimizerStep && s.firstOptimizerStep == kNoEvent)
            s.firstOptimizerStep = p.first;
        if (p.phase == Phase::Backward || p.phase == Phase::OptimizerStep)
            sawBackwardOrStep = true;
    }
    // Engine frees and grad mode: frees inside backward, and forward products released by the
    // autograd engine (in backward or when a graph is torn down).
    bool releasedByGraph = false;
    EventIndex firstOom = std::numeric_limits<EventIndex>::max();
    for (const OomEvent& o : dev.ooms)
        if (o.index >= 0)
            firstOom = std::min(firstOom, EventIndex(o.index));
    for (size_t e = 0; e < ev.count(); ++e) {
        const Action a = ev.action[e];
        if (a != Action::FreeRequested && a != Action::FreeCompleted)
            continue;
        if (a == Action::FreeCompleted && e > 0 && ev.action[e - 1] == Action::FreeRequested && dev.eventAlloc[e] == dev.eventAlloc[e - 1])
            continue; // the completion of the request just counted
        if (tl.phase[e] == Phase::Backward)
            ++f.engineFrees;
        const AllocId id = dev.eventAlloc[e];
        const bool looking = !releasedByGraph || (!f.graphsDroppedWithoutBackward && tl.phase[e] == Phase::Teardown && EventIndex(e) < firstOom);
        if (looking && id.valid() && (tl.phase[e] == Phase::Backward || tl.phase[e] == Phase::Teardown)) {
            const Allocation& al = dev.allocations[id.value];
            if (!al.preexisting() && tl.phase[size_t(al.allocEvent)] == Phase::Forward) {
                releasedByGraph = true;
                if (tl.phase[e] == Phase::Teardown && EventIndex(e) < firstOom)
                    f.graphsDroppedWithoutBackward = true;
            }
        }
    }
    f.graphsKeptAcrossCalls = history && f.backwardPasses == 0 && graphsOutliveTheirCalls(dev, f);
    f.graphsDroppedWithoutBackward = history && f.graphsDroppedWithoutBackward;
    if (!history) {
        f.backward = Known::Unknown;
        f.gradMode = Known::Unknown;
    } else {
        f.backward = f.backwardPasses > 0 ? Known::Yes : Known::No;
        f.gradMode = releasedByGraph || f.graphsKeptAcrossCalls ? Known::Yes : (f.forwardPasses > 0 ? Known::No : Known::Unknown);
    }
    return f;
}

void addPoolFacts(RunFacts& f, const DeviceTrace& dev, const Classification& c)
{
    f.parameters.clear();
    f.gradients.clear();
    f.optimizerState.clear();
    f.autocastRegions.clear();
    // A parameter rebuilt by a step (p.data = new): born in an optimizer step, it replaces the
    // parameter of its size that the same step freed.
    std::unordered_map<int64_t, std::vector<uint32_t>> freedInStep; // size -> parameters freed in a step, in order
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] == Pool::Gradient)
            f.gradients.push_back(uint32_t(i));
        else if (c.pool[i] == Pool::OptimizerState)
            f.optimizerState.push_back(uint32_t(i));
        if (c.pool[i] != Pool::Parameter)
            continue;
        ParameterFact p{uint32_t(i), a.size, UINT32_MAX};
        if (!a.preexisting() && i < c.birthPhase.size() && c.birthPhase[i] == Phase::OptimizerStep) {
            auto& list = freedInStep[a.size];
            if (!list.empty()) {
                p.replaces = list.front();
                list.erase(list.begin());
            }
        }
        f.parameters.push_back(p);
        if (i < c.freePhase.size() && c.freePhase[i] == Phase::OptimizerStep)
            freedInStep[a.size].push_back(uint32_t(i));
    }
    std::vector<uint8_t> casting(f.passes.size(), 0);
    bool anyCast = false;
    for (size_t i = 0; i < c.size(); ++i) {
        const RuleInfo& r = c.rules[c.rule[i]];
        if (!r.has(kRoleWeightCast) && !r.has(kRoleCastSurplus))
            continue;
        anyCast = true;
        const Allocation& a = dev.allocations[i];
        if (a.preexisting())
            continue;
        if (const int p = f.passAt(a.allocEvent); p >= 0)
            casting[size_t(p)] = 1;
    }
    for (size_t p = 0; p < f.passes.size(); ++p)
        if (casting[p])
            f.autocastRegions.push_back(f.passes[p]);
    f.autocast = anyCast ? Known::Yes : Known::Unknown;
}

} // namespace poolscope
