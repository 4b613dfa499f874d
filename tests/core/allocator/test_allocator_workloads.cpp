// The caching-allocator simulator under whole workloads: random malloc/free/empty_cache sequences keep
// its invariants (plain, max_split_size, expandable segments), and replaying a recorded trace
// reproduces the segments PyTorch recorded. The unit rules are in test_caching_allocator.cpp.
#include "core/allocator/caching_allocator.h"
#include "core/allocator/replay.h"
#include "core/model/trace_builder.h"
#include "support/sim_recording.h"

#include <QtTest>

#include <random>

using namespace poolscope;

namespace {
constexpr int64_t MiB = int64_t(1) << 20;
} // namespace

class TestAllocatorWorkloads : public QObject {
    Q_OBJECT
private slots:
    void randomWorkloadKeepsInvariants_data();
    void randomWorkloadKeepsInvariants();
    void replayReproducesRecordedSegments();
};

void TestAllocatorWorkloads::randomWorkloadKeepsInvariants_data()
{
    QTest::addColumn<bool>("expandable");
    QTest::addColumn<qint64>("maxSplit");
    QTest::newRow("plain") << false << qint64(kNoSplitLimit);
    QTest::newRow("max_split_size") << false << qint64(64 * MiB);
    QTest::newRow("expandable") << true << qint64(kNoSplitLimit);
}

void TestAllocatorWorkloads::randomWorkloadKeepsInvariants()
{
    QFETCH(bool, expandable);
    QFETCH(qint64, maxSplit);
    AllocatorConfig cfg;
    cfg.expandableSegments = expandable;
    cfg.maxSplitSize = maxSplit;
    cfg.deviceTotalMemory = 2LL << 30;
    CachingAllocatorSim sim(cfg, int64_t(1) << 30);
    std::mt19937_64 rng(42);
    std::vector<uint64_t> live;
    std::vector<uint64_t> pending;
    int ooms = 0;
    for (int step = 0; step < 4000; ++step) {
        const int op = int(rng() % 10);
        if (op < 5 || live.empty()) {
            const int64_t sizes[] = {100, 4096, 700 * 1024, 3 * MiB, 12 * MiB + 7, 70 * MiB, 150 * MiB};
            const int64_t size = sizes[rng() % 7] + int64_t(rng() % 4096);
            auto r = sim.malloc(size, int64_t(rng() % 2));
            if (r.ok) {
                QVERIFY(r.blockSize >= roundSize(cfg, size));
                live.push_back(r.addr);
            } else {
                ++ooms;
            }
        } else if (op < 9) {
            const size_t k = rng() % live.size();
            if (rng() % 4 == 0) {
                QVERIFY(sim.freeRequested(live[k]));
                pending.push_back(live[k]);
            } else {
                sim.free(live[k]);
            }
            live.erase(live.begin() + std::ptrdiff_t(k));
        } else if (!pending.empty()) {
            QVERIFY(sim.freeCompleted(pending.back()));
            pending.pop_back();
        } else if (rng() % 8 == 0) {
            sim.emptyCache();
        }
        if (sim.stats().reserved > (int64_t(1) << 30))
            QFAIL("reserved bytes exceed the capacity");
        // Completions forced by a flush drop those addresses from the pending list.
        for (const auto& e : sim.events())
            if (e.kind == SimEventKind::FreeCompleted)
                pending.erase(std::remove(pending.begin(), pending.end(), e.addr), pending.end());
        sim.clearEvents();
        const std::string bad = sim.checkInvariants();
        if (!bad.empty())
            QFAIL(qPrintable(QString("step %1: %2").arg(step).arg(QString::fromStdString(bad))));
    }
    QVERIFY(ooms > 0); // the workload is sized to hit the capacity sometimes
    QVERIFY(sim.stats().numAllocRetries > 0);
}

void TestAllocatorWorkloads::replayReproducesRecordedSegments()
{
    // Record a workload with one simulator, write it as a trace, replay it with a fresh one.
    const uint64_t pre = 0x7f1000000000ull;
    CachingAllocatorSim sim(AllocatorConfig{});
    std::vector<ExistingBlock> params{{pre, 16 * MiB, 16 * MiB}};
    QVERIFY(sim.addExistingSegment(pre, 40 * MiB, 0, false, params));
    testing::SimRecording rec{sim};
    std::mt19937_64 rng(7);
    std::vector<std::pair<uint64_t, int64_t>> live;
    for (int step = 0; step < 600; ++step) {
        if (live.empty() || rng() % 3 != 0) {
            const int64_t size = int64_t(rng() % (30 * MiB)) + 1;
            auto r = sim.malloc(size, 0);
            rec.segmentEvents();
            rec.push(Action::Alloc, r.addr, size);
            live.emplace_back(r.addr, size);
        } else {
            const size_t k = rng() % live.size();
            sim.free(live[k].first);
            rec.push(Action::FreeRequested, live[k].first, live[k].second);
            rec.push(Action::FreeCompleted, live[k].first, live[k].second);
            live.erase(live.begin() + std::ptrdiff_t(k));
        }
    }
    std::vector<std::string> warnings;
    const DeviceTrace dev = rec.finish(warnings);
    ReplayOptions opt;
    opt.useRecordedAddresses = false; // addresses come out the same by themselves: same rules, same start
    auto r = replayDevice(dev, AllocatorConfig{}, opt);
    QVERIFY(r.comparison.recorded > 10);
    QCOMPARE(r.comparison.matched, r.comparison.recorded);
    QCOMPARE(r.comparison.simulated, r.comparison.recorded);
    QCOMPARE(r.seededSegments, int64_t(1));
    QCOMPARE(r.seededAllocations, int64_t(1));
    QCOMPARE(r.reservedMatches, r.reservedCompared);
    QCOMPARE(r.finalStats.reserved, sim.stats().reserved);
    QCOMPARE(r.finalStats.allocated, sim.stats().allocated);
    // Without the pre-recording segment the first requests need segments of their own.
    opt.seedInitialState = false;
    auto bare = replayDevice(dev, AllocatorConfig{}, opt);
    QVERIFY(bare.comparison.matched < bare.comparison.recorded || bare.comparison.simulated > bare.comparison.recorded);
    // With a capacity below what the trace needs, the replay stops at an OOM.
    opt.seedInitialState = true;
    opt.capacity = sim.stats().peakReserved / 2; // live bytes only grow in this workload
    auto tight = replayDevice(dev, AllocatorConfig{}, opt);
    QVERIFY(tight.oom.has_value());
    QCOMPARE(tight.stoppedAt, tight.oom->index);
    QVERIFY(tight.oom->reserved <= *opt.capacity);
    QCOMPARE(tight.allocated.size(), size_t(tight.oom->index));
    // Going on past failures: failed requests are skipped, their frees touch nothing, and the
    // simulator never holds more than the capacity.
    opt.stopAtOom = false;
    auto onward = replayDevice(dev, AllocatorConfig{}, opt);
    QCOMPARE(onward.stoppedAt, kNoEvent);
    QCOMPARE(onward.oom->index, tight.oom->index);
    QCOMPARE(onward.reserved.size(), dev.eventCount());
    for (int64_t v : onward.reserved)
        QVERIFY(v <= *opt.capacity);
    QVERIFY(onward.finalStats.numOoms > 1);
}

QTEST_GUILESS_MAIN(TestAllocatorWorkloads)
#include "test_allocator_workloads.moc"
