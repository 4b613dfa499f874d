// Pool series: bytes per pool after every event, exact against the trace's own allocated totals,
// checked against a brute-force recount, with the rounding-slack remainder where the header says.
#include "core/classify/shipped_rules.h"
#include "training_trace.h"

#include "core/classify/agreement.h"
#include "core/classify/classifier.h"
#include "core/classify/pool_peaks.h"
#include "core/classify/pool_series.h"
#include "core/model/trace_builder.h"

#include <QtTest>

#include <algorithm>
#include <atomic>
#include <random>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

const RuleSet& defaultRules() { return poolscope::testing::shippedRules(); }

// A random trace: allocations and frees at random, some alive before recording (final-segment blocks
// with rounding slack), random pools. Addresses are reused.
struct RandomTrace {
    Trace trace;
    Classification c;
};

RandomTrace randomTrace(size_t events, uint64_t seed, bool withSegments)
{
    RandomTrace r;
    r.trace.devices.emplace_back();
    DeviceTrace& d = r.trace.devices.back();
    std::mt19937_64 rng(seed);
    std::vector<std::pair<uint64_t, int64_t>> live;
    std::vector<uint64_t> freeAddrs;
    uint64_t next = 0x10000;
    // Blocks alive before recording: some stay, some get freed (orphan frees), with slack.
    std::vector<std::pair<uint64_t, int64_t>> before;
    for (int i = 0; i < 20; ++i) {
        const int64_t size = int64_t(rng() % (4 << 20)) + 1;
        before.push_back({next, size});
        next += uint64_t(size) + (1 << 22);
    }
    for (size_t i = 0; i < events; ++i) {
        const bool doAlloc = live.empty() || rng() % 100 < 55;
        if (doAlloc) {
            uint64_t addr;
            if (!freeAddrs.empty() && rng() % 2) {
                addr = freeAddrs.back();
                freeAddrs.pop_back();
            } else {
                addr = next;
                next += 1 << 24;
            }
            const int64_t size = int64_t(rng() % (8 << 20)) + 1;
            d.events.push(Action::Alloc, addr, size, 0, kNoTime, StackId{});
            live.push_back({addr, size});
        } else if (!before.empty() && rng() % 10 == 0) {
            auto [addr, size] = before.back();
            before.pop_back();
            d.events.push(Action::FreeRequested, addr, size, 0, kNoTime, StackId{});
            d.events.push(Action::FreeCompleted, addr, size, 0, kNoTime, StackId{});
        } else {
            const size_t k = rng() % live.size();
            auto [addr, size] = live[k];
            live[k] = live.back();
            live.pop_back();
            d.events.push(Action::FreeRequested, addr, size, 0, kNoTime, StackId{});
            if (rng() % 3)
                d.events.push(Action::FreeCompleted, addr, size, 0, kNoTime, StackId{});
            else {
                live.push_back({addr, size}); // requested but not yet completed: still allocated
                continue;
            }
            freeAddrs.push_back(addr);
        }
    }
    if (withSegments) {
        auto block = [&](uint64_t addr, int64_t size, int64_t slack) {
            Segment s;
            s.address = addr;
            s.totalSize = (size + 511) / 512 * 512 + slack;
            Block b;
            b.address = addr;
            b.size = s.totalSize;
            b.requestedSize = size;
            b.state = BlockState::ActiveAllocated;
            s.blocks.push_back(b);
            d.segments.push_back(s);
        };
        for (auto [addr, size] : live)
            block(addr, size, int64_t(rng() % 3) * 512);
        for (auto [addr, size] : before)
            block(addr, size, 0);
    }
    finalizeDevice(d, r.trace.warnings);
    if (!withSegments && d.initialAllocated != d.orphanFreeBytes) {
        // What the profiler readers do without final segments: start from the bytes freed but never
        // allocated (finalizeDevice alone starts from zero, and the total could dip below it).
        const int64_t shift = d.orphanFreeBytes - d.initialAllocated;
        for (auto& v : d.allocated)
            v += shift;
        d.initialAllocated += shift;
    }
    r.c.pool.resize(d.allocations.size());
    for (auto& p : r.c.pool)
        p = Pool(rng() % kAllocationPoolCount);
    return r;
}

void checkExact(const DeviceTrace& d, const Classification& c, const PoolSeries& s)
{
    QCOMPARE(s.eventCount(), d.eventCount());
    QCOMPARE(allocatedBytes(s.at(kNoEvent)), d.initialAllocated);
    for (size_t i = 0; i < d.eventCount(); ++i) {
        const PoolBytes b = s.at(EventIndex(i));
        if (allocatedBytes(b) != d.allocated[i])
            QFAIL(qPrintable(QString("event %1: pools sum to %2, allocated is %3").arg(i).arg(allocatedBytes(b)).arg(d.allocated[i])));
        for (size_t p = 0; p < kPoolCount; ++p)
            if (b[p] < 0)
                QFAIL(qPrintable(QString("event %1: pool %2 negative").arg(i).arg(p)));
        QCOMPARE(b[size_t(Pool::CachedFree)], std::max<int64_t>(0, d.reserved[i] - d.allocated[i]));
    }
    // Per-pool peaks are the maxima of the columns.
    for (size_t p = 0; p < kPoolCount; ++p) {
        int64_t best = s.bytes(Pool(p), kNoEvent);
        for (size_t i = 0; i < d.eventCount(); ++i)
            best = std::max(best, s.bytes(Pool(p), EventIndex(i)));
        QCOMPARE(s.peak()[p], best);
        QCOMPARE(s.bytes(Pool(p), s.peakIndex(Pool(p))), best);
        bool holds = s.bytes(Pool(p), kNoEvent) != 0;
        for (size_t i = 0; i < d.eventCount() && !holds; ++i)
            holds = s.bytes(Pool(p), EventIndex(i)) != 0;
        QCOMPARE(s.holdsBytes(Pool(p)), holds);
    }
    (void)c;
}

// Everything a series says, compared: what one scan and two halves (or a stock) must agree on.
void checkPeaks(const DeviceTrace& d, const Classification& c)
{
    const PoolSeries s = computePoolSeries(d, c);
    // Once as one scan and once in two halves, whatever the trace's length.
    for (const size_t twoThreadsFrom : {SIZE_MAX, size_t(0)}) {
        const PoolPeakScan peaks = computePoolPeaks(d, c, twoThreadsFrom);
        for (size_t p = 0; p < kPoolCount; ++p) {
            const QString what = QString::fromUtf8(poolName(Pool(p)).data());
            QVERIFY2(peaks.initial[p] == s.initial()[p], qPrintable(what));
            QVERIFY2(peaks.peak[p] == s.peak()[p], qPrintable(QStringLiteral("%1: %2 vs %3").arg(what).arg(peaks.peak[p]).arg(s.peak()[p])));
            QVERIFY2(peaks.peakIndex[p] == s.peakIndex(Pool(p)), qPrintable(QStringLiteral("%1: event %2 vs %3").arg(what).arg(peaks.peakIndex[p]).arg(s.peakIndex(Pool(p)))));
        }
    }
}

void checkSame(const DeviceTrace& d, const PoolSeries& a, const PoolSeries& b)
{
    QCOMPARE(a.eventCount(), b.eventCount());
    QCOMPARE(a.initial(), b.initial());
    QCOMPARE(a.peak(), b.peak());
    QCOMPARE(a.maxRemainder(), b.maxRemainder());
    for (size_t p = 0; p < kPoolCount; ++p) {
        QCOMPARE(a.peakIndex(Pool(p)), b.peakIndex(Pool(p)));
        QCOMPARE(a.holdsBytes(Pool(p)), b.holdsBytes(Pool(p)));
        QCOMPARE(a.column(Pool(p)).size(), b.column(Pool(p)).size());
        if (a.column(Pool(p)) != b.column(Pool(p)))
            QFAIL(qPrintable(QString("pool %1: the columns differ").arg(p)));
    }
    for (EventIndex i = kNoEvent; i < EventIndex(d.eventCount()); ++i)
        if (a.remainder(i) != b.remainder(i))
            QFAIL(qPrintable(QString("event %1: remainder %2 vs %3").arg(i).arg(a.remainder(i)).arg(b.remainder(i))));
}

PoolSeries oneScan(const DeviceTrace& d, const Classification& c)
{
    return computePoolSeries(d, c, PoolSeriesOptions{.twoThreadsFrom = SIZE_MAX});
}

} // namespace

class TestPoolSeries : public QObject {
    Q_OBJECT
private slots:
    void exactOnSyntheticTraining()
    {
        TrainingOptions o;
        o.steps = 3;
        const TrainingTrace t = makeTrainingTrace(o);
        const DeviceTrace& d = t.trace->devices[0];
        const Classification c = classify(*t.trace, d, defaultRules());
        const PoolSeries s = computePoolSeries(d, c);
        checkExact(d, c, s);
        QCOMPARE(s.maxRemainder(), int64_t(0)); // no rounding slack here: every pool is its allocations
        // A pool no allocation has (and not the remainder's, other) keeps no column: bytes() says 0.
        int unused = 0;
        for (size_t p = 0; p < kAllocationPoolCount; ++p) {
            const bool has = std::find(c.pool.begin(), c.pool.end(), Pool(p)) != c.pool.end();
            QCOMPARE(s.column(Pool(p)).size(), has || Pool(p) == Pool::Other ? d.eventCount() : size_t(0));
            unused += !has && Pool(p) != Pool::Other;
        }
        QVERIFY(unused > 0); // the training trace leaves some pool empty, or the check above proves nothing
        QCOMPARE(s.column(Pool::CachedFree).size(), d.eventCount());
        // Brute force: bytes of each pool alive after every event.
        for (size_t i = 0; i < d.eventCount(); i += 7) {
            PoolBytes expect{};
            for (size_t a = 0; a < d.allocations.size(); ++a) {
                const Allocation& al = d.allocations[a];
                if (al.aliveAfter(EventIndex(i)))
                    expect[size_t(c.pool[a])] += al.size;
            }
            for (size_t p = 0; p < kAllocationPoolCount; ++p)
                QCOMPARE(s.bytes(Pool(p), EventIndex(i)), expect[p]);
        }
        // The optimizer state exists only after the first step begins.
        QCOMPARE(s.bytes(Pool::OptimizerState, kNoEvent), int64_t(0));
        QVERIFY(s.peak()[size_t(Pool::OptimizerState)] > 0);
    }

    void exactOnRandomTraces_data()
    {
        QTest::addColumn<int>("seed");
        QTest::addColumn<bool>("segments");
        for (int seed = 1; seed <= 6; ++seed)
            QTest::addRow("seed %d%s", seed, seed % 2 ? "" : ", no segments") << seed << (seed % 2 == 1);
    }
    void exactOnRandomTraces()
    {
        QFETCH(int, seed);
        QFETCH(bool, segments);
        const RandomTrace r = randomTrace(3000, uint64_t(seed), segments);
        const DeviceTrace& d = r.trace.devices[0];
        const PoolSeries s = computePoolSeries(d, r.c);
        checkExact(d, r.c, s);
        if (segments) {
            // The remainder is rounding slack of blocks alive at the end: never negative, and it
            // only shrinks as those blocks are born.
            for (size_t i = 1; i < d.eventCount(); ++i)
                QVERIFY(s.remainder(EventIndex(i)) <= s.remainder(EventIndex(i) - 1));
            QCOMPARE(s.remainder(EventIndex(d.eventCount()) - 1), int64_t(0));
        }
    }

    // One moment without the series (what `ranks` asks): the series' own numbers, pool for pool, at
    // every kind of moment, with and without segments (whose remainder goes to other pools).
    void oneMomentWithoutTheSeries_data() { exactOnRandomTraces_data(); }
    void oneMomentWithoutTheSeries()
    {
        QFETCH(int, seed);
        QFETCH(bool, segments);
        const RandomTrace r = randomTrace(3000, uint64_t(seed), segments);
        const DeviceTrace& d = r.trace.devices[0];
        const PoolSeries s = computePoolSeries(d, r.c);
        for (EventIndex i = -1; i < EventIndex(d.eventCount()); i += (i < 20 ? 1 : 37)) {
            const PoolBytes one = poolsAtEvent(d, r.c, i);
            for (size_t p = 0; p < kPoolCount; ++p)
                QVERIFY2(one[p] == s.bytes(Pool(p), i), qPrintable(QStringLiteral("event %1 pool %2: %3 vs %4")
                                                                        .arg(i).arg(QString::fromUtf8(poolName(Pool(p)).data())).arg(one[p]).arg(s.bytes(Pool(p), i))));
        }
    }

    // Each pool's peak without the series (what `report` keeps): the series' own peaks, their first
    // events and the initial state, pool for pool.
    void peaksWithoutTheSeries_data() { exactOnRandomTraces_data(); }
    void peaksWithoutTheSeries()
    {
        QFETCH(int, seed);
        QFETCH(bool, segments);
        const RandomTrace r = randomTrace(3000, uint64_t(seed), segments);
        checkPeaks(r.trace.devices[0], r.c);
    }

    // A live address allocated again (its free lost): the older allocation closes at the newer one's
    // alloc, an event whose eventAlloc names the newer one. The peaks still count that close.
    void peaksWhereALiveAddressIsReused()
    {
        Trace t;
        t.devices.emplace_back();
        DeviceTrace& d = t.devices.back();
        d.events.push(Action::Alloc, 0x1000, 5000, 0, kNoTime, StackId{});
        d.events.push(Action::Alloc, 0x2000, 100, 0, kNoTime, StackId{});
        d.events.push(Action::Alloc, 0x1000, 3000, 0, kNoTime, StackId{}); // 0x1000 again, never freed
        d.events.push(Action::Alloc, 0x3000, 2500, 0, kNoTime, StackId{});
        finalizeDevice(d, t.warnings);
        QCOMPARE(d.allocations[0].freeCompletedEvent, EventIndex(2));
        Classification c;
        c.pool = {Pool::Activation, Pool::Parameter, Pool::Activation, Pool::Activation};
        checkPeaks(d, c);
        QCOMPARE(computePoolPeaks(d, c).peak[size_t(Pool::Activation)], int64_t(5500)); // 3000 + 2500, after 5000 closed
    }

    // Slack of a block alive at the end follows its allocation from birth; before that it sits in
    // `other`, and the end state is block-exact.
    void slackRemainder()
    {
        Trace t;
        t.devices.emplace_back();
        DeviceTrace& d = t.devices.back();
        d.events.push(Action::Alloc, 0x1000, 1000, 0, kNoTime, StackId{});
        d.events.push(Action::Alloc, 0x9000, 3000, 0, kNoTime, StackId{});
        d.events.push(Action::FreeRequested, 0x9000, 3000, 0, kNoTime, StackId{});
        d.events.push(Action::FreeCompleted, 0x9000, 3000, 0, kNoTime, StackId{});
        Segment s;
        s.address = 0x1000;
        s.totalSize = 2 << 20;
        s.blocks.push_back(Block{0x1000, 1536, 1000, BlockState::ActiveAllocated, StackId{}});
        s.blocks.push_back(Block{0x1600, 4096, 4096, BlockState::ActiveAllocated, StackId{}}); // pre-existing
        d.segments.push_back(s);
        finalizeDevice(d, t.warnings);
        Classification c;
        c.pool.resize(d.allocations.size(), Pool::Activation);
        c.pool[0] = Pool::Parameter; // the pre-existing block sorts first
        const PoolSeries ps = computePoolSeries(d, c);
        QCOMPARE(d.initialAllocated, int64_t(4096 + 536));
        QCOMPARE(ps.bytes(Pool::Parameter, kNoEvent), int64_t(4096));
        QCOMPARE(ps.bytes(Pool::Other, kNoEvent), int64_t(536));
        QCOMPARE(ps.remainder(kNoEvent), int64_t(536));
        QCOMPARE(ps.bytes(Pool::Activation, 0), int64_t(1536)); // born with its slack
        QCOMPARE(ps.bytes(Pool::Other, 0), int64_t(0));
        QCOMPARE(ps.bytes(Pool::Activation, 1), int64_t(4536));
        QCOMPARE(ps.bytes(Pool::Activation, 3), int64_t(1536));
        QCOMPARE(ps.bytes(Pool::CachedFree, 3), int64_t(2 << 20) - 4096 - 1536);
    }

    // Without final segments (profiler traces) the part of the initial total that no allocation
    // accounts for goes where the rules put untracked memory.
    void untrackedMemoryWithoutSegments()
    {
        Trace t;
        t.devices.emplace_back();
        DeviceTrace& d = t.devices.back();
        d.events.push(Action::Alloc, 0x1000, 1 << 20, 0, kNoTime, StackId{});
        finalizeDevice(d, t.warnings);
        // What a Kineto reader does: anchor on the profiler's Total Allocated.
        d.initialAllocated += 64 << 20;
        for (auto& v : d.allocated)
            v += 64 << 20;
        const Classification c = classify(t, d, defaultRules());
        QCOMPARE(c.untrackedBytes, int64_t(64 << 20));
        QCOMPARE(c.untrackedPool, Pool::Parameter);
        QCOMPARE(c.rules[c.untrackedRule].name, std::string("preexisting-alive"));
        QVERIFY(c.untrackedConfidence > 0 && c.untrackedConfidence < 50); // only a total: a guess
        const PoolSeries s = computePoolSeries(d, c);
        QCOMPARE(s.bytes(Pool::Parameter, kNoEvent), int64_t(64 << 20));
        QCOMPARE(allocatedBytes(s.at(0)), d.allocated[0]);
    }

    void emptyDevice()
    {
        Trace t;
        t.devices.emplace_back();
        finalizeDevice(t.devices.back(), t.warnings);
        const Classification c = classify(t, t.devices.back(), defaultRules());
        const PoolSeries s = computePoolSeries(t.devices.back(), c);
        QCOMPARE(s.eventCount(), size_t(0));
        QCOMPARE(allocatedBytes(s.at(kNoEvent)), int64_t(0));
    }

    // PyTorch's own categories, where a trace has them: agreement by bytes, with the confusion.
    void agreementWithProfilerCategories()
    {
        const TrainingTrace t = makeTrainingTrace(TrainingOptions{});
        auto trace = std::make_shared<Trace>(*t.trace);
        DeviceTrace& d = trace->devices[0];
        const Classification c = classify(*trace, d, defaultRules());
        QVERIFY(!categoryAgreement(d, c).available());
        int64_t total = 0, agreeing = 0;
        for (size_t i = 0; i < d.allocations.size(); ++i) {
            // PyTorch's opinion: the truth, except that it calls activation gradients AUTOGRAD_DETAIL
            // and that it disagrees about every fifth allocation.
            ProfilerCategory cat = ProfilerCategory::Unknown;
            switch (t.truth[i]) {
            case Pool::Parameter: cat = ProfilerCategory::Parameter; break;
            case Pool::Gradient: cat = ProfilerCategory::Gradient; break;
            case Pool::OptimizerState: cat = ProfilerCategory::OptimizerState; break;
            case Pool::Activation: cat = ProfilerCategory::Activation; break;
            case Pool::Temporary: cat = ProfilerCategory::AutogradDetail; break;
            case Pool::Input: cat = ProfilerCategory::Input; break;
            default: break;
            }
            if (i % 5 == 0)
                cat = ProfilerCategory::Unknown;
            d.allocations[i].category = cat;
            total += d.allocations[i].size;
            if (poolOfCategory(cat) == c.pool[i])
                agreeing += d.allocations[i].size;
        }
        const CategoryAgreement a = categoryAgreement(d, c);
        QVERIFY(a.available());
        QCOMPARE(a.comparedAllocations, d.allocations.size());
        QCOMPARE(a.comparedBytes, total);
        QCOMPARE(a.agreedBytes, agreeing);
        QVERIFY(a.share() > 0.5 && a.share() < 1.0);
        QVERIFY(a.summary().find("largest disagreements: unknown (PyTorch) as") != std::string::npos);
    }

    // The running sums split at the middle event, two threads each taking a half: the same series as
    // one scan, remainder, peaks (the first event reaching them, across the halves) and all.
    void twoHalvesAgreeWithOneScan_data() { exactOnRandomTraces_data(); }
    void twoHalvesAgreeWithOneScan()
    {
        QFETCH(int, seed);
        QFETCH(bool, segments);
        const RandomTrace r = randomTrace(3000, uint64_t(seed), segments);
        const DeviceTrace& d = r.trace.devices[0];
        const PoolSeries halves = computePoolSeries(d, r.c, PoolSeriesOptions{.twoThreadsFrom = 0});
        checkExact(d, r.c, halves);
        checkSame(d, oneScan(d, r.c), halves);
        if (segments) // the rounding slack of blocks born in the second half is in the remainder there
            QVERIFY(halves.remainder(EventIndex(d.eventCount() / 2 + 1)) > 0);
    }

    // A peak held from the first half into the second is the first event reaching it.
    void peakAcrossTheMiddle()
    {
        Trace t;
        t.devices.emplace_back();
        DeviceTrace& d = t.devices.back();
        d.events.push(Action::Alloc, 0x1000, 4096, 0, kNoTime, StackId{});
        d.events.push(Action::Alloc, 0x9000, 4096, 0, kNoTime, StackId{});
        d.events.push(Action::FreeRequested, 0x9000, 4096, 0, kNoTime, StackId{});
        d.events.push(Action::FreeCompleted, 0x9000, 4096, 0, kNoTime, StackId{});
        d.events.push(Action::Alloc, 0x9000, 4096, 0, kNoTime, StackId{}); // back to the peak
        d.events.push(Action::FreeRequested, 0x9000, 4096, 0, kNoTime, StackId{});
        finalizeDevice(d, t.warnings);
        Classification c;
        c.pool.assign(d.allocations.size(), Pool::Activation);
        const PoolSeries s = computePoolSeries(d, c, PoolSeriesOptions{.twoThreadsFrom = 0});
        QCOMPARE(s.peak()[size_t(Pool::Activation)], int64_t(8192));
        QCOMPARE(s.peakIndex(Pool::Activation), EventIndex(1));
        checkSame(d, oneScan(d, c), s);
    }

    // The halves rely on allocations sorted by allocEvent (as the builder leaves them); out of
    // order, the series is scanned once as a whole, not miscounted.
    void unsortedAllocationsFallBackToOneScan()
    {
        RandomTrace r = randomTrace(3000, 7, true);
        DeviceTrace& d = r.trace.devices[0];
        // An allocation of the first quarter moved to the end: a first half that stops where the
        // events pass the middle would never meet it.
        const size_t a = d.allocations.size() / 4;
        QVERIFY(d.allocations[a].allocEvent > kNoEvent && d.allocations[a].allocEvent < EventIndex(d.eventCount() / 2));
        std::rotate(d.allocations.begin() + ptrdiff_t(a), d.allocations.begin() + ptrdiff_t(a) + 1, d.allocations.end());
        std::rotate(r.c.pool.begin() + ptrdiff_t(a), r.c.pool.begin() + ptrdiff_t(a) + 1, r.c.pool.end());
        const PoolSeries halves = computePoolSeries(d, r.c, PoolSeriesOptions{.twoThreadsFrom = 0});
        checkExact(d, r.c, halves);
        checkSame(d, oneScan(d, r.c), halves);
    }

    // Columns made ahead (prepareTrace's second thread) serve as the series' columns; a stock of
    // another length is not used, and taking past the stock makes new zeroed columns.
    void columnsFromAStock()
    {
        const RandomTrace r = randomTrace(3000, 3, true);
        const DeviceTrace& d = r.trace.devices[0];
        ColumnStock stock(d.eventCount());
        std::atomic<bool> stop{false};
        stock.fill(3, stop);
        const PoolSeries fromStock = computePoolSeries(d, r.c, PoolSeriesOptions{.stock = &stock, .twoThreadsFrom = 0});
        QCOMPARE(stock.ready(), size_t(0)); // more pools than three columns: all taken, the rest made
        checkSame(d, oneScan(d, r.c), fromStock);

        ColumnStock other(d.eventCount() + 1);
        other.fill(2, stop);
        checkSame(d, oneScan(d, r.c), computePoolSeries(d, r.c, PoolSeriesOptions{.stock = &other}));
        QCOMPARE(other.ready(), size_t(2));
    }

    // Scale is covered here for correctness only; speed is bench_classify's to measure.
    void aMillionEvents()
    {
        const RandomTrace r = randomTrace(1000000, 42, true);
        const PoolSeries s = computePoolSeries(r.trace.devices[0], r.c);
        QVERIFY(s.eventCount() >= 1000000);
        const DeviceTrace& d = r.trace.devices[0];
        for (size_t i : {size_t(0), s.eventCount() / 2, s.eventCount() - 1})
            QCOMPARE(allocatedBytes(s.at(EventIndex(i))), d.allocated[i]);
        checkSame(d, oneScan(d, r.c), s); // past twoThreadsFrom: two halves against one scan
    }
};

QTEST_GUILESS_MAIN(TestPoolSeries)
#include "test_pool_series.moc"
