#include "core/classify/structural_evidence.h"

#include "core/classify/structural_across.h"
#include "core/classify/structural_common.h"
#include "core/classify/structural_step_rebuilt.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace poolscope::classify_detail {
namespace {

// How many of `blocks` (sizes) pair one to one with a block of the same size in `reference`, in bytes.
int64_t pairedBytes(const std::vector<int64_t>& blocks, const std::vector<int64_t>& reference)
{
    std::unordered_map<int64_t, int64_t> left;
    for (int64_t s : reference)
        ++left[s];
    int64_t bytes = 0;
    for (int64_t s : blocks)
        if (auto it = left.find(s); it != left.end() && it->second > 0) {
            --it->second;
            bytes += s;
        }
    return bytes;
}

// nn.Module._apply moves each parameter and, right after it, that parameter's .grad: the two lines
// are in the function that makes the move, and their blocks come in turn, each gradient right after
// its own parameter. Two models of one shape moved by two calls (an EMA made by
// deepcopy(model).to(), then the model) differ in a line of the caller, outside the moving code, and
// come one model after the other. With history, the turn decides: at least three quarters of
// `later`'s blocks come straight after a block of `earlier` of their size. A segments-only dump has
// no order (cudaMalloc's addresses do not follow it), so there the place of the line decides: the
// frame whose line differs is in the same file as the frame it calls (the move's own loop).
bool movedInTurn(const FrameTable& frames, const DeviceTrace& dev, const std::vector<uint32_t>& earlier, const std::vector<uint32_t>& later,
                 StackId stack, uint32_t frame)
{
    bool history = true;
    for (const auto* g : {&earlier, &later})
        for (uint32_t i : *g)
            history = history && !dev.allocations[i].preexisting();
    if (!history) {
        const auto fs = frames.stack(stack);
        return frame > 0 && frame < fs.size() && frames.frame(fs[frame]).filename == frames.frame(fs[frame - 1]).filename;
    }
    std::vector<std::pair<EventIndex, uint32_t>> order; // (event, index << 1 | in later)
    for (uint32_t i : earlier)
        order.push_back({dev.allocations[i].allocEvent, i << 1});
    for (uint32_t i : later)
        order.push_back({dev.allocations[i].allocEvent, i << 1 | 1u});
    std::sort(order.begin(), order.end());
    size_t n = 0;
    for (size_t k = 1; k < order.size(); ++k) {
        const uint32_t cur = order[k].second, prev = order[k - 1].second;
        if ((cur & 1u) && !(prev & 1u) && dev.allocations[cur >> 1].size == dev.allocations[prev >> 1].size)
            ++n;
    }
    return n * 4 >= later.size() * 3;
}

int64_t sum(const std::vector<int64_t>& v)
{
    int64_t s = 0;
    for (int64_t x : v)
        s += x;
    return s;
}

} // namespace

void keptFromBeforeFirstForward(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history)
        return;
    // A script that builds no nn.Module names no forward: then what exists before the first backward
    // and is kept, with a gradient of its size, is a weight (a tensor made with requires_grad).
    const bool noForward = f.firstForward == kNoEvent;
    // Set-up comes before the first pass: what a recording that opens inside a backward makes after
    // it (the next forward's blocks before the start the stream gives that forward) is no set-up.
    const EventIndex bound = noForward || (f.firstBackward != kNoEvent && f.firstBackward < f.firstForward) ? f.firstBackward : f.firstForward;
    if (bound == kNoEvent)
        return;
    EventIndex firstOom = kNoEvent;
    for (const OomEvent& o : dev.ooms)
        if (firstOom == kNoEvent || o.index < firstOom)
            firstOom = o.index;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Unknown || a.preexisting() || a.allocEvent >= bound)
            continue;
        // Let go of by an optimizer step (replaced by its update) or by the unwinding after an OOM
        // (which drops the weights a handler moves off with everything else) is kept by the run. Not
        // a teardown the stream shows without an OOM: a graph dropped, whose forward's first output
        // can sit before the start the stream gives that forward.
        const EventIndex fe = freeEventOf(a);
        const bool unwound = fe != kNoEvent && firstOom != kNoEvent && fe > firstOom && c.phases.phase[size_t(fe)] == Phase::Teardown;
        if (fe != kNoEvent && c.phases.phase[size_t(fe)] != Phase::OptimizerStep && !unwound)
            continue;
        if (noForward && !c.gradientSizes.count(mirrorKey(a.size)))
            continue;
        if (!rule)
            rule = addRule(c, "made-before-first-forward-kept",
                           "made before the first forward pass and kept to the end (or until an optimizer step replaced it, or "
                           "the unwinding after an OOM let go of it), where no frame said more: the model's state (its weights, "
                           "or buffers made for them)",
                           Pool::Parameter, kEvidenceLifetime);
        decide(c, i, Pool::Parameter, rule, 60);
    }
}

void savedForBackward(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::Yes)
        return;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Unknown || a.preexisting())
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe == kNoEvent || c.phases.phase[size_t(fe)] != Phase::Backward)
            continue;
        const int pass = f.passAt(fe);
        if (pass < 0 || f.passes[size_t(pass)].phase != Phase::Backward || a.allocEvent >= f.passes[size_t(pass)].first)
            continue; // made in the backward that let go of it: the engine's own scratch
        const Phase birth = c.phases.phase[size_t(a.allocEvent)];
        if (birth != Phase::Unknown && birth != Phase::Forward)
            continue;
        if (!rule)
            rule = addRule(c, "saved-for-backward-by-structure",
                           "made before the backward pass that let go of it, and let go of inside that pass (by the autograd "
                           "engine): a tensor the graph saved for backward, whatever code made it (a script-level function, no "
                           "nn.Module)",
                           Pool::Activation, kEvidenceLifetime);
        decide(c, i, Pool::Activation, rule, 65);
    }
}

void perParameterBuffers(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    const FrameTable& frames = trace.frames;
    // Parameters by stack.
    std::unordered_map<uint32_t, std::vector<uint32_t>> byStack;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::Parameter && dev.allocations[i].stack.valid() && !frames.stack(dev.allocations[i].stack).empty())
            byStack[dev.allocations[i].stack.value].push_back(uint32_t(i));
    if (byStack.size() < 2 || byStack.size() > 4096)
        return; // nothing to pair, or more distinct stacks than a loop over parameters makes
    // Families: stacks equal but for the line of one Python frame.
    struct Member {
        int64_t line;
        uint32_t stack;
        uint32_t frame; // the index of the frame whose line differs
    };
    // Keyed by a 64-bit hash of the stack with frame j's line left out (FNV-1a over the other frames'
    // ids, then j and frame j's file and function).
    std::map<uint64_t, std::vector<Member>> families;
    std::vector<uint32_t> ordered;
    for (const auto& entry : byStack)
        ordered.push_back(entry.first);
    std::sort(ordered.begin(), ordered.end()); // the same families in the same order on every run
    auto mix = [](uint64_t h, uint64_t v) {
        for (int b = 0; b < 8; ++b, v >>= 8)
            h = (h ^ (v & 0xFF)) * 1099511628211ull;
        return h;
    };
    for (uint32_t stack : ordered) {
        const auto fs = frames.stack(StackId{stack});
        for (size_t j = 0; j < fs.size(); ++j) {
            const Frame& fr = frames.frame(fs[j]);
            if (fr.line <= 0)
                continue;
            uint64_t h = 1469598103934665603ull;
            for (size_t k = 0; k < fs.size(); ++k)
                h = mix(h, k == j ? UINT64_MAX : fs[k].value);
            h = mix(h, j);
            h = mix(h, std::hash<std::string>{}(fr.filename));
            h = mix(h, std::hash<std::string>{}(fr.name));
            families[h].push_back(Member{fr.line, stack, uint32_t(j)});
        }
    }
    const RunFacts& facts = c.facts;
    const bool trains = facts.optimizerSteps > 0 || facts.backward == Known::Yes;
    uint16_t gradRule = 0, stateRule = 0;
    std::vector<uint8_t> taken(c.size(), 0);
    for (auto& [key, members] : families) {
        if (members.size() < 2)
            continue;
        std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.line < b.line; });
        std::vector<std::vector<uint32_t>> groups;
        std::vector<std::vector<int64_t>> sizes;
        bool allMove = true;
        for (const Member& m : members) {
            groups.push_back(byStack[m.stack]);
            sizes.emplace_back();
            for (uint32_t i : groups.back()) {
                sizes.back().push_back(dev.allocations[i].size);
                allMove = allMove && c.rules[c.rule[i]].has(kRoleMovesParameters);
            }
        }
        // Moved with .to(): the earliest line moves the parameters, a later line whose blocks pair
        // with them, carry at least half their bytes and come in turn with them moves their gradients
        // (buffers, moved by another loop, carry far fewer).
        if (allMove) {
            const int64_t refBytes = sum(sizes[0]);
            for (size_t g = 1; g < groups.size(); ++g) {
                const int64_t bytes = sum(sizes[g]);
                const int64_t paired = pairedBytes(sizes[g], sizes[0]);
                if (paired * 10 < bytes * 9 || bytes * 2 < refBytes)
                    continue;
                if (!movedInTurn(frames, dev, groups[0], groups[g], StackId{members[g].stack}, members[g].frame))
                    continue; // a second model of the same shape, moved by a call of its own
                if (!gradRule)
                    gradRule = addRule(c, "gradients-moved-with-parameters",
                                       "moved by nn.Module._apply (.to/.cuda) from a line of its own, one block per parameter of the "
                                       "same size as the parameters moved at an earlier line of the same loop: each parameter's .grad, "
                                       "moved with the model because it still held gradients",
                                       Pool::Gradient, kEvidenceFrames | kEvidenceSize);
                for (uint32_t i : groups[g])
                    if (!taken[i]) {
                        taken[i] = 1;
                        decide(c, i, Pool::Gradient, gradRule, 80);
                    }
            }
            continue;
        }
        if (!trains)
            continue;
        // A constructor's per-parameter buffers: each line pairs with all parameters outside it.
        std::vector<uint8_t> inFamily(c.size(), 0);
        EventIndex familyFirst = std::numeric_limits<EventIndex>::max();
        for (const auto& g : groups)
            for (uint32_t i : g) {
                inFamily[i] = 1;
                if (!dev.allocations[i].preexisting())
                    familyFirst = std::min(familyFirst, dev.allocations[i].allocEvent);
            }
        if (facts.firstForward != kNoEvent && familyFirst != std::numeric_limits<EventIndex>::max() && familyFirst > facts.firstForward)
            continue; // made after the first forward: not a constructor's
        std::vector<int64_t> outside;
        for (size_t i = 0; i < c.size(); ++i)
            if (c.pool[i] == Pool::Parameter && !inFamily[i] && !taken[i] &&
                (dev.allocations[i].preexisting() || dev.allocations[i].allocEvent < familyFirst))
                outside.push_back(dev.allocations[i].size);
        const int64_t outsideBytes = sum(outside);
        if (outsideBytes == 0)
            continue;
        bool every = true;
        for (const auto& s : sizes) {
            const int64_t bytes = sum(s);
            every = every && pairedBytes(s, outside) * 10 >= bytes * 9 && bytes * 10 >= outsideBytes * 9;
        }
        if (!every)
            continue;
        if (!stateRule)
            stateRule = addRule(c, "per-parameter-state-before-first-forward",
                                "made before the first forward, after the parameters, by one loop at " + std::to_string(groups.size()) +
                                    " line(s) each making one block of every parameter's size: per-parameter buffers of the "
                                    "optimizer (moments made in its constructor), in a run that has an optimizer step or backward",
                                Pool::OptimizerState, kEvidenceLifetime | kEvidenceSize);
        for (const auto& g : groups)
            for (uint32_t i : g)
                if (!taken[i]) {
                    taken[i] = 1;
                    decide(c, i, Pool::OptimizerState, stateRule, 75);
                }
    }
}

void stepReplacements(const DeviceTrace& dev, Classification& c)
{
    const auto& tl = c.phases;
    const auto& ev = dev.events;
    uint16_t rule[2] = {0, 0}; // parameter, optimizer state
    uint32_t run = UINT32_MAX;
    // Per size, the blocks this step made that are still alive and stand in for nothing yet, by birth.
    std::unordered_map<int64_t, std::set<std::pair<EventIndex, uint32_t>>> open;
    // What a block this step made replaced (a chain: p.data rebuilt twice, by the update and then by
    // the weight decay, makes an intermediate the step itself lets go of): the pool it stands for and
    // how sure that was; pool Unknown where the replaced block had none.
    // `guessed`: the chain began at a block no frame named, from before recording or a guess of the
    // readings before (a ring buffer's window): which of a parameter's blocks is the parameter is
    // then for parametersRebuiltInTurns to read.
    struct Link {
        Pool pool;
        uint8_t confidence;
        bool guessed = false;
    };
    std::unordered_map<uint32_t, Link> links;
    std::vector<GuessedReplacement> guessed; // this step's, for parametersRebuiltInTurns
    EventIndex runFirst = kNoEvent, runLast = kNoEvent;
    auto endRun = [&] {
        if (!guessed.empty())
            parametersRebuiltInTurns(dev, c, runFirst, runLast, guessed);
        guessed.clear();
    };
    for (size_t e = 0; e < ev.count(); ++e) {
        if (tl.phase[e] != Phase::OptimizerStep)
            continue;
        if (tl.run[e] != run) {
            endRun();
            run = tl.run[e];
            runFirst = EventIndex(e);
            open.clear();
            links.clear();
        }
        runLast = EventIndex(e);
        const AllocId id = dev.eventAlloc[e];
        if (!id.valid())
            continue;
        const uint32_t i = id.value;
        const Allocation& a = dev.allocations[i];
        const bool bornHere = !a.preexisting() && tl.run[size_t(a.allocEvent)] == run;
        if (ev.action[e] == Action::Alloc && a.allocEvent == EventIndex(e)) {
            open[a.size].insert({a.allocEvent, i});
            continue;
        }
        if (EventIndex(e) != freeEventOf(a))
            continue;
        // (A block an earlier step made carries that step's reading on: only chains that begin outside
        // the steps are read in turns, once, not again at every step of a long run.)
        Link from{c.pool[i], c.confidence[i],
                  !(c.evidenceOf(i) & kEvidenceFrames) &&
                      (a.preexisting() || (c.confidence[i] <= 60 && tl.phase[size_t(a.allocEvent)] != Phase::OptimizerStep))};
        if (bornHere) {
            open[a.size].erase({a.allocEvent, i});
            const auto l = links.find(i);
            if (l == links.end())
                continue; // made and freed in this step, replacing nothing: scratch
            from = l->second;
        } else if (from.pool != Pool::Parameter && from.pool != Pool::OptimizerState) {
            from.pool = Pool::Unknown;
        }
        // An out-of-place update computes the new value, then lets go of the old one: the newest
        // block of its size the step made and still holds is what replaced it.
        auto& candidates = open[a.size];
        if (candidates.empty())
            continue;
        const uint32_t b = std::prev(candidates.end())->second;
        candidates.erase(std::prev(candidates.end()));
        links[b] = from;
        if (from.pool == Pool::Unknown) {
            // It replaced something nothing named (its weights' own frames are gone): whether it is
            // the optimizer's state or a rebuilt parameter, the dump cannot say.
            c.confidence[b] = std::min<uint8_t>(c.confidence[b], 50);
            continue;
        }
        const bool param = from.pool == Pool::Parameter;
        uint16_t& r = rule[param ? 0 : 1];
        if (!r)
            r = addRule(c, param ? "step-rebuilds-parameter" : "step-replaces-state",
                        std::string("made in an optimizer step, which let go of a ") + (param ? "parameter" : "block of optimizer state") +
                            " of the same size right after making it (an out-of-place update such as p.data = p - lr * u, "
                            "possibly in two moves: the update, then the weight decay): it takes the place, and the pool, of "
                            "what it replaced",
                        from.pool, kEvidenceLifetime | kEvidenceSize);
        // A replacement is as sure as what it replaced.
        decide(c, b, from.pool, r, std::min<int>(param ? 80 : 85, from.confidence));
        links[b].confidence = c.confidence[b];
        if (from.guessed)
            guessed.push_back({b, dev.allocations[b].allocEvent});
    }
    endRun();
}

namespace {

// cuBLAS makes a handle's workspace at the handle's first matmul on a stream: in the run's first
// forward for the main thread, in its first backward for the autograd engine's. A block born in a
// pass of the same phase on the same stream as an earlier step's (a handle already equipped) is
// not that workspace, whatever its size: an activation the dump was cut before freeing.
bool handleUsedInAnEarlierStep(const DeviceTrace& dev, const Classification& c, const Allocation& a, Phase birth)
{
    const auto& steps = c.facts.steps;
    for (size_t s = 0; s < steps.size(); ++s) {
        const StepFacts& st = steps[s];
        if (st.first == kNoEvent || st.last == kNoEvent || st.last >= a.allocEvent)
            continue;
        const EventIndex from = birth == Phase::Forward ? st.firstForward : st.firstBackward;
        if (from == kNoEvent)
            continue;
        for (EventIndex e = from; e <= st.last; ++e) {
            const AllocId id = dev.eventAlloc[size_t(e)];
            if (id.valid() && dev.allocations[id.value].allocEvent == e && dev.allocations[id.value].stream == a.stream &&
                id.value < c.birthPhase.size() && c.birthPhase[id.value] == birth)
                return true;
        }
    }
    return false;
}

// A recording that opens in a backward, or after one (in the step, in a zero_grad that lets go of
// gradients: a pass is events, and a zero_grad before any backward has none), opens after a forward
// the main thread ran: its handles hold their workspaces from before recording, so no pass of that
// phase the recording shows makes one. Opening inside a backward, the engine's handle has done its
// first matmul too. (For a forward's or a backward's birth: what workspaceBySize asks of.)
bool handlesEquippedBeforeRecording(const Classification& c)
{
    const auto& passes = c.facts.passes;
    if (passes.empty())
        return false;
    for (EventIndex e = 0; e < passes.front().first; ++e)
        if (c.phases.phase[size_t(e)] != Phase::Unknown)
            return false;
    const Phase opening = passes.front().phase;
    return opening == Phase::Backward || opening == Phase::OptimizerStep || opening == Phase::ZeroGrad;
}

// The same for a run without steps (inference, a service): an earlier pass of the same phase that
// made blocks on the block's stream ran matmuls there, so its handle had its workspace already
// (bert_embed_service: the first call's 32 MiB workspace beside four later calls' 32 MiB outputs,
// five blocks of one size on one stream, so none read as the workspace).
bool handleUsedInAnEarlierPass(const DeviceTrace& dev, const Classification& c, const Allocation& a, Phase birth)
{
    for (const Pass& p : c.facts.passes) {
        if (p.last >= a.allocEvent)
            break;
        if (p.phase != birth)
            continue;
        for (EventIndex e = p.first; e <= p.last; ++e) {
            const AllocId id = dev.eventAlloc[size_t(e)];
            if (id.valid() && dev.allocations[id.value].allocEvent == e && dev.allocations[id.value].stream == a.stream)
                return true;
        }
    }
    return false;
}

} // namespace

void workspaceBySize(const DeviceTrace& dev, Classification& c)
{
    const bool equippedBefore = handlesEquippedBeforeRecording(c);
    // Streams whose forward handle shows a workspace from before recording: a block of a workspace
    // size made in a forward before recording and kept, that no frame named
    // (forwardProductsFromBeforeRecording reads it). The recording then holds no first matmul of the
    // main thread there, whatever pass it opens with (a service's window opening between calls: its
    // first call's output read as a second workspace). The autograd engine's thread has a handle of
    // its own.
    std::set<int64_t> equippedStreams;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() && freeEventOf(a) == kNoEvent && isCublasWorkspaceSize(a.size) && c.pool[i] == Pool::Activation &&
            i < c.birthPhase.size() && c.birthPhase[i] == Phase::Forward && !(c.rules[c.rule[i]].evidence & kEvidenceFrames))
            equippedStreams.insert(a.stream);
    }
    // Earlier passes say it only where the run has no optimizer step: a training run's steps say it
    // (handleUsedInAnEarlierStep), and a frameless reading can cut a reentrant checkpoint's backward
    // into "forwards" (adafactor_reentrant: the engine thread's workspace, made in such a stretch,
    // read as an activation on the first try).
    const bool stepless = std::none_of(c.phases.phase.begin(), c.phases.phase.end(), [](Phase p) { return p == Phase::OptimizerStep; });
    std::map<std::pair<int, int64_t>, std::vector<uint32_t>> byStream;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!isCublasWorkspaceSize(a.size))
            continue;
        if (freeEventOf(a) != kNoEvent)
            continue;
        // With history, a block from before recording was made in no pass the recording shows:
        // forwardProductsFromBeforeRecording reads it (below 70 %).
        if (c.history && a.preexisting())
            continue;
        const Phase birth = i < c.birthPhase.size() ? c.birthPhase[i] : Phase::Unknown;
        if (birth != Phase::Forward && birth != Phase::Backward)
            continue; // weights of that size are made outside the passes
        const Pool p = c.pool[i];
        // A gradient only its lifetime named (made in backward and kept) that has no parameter's size
        // is no gradient: the engine thread's first matmul made its handle's workspace.
        const bool lifetimeGradient = p == Pool::Gradient && !(c.rules[c.rule[i]].evidence & kEvidenceFrames) &&
                                      !c.parameterSizes.count(mirrorKey(a.size));
        if (p != Pool::Activation && p != Pool::Temporary && p != Pool::Unknown && p != Pool::Other && !lifetimeGradient)
            continue;
        if (equippedBefore || (birth == Phase::Forward && !a.preexisting() && equippedStreams.count(a.stream)) ||
            handleUsedInAnEarlierStep(dev, c, a, birth) || (stepless && handleUsedInAnEarlierPass(dev, c, a, birth)))
            continue;
        byStream[{int(a.stream), a.size}].push_back(uint32_t(i));
    }
    uint16_t rule = 0;
    for (const auto& [key, ids] : byStream) {
        if (ids.size() > 2)
            continue; // more than one per handle: not a workspace
        if (!rule)
            rule = addRule(c, "library-workspace-by-size",
                           "a block of a default cuBLAS workspace size (8,519,680 B before Hopper, 32 MiB on Hopper and "
                           "Blackwell), made inside a forward or backward pass and never freed, at most one per handle on its "
                           "stream: the workspace cuBLAS keeps per handle and stream, whatever frames the dump recorded",
                           Pool::Workspace, kEvidenceLifetime | kEvidenceSize, kRoleLibraryWorkspace);
        for (uint32_t i : ids)
            decide(c, i, Pool::Workspace, rule, c.history ? 75 : 55);
    }
}

void gradientsMadeAfterTheirBackward(const DeviceTrace& dev, Classification& c)
{
    const PhaseTimeline& tl = c.phases;
    if (!c.history || c.parameterSizes.empty() || tl.phase.size() != dev.eventCount())
        return;
    const auto n = EventIndex(tl.phase.size());
    auto unread = [&](EventIndex e) { return tl.phase[size_t(e)] == Phase::Unknown && tl.source[size_t(e)] == PhaseSource::None; };
    // The unread stretches, in one pass, that follow the backward (or a stretch read as a step that the
    // step ahead continues: no pass runs between the two, and the backward's last layers, read from the
    // stream, can look like a step) and end where an optimizer step begins; with that step's end.
    struct Stretch {
        EventIndex first, last, stepEnd;
    };
    std::vector<Stretch> stretches;
    for (EventIndex e = 1; e < n; ++e) {
        if (!unread(e) || unread(e - 1))
            continue;
        const Phase before = tl.phase[size_t(e - 1)];
        EventIndex last = e;
        while (last + 1 < n && unread(last + 1))
            ++last;
        const EventIndex step = last + 1;
        if ((before != Phase::Backward && before != Phase::OptimizerStep) || step >= n || tl.phase[size_t(step)] != Phase::OptimizerStep) {
            e = last;
            continue;
        }
        EventIndex stepEnd = step;
        while (stepEnd + 1 < n && tl.phase[size_t(stepEnd + 1)] == Phase::OptimizerStep)
            ++stepEnd;
        stretches.push_back({e, last, stepEnd});
        e = last;
    }
    if (stretches.empty())
        return;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Unknown || a.preexisting() || !unread(a.allocEvent) || !c.parameterSizes.count(mirrorKey(a.size)))
            continue;
        const auto it = std::upper_bound(stretches.begin(), stretches.end(), a.allocEvent, [](EventIndex e, const Stretch& s) { return e < s.first; });
        if (it == stretches.begin() || std::prev(it)->last < a.allocEvent)
            continue;
        const EventIndex r = freeEventOf(a);
        if (r != kNoEvent && r <= std::prev(it)->stepEnd)
            continue; // let go of before the step ended: scratch of the clipping or the scaler
        if (!rule)
            rule = addRule(c, "gradient-made-after-its-backward",
                           "made after the backward's last event read and before the optimizer step, kept across that step, "
                           "with a parameter's size: the gradient of the layer the backward reaches last (an embedding's, "
                           "made at once at its end), whatever code made it",
                           Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Gradient, rule, 55);
    }
}

void gradientsNeedParameterSize(const DeviceTrace& dev, Classification& c)
{
    if (c.parameterSizes.empty())
        return;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] != Pool::Gradient || (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue;
        if (!c.parameterSizes.count(mirrorKey(dev.allocations[i].size)))
            c.confidence[i] = std::min<uint8_t>(c.confidence[i], 45);
    }
}

} // namespace poolscope::classify_detail
