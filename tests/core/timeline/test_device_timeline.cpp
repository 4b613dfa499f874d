// Pool layers, breakdowns, capacity, moments and the segment layout of a DeviceTimeline, checked
// against plain scans over the allocations of a synthetic but self-consistent trace.
#include "core/classify/classifier.h"
#include "core/timeline/device_timeline.h"
#include "core/timeline/moment.h"
#include "core/timeline/segment_layout.h"
#include "synthetic_trace.h"

#include <QTest>

#include <random>

using namespace poolscope;
using poolscope::testing::SynthOptions;
using poolscope::testing::synthesize;

class TestDeviceTimeline : public QObject {
    Q_OBJECT
private slots:
    void unclassifiedShowsAllocatedAndCache()
    {
        auto r = synthesize(SynthOptions{.targetEvents = 3000});
        const DeviceTimeline tl(r.trace, 0);
        const auto& d = tl.device();
        QCOMPARE(tl.layers(), (std::vector<Pool>{Pool::Unknown, Pool::CachedFree}));
        for (EventIndex i = -1; i < EventIndex(d.eventCount()); ++i) {
            const Breakdown b = tl.breakdownAt(i, -1);
            QCOMPARE(b.pool[size_t(Pool::Unknown)], d.allocatedAt(i));
            QCOMPARE(b.cachedFree(), std::max<int64_t>(0, d.reservedAt(i) - d.allocatedAt(i)));
            QCOMPARE(b.reserved, d.reservedAt(i));
        }
        QVERIFY(!tl.hasTime() || tl.axis(AxisMode::WallTime).mode() == AxisMode::WallTime);
    }

    void classifiedPoolsMatchAliveSums()
    {
        auto r = synthesize(SynthOptions{.targetEvents = 4000, .seed = 3});
        const auto doc = poolscope::testing::documentOf(r);
        const DeviceTimeline& tl = doc->device(0).timeline();
        const Classification& c = *doc->device(0).classification();
        const auto& d = tl.device();
        // The real rules name the generator's pools: its frames are the ones real dumps carry.
        for (size_t a = 0; a < d.allocations.size(); ++a)
            QVERIFY2(c.pool[a] == r.truth[a], (std::to_string(a) + ": " + std::string(poolName(c.pool[a])) + " by " + c.rules[c.rule[a]].name +
                                               ", meant " + std::string(poolName(r.truth[a]))).c_str());
        QVERIFY(tl.layers().size() >= 5);
        QCOMPARE(tl.layers().back(), Pool::CachedFree);
        std::mt19937_64 rng(5);
        for (int q = 0; q < 200; ++q) {
            const EventIndex i = q == 0 ? kNoEvent : EventIndex(rng() % d.eventCount());
            std::array<int64_t, kPoolCount> want{};
            for (size_t a = 0; a < d.allocations.size(); ++a)
                if (const Allocation& al = d.allocations[a]; al.aliveAfter(i)) // a block alive at the end brings its slack
                    want[size_t(c.pool[a])] += al.size + (al.aliveAtEnd() ? std::max<int64_t>(0, al.blockSize - al.size) : 0);
            const Breakdown b = tl.breakdownAt(i, -1);
            int64_t sum = 0;
            for (Pool p : {Pool::Parameter, Pool::Gradient, Pool::OptimizerState, Pool::Activation, Pool::Temporary}) {
                QCOMPARE(b.pool[size_t(p)], want[size_t(p)]);
                sum += b.pool[size_t(p)];
            }
            // The allocator's rounding of blocks alive at the end has no owner before their births:
            // it sits in `other` (see PoolSeries), so every allocation pool together is allocated.
            QCOMPARE(sum + b.pool[size_t(Pool::Unknown)] + b.pool[size_t(Pool::Other)], d.allocatedAt(i));
        }
        QCOMPARE(tl.reasonOf(AllocId(0)), c.rules[c.rule[0]].reason);
    }

    // With the classifier's series the layers are that series, pool for pool, at every event.
    void layersFromPoolSeries()
    {
        auto r = synthesize(SynthOptions{.targetEvents = 3000, .seed = 4});
        const auto doc = poolscope::testing::documentOf(r);
        QCOMPARE(doc->deviceCount(), size_t(1));
        const DeviceDocument& dev = doc->device(0);
        QVERIFY2(dev.classification(), doc->notes().empty() ? "no classification" : doc->notes()[0].c_str());
        const PoolSeries series = computePoolSeries(dev.device(), *dev.classification());
        QVERIFY(dev.timeline().classified());
        QCOMPARE(dev.timeline().layers().back(), Pool::CachedFree);
        for (EventIndex i = -1; i < EventIndex(dev.device().eventCount()); i += 7) {
            const Breakdown b = dev.timeline().breakdownAt(i, -1);
            for (size_t p = 0; p < kPoolCount; ++p) {
                QCOMPARE(b.pool[p], series.bytes(Pool(p), i));
                QCOMPARE(dev.poolsAt(i)[p], series.bytes(Pool(p), i));
            }
            QCOMPARE(b.allocated, dev.device().allocatedAt(i));
        }
    }

    void capacityFromOom()
    {
        auto r = synthesize(SynthOptions{.targetEvents = 2000});
        const DeviceTimeline tl(r.trace, 0);
        const auto& d = tl.device();
        QCOMPARE(d.ooms.size(), size_t(1));
        // The generator's OOM asks for less than the device has free: the device had room, so a
        // limit of the process's own refused it, at most reserved + the request (OomEvent::capacity).
        QVERIFY(d.ooms[0].atProcessLimit());
        QCOMPARE(tl.oomCapacity(), d.reservedAt(d.ooms[0].index) + d.ooms[0].requestedBytes);
        const Breakdown b = tl.breakdownAt(d.ooms[0].index, tl.oomCapacity());
        QCOMPARE(b.headroom(), d.ooms[0].requestedBytes);
        // Where the device itself had no room for it: reserved + free.
        OomEvent full = d.ooms[0];
        full.deviceFree = full.requestedBytes - 1;
        QCOMPARE(full.capacity(1000), 1000 + full.deviceFree);
        auto none = synthesize(SynthOptions{.targetEvents = 2000, .oomAtEnd = false});
        QCOMPARE(DeviceTimeline(none.trace, 0).oomCapacity(), int64_t(-1));
    }

    void moments()
    {
        auto r = synthesize(SynthOptions{.targetEvents = 2000});
        const auto& d = r.trace->devices[0];
        std::string error;
        QCOMPARE(resolveMoment(d, "peak")->event, d.peakIndex);
        QCOMPARE(resolveMoment(d, "end")->event, EventIndex(d.eventCount()) - 1);
        QCOMPARE(resolveMoment(d, "oom")->event, d.ooms.back().index);
        QCOMPARE(resolveMoment(d, "17")->event, EventIndex(17));
        QCOMPARE(resolveMoment(d, "17")->label, std::string("event 17"));
        QVERIFY(!resolveMoment(d, "-3", &error));
        QVERIFY(!resolveMoment(d, "17x", &error));
        QVERIFY(error.find("expected peak, oom, end") != std::string::npos);
        QVERIFY(!resolveMoment(d, std::to_string(d.eventCount()), &error));
        auto none = synthesize(SynthOptions{.targetEvents = 500, .oomAtEnd = false});
        QVERIFY(!resolveMoment(none.trace->devices[0], "oom", &error));
        QVERIFY(error.find("no OOM") != std::string::npos);
    }

    void segmentLayoutAgreesWithSeries()
    {
        auto r = synthesize(SynthOptions{.targetEvents = 3000, .seed = 9});
        const DeviceTimeline tl(r.trace, 0);
        const auto& d = tl.device();
        std::mt19937_64 rng(11);
        for (int q = 0; q < 60; ++q) {
            const EventIndex i = q == 0 ? kNoEvent : q == 1 ? EventIndex(d.eventCount()) - 1 : EventIndex(rng() % d.eventCount());
            const SegmentLayout lay = segmentLayoutAt(d, tl.alive(), i);
            QCOMPARE(lay.reserved, d.reservedAt(i));
            QCOMPARE(lay.unplacedCount, int64_t(0));
            int64_t aliveBlocks = 0;
            for (AllocId id : tl.alive().aliveAfter(i))
                aliveBlocks += blockBytes(d.allocations[id.value]);
            QCOMPARE(lay.allocated, aliveBlocks);
            QCOMPARE(lay.freeBytes, lay.reserved - lay.allocated);
            for (const auto& s : lay.segments) {
                uint64_t at = s.address;
                for (const auto& b : s.blocks) {
                    QCOMPARE(b.address, at); // contiguous, no overlaps
                    at += uint64_t(b.size);
                }
                QCOMPARE(at, s.address + uint64_t(s.size));
            }
            QVERIFY(lay.fragmentation() >= 0 && lay.fragmentation() <= 1);
        }
    }
};

QTEST_APPLESS_MAIN(TestDeviceTimeline)
#include "test_device_timeline.moc"
