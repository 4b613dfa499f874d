// Replays a Plan through CachingAllocatorSim. Handles 0..n-1 are the trace's allocations, n.. the
// injected ones; a handle maps to its simulated address while live. The loop touches only flat
// arrays: no hashing of addresses on our side (the simulator keeps its own map).
#include "core/whatif/whatif.h"

#include "core/allocator/allocator_config.h"
#include "core/util/units.h"

#include <algorithm>
#include <chrono>
#include <iterator>

namespace poolscope {
namespace {

struct Op {
    EventIndex at = kNoEvent;
    uint32_t handle = 0;
    bool alloc = false;
    bool operator<(const Op& o) const
    {
        if (at != o.at)
            return at < o.at;
        if (alloc != o.alloc)
            return !alloc; // frees first
        return handle < o.handle;
    }
};

bool isSegmentAction(Action a)
{
    return a == Action::SegmentAlloc || a == Action::SegmentFree || a == Action::SegmentMap || a == Action::SegmentUnmap;
}

struct SeedSegment {
    const TraceModel::InitialSegment* segment = nullptr;
    bool keep = true; // false: a block in it changed, so its blocks are allocated afresh
    std::vector<ExistingBlock> blocks;
    std::vector<uint32_t> handles;
};

class PlanReplayer {
public:
    PlanReplayer(const DeviceTrace& dev, const TraceModel& model, const Plan& plan,
                 const AllocatorConfig& config, std::optional<int64_t> capacity, WhatIfResult& out)
        : m_dev(dev), m_model(model), m_plan(plan), m_config(config), m_sim(config, capacity), m_out(out)
    {
        const size_t n = dev.allocations.size();
        const size_t handles = n + plan.extras.size();
        m_addr.assign(handles, 0);
        m_block.assign(handles, 0);
        m_size.resize(handles);
        m_pool.resize(handles);
        m_stream.resize(handles);
        for (size_t a = 0; a < n; ++a) {
            m_size[a] = plan.size[a];
            m_pool[a] = a < model.pool.size() ? model.pool[a] : Pool::Unknown;
        }
        m_stream.assign(model.stream.begin(), model.stream.end());
        m_stream.resize(handles);
        for (size_t e = 0; e < plan.extras.size(); ++e) {
            m_size[n + e] = plan.extras[e].size;
            m_pool[n + e] = plan.extras[e].pool;
            m_stream[n + e] = plan.extras[e].stream;
        }
        for (size_t a = 0; a < n; ++a)
            if (plan.earlyFree[a] != kNoEvent)
                m_ops.push_back({plan.earlyFree[a], uint32_t(a), false});
        for (size_t e = 0; e < plan.extras.size(); ++e) {
            if (plan.extras[e].size <= 0)
                continue;
            m_ops.push_back({plan.extras[e].allocAt, uint32_t(n + e), true});
            if (plan.extras[e].freeAt != kNoEvent)
                m_ops.push_back({plan.extras[e].freeAt, uint32_t(n + e), false});
        }
        std::sort(m_ops.begin(), m_ops.end());
    }

    void run(const WhatIfOptions& options)
    {
        seed();
        const auto& ev = m_dev.events;
        const size_t n = ev.count();
        std::vector<EventIndex> empties;
        for (const auto& run : m_model.releaseRuns)
            if (run.emptyCache(m_sim.capacity().has_value()))
                empties.push_back(run.at);
        const auto& closes = m_model.reuseCloses;
        size_t nextEmpty = 0, nextOp = 0, nextClose = 0;
        while (nextOp < m_ops.size() && m_ops[nextOp].at < 0)
            runOp(m_ops[nextOp++]);
        // The trace's allocated series counts, from its first event on, the rounding slack (block -
        // requested bytes) of the blocks still allocated at the end (trace_builder.h): a constant
        // over the requested bytes the simulator counts. It is the recorded one for the identity
        // (and checked event by event); a scenario's own is known once its replay has ended.
        const int64_t recordedOffset = m_dev.initialAllocated - m_seededRequested;
        m_out.initialAllocated = m_sim.stats().requested;
        m_out.initialReserved = m_sim.stats().reserved;
        if (options.keepSeries) {
            m_out.allocated.reserve(n);
            m_out.reserved.reserve(n);
        }
        if (options.keepPoolSeries) {
            m_out.poolSeries.assign(kAllocationPoolCount, {});
            for (auto& series : m_out.poolSeries)
                series.reserve(n);
        }
        const bool compare = m_plan.identity && m_dev.allocated.size() == n;
        const bool compareReserved = m_plan.identity && !m_out.allocatorChanged && m_dev.reserved.size() == n;
        for (size_t i = 0; i < n; ++i) {
            if ((i & 0xffff) == 0 && options.cancel && options.cancel->load(std::memory_order_relaxed)) {
                m_out.cancelled = true;
                m_out.allocated.clear();
                m_out.reserved.clear();
                m_out.poolSeries.clear();
                return;
            }
            const auto idx = EventIndex(i);
            if (nextEmpty < empties.size() && empties[nextEmpty] == idx) {
                m_sim.emptyCache();
                m_sim.clearEvents();
                ++nextEmpty;
            }
            // The builder closed these where this event's allocation reused their address.
            for (; nextClose < closes.size() && closes[nextClose].first == idx; ++nextClose)
                if (m_addr[closes[nextClose].second])
                    release(closes[nextClose].second);
            const AllocId id = m_dev.eventAlloc[i];
            switch (ev.action[i]) {
            case Action::Alloc:
                if (id.valid() && m_size[id.value] > 0)
                    allocate(id.value, idx);
                break;
            case Action::FreeRequested:
                // Mostly the very next event completes it: freeCompleted() then does both, one lookup
                // less, and nothing the series keeps (requested and reserved bytes) moves in between.
                if (id.valid() && m_addr[id.value] &&
                    !(i + 1 < n && ev.action[i + 1] == Action::FreeCompleted && m_dev.eventAlloc[i + 1] == id))
                    m_sim.freeRequested(m_addr[id.value]);
                break;
            case Action::FreeCompleted:
                if (id.valid() && m_addr[id.value])
                    release(id.value);
                break;
            case Action::Oom:
                tryRecordedOom(idx, ev.size[i], ev.stream[i]);
                break;
            default:
                break;
            }
            while (nextOp < m_ops.size() && m_ops[nextOp].at == idx)
                runOp(m_ops[nextOp++]);
            const int64_t allocated = m_sim.stats().requested;
            const int64_t reserved = m_sim.stats().reserved;
            if (options.keepSeries) {
                m_out.allocated.push_back(allocated);
                m_out.reserved.push_back(reserved);
            }
            if (options.keepPoolSeries)
                for (size_t p = 0; p < kAllocationPoolCount; ++p)
                    m_out.poolSeries[p].push_back(m_pools[p]);
            if (allocated > m_out.peakAllocated || m_out.peakAt == kNoEvent) {
                m_out.peakAllocated = allocated;
                m_out.peakAt = idx;
                m_out.poolsAtPeak = m_pools;
            }
            // Reserved peaks are judged after requests and frees: within a run of segment events the
            // trace moves reserved one entry at a time, the simulator all at once.
            const bool segmentEvent = isSegmentAction(ev.action[i]);
            if (!segmentEvent && (reserved > m_out.peakReserved || m_out.peakReservedAt == kNoEvent)) {
                m_out.peakReserved = reserved;
                m_out.peakReservedAt = idx;
                m_out.blockBytesAtPeakReserved = m_sim.stats().allocated;
            }
            if (options.layoutAt && *options.layoutAt == idx && !m_out.fragmentationDetail.known) {
                m_out.fragmentationDetail = fragmentationOf(m_sim.segments());
                m_out.fragmentationDetail.source = "the replay after event " + std::to_string(idx);
            }
            if (compare && allocated + recordedOffset != m_dev.allocated[i]) {
                if (m_out.allocatedMismatches++ == 0)
                    m_out.firstAllocatedMismatch = idx;
            }
            if (compareReserved && !segmentEvent) {
                ++m_out.reservedCompared;
                m_out.reservedMatches += reserved == m_dev.reserved[i];
            }
        }
        while (nextOp < m_ops.size())
            runOp(m_ops[nextOp++]);
        int64_t offset = recordedOffset;
        // Without final segments (Kineto, timeline exports) there are no blocks to take slack
        // from: the constant is memory the profiler saw allocated before it started, and stays.
        if (!m_plan.identity && !m_dev.segments.empty()) {
            offset = 0;
            for (size_t h = 0; h < m_addr.size(); ++h)
                if (m_addr[h] && m_block[h] > 0)
                    offset += m_block[h] - m_size[h];
        }
        if (m_out.peakReservedAt == kNoEvent)
            m_out.peakReserved = m_out.initialReserved;
        m_out.peakAllocated += offset;
        m_out.initialAllocated += offset;
        for (int64_t& v : m_out.allocated)
            v += offset;
    }

private:
    void seed();

    void allocate(uint32_t h, EventIndex at)
    {
        AllocResult r = m_sim.malloc(m_size[h], m_stream[h]);
        if (!r.ok) {
            if (!m_out.oom)
                noteOom(ReplayOom{at, m_size[h], r.roundedSize, r.wantedBytes, r.deviceFree, m_sim.stats().allocated,
                                  m_sim.stats().reserved, m_sim.stats().requested});
            // Go on without a limit: the rest of the run still shows what it would need.
            m_sim.setCapacity(std::nullopt);
            r = m_sim.malloc(m_size[h], m_stream[h]);
        }
        m_sim.clearEvents();
        ++m_out.replayedAllocations;
        if (!r.ok)
            return;
        m_addr[h] = r.addr;
        m_block[h] = r.blockSize;
        const size_t p = size_t(m_pool[h]);
        m_pools[p] += m_size[h];
        if (m_pools[p] > m_out.poolPeaks[p])
            m_out.poolPeaks[p] = m_pools[p];
    }

    void release(uint32_t h)
    {
        m_sim.freeCompleted(m_addr[h]); // also completes a block whose free was never requested
        m_sim.clearEvents();
        m_addr[h] = 0;
        m_pools[size_t(m_pool[h])] -= m_size[h];
    }

    void runOp(const Op& op)
    {
        if (op.alloc) {
            if (!m_addr[op.handle])
                allocate(op.handle, op.at);
        } else if (m_addr[op.handle]) {
            release(op.handle);
        }
    }

    void tryRecordedOom(EventIndex at, int64_t size, int64_t stream)
    {
        if (!m_sim.capacity())
            return;
        AllocResult r = m_sim.malloc(size, stream);
        m_sim.clearEvents();
        if (r.ok) {
            m_sim.free(r.addr);
            m_sim.clearEvents();
        } else if (!m_out.oom) {
            noteOom(ReplayOom{at, size, r.roundedSize, r.wantedBytes, r.deviceFree, m_sim.stats().allocated, m_sim.stats().reserved,
                              m_sim.stats().requested});
        }
    }

    // The first OOM, with the layout the allocator was left with after its cache flush.
    void noteOom(const ReplayOom& oom)
    {
        m_out.oom = oom;
        m_out.fragmentationDetail = fragmentationOf(m_sim.segments(), oom.roundedSize);
        m_out.fragmentationDetail.source = "the replay at the OOM (event " + std::to_string(oom.index) + "), after the cache flush";
    }

    const DeviceTrace& m_dev;
    const TraceModel& m_model;
    const Plan& m_plan;
    AllocatorConfig m_config;
    CachingAllocatorSim m_sim;
    WhatIfResult& m_out;
    std::vector<uint64_t> m_addr;
    std::vector<int64_t> m_block; // block size of what the replay allocated (0: seeded, or not live)
    std::vector<int64_t> m_size;
    std::vector<Pool> m_pool;
    std::vector<int64_t> m_stream;
    std::vector<Op> m_ops; // after the event's own operation
    PoolBytes m_pools{};
    int64_t m_seededRequested = 0; // requested bytes of the recorded initial state, as the trace has it
};

// The allocator state when recording began (as core/allocator/replay.cpp reconstructs it): the
// segments no segment_alloc created, holding the allocations made before recording. A segment
// whose allocations the scenario changes is not seeded: its allocations are requested afresh.
void PlanReplayer::seed()
{
    std::vector<SeedSegment> segs;
    segs.reserve(m_model.initialSegments.size());
    for (const auto& seg : m_model.initialSegments)
        segs.push_back({&seg, true, {}, {}});
    std::vector<uint32_t> fresh; // pre-existing allocations requested anew, in address order
    for (size_t a = 0; a < m_dev.allocations.size(); ++a) {
        const Allocation& al = m_dev.allocations[a];
        if (!al.preexisting())
            continue;
        m_seededRequested += al.size;
        auto it = std::upper_bound(segs.begin(), segs.end(), al.address,
                                   [](uint64_t addr, const SeedSegment& s) { return addr < s.segment->addr; });
        if (it == segs.begin() || al.address >= std::prev(it)->segment->addr + uint64_t(std::prev(it)->segment->size)) {
            fresh.push_back(uint32_t(a));
            continue;
        }
        SeedSegment& s = *std::prev(it);
        const int64_t block = al.blockSize != al.size ? al.blockSize : std::max(al.blockSize, roundSize(m_config, al.size));
        s.blocks.push_back({al.address, block, al.size});
        s.handles.push_back(uint32_t(a));
        if (m_size[a] != al.size || m_plan.earlyFree[a] != kNoEvent)
            s.keep = false;
    }
    for (auto& s : segs) {
        if (!s.keep) {
            fresh.insert(fresh.end(), s.handles.begin(), s.handles.end());
            continue;
        }
        std::vector<size_t> order(s.blocks.size());
        for (size_t k = 0; k < order.size(); ++k)
            order[k] = k;
        std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return s.blocks[x].addr < s.blocks[y].addr; });
        std::vector<ExistingBlock> blocks;
        for (size_t k = 0; k < order.size(); ++k) {
            ExistingBlock b = s.blocks[order[k]];
            const uint64_t limit = k + 1 < order.size() ? s.blocks[order[k + 1]].addr : s.segment->addr + uint64_t(s.segment->size);
            b.size = std::min<int64_t>(b.size, int64_t(limit - b.addr));
            blocks.push_back(b);
        }
        const auto& seg = *s.segment;
        if (m_sim.addExistingSegment(seg.addr, seg.size, seg.stream, seg.small, blocks)) {
            for (size_t k = 0; k < order.size(); ++k) {
                const uint32_t h = s.handles[order[k]];
                m_addr[h] = s.blocks[order[k]].addr;
                m_pools[size_t(m_pool[h])] += m_size[h];
            }
        } else {
            m_out.allocatorWarnings.push_back("could not seed the segment at " + std::to_string(seg.addr));
            fresh.insert(fresh.end(), s.handles.begin(), s.handles.end());
        }
    }
    std::sort(fresh.begin(), fresh.end(),
              [&](uint32_t x, uint32_t y) { return m_dev.allocations[x].address < m_dev.allocations[y].address; });
    for (uint32_t h : fresh)
        if (m_size[h] > 0)
            allocate(h, kNoEvent);
    m_sim.clearEvents();
    m_out.poolPeaks = m_pools;
    m_out.poolsAtPeak = m_pools;
}

} // namespace

std::optional<int64_t> recordedCapacity(const DeviceTrace& dev)
{
    if (dev.ooms.empty())
        return std::nullopt;
    const OomEvent& o = dev.ooms.back();
    if (o.deviceFree < 0)
        return std::nullopt;
    return dev.reservedAt(o.index) + o.deviceFree;
}

WhatIfResult replayPlan(const Trace& trace, const DeviceTrace& dev, const TraceModel& model, const Plan& plan,
                        const Scenario& scenario, const WhatIfOptions& options)
{
    WhatIfResult out;
    out.scenario = scenario;
    out.device = dev.label();
    out.events = int64_t(dev.eventCount());
    out.identity = plan.identity; // cleared below when the allocator changed
    out.recordedOom = !dev.ooms.empty();
    if (scenario.capacity) {
        out.capacity = scenario.capacity;
        out.capacitySource = "--capacity";
    } else if (auto c = recordedCapacity(dev)) {
        out.capacity = c;
        out.capacitySource = "the recorded OOM (reserved + free device memory)";
    }
    std::vector<std::string> notes;
    AllocatorConfig config = allocatorConfigFromSettings(trace.allocatorSettings, &notes);
    const AllocatorConfig recorded = config;
    out.allocatorSettingsRecorded = !trace.allocatorSettings.empty();
    out.allocatorBaseline = describeAllocConf(config) +
                            (out.allocatorSettingsRecorded ? " (the run's allocator_settings)"
                                                           : " (assumed: the dump does not record allocator_settings)");
    if (!scenario.allocConf.empty()) {
        std::vector<std::string> ignored;
        if (const std::string problem = applyAllocConfStrict(config, scenario.allocConf, &ignored); !problem.empty())
            notes.push_back("--alloc-conf: " + problem + "; replayed with the run's own settings");
        for (const auto& key : ignored)
            notes.push_back(key + " does not change where blocks land; not simulated");
    }
    out.allocatorChanged = !(config == recorded);
    out.allocatorReplayed = describeAllocConf(config);
    if (config.gcThreshold > 0) {
        if (out.capacity)
            notes.push_back("garbage_collection_threshold acts only after torch.cuda.set_per_process_memory_fraction(); "
                            "the replay assumes the fraction allows " + formatBytes(*out.capacity));
        else
            notes.push_back("garbage_collection_threshold needs the allowed memory (--capacity): not simulated");
    }
    if (out.capacity)
        config.deviceTotalMemory = *out.capacity;
    const auto t0 = std::chrono::steady_clock::now();
    PlanReplayer replayer(dev, model, plan, config, out.capacity, out);
    replayer.run(options);
    if (out.allocatorChanged)
        out.identity = false;
    out.replayUs = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    out.allocatorWarnings.insert(out.allocatorWarnings.end(), notes.begin(), notes.end());
    return out;
}

} // namespace poolscope
