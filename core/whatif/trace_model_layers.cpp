// Forward passes and their repeated units. A model runs the same block L times (transformer layers,
// a GNN's message-passing steps, UNet blocks, experts: a module called in a loop), so the call
// sites of its forward repeat: the same stack appears L times per pass (or a multiple of L). The
// most common repeat count is L; the earliest call site that repeats exactly L times, spread over
// the pass, marks where each unit begins. Keyed by the stack alone, a unit whose sizes change from
// one call to the next (a UNet's resolutions, an expert's share of the tokens) still repeats.
#include "core/whatif/trace_model.h"

#include "core/util/units.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace poolscope {
namespace {

uint64_t keyOf(const Allocation& a)
{
    // Without frames the size has to stand in for the call site.
    return a.stack.valid() ? uint64_t(a.stack.value) : (uint64_t(1) << 63) ^ uint64_t(a.size);
}

struct PassRange {
    EventIndex begin = 0, end = 0;
};

// Forward runs, merged across runs of unknown phase between them (a frame-less stretch inside a
// forward is still that forward). A trace whose phases are all unknown and that has no backward
// or step is taken as one forward pass.
std::vector<PassRange> forwardRanges(const DeviceTrace& dev, const Classification& c, const TraceRunFacts& run,
                                     std::vector<std::string>& notes)
{
    std::vector<PassRange> out;
    bool open = false;
    // A run that only releases, gives back at least half of what the open pass built (allocated never
    // above where the run began, and that much lower at its end), and is followed by the pass's own
    // first allocation again (the next call of the model: its first tensor, same stack and bytes) is
    // no forward, whatever its frames say: the previous call's graph freed before the next forward
    // (Python-only stacks put the frees under the loop's line of the next call). A release inside a
    // pass (a no-grad forward dropping what it no longer needs) is followed by something else. A
    // release that ends the recording is left in the pass, unless it lets go of what was kept from
    // across the pass (endsWithGraphRelease, below): a no-grad forward dropping its output frees little.
    auto level = [&](EventIndex e) { return e > 0 ? dev.allocated[size_t(e) - 1] : dev.initialAllocated; };
    auto firstAllocation = [&](EventIndex from) -> const Allocation* {
        for (size_t e = size_t(from); e < dev.eventAlloc.size() && e < size_t(from) + 64; ++e) {
            const AllocId id = dev.eventAlloc[e];
            if (id.valid() && dev.allocations[id.value].allocEvent == EventIndex(e))
                return &dev.allocations[id.value];
        }
        return nullptr;
    };
    int64_t passStart = 0;
    const Allocation* passFirst = nullptr;
    auto releasesGraph = [&](const PhaseTimeline::Run& pr) {
        if (!open || !passFirst || dev.allocated.size() <= size_t(pr.last) || pr.first > pr.last)
            return false;
        const int64_t start = level(pr.first);
        const int64_t high = *std::max_element(dev.allocated.begin() + pr.first, dev.allocated.begin() + pr.last + 1);
        const int64_t drop = start - dev.allocated[size_t(pr.last)];
        if (high > start || drop <= 0 || 2 * drop < start - passStart)
            return false;
        const Allocation* next = firstAllocation(pr.last + 1);
        return next && next->size == passFirst->size && next->stack == passFirst->stack;
    };
    // A release that ends the recording (no allocation after it) is the graph's, not a no-grad forward
    // dropping its output, when what it frees was kept from across the pass: at least kGraphTensors
    // tensors born in the pass's first half. A no-grad forward frees each intermediate once the next
    // operator has read it, so at its end only its output (born last) and the odd cache are left; with
    // grad on, autograd's nodes hold what backward would read, layer after layer, until the graph is
    // dropped (bol_fwd_cl512_fp32: 709 tensors, 26.9 GiB, born from the pass's first event on; its
    // no-grad cl128 and cl2048 runs free 3 at the end). With C++ frames the graph's frees name no
    // forward operator; with Python frames only they fall under the line that called the model.
    constexpr int kGraphTensors = 8;
    const size_t lastAllocEvent = [&] {
        for (size_t a = dev.allocations.size(); a-- > 0;)
            if (!dev.allocations[a].preexisting())
                return size_t(dev.allocations[a].allocEvent);
        return size_t(0);
    }();
    // The run's frees after the recording's last allocation (the whole run, or the tail of the run
    // that made it), checked once the run joined its pass.
    auto endsWithGraphRelease = [&](const PhaseTimeline::Run& pr) {
        const size_t first = std::max(size_t(pr.first), lastAllocEvent + 1);
        if (!open || out.empty() || dev.allocated.size() <= size_t(pr.last) || first > size_t(pr.last))
            return false;
        const int64_t start = level(EventIndex(first));
        const int64_t drop = start - dev.allocated[size_t(pr.last)];
        if (drop <= 0 || 2 * drop < start - passStart)
            return false;
        const EventIndex half = out.back().begin + (EventIndex(first) - out.back().begin) / 2;
        int early = 0;
        for (size_t e = first; e <= size_t(pr.last) && e < dev.eventAlloc.size(); ++e) {
            const AllocId id = dev.eventAlloc[e];
            if (!id.valid() || dev.events.action[e] != Action::FreeCompleted)
                continue;
            const Allocation& al = dev.allocations[id.value];
            early += !al.preexisting() && al.allocEvent >= out.back().begin && al.allocEvent <= half;
        }
        return early >= kGraphTensors;
    };
    for (const auto& r : c.phases.runs) {
        if (r.phase == Phase::Forward && releasesGraph(r)) {
            open = false;
        } else if (r.phase == Phase::Forward) {
            if (open)
                out.back().end = r.last;
            else {
                passStart = dev.allocated.empty() ? 0 : level(r.first);
                passFirst = dev.eventAlloc.empty() ? nullptr : firstAllocation(r.first);
                out.push_back({r.first, r.last});
            }
            open = true;
            if (endsWithGraphRelease(r)) {
                // The pass ended with its last allocation; what follows is the graph let go.
                out.back().end = std::min(out.back().end, EventIndex(lastAllocEvent));
                open = false;
            }
        } else if (r.phase != Phase::Unknown) {
            open = false;
        }
    }
    if (out.empty() && !run.hasBackward && !run.hasStep && dev.eventCount() > 0) {
        out.push_back({0, EventIndex(dev.eventCount()) - 1});
        notes.push_back("no phase evidence: the whole trace is taken as one forward pass");
    }
    return out;
}

// U (the layer input) and each saved allocation's layer, once the units' starts are known.
// `shape`: the allocations the units were read from (the saved ones, or all in inference).
void assignLayers(const DeviceTrace& dev, const std::vector<size_t>& shape, const std::vector<size_t>& savedIdx, ForwardPass& pass,
                  int passNo, TraceLayers& m, const std::vector<uint8_t>& follows, const std::vector<EventIndex>& begins,
                  EventIndex headBegin)
{
    const auto& allocs = dev.allocations;
    // U, the layer input: the embedding output (the largest allocation that follows the batch kept
    // before the first layer), else the most common such size inside the layers.
    for (size_t a : shape)
        if (allocs[a].allocEvent < begins[0] && follows[a])
            pass.inputBytes = std::max(pass.inputBytes, allocs[a].size);
    if (pass.inputBytes == 0) {
        std::unordered_map<int64_t, int64_t> sizes;
        for (size_t a : shape)
            if (allocs[a].allocEvent >= begins[0] && follows[a])
                ++sizes[allocs[a].size];
        int64_t most = 0;
        for (auto& [s, n] : sizes)
            if (n > most || (n == most && s > pass.inputBytes)) {
                most = n;
                pass.inputBytes = s;
            }
    }
    std::vector<int64_t> lastInput(pass.layers.size(), -1);
    for (size_t a : savedIdx) {
        const EventIndex e = allocs[a].allocEvent;
        if (e < begins[0] || e >= headBegin)
            continue;
        const size_t l = size_t(std::upper_bound(begins.begin(), begins.end(), e) - begins.begin()) - 1;
        m.pass[a] = passNo;
        m.layer[a] = int32_t(l);
        pass.layers[l].savedBytes += allocs[a].size;
        if (allocs[a].size == pass.inputBytes && follows[a])
            lastInput[l] = int64_t(a);
    }
    for (int64_t a : lastInput)
        if (a >= 0)
            m.keptInput[size_t(a)] = 1;
}

// `all`: every allocation of the pass that follows the batch, `savedIdx`: those kept past it;
// `marked`: units the recording marked (poolscope::unit annotations), as event ranges.
// `pythonOnly[stack]`: the stack holds frames and none of them is C++ (stacks='python').
void findLayers(const DeviceTrace& dev, const std::vector<size_t>& all, const std::vector<size_t>& savedIdx, ForwardPass& pass,
                int passNo, TraceLayers& m, const std::vector<uint8_t>& follows, const std::vector<std::pair<EventIndex, EventIndex>>& marked,
                const std::vector<uint8_t>& pythonOnly)
{
    const auto& allocs = dev.allocations;
    if (!marked.empty()) {
        // The capture helper's units= marked each unit's forward: no need to guess from repetition.
        std::vector<EventIndex> begins;
        for (auto& [b, e] : marked)
            if (b >= pass.begin && b <= pass.end)
                begins.push_back(b);
        if (begins.size() >= 2) {
            pass.layers.resize(begins.size());
            size_t k = 0;
            for (auto& [b, e] : marked)
                if (b >= pass.begin && b <= pass.end) {
                    pass.layers[k].forwardBegin = b;
                    pass.layers[k].forwardEnd = std::min(e, pass.end);
                    ++k;
                }
            assignLayers(dev, savedIdx.size() >= 16 ? savedIdx : all, savedIdx, pass, passNo, m, follows, begins,
                         pass.layers.back().forwardEnd + 1);
            return;
        }
    }
    // The structure comes from what is kept for backward when there is enough of it (training),
    // else from every allocation of the pass (inference keeps nothing).
    const std::vector<size_t>& shape = savedIdx.size() >= 16 ? savedIdx : all;
    // Where a unit begins. With Python frames only, one line's several allocations share a stack (a
    // layer norm's output, mean and rstd; autocast's input cast, weight cast and product), so the
    // unit's first line repeats k x L times and a later line became the anchor (the first unit's
    // qkv output taken as the layer input: T read as 1920 for 1280). For the anchor alone, a
    // Python-only line's j-th allocation in a row is keyed apart, as the C++ frames would key them;
    // L and the periodic share stay read from whole lines, so no unit is found that was not before.
    std::vector<uint64_t> key(allocs.size(), 0);
    for (size_t i = 0, run = 0; i < shape.size(); ++i) {
        const Allocation& a = allocs[shape[i]];
        const bool sameLine = i > 0 && a.stack.valid() && allocs[shape[i - 1]].stack == a.stack;
        run = sameLine ? run + 1 : 0;
        const bool split = a.stack.valid() && a.stack.value < pythonOnly.size() && pythonOnly[a.stack.value];
        key[shape[i]] = keyOf(a) ^ (split ? uint64_t(run) << 40 : 0);
    }
    auto keyAt = [&](size_t a) { return key[a]; };
    std::unordered_map<uint64_t, int64_t> count, countApart;
    for (size_t a : shape) {
        ++count[keyOf(allocs[a])];
        ++countApart[keyAt(a)];
    }
    std::map<int64_t, int64_t> votes; // repeat count -> keys with it
    for (auto& [k, n] : count)
        if (n >= 2)
            ++votes[n];
    int64_t layers = 0, best = 0;
    for (auto& [n, keys] : votes)
        if (keys > best) {
            best = keys;
            layers = n;
        }
    if (layers < 2)
        return;
    int64_t periodic = 0, total = 0;
    EventIndex lastPeriodic = kNoEvent;
    for (size_t a : shape) {
        total += allocs[a].size;
        if (count[keyOf(allocs[a])] % layers == 0) {
            periodic += allocs[a].size;
            lastPeriodic = std::max(lastPeriodic, allocs[a].allocEvent);
        }
    }
    if (periodic * 2 < total)
        return;
    // The anchor: the earliest call site with exactly L occurrences, none two in a row (a loop
    // inside one unit repeats back to back).
    std::unordered_map<uint64_t, std::vector<size_t>> where;
    for (size_t i = 0; i < shape.size(); ++i)
        if (countApart[keyAt(shape[i])] == layers)
            where[keyAt(shape[i])].push_back(i);
    uint64_t anchor = 0;
    bool found = false;
    for (size_t a : shape) {
        const uint64_t k = keyAt(a);
        auto it = where.find(k);
        if (it == where.end())
            continue;
        bool spread = true;
        for (size_t j = 1; j < it->second.size(); ++j)
            spread &= it->second[j] > it->second[j - 1] + 1;
        if (spread) {
            anchor = k;
            found = true;
            break;
        }
    }
    if (!found)
        return;
    std::vector<EventIndex> begins;
    for (size_t a : shape)
        if (keyAt(a) == anchor)
            begins.push_back(allocs[a].allocEvent);
    // The head (final norm, logits) follows the last layer: allocations after the last periodic
    // one belong to no layer.
    EventIndex headBegin = pass.end + 1;
    for (size_t a : shape)
        if (allocs[a].allocEvent > lastPeriodic) {
            headBegin = allocs[a].allocEvent;
            break;
        }
    pass.layers.resize(size_t(layers));
    for (size_t l = 0; l < pass.layers.size(); ++l) {
        pass.layers[l].forwardBegin = begins[l];
        pass.layers[l].forwardEnd = l + 1 < begins.size() ? begins[l + 1] - 1 : headBegin - 1;
    }
    assignLayers(dev, shape, savedIdx, pass, passNo, m, follows, begins, headBegin);
}

// Backward of each layer: its saved activations are released there, top layer first.
void findBackward(const DeviceTrace& dev, const std::vector<size_t>& savedIdx, ForwardPass& pass, int passNo, const TraceLayers& m)
{
    const auto& allocs = dev.allocations;
    const size_t L = pass.layers.size();
    std::vector<EventIndex> minFree(L, kNoEvent), maxFree(L, kNoEvent);
    for (size_t a : savedIdx) {
        const EventIndex f = allocs[a].freeCompletedEvent;
        if (f == kNoEvent)
            continue;
        pass.backwardBegin = pass.backwardBegin == kNoEvent ? f : std::min(pass.backwardBegin, f);
        pass.backwardEnd = std::max(pass.backwardEnd, f);
        if (m.pass[a] != passNo || m.layer[a] < 0)
            continue;
        const size_t l = size_t(m.layer[a]);
        minFree[l] = minFree[l] == kNoEvent ? f : std::min(minFree[l], f);
        maxFree[l] = std::max(maxFree[l], f);
    }
    for (size_t k = L; k-- > 0;) {
        LayerSpan& span = pass.layers[k];
        if (maxFree[k] == kNoEvent)
            continue;
        span.backwardEnd = maxFree[k];
        EventIndex begin = k + 1 < L && pass.layers[k + 1].backwardEnd != kNoEvent ? pass.layers[k + 1].backwardEnd + 1
                                                                                 : pass.backwardBegin;
        span.backwardBegin = std::min(begin, minFree[k]);
    }
}

} // namespace

// The capture helper's units= opens a record_function scope "poolscope::unit" around each unit's
// forward; PyTorch keeps them in the dump's external_annotations, with times.
std::vector<std::pair<EventIndex, EventIndex>> markedUnits(const Trace& trace, const DeviceTrace& dev)
{
    std::vector<std::pair<EventIndex, EventIndex>> out;
    if (!dev.hasTime)
        return out;
    const auto& t = dev.events.timeUs;
    std::vector<int64_t> starts;
    for (const auto& a : trace.annotations) {
        if (a.device != dev.device || a.name != "poolscope::unit" || a.timeUs == kNoTime)
            continue;
        if (a.start) {
            starts.push_back(a.timeUs);
            continue;
        }
        if (starts.empty())
            continue;
        const int64_t from = starts.back();
        starts.pop_back();
        if (!starts.empty())
            continue; // a unit inside a unit: the outer one is the unit
        // Events are in time order: the first at or after the start, the last at or before the end.
        const auto b = std::lower_bound(t.begin(), t.end(), from);
        const auto e = std::upper_bound(t.begin(), t.end(), a.timeUs);
        if (b < e)
            out.emplace_back(EventIndex(b - t.begin()), EventIndex(e - t.begin()) - 1);
    }
    std::sort(out.begin(), out.end());
    return out;
}

TraceLayers findForwardPasses(const Trace& trace, const DeviceTrace& dev, const Classification& c, const TraceAllocations& allocations,
                              const TraceRunFacts& run, const std::vector<uint8_t>& follows, std::vector<std::string>& notes)
{
    TraceLayers m;
    const size_t n = dev.allocations.size();
    m.pass.assign(n, -1);
    m.layer.assign(n, -1);
    m.saved.assign(n, 0);
    m.keptInput.assign(n, 0);
    const auto ranges = forwardRanges(dev, c, run, notes);
    const auto marked = markedUnits(trace, dev);
    std::vector<uint8_t> pythonOnly(trace.frames.stackCount(), 0);
    for (size_t st = 0; st < pythonOnly.size(); ++st) {
        const auto frames = trace.frames.stack(StackId{uint32_t(st)});
        pythonOnly[st] = !frames.empty() &&
                         std::all_of(frames.begin(), frames.end(), [&](FrameId f) { return trace.frames.frame(f).isPython(); });
    }
    const auto& allocs = dev.allocations;
    // Allocations are sorted by allocEvent (pre-existing first): one sweep assigns passes.
    size_t a = 0;
    for (size_t p = 0; p < ranges.size(); ++p) {
        ForwardPass pass;
        pass.begin = ranges[p].begin;
        pass.end = ranges[p].end;
        if (dev.hasTime && size_t(pass.end) < dev.eventCount()) {
            const int64_t t0 = dev.events.timeUs[size_t(pass.begin)], t1 = dev.events.timeUs[size_t(pass.end)];
            if (t0 != kNoTime && t1 != kNoTime)
                pass.durationUs = t1 - t0;
        }
        std::vector<size_t> savedIdx, all;
        while (a < allocs.size() && allocs[a].allocEvent < pass.begin)
            ++a;
        for (; a < allocs.size() && allocs[a].allocEvent <= pass.end; ++a) {
            if (!follows[a])
                continue;
            all.push_back(a);
            const EventIndex f = allocs[a].freeCompletedEvent;
            if (f == kNoEvent || f > pass.end) {
                m.saved[a] = 1;
                savedIdx.push_back(a);
            }
        }
        findLayers(dev, all, savedIdx, pass, int(p), m, follows, marked, pythonOnly);
        for (size_t s : savedIdx)
            if (m.pass[s] < 0)
                m.pass[s] = int32_t(p);
        if (!pass.layers.empty())
            findBackward(dev, savedIdx, pass, int(p), m);
        m.layersPerPass = std::max(m.layersPerPass, int(pass.layers.size()));
        m.passes.push_back(std::move(pass));
    }
    if (!m.passes.empty() && m.layersPerPass == 0)
        notes.push_back("no repeated unit (a module called in a loop) found in the forward pass: checkpointing and sharding "
                          "units are approximated. Record with the capture helper's units= (resources/capture/poolscope_capture.py: "
                          "record(..., annotate=model, units=model.layers)) to mark them");
    else if (!m.passes.empty())
        notes.push_back(std::to_string(m.passes.size()) + " forward pass(es) of " + std::to_string(m.layersPerPass) +
                          (marked.empty() ? " repeated units (found by their repeating call sites)" : " units (marked by units=)") +
                          "; a unit's input is " + formatBytes(m.passes.front().inputBytes));
    if (m.layersPerPass > 0) {
        // A layer's weights: each parameter size as many times as it occurs per layer (a norm's
        // 2L + 1 copies give two per layer; embeddings and heads, once or twice, none).
        std::unordered_map<int64_t, std::pair<int64_t, int64_t>> bySize; // requested -> (count, block bytes)
        for (size_t a = 0; a < n; ++a)
            if (allocations.pool[a] == Pool::Parameter) {
                auto& [count, bytes] = bySize[allocations.requestedSize[a]];
                ++count;
                bytes = std::max(bytes, dev.allocations[a].size);
            }
        for (auto& [size, cb] : bySize)
            m.layerParameterBytes += cb.second * (cb.first / m.layersPerPass);
    }
    return m;
}

} // namespace poolscope
