// Unit rules of the caching-allocator simulator, each checked against what
// c10/cuda/CUDACachingAllocator.cpp does for the same calls.
#include "core/allocator/caching_allocator.h"

#include <QtTest>

using namespace poolscope;

namespace {

constexpr int64_t MiB = int64_t(1) << 20;

std::vector<SimEvent> segmentEvents(const CachingAllocatorSim& sim)
{
    std::vector<SimEvent> out;
    for (const auto& e : sim.events())
        if (e.kind != SimEventKind::FreeCompleted && e.kind != SimEventKind::Oom)
            out.push_back(e);
    return out;
}

#define CHECK_INVARIANTS(sim) QCOMPARE(QString::fromStdString((sim).checkInvariants()), QString())

} // namespace

class TestCachingAllocator : public QObject {
    Q_OBJECT
private slots:
    void roundSizeRules();
    void roundSizePowerOfTwoDivisions();
    void allocationSizes();
    void configFromSnapshotSettings();
    void configFromAllocConf();
    void smallPoolPacksTwoMiBSegments();
    void largeRequestsSplitTwentyMiBSegments();
    void largeSplitNeedsMoreThanOneMiBLeft();
    void bestFitBySizeThenAddress();
    void freeMergesNeighboursAndEmptyCacheReleases();
    void streamsDoNotShareBlocks();
    void oversizeRules();
    void releaseAndRetryOnCudaMallocFailure();
    void oomReportsWantedSegment();
    void releaseAvailableFreesOneOversizeBlock();
    void crossStreamFreeWaitsForCompletion();
    void expandableSegmentsGrowAndUnmap();
    void existingSegmentsAreUsedFirst();
};

void TestCachingAllocator::roundSizeRules()
{
    AllocatorConfig c;
    QCOMPARE(roundSize(c, 0), int64_t(512));
    QCOMPARE(roundSize(c, 1), int64_t(512));
    QCOMPARE(roundSize(c, 512), int64_t(512));
    QCOMPARE(roundSize(c, 513), int64_t(1024));
    QCOMPARE(roundSize(c, 2048), int64_t(2048));
    QCOMPARE(roundSize(c, 5 * MiB + 1), 5 * MiB + 512);
    QVERIFY(isSmallRequest(roundSize(c, MiB)));
    QVERIFY(!isSmallRequest(roundSize(c, MiB + 1)));
}

void TestCachingAllocator::roundSizePowerOfTwoDivisions()
{
    AllocatorConfig c;
    c.roundupPower2Divisions.fill(4);
    // The source's own example: 1200 bytes with 4 divisions lies below 512 * 4, so plain rounding.
    QCOMPARE(roundSize(c, 1200), int64_t(1536));
    // 5 MiB + 1 lies in [4, 8) MiB, steps of 1 MiB.
    QCOMPARE(roundSize(c, 5 * MiB + 1), 6 * MiB);
    QCOMPARE(roundSize(c, 4 * MiB), 4 * MiB);     // powers of two stay
    QCOMPARE(roundSize(c, 6 * MiB), 6 * MiB);     // already on a division
    QCOMPARE(roundSize(c, 3000), int64_t(3072));  // [2048, 4096) in steps of 512
    // Divisions per interval: only sizes from 64 MiB on are rounded to 2 divisions.
    AllocatorConfig d;
    d.roundupPower2Divisions[6] = 2;
    QCOMPARE(roundSize(d, 70 * MiB), 96 * MiB);
    QCOMPARE(roundSize(d, 33 * MiB), 33 * MiB);
}

void TestCachingAllocator::allocationSizes()
{
    QCOMPARE(allocationSize(512), kSmallBuffer);
    QCOMPARE(allocationSize(MiB), kSmallBuffer);
    QCOMPARE(allocationSize(MiB + 512), kLargeBuffer);
    QCOMPARE(allocationSize(10 * MiB - 512), kLargeBuffer);
    QCOMPARE(allocationSize(10 * MiB), 10 * MiB);
    QCOMPARE(allocationSize(11 * MiB), 12 * MiB);
    QCOMPARE(allocationSize(11 * MiB + 512), 12 * MiB);
}

void TestCachingAllocator::configFromSnapshotSettings()
{
    std::map<std::string, std::string> s{
        {"PYTORCH_CUDA_ALLOC_CONF", ""},
        {"max_split_size", "-1"},
        {"expandable_segments", "False"},
        {"roundup_power2_divisions", "{'1': 0, '2': 0, '4': 0, '8': 0, '16': 0, '32': 0, '64': 0, '128': 0, "
                                     "'256': 0, '512': 0, '1024': 0, '2048': 0, '4096': 0, '8192': 0, '16384': 0, '32768': 0}"}};
    std::vector<std::string> notes;
    AllocatorConfig c = allocatorConfigFromSettings(s, &notes);
    QCOMPARE(c, AllocatorConfig{});
    QVERIFY(notes.empty());

    s["max_split_size"] = "209715200";
    s["expandable_segments"] = "True";
    s["roundup_power2_divisions"] = R"({"1": 4, "2": 4, "64": 8})";
    c = allocatorConfigFromSettings(s, &notes);
    QCOMPARE(c.maxSplitSize, 200 * MiB);
    QVERIFY(c.expandableSegments);
    QCOMPARE(c.roundupPower2Divisions[0], int64_t(4));
    QCOMPARE(c.roundupPower2Divisions[1], int64_t(4));
    QCOMPARE(c.roundupPower2Divisions[6], int64_t(8));
    QCOMPARE(c.roundupPower2Divisions[2], int64_t(0));

    s["expandable_segments"] = "maybe";
    c = allocatorConfigFromSettings(s, &notes);
    QVERIFY(!notes.empty());
}

void TestCachingAllocator::configFromAllocConf()
{
    AllocatorConfig c;
    QVERIFY(applyAllocConf(c, "max_split_size_mb:128,expandable_segments:True,roundup_power2_divisions:[256:1,512:2,>:4]"));
    QCOMPARE(c.maxSplitSize, 128 * MiB);
    QVERIFY(c.expandableSegments);
    // The first entry fills every interval below it; '>' fills from the last listed interval on,
    // that one included (CUDAAllocatorConfig::parseRoundUpPower2Divisions does exactly that).
    QCOMPARE(c.roundupPower2Divisions[0], int64_t(1));
    QCOMPARE(c.roundupPower2Divisions[8], int64_t(1));
    QCOMPARE(c.roundupPower2Divisions[9], int64_t(4));
    QCOMPARE(c.roundupPower2Divisions[10], int64_t(4));
    QCOMPARE(c.roundupPower2Divisions[15], int64_t(4));

    AllocatorConfig d;
    QVERIFY(applyAllocConf(d, "roundup_power2_divisions:8, max_split_size_mb:5"));
    QCOMPARE(d.roundupPower2Divisions[3], int64_t(8));
    QCOMPARE(d.maxSplitSize, kLargeBuffer); // raised to the 20 MiB floor like the allocator does
    AllocatorConfig e;
    QVERIFY(!applyAllocConf(e, "roundup_power2_divisions:[256:3]"));

    // An explicit snapshot field wins over the environment string.
    std::map<std::string, std::string> s{{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:64"},
                                         {"max_split_size", "-1"}};
    AllocatorConfig f = allocatorConfigFromSettings(s);
    QVERIFY(f.expandableSegments);
    QCOMPARE(f.maxSplitSize, kNoSplitLimit);
}

void TestCachingAllocator::smallPoolPacksTwoMiBSegments()
{
    CachingAllocatorSim sim(AllocatorConfig{});
    auto a = sim.malloc(100, 0);
    auto b = sim.malloc(700, 0);
    QVERIFY(a.ok && b.ok);
    QCOMPARE(a.blockSize, int64_t(512));
    QCOMPARE(b.blockSize, int64_t(1024));
    QCOMPARE(b.addr, a.addr + 512);
    auto ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(1));
    QCOMPARE(ev[0].kind, SimEventKind::SegmentAlloc);
    QCOMPARE(ev[0].size, kSmallBuffer);
    QVERIFY(ev[0].small);
    QCOMPARE(sim.stats().allocated, int64_t(1536));
    QCOMPARE(sim.stats().requested, int64_t(800));
    QCOMPARE(sim.stats().reserved, kSmallBuffer);
    // A 1 MiB request is still small: it shares the segment.
    sim.clearEvents();
    auto c = sim.malloc(MiB, 0);
    QCOMPARE(c.addr, a.addr + 1536);
    QVERIFY(segmentEvents(sim).empty());
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::largeRequestsSplitTwentyMiBSegments()
{
    CachingAllocatorSim sim(AllocatorConfig{});
    std::vector<AllocResult> r;
    for (int i = 0; i < 6; ++i)
        r.push_back(sim.malloc(4 * MiB, 0));
    // Five 4 MiB blocks fill the first 20 MiB segment (each split leaves more than 1 MiB, the last
    // fits exactly); the sixth needs a second segment.
    auto ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(2));
    QCOMPARE(ev[0].size, kLargeBuffer);
    QCOMPARE(ev[1].size, kLargeBuffer);
    for (int i = 1; i < 5; ++i)
        QCOMPARE(r[size_t(i)].addr, r[0].addr + uint64_t(i) * uint64_t(4 * MiB));
    QCOMPARE(r[4].blockSize, 4 * MiB);
    QCOMPARE(r[5].addr, ev[1].addr);
    // 10 MiB and above get a segment of their own, rounded to 2 MiB.
    sim.clearEvents();
    auto big = sim.malloc(21 * MiB, 0); // no cached block is that large
    ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(1));
    QCOMPARE(ev[0].size, 22 * MiB);
    QCOMPARE(big.blockSize, 22 * MiB); // 1 MiB would remain, which is not more than 1 MiB: no split
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::largeSplitNeedsMoreThanOneMiBLeft()
{
    CachingAllocatorSim sim(AllocatorConfig{});
    auto a = sim.malloc(19 * MiB, 0);
    QCOMPARE(a.blockSize, 20 * MiB); // exactly 1 MiB would remain: handed out whole
    QCOMPARE(sim.stats().allocated, 20 * MiB);
    auto b = sim.malloc(5 * MiB, 0);
    QVERIFY(b.addr != a.addr + uint64_t(19 * MiB));
    CachingAllocatorSim sim2(AllocatorConfig{});
    auto c = sim2.malloc(18 * MiB + 512, 0);
    QCOMPARE(c.blockSize, 18 * MiB + 512); // 2 MiB - 512 remain: split
    CHECK_INVARIANTS(sim);
    CHECK_INVARIANTS(sim2);
}

void TestCachingAllocator::bestFitBySizeThenAddress()
{
    CachingAllocatorSim sim(AllocatorConfig{});
    // Three 12 MiB segments; free 8 MiB holes of different sizes into them.
    auto s1 = sim.malloc(12 * MiB, 0);
    auto s2 = sim.malloc(12 * MiB, 0);
    auto s3 = sim.malloc(12 * MiB, 0);
    sim.free(s1.addr);
    sim.free(s2.addr);
    sim.free(s3.addr);
    auto a = sim.malloc(12 * MiB, 0); // three equal candidates: lowest address wins
    QCOMPARE(a.addr, std::min({s1.addr, s2.addr, s3.addr}));
    auto big = sim.malloc(30 * MiB, 0);
    sim.free(big.addr);
    auto small = sim.malloc(11 * MiB, 0); // 12 MiB blocks beat the 30 MiB one
    QVERIFY(small.addr != big.addr);
    QCOMPARE(small.blockSize, 12 * MiB);
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::freeMergesNeighboursAndEmptyCacheReleases()
{
    CachingAllocatorSim sim(AllocatorConfig{});
    auto a = sim.malloc(4 * MiB, 0);
    auto b = sim.malloc(4 * MiB, 0);
    auto c = sim.malloc(4 * MiB, 0);
    sim.free(b.addr);
    sim.free(a.addr);
    auto segs = sim.segments();
    QCOMPARE(segs.size(), size_t(1));
    QCOMPARE(segs[0].blocks.size(), size_t(3)); // [free 8 MiB][c][free 8 MiB]
    QCOMPARE(segs[0].blocks[0].size, 8 * MiB);
    QVERIFY(segs[0].blocks[1].allocated);
    sim.clearEvents();
    sim.emptyCache(); // split segment: not released
    QVERIFY(segmentEvents(sim).empty());
    sim.free(c.addr);
    segs = sim.segments();
    QCOMPARE(segs[0].blocks.size(), size_t(1));
    sim.emptyCache();
    auto ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(1));
    QCOMPARE(ev[0].kind, SimEventKind::SegmentFree);
    QCOMPARE(ev[0].size, kLargeBuffer);
    QCOMPARE(sim.stats().reserved, int64_t(0));
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::streamsDoNotShareBlocks()
{
    CachingAllocatorSim sim(AllocatorConfig{});
    auto a = sim.malloc(12 * MiB, 1);
    sim.free(a.addr);
    sim.clearEvents();
    auto b = sim.malloc(12 * MiB, 2);
    QVERIFY(b.addr != a.addr);
    QCOMPARE(segmentEvents(sim).size(), size_t(1));
    auto c = sim.malloc(12 * MiB, 1);
    QCOMPARE(c.addr, a.addr);
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::oversizeRules()
{
    AllocatorConfig cfg;
    cfg.maxSplitSize = 40 * MiB;
    CachingAllocatorSim sim(cfg);
    auto big = sim.malloc(50 * MiB, 0);
    auto huge = sim.malloc(80 * MiB, 0);
    sim.free(big.addr);
    sim.free(huge.addr);
    sim.clearEvents();
    // Below max_split_size: never an oversize block.
    auto r = sim.malloc(30 * MiB, 0);
    QVERIFY(r.addr != big.addr && r.addr != huge.addr);
    QCOMPARE(segmentEvents(sim).size(), size_t(1));
    // At or above: a cached block smaller than request + 20 MiB, whole (no split).
    auto o = sim.malloc(45 * MiB, 0);
    QCOMPARE(o.addr, big.addr);
    QCOMPARE(o.blockSize, 50 * MiB);
    sim.clearEvents();
    auto p = sim.malloc(58 * MiB, 0); // 80 MiB >= 58 + 20: not taken
    QVERIFY(p.addr != huge.addr);
    QCOMPARE(segmentEvents(sim).size(), size_t(1));
    auto q = sim.malloc(61 * MiB, 0); // 80 < 61 + 20: taken whole
    QCOMPARE(q.addr, huge.addr);
    QCOMPARE(q.blockSize, 80 * MiB);
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::releaseAndRetryOnCudaMallocFailure()
{
    CachingAllocatorSim sim(AllocatorConfig{}, 100 * MiB);
    auto a = sim.malloc(60 * MiB, 0);
    auto keep = sim.malloc(MiB / 2, 0); // a small segment that stays
    sim.free(a.addr);
    sim.clearEvents();
    auto b = sim.malloc(70 * MiB, 0); // 60 cached + 2 small + 70 > 100: release, then retry
    QVERIFY(b.ok);
    auto ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(2));
    QCOMPARE(ev[0].kind, SimEventKind::SegmentFree);
    QCOMPARE(ev[0].size, 60 * MiB);
    QCOMPARE(ev[1].kind, SimEventKind::SegmentAlloc);
    QCOMPARE(ev[1].size, 70 * MiB);
    QCOMPARE(sim.stats().numAllocRetries, int64_t(1));
    QCOMPARE(sim.stats().reserved, 72 * MiB);
    QVERIFY(keep.ok);
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::oomReportsWantedSegment()
{
    CachingAllocatorSim sim(AllocatorConfig{}, 100 * MiB);
    auto a = sim.malloc(70 * MiB, 0);
    QVERIFY(a.ok);
    auto b = sim.malloc(5 * MiB, 0); // fits: 20 MiB segment
    QVERIFY(b.ok);
    sim.clearEvents();
    auto c = sim.malloc(15 * MiB, 0); // the 20 MiB segment has 15 MiB left: fits without cudaMalloc
    QVERIFY(c.ok);
    auto d = sim.malloc(9 * MiB + 1, 0); // wants a 20 MiB segment, 10 MiB left on the device
    QVERIFY(!d.ok);
    QCOMPARE(d.wantedBytes, kLargeBuffer);
    QCOMPARE(d.deviceFree, 10 * MiB);
    QCOMPARE(sim.stats().numOoms, int64_t(1));
    QCOMPARE(sim.events().back().kind, SimEventKind::Oom);
    // Absurd sizes fail cleanly instead of overflowing the rounding.
    CachingAllocatorSim unlimited(AllocatorConfig{});
    QVERIFY(!unlimited.malloc(std::numeric_limits<int64_t>::max(), 0).ok);
    QVERIFY(!unlimited.malloc(std::numeric_limits<int64_t>::max() - 100, 0).ok);
    QVERIFY(!unlimited.addExistingSegment(~uint64_t(0) - 10, 1 << 20, 0, false, {}));
    CHECK_INVARIANTS(unlimited);
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::releaseAvailableFreesOneOversizeBlock()
{
    AllocatorConfig cfg;
    cfg.maxSplitSize = 40 * MiB;
    CachingAllocatorSim sim(cfg, 200 * MiB);
    auto a = sim.malloc(50 * MiB, 0);
    auto b = sim.malloc(100 * MiB, 0);
    auto pin = sim.malloc(30 * MiB, 0);
    sim.free(a.addr);
    sim.free(b.addr);
    sim.clearEvents();
    // 45 MiB: the 50 MiB block fits the oversize rule, so it is reused, nothing released.
    auto c = sim.malloc(45 * MiB, 0);
    QCOMPARE(c.addr, a.addr);
    sim.free(c.addr);
    sim.clearEvents();
    // 30 MiB (below max split): no oversize block may serve it; cudaMalloc fails (180 + 30 > 200);
    // the allocator frees the smallest oversize block that is large enough for max_split_size (50).
    auto d = sim.malloc(30 * MiB, 0);
    QVERIFY(d.ok);
    auto ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(2));
    QCOMPARE(ev[0].kind, SimEventKind::SegmentFree);
    QCOMPARE(ev[0].size, 50 * MiB);
    QCOMPARE(sim.stats().numAllocRetries, int64_t(0));
    QVERIFY(pin.ok);
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::crossStreamFreeWaitsForCompletion()
{
    CachingAllocatorSim sim(AllocatorConfig{});
    auto a = sim.malloc(12 * MiB, 0);
    QVERIFY(sim.freeRequested(a.addr));
    QCOMPARE(sim.stats().allocated, int64_t(0));
    QCOMPARE(sim.stats().active, 12 * MiB);
    auto b = sim.malloc(12 * MiB, 0);
    QVERIFY(b.addr != a.addr); // still in use by the other stream
    QVERIFY(sim.freeCompleted(a.addr));
    auto c = sim.malloc(12 * MiB, 0);
    QCOMPARE(c.addr, a.addr);
    // A cache flush synchronises outstanding frees and says so.
    QVERIFY(sim.freeRequested(c.addr));
    sim.clearEvents();
    sim.emptyCache();
    QCOMPARE(sim.events().front().kind, SimEventKind::FreeCompleted);
    QCOMPARE(sim.events().front().addr, c.addr);
    QCOMPARE(sim.events().back().kind, SimEventKind::SegmentFree);
    QVERIFY(!sim.freeCompleted(c.addr));
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::expandableSegmentsGrowAndUnmap()
{
    AllocatorConfig cfg;
    cfg.expandableSegments = true;
    cfg.deviceTotalMemory = 8LL << 30;
    CachingAllocatorSim sim(cfg);
    auto a = sim.malloc(5 * MiB, 0);
    auto ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(1));
    QCOMPARE(ev[0].kind, SimEventKind::SegmentMap);
    QCOMPARE(ev[0].size, kLargeBuffer);
    QCOMPARE(ev[0].addr, a.addr);
    sim.clearEvents();
    auto b = sim.malloc(30 * MiB, 0); // 15 MiB free after a, then one more 20 MiB page
    QCOMPARE(b.addr, a.addr + uint64_t(5 * MiB));
    ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(1));
    QCOMPARE(ev[0].addr, a.addr + uint64_t(kLargeBuffer));
    QCOMPARE(sim.stats().reserved, 40 * MiB);
    // Expandable blocks split down to 512 bytes.
    auto c = sim.malloc(4 * MiB + 512, 0);
    QCOMPARE(c.blockSize, 4 * MiB + 512);
    sim.free(a.addr);
    sim.free(b.addr);
    sim.free(c.addr);
    sim.clearEvents();
    sim.emptyCache();
    ev = segmentEvents(sim);
    QCOMPARE(ev.size(), size_t(1));
    QCOMPARE(ev[0].kind, SimEventKind::SegmentUnmap);
    QCOMPARE(ev[0].size, 40 * MiB);
    QCOMPARE(sim.stats().reserved, int64_t(0));
    CHECK_INVARIANTS(sim);
    // Small requests map 2 MiB pages.
    sim.clearEvents();
    sim.malloc(1000, 0);
    QCOMPARE(segmentEvents(sim).at(0).size, kSmallBuffer);
    CHECK_INVARIANTS(sim);
}

void TestCachingAllocator::existingSegmentsAreUsedFirst()
{
    CachingAllocatorSim sim(AllocatorConfig{});
    const uint64_t base = 0x7f0000000000ull;
    std::vector<ExistingBlock> live{{base + uint64_t(8 * MiB), 4 * MiB, 4 * MiB}};
    QVERIFY(sim.addExistingSegment(base, 20 * MiB, 0, false, live));
    QVERIFY(!sim.addExistingSegment(base + uint64_t(2 * MiB), 20 * MiB, 0, false, {})); // overlaps
    QCOMPARE(sim.stats().allocated, 4 * MiB);
    QCOMPARE(sim.stats().reserved, 20 * MiB);
    auto a = sim.malloc(6 * MiB, 0); // free holes: 8 MiB below, 8 MiB above; lowest address wins
    QCOMPARE(a.addr, base);
    QVERIFY(segmentEvents(sim).empty());
    sim.free(base + uint64_t(8 * MiB));
    CHECK_INVARIANTS(sim);
}

QTEST_GUILESS_MAIN(TestCachingAllocator)
#include "test_caching_allocator.moc"
