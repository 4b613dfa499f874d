// Forward passes and their layers. A transformer's forward runs the same block L times, so the
// activations it keeps for backward repeat: the same (stack, size) appears L times per pass (or a
// multiple of L). The most common repeat count is L; the earliest-born key that repeats exactly L
// times marks where each layer begins.
#include "core/whatif/trace_model.h"

#include "core/util/units.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace poolscope {
namespace {

uint64_t keyOf(const Allocation& a)
{
    return (uint64_t(a.stack.value) << 40) ^ uint64_t(a.size);
}

struct PassRange {
    EventIndex begin = 0, end = 0;
};

// Forward runs, merged across runs of unknown phase between them (a frame-less stretch inside a
// forward is still that forward). A trace whose phases are all unknown and that has no backward
// or step is taken as one forward pass.
std::vector<PassRange> forwardRanges(const DeviceTrace& dev, const Classification& c, TraceModel& m)
{
    std::vector<PassRange> out;
    bool open = false;
    for (const auto& run : c.phases.runs) {
        if (run.phase == Phase::Forward) {
            if (open)
                out.back().end = run.last;
            else
                out.push_back({run.first, run.last});
            open = true;
        } else if (run.phase != Phase::Unknown) {
            open = false;
        }
    }
    if (out.empty() && !m.hasBackward && !m.hasStep && dev.eventCount() > 0) {
        out.push_back({0, EventIndex(dev.eventCount()) - 1});
        m.notes.push_back("no phase evidence: the whole trace is taken as one forward pass");
    }
    return out;
}

void findLayers(const DeviceTrace& dev, const std::vector<size_t>& savedIdx, ForwardPass& pass, int passNo, TraceModel& m)
{
    const auto& allocs = dev.allocations;
    std::unordered_map<uint64_t, int64_t> count;
    for (size_t a : savedIdx)
        ++count[keyOf(allocs[a])];
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
    for (size_t a : savedIdx) {
        total += allocs[a].size;
        if (count[keyOf(allocs[a])] % layers == 0) {
            periodic += allocs[a].size;
            lastPeriodic = std::max(lastPeriodic, allocs[a].allocEvent);
        }
    }
    if (periodic * 2 < total)
        return;
    uint64_t anchor = 0;
    bool found = false;
    for (size_t a : savedIdx)
        if (count[keyOf(allocs[a])] == layers) {
            anchor = keyOf(allocs[a]);
            found = true;
            break;
        }
    if (!found)
        return;
    std::vector<EventIndex> begins;
    for (size_t a : savedIdx)
        if (keyOf(allocs[a]) == anchor)
            begins.push_back(allocs[a].allocEvent);
    // The head (final norm, logits) follows the last layer: saved allocations after the last
    // periodic one belong to no layer.
    EventIndex headBegin = pass.end + 1;
    for (size_t a : savedIdx)
        if (allocs[a].allocEvent > lastPeriodic) {
            headBegin = allocs[a].allocEvent;
            break;
        }
    pass.layers.resize(size_t(layers));
    for (size_t l = 0; l < pass.layers.size(); ++l) {
        pass.layers[l].forwardBegin = begins[l];
        pass.layers[l].forwardEnd = l + 1 < begins.size() ? begins[l + 1] - 1 : headBegin - 1;
    }
    // U, the layer input: the embedding output (the largest linear allocation kept before the first
    // layer), else the most common linear size inside the layers.
    for (size_t a : savedIdx)
        if (allocs[a].allocEvent < begins[0] && m.law[a] == SizeLaw::Linear)
            pass.inputBytes = std::max(pass.inputBytes, allocs[a].size);
    if (pass.inputBytes == 0) {
        std::unordered_map<int64_t, int64_t> sizes;
        for (size_t a : savedIdx)
            if (allocs[a].allocEvent >= begins[0] && m.law[a] == SizeLaw::Linear)
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
        if (allocs[a].size == pass.inputBytes && m.law[a] == SizeLaw::Linear)
            lastInput[l] = int64_t(a);
    }
    for (int64_t a : lastInput)
        if (a >= 0)
            m.keptInput[size_t(a)] = 1;
}

// Backward of each layer: its saved activations are released there, top layer first.
void findBackward(const DeviceTrace& dev, const std::vector<size_t>& savedIdx, ForwardPass& pass, int passNo, const TraceModel& m)
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

void findForwardPasses(const DeviceTrace& dev, const Classification& c, TraceModel& m)
{
    const auto ranges = forwardRanges(dev, c, m);
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
        std::vector<size_t> savedIdx;
        while (a < allocs.size() && allocs[a].allocEvent < pass.begin)
            ++a;
        for (; a < allocs.size() && allocs[a].allocEvent <= pass.end; ++a) {
            if (m.law[a] == SizeLaw::Fixed)
                continue;
            const EventIndex f = allocs[a].freeCompletedEvent;
            if (f == kNoEvent || f > pass.end) {
                m.saved[a] = 1;
                savedIdx.push_back(a);
            }
        }
        findLayers(dev, savedIdx, pass, int(p), m);
        for (size_t s : savedIdx)
            if (m.pass[s] < 0)
                m.pass[s] = int32_t(p);
        if (!pass.layers.empty())
            findBackward(dev, savedIdx, pass, int(p), m);
        m.layersPerPass = std::max(m.layersPerPass, int(pass.layers.size()));
        m.passes.push_back(std::move(pass));
    }
    if (!m.passes.empty() && m.layersPerPass == 0)
        m.notes.push_back("no repeating layer structure in the forward pass: checkpointing and sharding units are approximated");
    else if (!m.passes.empty())
        m.notes.push_back(std::to_string(m.passes.size()) + " forward pass(es) of " + std::to_string(m.layersPerPass) +
                          " layers; a layer input is " + formatBytes(m.passes.front().inputBytes));
}

} // namespace poolscope
