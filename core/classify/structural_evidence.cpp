#include "core/classify/structural_evidence.h"

#include "core/classify/structural_across.h"
#include "core/classify/structural_common.h"

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
    const EventIndex bound = noForward ? f.firstBackward : f.firstForward;
    if (bound == kNoEvent)
        return;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Unknown || a.preexisting() || a.allocEvent >= bound)
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe != kNoEvent && c.phases.phase[size_t(fe)] != Phase::OptimizerStep)
            continue;
        if (noForward && !c.gradientSizes.count(mirrorKey(a.size)))
            continue;
        if (!rule)
            rule = addRule(c, "made-before-first-forward-kept",
                           "made before the first forward pass and kept to the end (or until an optimizer step replaced it), "
                           "where no frame said more: the model's state (its weights, or buffers made for them)",
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
    struct Link {
        Pool pool;
        uint8_t confidence;
    };
    std::unordered_map<uint32_t, Link> links;
    for (size_t e = 0; e < ev.count(); ++e) {
        if (tl.phase[e] != Phase::OptimizerStep)
            continue;
        if (tl.run[e] != run) {
            run = tl.run[e];
            open.clear();
            links.clear();
        }
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
        Link from{c.pool[i], c.confidence[i]};
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
    }
}

void workspaceBySize(const DeviceTrace& dev, Classification& c)
{
    std::map<std::pair<int, int64_t>, std::vector<uint32_t>> byStream;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!isCublasWorkspaceSize(a.size))
            continue;
        if (freeEventOf(a) != kNoEvent)
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

namespace {

// Whether the backward shows autocast, where its weights' gradients can: a weight autocast cast to 16
// bits for its matmul gets its gradient in 16 bits first (the matmul's backward) and copied to fp32 on
// its way into .grad (ToCopyBackward0; AccumulateGrad may copy that again), so the first block let go
// of after the fp32 copy is made, before anything else is made, is that 16-bit gradient of half its
// bytes (niu_fb_200_bf16: 87 of 90 gradients). In an fp32 run the matmul's backward makes the gradient
// itself. Only the gradients of the weights the candidates would be casts of (`castWeights`) count: a
// frozen matmul's cast has no gradient, a norm's weight is not cast. False where the backward made four
// such gradients or more and not one shows the copy; true otherwise. One is enough: an fp32 backward
// shows it by chance where the gradient a matmul was handed (let go of after it) has half its weight's
// bytes (tokens = half the weight's input width), so the guard only ever rules autocast out.
bool castGradientsInBackward(const DeviceTrace& dev, const Classification& c, const std::unordered_set<int64_t>& castWeights)
{
    constexpr size_t kNone = std::numeric_limits<size_t>::max();
    // The first block let go of after allocation i is made, before the next birth, where it was made
    // before i with num/den of its bytes (half: the 16-bit source; the same: an fp32 copy of one).
    auto copiedFrom = [&](size_t i, int64_t num, int64_t den) -> size_t {
        const Allocation& a = dev.allocations[i];
        for (EventIndex e = a.allocEvent + 1; size_t(e) < dev.events.action.size(); ++e) {
            const Action act = dev.events.action[size_t(e)];
            if (act == Action::Alloc)
                return kNone;
            if (act != Action::FreeRequested && act != Action::FreeCompleted)
                continue;
            const Allocation* h = releasedAt(dev, e);
            if (!h || h->preexisting() || h->allocEvent >= a.allocEvent || h->size * den != a.size * num)
                return kNone;
            return size_t(h - dev.allocations.data());
        }
        return kNone;
    };
    int gradients = 0, cast = 0;
    for (size_t g = 0; g < c.size(); ++g) {
        const Allocation& a = dev.allocations[g];
        if (a.preexisting() || c.pool[g] != Pool::Gradient || c.birthPhase[g] != Phase::Backward || !castWeights.count(mirrorKey(a.size)))
            continue;
        ++gradients;
        size_t from = copiedFrom(g, 1, 2);
        if (from == kNone)
            if (const size_t copy = copiedFrom(g, 1, 1); copy != kNone)
                from = copiedFrom(copy, 1, 2);
        cast += from != kNone;
    }
    return gradients < 4 || cast > 0;
}

} // namespace

void autocastCastsByCount(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    for (size_t i = 0; i < c.size(); ++i)
        if (c.rules[c.rule[i]].has(kRoleWeightCast))
            return; // the frames showed autocast's casts: the rule that matched them decided
    // The frames this device's history recorded (a dump's frame table may hold others).
    std::vector<uint8_t> seen(trace.frames.stackCount(), 0);
    auto cppIn = [&](StackId st) {
        if (!st.valid() || st.value >= seen.size() || seen[st.value])
            return false;
        seen[st.value] = 1;
        for (FrameId f : trace.frames.stack(st))
            if (!trace.frames.frame(f).isPython())
                return true;
        return false;
    };
    for (StackId st : dev.events.stack)
        if (cppIn(st))
            return; // C++ frames were recorded and showed no cast: autocast was off
    for (const Allocation& a : dev.allocations)
        if (cppIn(a.stack))
            return;
    // Parameters by mirror key, as the rules count them (a pre-existing block by its requested size).
    // A parameter an optimizer step rebuilt (p.data = ...) is the same weight again: one cast each.
    std::unordered_map<int64_t, int64_t> params;
    for (const auto& [key, n] : c.parameterSizes)
        params[key] = n;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::Parameter && !dev.allocations[i].preexisting() && i < c.birthPhase.size() &&
            c.birthPhase[i] == Phase::OptimizerStep)
            if (auto it = params.find(mirrorKey(dev.allocations[i].size)); it != params.end() && it->second > 0)
                --it->second;
    // Copies from before recording held k times (a parameter, its .grad, its moments) are one
    // weight per k blocks: autocast casts the parameter, not its gradient or moments.
    for (const auto& [key, n] : parameterCopiesBeyondOne(dev, c))
        if (auto it = params.find(key); it != params.end())
            it->second = std::max<int64_t>(0, it->second - n);
    int64_t paramBytes = 0;
    for (const auto& [key, n] : params)
        paramBytes += key * n;
    if (paramBytes == 0)
        return;
    const RunFacts& facts = c.facts;
    // autocast casts a weight inside the matmul's own call, before the call's product is made, so a
    // cast is never its call's last allocation: the next allocation is made under the same stack.
    // An fp32 linear layer's output has a cast's size whenever T tokens x 4 B equal the weight's
    // input width x 2 B (T = in / 2: wed_training_128's T = 512 beside h = 1024), and it is its
    // call's only allocation. Where the stacks hold no frame, nothing tells a call apart; the count
    // alone decides, as before.
    const std::vector<uint32_t> byBirth = recordedByBirth(dev);
    constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
    std::vector<uint32_t> nextBorn(c.size(), kNone);
    for (size_t k = 0; k + 1 < byBirth.size(); ++k)
        nextBorn[byBirth[k]] = byBirth[k + 1];
    auto notItsCallsLast = [&](uint32_t i) {
        const StackId st = dev.allocations[i].stack;
        if (!st.valid() || trace.frames.stack(st).empty())
            return true;
        return nextBorn[i] != kNone && dev.allocations[nextBorn[i]].stack == st;
    };
    // Per forward pass: candidates by size.
    std::map<int, std::map<int64_t, std::vector<uint32_t>>> byPass;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || !params.count(mirrorKey(2 * a.size)) || !notItsCallsLast(uint32_t(i)))
            continue;
        const Pool p = c.pool[i];
        if (p != Pool::Activation && p != Pool::Unknown && p != Pool::Temporary && p != Pool::Other)
            continue;
        const int pass = facts.passAt(a.allocEvent);
        if (pass < 0 || facts.passes[size_t(pass)].phase != Phase::Forward)
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe != kNoEvent && fe <= facts.passes[size_t(pass)].last)
            continue; // let go of within its pass: not a cast kept for the weights' next use
        byPass[pass][a.size].push_back(uint32_t(i));
    }
    std::unordered_set<int64_t> castWeights; // the weights' sizes the candidates would be casts of
    for (const auto& [pass, sizes] : byPass)
        for (const auto& [size, ids] : sizes)
            castWeights.insert(mirrorKey(2 * size));
    if (!castGradientsInBackward(dev, c, castWeights))
        return;
    uint16_t rule = 0;
    for (auto& [pass, sizes] : byPass) {
        int64_t covered = 0;
        int classes = 0;
        // A model has one set of weight casts per autocast region. A size that a pass keeps more than
        // twice as often as there are weights to cast is mostly something else (an fp32 run at T = 2h
        // keeps each layer's softmax output, b x a x s^2 x 4 B, at the cast size of an embedding
        // table of vocab x h x 4 B): it cannot be the evidence that autocast ran. Where other sizes
        // show it did, its longest-kept candidates are still taken, one per weight, as before.
        for (const auto& [size, ids] : sizes) {
            const int64_t weights = params[mirrorKey(2 * size)];
            if (int64_t(ids.size()) > 2 * weights)
                continue;
            covered += std::min<int64_t>(int64_t(ids.size()), weights) * 2 * size;
            ++classes;
        }
        if (classes < 2 || covered * 10 < paramBytes * 4)
            continue;
        if (!rule)
            rule = addRule(c, "autocast-casts-by-count",
                           "made in a forward and kept past it with half a parameter's size, one per weight of twice that size "
                           "across the weights' shapes (at least 40 % of the parameters' bytes): autocast's 16-bit copies of fp32 "
                           "weights, told by count where the dump recorded no C++ frame to show autocast's cast",
                           Pool::CastCache, kEvidenceLifetime | kEvidenceSize, kRoleWeightCast);
        for (auto& [size, ids] : sizes) {
            // At most one per weight; those kept longest (weight casts live until autocast exits).
            std::stable_sort(ids.begin(), ids.end(), [&](uint32_t x, uint32_t y) {
                const EventIndex fx = freeEventOf(dev.allocations[x]), fy = freeEventOf(dev.allocations[y]);
                return (fx == kNoEvent ? std::numeric_limits<EventIndex>::max() : fx) > (fy == kNoEvent ? std::numeric_limits<EventIndex>::max() : fy);
            });
            const size_t n = std::min<size_t>(ids.size(), size_t(params[mirrorKey(2 * size)]));
            for (size_t k = 0; k < n; ++k)
                decide(c, ids[k], Pool::CastCache, rule, 55);
        }
    }
}

void unwoundAtOom(const DeviceTrace& dev, Classification& c)
{
    if (dev.ooms.empty())
        return;
    const auto& tl = c.phases;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] != Pool::Temporary)
            continue;
        const Allocation& a = dev.allocations[i];
        const EventIndex fe = freeEventOf(a);
        if (a.preexisting() || fe == kNoEvent || tl.phase[size_t(a.allocEvent)] != Phase::Forward ||
            tl.run[size_t(fe)] != tl.run[size_t(a.allocEvent)])
            continue;
        bool across = false;
        for (const OomEvent& o : dev.ooms)
            across = across || (o.index > a.allocEvent && o.index < fe);
        if (!across)
            continue;
        if (!rule)
            rule = addRule(c, "alive-at-oom-unwound",
                           "made by the forward that ran out of memory, alive at the OOM, and let go of while the exception "
                           "unwound, under the forward's own frames: part of that forward's working set (the graph's saved "
                           "tensors or the failing function's locals; only the C++ frames of the release could tell which)",
                           Pool::Activation, kEvidenceLifetime);
        decide(c, i, Pool::Activation, rule, 60);
    }
}

void heldAtOomInBackward(const DeviceTrace& dev, Classification& c)
{
    if (dev.ooms.empty() || !c.history)
        return;
    const auto& tl = c.phases;
    auto cut = [&](const Allocation& a) {
        if (a.preexisting() || freeEventOf(a) != kNoEvent || tl.phase[size_t(a.allocEvent)] != Phase::Backward)
            return false;
        for (const OomEvent& o : dev.ooms)
            if (o.index > a.allocEvent && size_t(o.index) < tl.run.size() && tl.sameRun(o.index, a.allocEvent))
                return true;
        return false;
    };
    std::vector<uint32_t> unknown, byLifetime;
    std::unordered_set<int64_t> classes;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        const bool undecided = c.pool[i] == Pool::Unknown;
        const bool lifetimeGradient = c.pool[i] == Pool::Gradient && !(c.rules[c.rule[i]].evidence & kEvidenceFrames) &&
                                      (c.lifetime[i] & bit(Lifetime::SurvivesBackward));
        if ((!undecided && !lifetimeGradient) || !cut(a))
            continue;
        if (undecided)
            unknown.push_back(uint32_t(i));
        if (lifetimeGradient && c.parameterSizes.count(mirrorKey(a.size))) {
            byLifetime.push_back(uint32_t(i));
            classes.insert(mirrorKey(a.size));
        }
    }
    uint16_t gradientRule = 0, scratchRule = 0;
    auto gradient = [&](uint32_t i) {
        if (!gradientRule)
            gradientRule = addRule(c, "held-at-oom-in-backward-parameter-size",
                                   "made in the backward that ran out of memory, still held at the OOM, with a parameter's bytes, "
                                   "and the only one or two such blocks: a weight's gradient, or an activation's gradient of the "
                                   "same bytes (the logits' gradient has the output layer's weight size where batch x sequence "
                                   "equals the width) that the next node would have let go of; the dump cannot say which",
                                   Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Gradient, gradientRule, 55);
    };
    for (uint32_t i : unknown) {
        if (c.parameterSizes.count(mirrorKey(dev.allocations[i].size))) {
            gradient(i);
            continue;
        }
        if (!scratchRule)
            scratchRule = addRule(c, "held-at-oom-in-backward",
                                  "made in the backward that ran out of memory, still held at the OOM, with no parameter's bytes: "
                                  "not a weight's gradient but one flowing between the backward's nodes (an activation's), "
                                  "which the next node would have let go of",
                                  Pool::Temporary, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Temporary, scratchRule, 60);
    }
    // Gradients of several weight shapes, or several of one, are the backward's so far; one or two
    // blocks of one shape are what an OOM early in the backward holds either way.
    if (classes.size() < 2 && byLifetime.size() < 3)
        for (uint32_t i : byLifetime)
            gradient(i);
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
