#include "core/allocator/replay.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace poolscope {
namespace {

bool isSegmentAction(Action a)
{
    return a == Action::SegmentAlloc || a == Action::SegmentFree || a == Action::SegmentMap || a == Action::SegmentUnmap;
}

SimEventKind kindOf(Action a)
{
    switch (a) {
    case Action::SegmentAlloc:
        return SimEventKind::SegmentAlloc;
    case Action::SegmentFree:
        return SimEventKind::SegmentFree;
    case Action::SegmentMap:
        return SimEventKind::SegmentMap;
    default:
        return SimEventKind::SegmentUnmap;
    }
}

const char* kindName(SimEventKind k)
{
    switch (k) {
    case SimEventKind::SegmentAlloc:
        return "segment_alloc";
    case SimEventKind::SegmentFree:
        return "segment_free";
    case SimEventKind::SegmentMap:
        return "segment_map";
    case SimEventKind::SegmentUnmap:
        return "segment_unmap";
    case SimEventKind::FreeCompleted:
        return "free_completed";
    case SimEventKind::Oom:
        return "oom";
    }
    return "?";
}

bool stackSaysEmptyCache(const FrameTable* frames, StackId stack)
{
    if (!frames || !stack.valid())
        return false;
    for (FrameId f : frames->stack(stack)) {
        const std::string& name = frames->frame(f).name;
        if (name == "empty_cache" || name.find("emptyCache") != std::string::npos)
            return true;
    }
    return false;
}

// Recorded segment events with their anchors, and the trace indices where empty_cache() ran.
struct RecordedPlan {
    std::vector<SegmentEventAt> events;
    std::vector<char> emptyCacheAt; // per trace event
};

RecordedPlan planRecorded(const DeviceTrace& dev, const ReplayOptions& options)
{
    const auto& ev = dev.events;
    const size_t n = ev.count();
    RecordedPlan plan;
    plan.emptyCacheAt.assign(n, 0);
    // The request each event belongs to: the next alloc or oom (segment events precede their alloc).
    std::vector<EventIndex> nextRequest(n + 1, EventIndex(n));
    for (size_t i = n; i-- > 0;)
        nextRequest[i] = (ev.action[i] == Action::Alloc || ev.action[i] == Action::Oom) ? EventIndex(i) : nextRequest[i + 1];
    size_t i = 0;
    while (i < n) {
        if (!isSegmentAction(ev.action[i])) {
            ++i;
            continue;
        }
        if (ev.action[i] == Action::SegmentAlloc || ev.action[i] == Action::SegmentMap) {
            plan.events.push_back({kindOf(ev.action[i]), ev.addr[i], ev.size[i], ev.stream[i], nextRequest[i]});
            ++i;
            continue;
        }
        size_t j = i;
        bool framed = false, saysEmpty = false;
        while (j < n && (ev.action[j] == Action::SegmentFree || ev.action[j] == Action::SegmentUnmap)) {
            framed |= ev.stack[j].valid();
            saysEmpty |= stackSaysEmptyCache(options.frames, ev.stack[j]);
            ++j;
        }
        bool emptyCache = saysEmpty;
        if (!options.capacity) {
            // Without a capacity the simulator never releases on its own, so every recorded release
            // is replayed where it happened, whatever the stacks say: the replay (and the report's
            // fragmentation) must not change when a redacted copy renames or drops frames.
            emptyCache = true;
        } else if (!framed || !options.frames) {
            // No stacks to tell: a release inside malloc is always followed by the retried cudaMalloc
            // or the OOM; without a capacity the simulator never releases on its own.
            const bool requestFollows = j < n && (ev.action[j] == Action::SegmentAlloc || ev.action[j] == Action::SegmentMap ||
                                                  ev.action[j] == Action::Alloc || ev.action[j] == Action::Oom);
            emptyCache = !requestFollows;
        }
        emptyCache = emptyCache && options.replayEmptyCache;
        if (emptyCache)
            plan.emptyCacheAt[i] = 1;
        for (size_t k = i; k < j; ++k)
            plan.events.push_back({kindOf(ev.action[k]), ev.addr[k], ev.size[k], ev.stream[k],
                                   emptyCache ? EventIndex(i) : nextRequest[k]});
        i = j;
    }
    return plan;
}

// Hands the simulator the device's recorded addresses for the request being replayed, and invents
// addresses far from them when the simulation asks for something the device did not do.
class RecordedAddressSource final : public SegmentAddressSource {
public:
    RecordedAddressSource() : m_space(0x200000000000ull, VirtualAddressSpace::kDefaultSpan) {}
    void setCandidates(const SegmentEventAt* begin, const SegmentEventAt* end)
    {
        m_begin = begin;
        m_end = end;
        m_used.assign(size_t(end - begin), 0);
    }
    uint64_t acquire(int64_t bytes, bool expandable) override
    {
        const SimEventKind want = expandable ? SimEventKind::SegmentMap : SimEventKind::SegmentAlloc;
        for (const SegmentEventAt* c = m_begin; c != m_end; ++c) {
            const size_t k = size_t(c - m_begin);
            if (m_used[k] || c->kind != want || (!expandable && c->size != bytes))
                continue;
            if (m_space.claim(c->addr, bytes)) {
                m_used[k] = 1;
                return c->addr;
            }
        }
        return m_space.acquire(bytes, expandable);
    }
    void release(uint64_t addr, int64_t bytes) override { m_space.release(addr, bytes); }
    bool claim(uint64_t addr, int64_t bytes) override { return m_space.claim(addr, bytes); }

private:
    VirtualAddressSpace m_space;
    const SegmentEventAt* m_begin = nullptr;
    const SegmentEventAt* m_end = nullptr;
    std::vector<char> m_used;
};

struct SeedSegment {
    uint64_t addr = 0;
    int64_t size = 0;
    int64_t stream = 0;
    bool small = false;
    std::vector<ExistingBlock> blocks;
};

// The allocator state when recording began, as far as the trace and the final segments tell it.
void seed(const DeviceTrace& dev, const AllocatorConfig& config, CachingAllocatorSim& sim, ReplayResult& out)
{
    const auto& ev = dev.events;
    std::unordered_set<uint64_t> createdByTrace;
    std::vector<SeedSegment> segs;
    for (size_t i = 0; i < ev.count(); ++i) {
        if (ev.action[i] == Action::SegmentAlloc) {
            createdByTrace.insert(ev.addr[i]);
        } else if (ev.action[i] == Action::SegmentFree) {
            if (!createdByTrace.count(ev.addr[i]))
                segs.push_back({ev.addr[i], ev.size[i], ev.stream[i], ev.size[i] == kSmallBuffer, {}});
            else
                createdByTrace.erase(ev.addr[i]);
        }
    }
    int64_t expandableSkipped = 0;
    for (const auto& s : dev.segments) {
        if (createdByTrace.count(s.address))
            continue;
        if (s.isExpandable) {
            ++expandableSkipped;
            continue;
        }
        segs.push_back({s.address, s.totalSize, s.stream, !s.isLarge, {}});
    }
    if (expandableSkipped > 0)
        out.warnings.push_back(std::to_string(expandableSkipped) +
                               " expandable segments existed before recording; their layout is not replayed");
    std::sort(segs.begin(), segs.end(), [](const SeedSegment& a, const SeedSegment& b) { return a.addr < b.addr; });

    int64_t unplaced = 0;
    for (const auto& a : dev.allocations) {
        if (!a.preexisting())
            continue;
        auto it = std::upper_bound(segs.begin(), segs.end(), a.address,
                                   [](uint64_t addr, const SeedSegment& s) { return addr < s.addr; });
        if (it == segs.begin() || a.address >= std::prev(it)->addr + uint64_t(std::prev(it)->size)) {
            ++unplaced;
            continue;
        }
        // Final blocks know their rounded size; a block only seen being freed gets round_size().
        const int64_t block = a.blockSize != a.size ? a.blockSize : std::max(a.blockSize, roundSize(config, a.size));
        std::prev(it)->blocks.push_back({a.address, block, a.size});
    }
    for (auto& s : segs) {
        std::sort(s.blocks.begin(), s.blocks.end(), [](const ExistingBlock& a, const ExistingBlock& b) { return a.addr < b.addr; });
        for (size_t k = 0; k < s.blocks.size(); ++k) {
            const uint64_t limit = k + 1 < s.blocks.size() ? s.blocks[k + 1].addr : s.addr + uint64_t(s.size);
            s.blocks[k].size = std::min<int64_t>(s.blocks[k].size, int64_t(limit - s.blocks[k].addr));
        }
        if (sim.addExistingSegment(s.addr, s.size, s.stream, s.small, s.blocks)) {
            ++out.seededSegments;
            out.seededAllocations += int64_t(s.blocks.size());
        } else {
            out.warnings.push_back("could not seed the segment at " + std::to_string(s.addr));
        }
    }
    if (unplaced > 0)
        out.warnings.push_back(std::to_string(unplaced) + " allocations made before recording lie in no known segment");
}

} // namespace

ReplayResult replayDevice(const DeviceTrace& dev, const AllocatorConfig& config, std::optional<int64_t> capacity)
{
    ReplayOptions options;
    options.capacity = capacity;
    return replayDevice(dev, config, options);
}

ReplayResult replayTraceDevice(const Trace& trace, const DeviceTrace& device, ReplayOptions options)
{
    std::vector<std::string> notes;
    AllocatorConfig config = allocatorConfigFromSettings(trace.allocatorSettings, &notes);
    if (options.capacity)
        config.deviceTotalMemory = *options.capacity;
    options.frames = &trace.frames;
    ReplayResult r = replayDevice(device, config, options);
    r.warnings.insert(r.warnings.end(), notes.begin(), notes.end());
    return r;
}

ReplayResult replayDevice(const DeviceTrace& dev, const AllocatorConfig& config, const ReplayOptions& options)
{
    ReplayResult out;
    out.config = config;
    const auto& ev = dev.events;
    const size_t n = ev.count();
    RecordedPlan plan = planRecorded(dev, options);
    out.recordedEvents = plan.events;

    CachingAllocatorSim sim(config, options.capacity);
    RecordedAddressSource recorded;
    if (options.useRecordedAddresses)
        sim.setAddressSource(&recorded);
    if (options.seedInitialState)
        seed(dev, config, sim, out);
    out.initialAllocated = sim.stats().allocated;
    out.initialReserved = sim.stats().reserved;
    sim.clearEvents();
    if (options.snapshotAfter && *options.snapshotAfter < 0) {
        out.segmentsAtStop = sim.segments();
        out.finalStats = sim.stats();
        return out;
    }

    if (options.keepSeries) {
        out.allocated.reserve(n);
        out.active.reserve(n);
        out.reserved.reserve(n);
    }
    // Recorded address -> simulated address of live allocations (identical while the replay agrees).
    std::unordered_map<uint64_t, uint64_t> live;
    live.reserve(1024);
    auto simAddr = [&](uint64_t recordedAddr) {
        auto it = live.find(recordedAddr);
        return it == live.end() ? recordedAddr : it->second;
    };
    size_t cursor = 0; // first recorded event whose anchor is not behind us
    auto candidatesFor = [&](EventIndex i) {
        while (cursor < plan.events.size() && plan.events[cursor].anchor < i)
            ++cursor;
        size_t end = cursor;
        while (end < plan.events.size() && plan.events[end].anchor == i)
            ++end;
        recorded.setCandidates(plan.events.data() + cursor, plan.events.data() + end);
    };
    auto drain = [&](EventIndex i) {
        for (const SimEvent& e : sim.events())
            if (e.kind != SimEventKind::FreeCompleted && e.kind != SimEventKind::Oom)
                out.events.push_back({e.kind, e.addr, e.size, e.stream, i});
        sim.clearEvents();
    };
    auto request = [&](EventIndex i, int64_t size, int64_t stream) {
        candidatesFor(i);
        AllocResult r = sim.malloc(size, stream);
        drain(i);
        if (!r.ok && !out.oom)
            out.oom = ReplayOom{i, size, r.roundedSize, r.wantedBytes, r.deviceFree, sim.stats().allocated, sim.stats().reserved,
                                sim.stats().requested};
        return r;
    };

    for (size_t i = 0; i < n; ++i) {
        const auto idx = EventIndex(i);
        if (plan.emptyCacheAt[i]) {
            candidatesFor(idx);
            sim.emptyCache();
            drain(idx);
            ++out.emptyCacheCalls;
        }
        switch (ev.action[i]) {
        case Action::Alloc: {
            ++out.replayedAllocs;
            AllocResult r = request(idx, ev.size[i], ev.stream[i]);
            if (r.ok) {
                live[ev.addr[i]] = r.addr;
                out.allocAddressMatches += r.addr == ev.addr[i];
            } else if (options.stopAtOom) {
                out.stoppedAt = idx;
            } else {
                live[ev.addr[i]] = 0; // never placed: its frees must not touch whatever lives there
            }
            break;
        }
        case Action::FreeRequested:
            if (const uint64_t a = simAddr(ev.addr[i]); a != 0)
                sim.freeRequested(a);
            break;
        case Action::FreeCompleted:
            if (const uint64_t a = simAddr(ev.addr[i]); a != 0)
                sim.freeCompleted(a);
            live.erase(ev.addr[i]);
            break;
        case Action::Oom:
            // The program asked and failed; with a capacity the simulator can fail the same way.
            if (options.capacity) {
                AllocResult r = request(idx, ev.size[i], ev.stream[i]);
                if (r.ok) {
                    sim.free(r.addr);
                    out.warnings.push_back("event " + std::to_string(i) + ": the trace ran out of memory here, the replay did not");
                }
            }
            break;
        default:
            break;
        }
        if (out.stoppedAt != kNoEvent)
            break;
        if (options.keepSeries) {
            out.allocated.push_back(sim.stats().allocated);
            out.active.push_back(sim.stats().active);
            out.reserved.push_back(sim.stats().reserved);
        }
        if (i < dev.reserved.size() && !isSegmentAction(ev.action[i])) {
            ++out.reservedCompared;
            out.reservedMatches += sim.stats().reserved == dev.reserved[i];
        }
        if (options.snapshotAfter && *options.snapshotAfter == idx) {
            out.segmentsAtStop = sim.segments();
            out.stoppedAt = idx;
            break;
        }
    }
    out.finalStats = sim.stats();
    out.comparison = compareSegmentEvents(out.recordedEvents, out.events);
    return out;
}

SegmentEventComparison compareSegmentEvents(const std::vector<SegmentEventAt>& recorded,
                                            const std::vector<SegmentEventAt>& simulated)
{
    SegmentEventComparison c;
    c.recorded = int64_t(recorded.size());
    c.simulated = int64_t(simulated.size());
    auto sameKind = [](const SegmentEventAt& a, const SegmentEventAt& b) { return a.kind == b.kind && a.size == b.size; };
    auto sameAll = [](const SegmentEventAt& a, const SegmentEventAt& b) {
        return a.kind == b.kind && a.size == b.size && a.addr == b.addr;
    };
    // Longest common subsequence; a greedy walk when a single request has huge lists on both sides.
    auto lcs = [](const SegmentEventAt* a, size_t na, const SegmentEventAt* b, size_t nb, auto eq) -> int64_t {
        if (na == 0 || nb == 0)
            return 0;
        if (na * nb > 4'000'000) {
            int64_t m = 0;
            size_t j = 0;
            for (size_t i = 0; i < na && j < nb; ++i) {
                size_t k = j;
                while (k < nb && !eq(a[i], b[k]))
                    ++k;
                if (k < nb) {
                    ++m;
                    j = k + 1;
                }
            }
            return m;
        }
        std::vector<int32_t> prev(nb + 1, 0), cur(nb + 1, 0);
        for (size_t i = 1; i <= na; ++i) {
            for (size_t j = 1; j <= nb; ++j)
                cur[j] = eq(a[i - 1], b[j - 1]) ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
            std::swap(prev, cur);
        }
        return prev[nb];
    };
    size_t i = 0, j = 0;
    while (i < recorded.size() || j < simulated.size()) {
        const EventIndex ai = i < recorded.size() ? recorded[i].anchor : std::numeric_limits<EventIndex>::max();
        const EventIndex aj = j < simulated.size() ? simulated[j].anchor : std::numeric_limits<EventIndex>::max();
        const EventIndex anchor = std::min(ai, aj);
        size_t ie = i, je = j;
        while (ie < recorded.size() && recorded[ie].anchor == anchor)
            ++ie;
        while (je < simulated.size() && simulated[je].anchor == anchor)
            ++je;
        const int64_t m = lcs(recorded.data() + i, ie - i, simulated.data() + j, je - j, sameKind);
        c.matched += m;
        c.matchedWithAddress += lcs(recorded.data() + i, ie - i, simulated.data() + j, je - j, sameAll);
        ++c.anchors;
        const bool equal = m == int64_t(ie - i) && m == int64_t(je - j);
        if (equal) {
            ++c.anchorsEqual;
        } else if (c.firstMismatch == kNoEvent) {
            c.firstMismatch = anchor;
            std::string text = "event " + std::to_string(anchor) + ": recorded";
            for (size_t k = i; k < ie && k < i + 4; ++k)
                text += std::string(" ") + kindName(recorded[k].kind) + "(" + std::to_string(recorded[k].size) + ")";
            if (ie - i > 4)
                text += " ... (" + std::to_string(ie - i) + ")";
            text += ", simulated";
            for (size_t k = j; k < je && k < j + 4; ++k)
                text += std::string(" ") + kindName(simulated[k].kind) + "(" + std::to_string(simulated[k].size) + ")";
            if (je - j > 4)
                text += " ... (" + std::to_string(je - j) + ")";
            if (ie == i)
                text += " (nothing recorded)";
            if (je == j)
                text += " (nothing simulated)";
            c.firstMismatchText = std::move(text);
        }
        i = ie;
        j = je;
    }
    return c;
}

} // namespace poolscope
