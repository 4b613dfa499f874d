#include "core/classify/phases.h"

#include "core/classify/phase_backward_end.h"
#include "core/classify/phase_call_restart.h"
#include "core/classify/stack_root.h"
#include "core/classify/structural_phases.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>

namespace poolscope {
namespace {

// Nested windows: the more specific phase wins (an Optimizer.step inside a user "train" scope).
constexpr std::array<int, kPhaseCount> kWindowRank = {0, 1, 2, 4, 3, 5}; // by Phase

struct Segment {
    int64_t startUs;
    Phase phase;
};

// Windows a library opens around its hooks, not its passes: FSDP2 names each unit's pre- and
// post-forward ("FSDP::pre_forward (model.layers.0)", "FSDP::post_forward (...)") and its backward
// hooks, and the layers run between them. Without frames, events after a window have nothing to
// inherit, so each forward read as a scatter of hook-long passes and the layers' saved tensors as
// made outside any pass. Between two windows of one phase with different names (a pass's successive
// hooks), with no window of another phase in the gap, the pass goes on; two windows of one name
// are two calls (DistributedDataParallel.forward each step, a user's "forward" per request), and
// what runs between them is the caller's.
std::vector<PhaseWindow> bridgedHookWindows(const std::vector<PhaseWindow>& windows)
{
    std::vector<PhaseWindow> out = windows;
    // windows come sorted by start (phaseWindows); per phase, the latest end among the first k.
    std::vector<std::array<int64_t, kPhaseCount>> latestEnd(windows.size() + 1);
    latestEnd[0].fill(std::numeric_limits<int64_t>::min());
    for (size_t k = 0; k < windows.size(); ++k) {
        latestEnd[k + 1] = latestEnd[k];
        int64_t& e = latestEnd[k + 1][size_t(windows[k].phase)];
        e = std::max(e, windows[k].endUs);
    }
    for (size_t i = 0; i + 1 < windows.size(); ++i) {
        const PhaseWindow& a = windows[i];
        if (a.endUs == std::numeric_limits<int64_t>::max())
            continue;
        // The next window that starts after this one ends (nested ones aside).
        const size_t j = size_t(std::upper_bound(windows.begin(), windows.end(), a.endUs,
                                                 [](int64_t t, const PhaseWindow& w) { return t < w.startUs; }) -
                                windows.begin());
        if (j == windows.size())
            continue;
        const PhaseWindow& b = windows[j];
        if (b.phase != a.phase || b.name == a.name)
            continue;
        // A window of another phase open in the gap: it started before the gap (one of the first j)
        // and had not ended, or it starts with b.
        const size_t k = size_t(std::upper_bound(windows.begin(), windows.end(), b.startUs,
                                                 [](int64_t t, const PhaseWindow& w) { return t < w.startUs; }) -
                                windows.begin());
        bool otherPhase = false;
        for (size_t p = 0; p < kPhaseCount; ++p)
            otherPhase = otherPhase || (Phase(p) != a.phase && latestEnd[k][p] >= a.endUs);
        if (!otherPhase)
            out.push_back(PhaseWindow{a.name + " .. " + b.name, a.phase, a.endUs + 1, b.startUs - 1});
    }
    return out;
}

std::vector<Segment> windowSegments(const std::vector<PhaseWindow>& windows)
{
    struct Edge {
        int64_t t;
        int delta;
        Phase phase;
    };
    std::vector<Edge> edges;
    edges.reserve(windows.size() * 2);
    for (const auto& w : windows) {
        edges.push_back({w.startUs, +1, w.phase});
        // Ends are inclusive: the window stops covering at end + 1 µs.
        const int64_t stop = w.endUs == std::numeric_limits<int64_t>::max() ? w.endUs : w.endUs + 1;
        edges.push_back({stop, -1, w.phase});
    }
    std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
    std::array<int, kPhaseCount> open{};
    std::vector<Segment> segs;
    for (size_t i = 0; i < edges.size();) {
        const int64_t t = edges[i].t;
        for (; i < edges.size() && edges[i].t == t; ++i)
            open[size_t(edges[i].phase)] += edges[i].delta;
        Phase best = Phase::Unknown;
        for (size_t p = 1; p < kPhaseCount; ++p)
            if (open[p] > 0 && kWindowRank[p] > kWindowRank[size_t(best)])
                best = Phase(p);
        if (segs.empty() || segs.back().phase != best)
            segs.push_back({t, best});
    }
    return segs;
}

// The phase of the windows open at t, and since when they have named it (`since`).
Phase windowPhaseAt(const std::vector<Segment>& segs, int64_t t, int64_t* since = nullptr)
{
    auto it = std::upper_bound(segs.begin(), segs.end(), t, [](int64_t v, const Segment& s) { return v < s.startUs; });
    if (it == segs.begin())
        return Phase::Unknown;
    if (since)
        *since = std::prev(it)->startUs;
    return std::prev(it)->phase;
}

} // namespace

std::vector<PhaseWindow> phaseWindows(const Trace& trace, const DeviceTrace& dev, const RuleSet& rules)
{
    std::vector<PhaseWindow> out;
    const auto& regexes = rules.regexes();
    std::map<std::string, std::vector<int64_t>> openStarts; // name -> START times not yet closed
    auto phaseOf = [&](const std::string& name) {
        for (const auto& a : rules.annotationPatterns())
            if (a.regex >= 0 && regexes[size_t(a.regex)].search(name))
                return a.phase;
        return Phase::Unknown;
    };
    std::vector<const Annotation*> anns;
    for (const auto& a : trace.annotations)
        if (a.timeUs != kNoTime && (a.device == dev.device || a.device < 0))
            anns.push_back(&a);
    std::stable_sort(anns.begin(), anns.end(), [](const Annotation* a, const Annotation* b) { return a->timeUs < b->timeUs; });
    for (const Annotation* a : anns) {
        const Phase ph = phaseOf(a->name);
        if (ph == Phase::Unknown)
            continue;
        if (a->start) {
            openStarts[a->name].push_back(a->timeUs);
            continue;
        }
        auto& starts = openStarts[a->name];
        PhaseWindow w{a->name, ph, std::numeric_limits<int64_t>::min(), a->timeUs};
        if (!starts.empty()) {
            w.startUs = starts.back();
            starts.pop_back();
        }
        out.push_back(std::move(w));
    }
    for (auto& [name, starts] : openStarts)
        for (int64_t s : starts)
            out.push_back(PhaseWindow{name, phaseOf(name), s, std::numeric_limits<int64_t>::max()});
    std::sort(out.begin(), out.end(), [](const PhaseWindow& a, const PhaseWindow& b) { return a.startUs < b.startUs; });
    return out;
}

PhaseTimeline computePhases(const Trace& trace, const DeviceTrace& dev, const RuleSet& rules, FrameMatcher& matcher)
{
    PhaseTimeline tl;
    const auto& ev = dev.events;
    const size_t n = ev.count();
    tl.phase.assign(n, Phase::Unknown);
    tl.source.assign(n, PhaseSource::None);
    tl.run.assign(n, 0);
    tl.windows = dev.hasTime ? phaseWindows(trace, dev, rules) : std::vector<PhaseWindow>{};
    // Where the device recorded no frames at all, only annotation windows name phases, and an event
    // after a window has closed has nothing to inherit from it: the window's phase ends with it.
    bool framesRecorded = false;
    for (size_t i = 0; i < n && !framesRecorded; ++i)
        framesRecorded = ev.stack[i].valid() && !trace.frames.stack(ev.stack[i]).empty();
    const auto segs = windowSegments(framesRecorded ? tl.windows : bridgedHookWindows(tl.windows));

    tl.decisiveFrame.assign(trace.frames.stackCount(), FrameId{});
    // Per stack: does it hold a Python frame? An event whose Python frames name no phase runs in the
    // caller's code (a training loop, an inference driver), outside the pass that named the phase.
    std::vector<uint8_t> hasPython(trace.frames.stackCount(), 2); // 2: not known yet
    auto pythonStack = [&](StackId st) {
        uint8_t& v = hasPython[st.value];
        if (v == 2) {
            v = 0;
            for (FrameId f : trace.frames.stack(st)) {
                const std::string& file = trace.frames.frame(f).filename;
                if ((file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0) || (!file.empty() && file.front() == '<' && file != "<op>")) {
                    v = 1;
                    break;
                }
            }
        }
        return v == 1;
    };
    std::vector<uint8_t> boundary(n, 0);
    std::vector<uint8_t> python(n, 0); // per event: its stack holds a Python frame
    PhaseSource previousSource = PhaseSource::None;
    Phase previous = Phase::Unknown;
    bool previousInCaller = false; // the previous event ran in the caller's code (see above)
    bool afterOom = false;
    // An optimizer stepped by a hook the engine calls back (a post-accumulate-grad hook: Python
    // frames with no program entry, named by torch.optim's), inside a backward: the engine's events
    // after it (no frame of their own where only Python frames were recorded) are the backward's
    // again, not the step's.
    Phase beforeStep = Phase::Unknown;
    bool stepInBackward = false;
    // The phase the frames named last (a forward, a backward, the step's own), and when. Inside a
    // window, frames that named another phase show a pass nested in it (Lightning and LBFGS run the
    // forward and the backward inside Optimizer.step's range, through the closure): the innermost
    // decides, so the events after them that name nothing (the engine's, where only Python frames
    // were recorded) go on with that pass, not with the window's phase.
    Phase passFramed = Phase::Unknown;
    int64_t passFramedAt = kNoTime;
    auto nestedPassGoesOn = [&](Phase window, int64_t windowSince) {
        return passFramed != Phase::Unknown && passFramed != window && passFramedAt != kNoTime && passFramedAt >= windowSince &&
               previousSource != PhaseSource::Annotation && previous == passFramed;
    };
    EventIndex firstKnown = kNoEvent;
    for (size_t i = 0; i < n; ++i) {
        Phase ph = Phase::Unknown;
        PhaseSource src = PhaseSource::None;
        const bool validStack = ev.stack[i].valid() && ev.stack[i].value < tl.decisiveFrame.size();
        python[i] = validStack && pythonStack(ev.stack[i]);
        if (validStack) {
            ph = matcher.stackPhase(ev.stack[i], &tl.decisiveFrame[ev.stack[i].value]);
        } else if (const AllocId id = dev.eventAlloc[i]; id.valid() && dev.allocations[id.value].op != 0) {
            ph = matcher.opPhase(trace.opName(dev.allocations[id.value]));
        }
        bool inCaller = false;
        if (ph != Phase::Unknown) {
            src = PhaseSource::Frames;
            tl.anyFrameEvidence = true;
            afterOom = false;
            const bool step = ph == Phase::OptimizerStep || ph == Phase::ZeroGrad;
            if (!step)
                beforeStep = ph;
            stepInBackward = step && beforeStep == Phase::Backward && pythonWithoutEntry(trace.frames, ev.stack[i]);
            if (ph == Phase::Forward || ph == Phase::Backward || step) {
                passFramed = ph;
                passFramedAt = ev.timeUs[i];
            }
        } else if (int64_t since = 0; !segs.empty() && ev.timeUs[i] != kNoTime &&
                   (ph = windowPhaseAt(segs, ev.timeUs[i], &since)) != Phase::Unknown && !nestedPassGoesOn(ph, since)) {
            src = PhaseSource::Annotation;
            // Where the device records frames, an event with none is the autograd engine's thread
            // (its Python-less stack): inside an optimizer step's window that is a backward the step
            // runs through its closure (Lightning, LBFGS) whose seed, which would have named it, the
            // recording does not hold (a ring buffer that dropped it).
            if (framesRecorded && (ph == Phase::OptimizerStep || ph == Phase::ZeroGrad) &&
                (!ev.stack[i].valid() || trace.frames.stack(ev.stack[i]).empty())) {
                ph = Phase::Backward;
                src = PhaseSource::Structure;
            }
        } else if (ph = Phase::Unknown; afterOom) { // (a window the nested pass overrides names nothing)
            // An OOM ended the step: until frames name a phase again, what follows is the exception
            // unwinding and the program's recovery, not the pass that failed.
            ph = Phase::Teardown;
            src = PhaseSource::Inherited;
        } else if (previous != Phase::Unknown && (framesRecorded || previousSource != PhaseSource::Annotation)) {
            ph = stepInBackward && (previous == Phase::OptimizerStep || previous == Phase::ZeroGrad) ? Phase::Backward : previous;
            src = PhaseSource::Inherited;
            // A hook the engine calls back (Python frames, no program entry) is still the pass.
            inCaller = python[i] && !(previous == Phase::Backward && pythonWithoutEntry(trace.frames, ev.stack[i]));
        }
        if (ev.action[i] == Action::Oom)
            afterOom = true;
        // A step's pass ends where the caller's code takes over, and a new one begins where frames
        // or an annotation name a phase again: runs split there even when the phase stays the same,
        // so that "freed in the same pass" means one call of the model, not a whole inference loop.
        // Events with no Python frame (the autograd engine's thread) neither end nor begin a pass.
        if (src != PhaseSource::Inherited || inCaller) {
            if (inCaller != previousInCaller)
                boundary[i] = 1;
            previousInCaller = inCaller;
        }
        if (ph != Phase::Unknown && firstKnown == kNoEvent)
            firstKnown = EventIndex(i);
        tl.phase[i] = ph;
        tl.source[i] = src;
        previous = ph;
        previousSource = src;
    }
    // Events before the first evidence stay Unknown: guessing them from what follows would invent
    // a phase (a trace often starts with data loading or model set-up). One case is not a guess: a
    // recording that begins mid-backward (a ring buffer dropped the seed, or recording started there)
    // where the device records frames. The program's thread is blocked in the backward call, so the
    // events before its first framed one (the call returning) come from the autograd engine's
    // thread, which records no Python frame: they are that backward's, whatever it was named.
    leadingEngineEventsOfBackward(trace.frames, dev, framesRecorded, firstKnown, tl);
    // Where neither frames nor annotations named a forward or a backward, the stream's shape may.
    inferStructuralPhases(dev, tl);
    openingBackwardBeforeANamedStep(dev, tl);
    // A forward no frame names, after a named backward, would inherit "backward" to the next named
    // event: the engine's releases in the next backward show where it began (phase_backward_end.h).
    endInheritedBackward(dev, python, tl);
    // Calls of the model with nothing of the caller's between them, told apart by their frames.
    splitRestartedCalls(trace.frames, dev, tl, boundary);

    for (size_t i = 0; i < n; ++i) {
        if (tl.runs.empty() || tl.runs.back().phase != tl.phase[i] || boundary[i])
            tl.runs.push_back(PhaseTimeline::Run{tl.phase[i], EventIndex(i), EventIndex(i)});
        tl.runs.back().last = EventIndex(i);
        tl.run[i] = uint32_t(tl.runs.size() - 1);
    }
    // A backward resumed after optimizer steps inside it (each with its zero_grad) continues the
    // backward before them.
    uint32_t openBackward = UINT32_MAX;
    bool stepped = false;
    for (uint32_t r = 0; r < tl.runs.size(); ++r) {
        PhaseTimeline::Run& run = tl.runs[r];
        run.continues = r;
        if (run.phase == Phase::Backward) {
            if (openBackward != UINT32_MAX && stepped)
                run.continues = tl.runs[openBackward].continues;
            openBackward = r;
            stepped = false;
        } else if (run.phase == Phase::OptimizerStep || run.phase == Phase::ZeroGrad) {
            stepped = stepped || run.phase == Phase::OptimizerStep;
        } else {
            openBackward = UINT32_MAX;
        }
    }
    return tl;
}

} // namespace poolscope
