// Where memory lives, beside what it is for: private pools (segment_pool_id: CUDA graphs, MemPool)
// and blocks pending free (active_pending_free), from the final segments.
#include "core/classify/shipped_rules.h"
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/model/trace_builder.h"
#include "core/report/verdict.h"
#include "core/timeline/alive_index.h"

#include <QtTest>

using namespace poolscope;

namespace {

const RuleSet& defaultRules() { return poolscope::testing::shippedRules(); }

constexpr int64_t kMiB = int64_t(1) << 20;

Segment segment(uint64_t addr, std::vector<std::pair<int64_t, BlockState>> blocks, int64_t pool0 = 0, int64_t pool1 = 0)
{
    Segment s;
    s.address = addr;
    s.poolId[0] = pool0;
    s.poolId[1] = pool1;
    uint64_t at = addr;
    for (const auto& [size, state] : blocks) {
        Block b;
        b.address = at;
        b.size = size;
        b.requestedSize = state == BlockState::Inactive ? 0 : size;
        b.state = state;
        s.blocks.push_back(b);
        s.totalSize += size;
        at += uint64_t(size);
    }
    return s;
}

} // namespace

class TestPrivatePools : public QObject {
    Q_OBJECT
private slots:
    // A block the program freed while another stream still used it is neither the program's nor free
    // for the allocator: it counts as allocated (PyTorch's active bytes), in `other`, not cached_free.
    void pendingFreeIsNotCachedFree()
    {
        Trace t;
        DeviceTrace d;
        d.segments.push_back(segment(0x10000000, {{4 * kMiB, BlockState::ActiveAllocated},
                                                  {6 * kMiB, BlockState::ActivePendingFree},
                                                  {10 * kMiB, BlockState::Inactive}}));
        std::vector<std::string> warnings;
        finalizeDevice(d, warnings);
        QCOMPARE(d.allocations.size(), size_t(2));
        QCOMPARE(d.initialAllocated, 10 * kMiB);
        const Classification c = classify(t, d, defaultRules());
        size_t pending = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (d.allocations[i].pendingFreeAtEnd) {
                ++pending;
                QCOMPARE(c.pool[i], Pool::Other);
                QCOMPARE(c.rules[c.rule[i]].name, std::string("pending-free-block"));
                const Explanation x = explain(t, d, c, AllocId(uint32_t(i)));
                bool said = false;
                for (const auto& e : x.evidence)
                    said = said || e.find("active_pending_free") != std::string::npos;
                QVERIFY(said);
            }
        QCOMPARE(pending, size_t(1));
        const PoolSeries s = computePoolSeries(d, c);
        QCOMPARE(s.at(kNoEvent)[size_t(Pool::CachedFree)], 10 * kMiB);
        QCOMPARE(s.at(kNoEvent)[size_t(Pool::Other)], 6 * kMiB);
    }

    // A pending block whose free_requested the trace recorded is that allocation, still alive.
    void pendingFreeSeenInTheTraceStaysItsAllocation()
    {
        Trace t;
        DeviceTrace d;
        const uint64_t a = 0x20000000;
        d.events.push(Action::SegmentAlloc, a, 20 * kMiB, 0, kNoTime, StackId{});
        d.events.push(Action::Alloc, a, 6 * kMiB, 0, kNoTime, StackId{});
        d.events.push(Action::FreeRequested, a, 6 * kMiB, 0, kNoTime, StackId{});
        d.segments.push_back(segment(a, {{6 * kMiB, BlockState::ActivePendingFree}, {14 * kMiB, BlockState::Inactive}}));
        std::vector<std::string> warnings;
        finalizeDevice(d, warnings);
        QCOMPARE(d.allocations.size(), size_t(1));
        QVERIFY(!d.allocations[0].pendingFreeAtEnd);
        QCOMPARE(d.initialAllocated, int64_t(0));
        QCOMPARE(d.allocatedAt(2), 6 * kMiB);
    }

    // Segments of a CUDA graph's own pool (N, 0) and of a user pool (0, N): each allocation knows its
    // pool, explanations and the verdict name them, and the default pool is not listed.
    void privatePoolsAreNamed()
    {
        Trace t;
        DeviceTrace d;
        d.segments.push_back(segment(0x30000000, {{8 * kMiB, BlockState::ActiveAllocated}, {12 * kMiB, BlockState::Inactive}}));
        d.segments.push_back(segment(0x40000000, {{16 * kMiB, BlockState::ActiveAllocated}, {4 * kMiB, BlockState::Inactive}}, 2, 0));
        d.segments.push_back(segment(0x50000000, {{10 * kMiB, BlockState::ActiveAllocated}, {10 * kMiB, BlockState::Inactive}}, 0, 1));
        std::vector<std::string> warnings;
        finalizeDevice(d, warnings);
        const Classification c = classify(t, d, defaultRules());
        QCOMPARE(c.privatePools.size(), size_t(3));
        std::vector<std::string> labels;
        for (size_t i = 0; i < c.size(); ++i)
            labels.push_back(c.privatePools[c.privatePoolOf(i)].label());
        std::sort(labels.begin(), labels.end());
        QCOMPARE(labels, (std::vector<std::string>{"CUDA-graph private pool (2,0)", "default pool",
                                                   "private pool (0,1) (torch.cuda.graph_pool_handle or torch.cuda.MemPool)"}));
        const std::vector<AllocId> alive = AliveIndex(d.allocations).aliveAfter(kNoEvent);
        const MomentEvidence ev = momentEvidence(c, d.allocations, alive);
        QCOMPARE(ev.privatePools.size(), size_t(2));
        QCOMPARE(ev.privatePools[0].second, 16 * kMiB); // largest first
        const PoolSeries s = computePoolSeries(d, c);
        const Verdict v = makeVerdict("In the snapshot", s.at(kNoEvent), ev);
        QVERIFY2(v.breakdown.find("; 0.02 GiB in CUDA-graph private pool (2,0); 0.01 GiB in private pool (0,1)") != std::string::npos,
                 v.breakdown.c_str());
        // No history here: said first, and the unnamed blocks are not called parameters.
        QVERIFY(v.sentence.rfind(std::string(kNoHistoryCaveat), 0) == 0);
        for (size_t i = 0; i < c.size(); ++i)
            QCOMPARE(c.pool[i], Pool::Unknown);
    }
};

QTEST_GUILESS_MAIN(TestPrivatePools)
#include "test_private_pools.moc"
