// Pairing and absolute reconstruction (core/model/trace_builder.h) on hand-built event streams.
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;

namespace {
constexpr int64_t MiB = int64_t(1) << 20;

struct Builder {
    DeviceTrace dev;
    int64_t t = 1000;
    Builder& ev(Action a, uint64_t addr, int64_t size)
    {
        dev.events.push(a, addr, size, 0, t++, StackId{});
        return *this;
    }
    Builder& segment(uint64_t addr, int64_t total, std::vector<Block> blocks)
    {
        Segment s;
        s.address = addr;
        s.totalSize = total;
        s.blocks = std::move(blocks);
        dev.segments.push_back(std::move(s));
        return *this;
    }
    std::vector<std::string> finish()
    {
        std::vector<std::string> w;
        finalizeDevice(dev, w);
        return w;
    }
};

Block active(uint64_t addr, int64_t size) { return Block{addr, size, size, BlockState::ActiveAllocated, {}}; }
} // namespace

class TestTraceBuilder : public QObject {
    Q_OBJECT
private slots:
    void pairsAllocFreeByAddress()
    {
        Builder b;
        b.ev(Action::SegmentAlloc, 0x1000, 20 * MiB)
            .ev(Action::Alloc, 0x1000, 4 * MiB)
            .ev(Action::Alloc, 0x2000, 1 * MiB)
            .ev(Action::FreeRequested, 0x1000, 4 * MiB)
            .ev(Action::FreeCompleted, 0x1000, 4 * MiB)
            .ev(Action::Alloc, 0x1000, 2 * MiB); // the address is reused after its free
        b.segment(0x1000, 20 * MiB, {active(0x1000, 2 * MiB), active(0x2000, 1 * MiB)});
        QVERIFY(b.finish().empty());
        const auto& d = b.dev;
        QCOMPARE(d.allocations.size(), size_t(3));
        QCOMPARE(d.allocations[0].freeRequestedEvent, EventIndex(3));
        QCOMPARE(d.allocations[0].freeCompletedEvent, EventIndex(4));
        QVERIFY(d.allocations[2].aliveAtEnd());
        QCOMPARE(d.eventAlloc[4], AllocId(0));
        QCOMPARE(d.eventAlloc[5], AllocId(2));
        QCOMPARE(d.initialAllocated, int64_t(0));
        QCOMPARE(d.peakAllocated, 5 * MiB);
        QCOMPARE(d.peakIndex, EventIndex(2));
        QCOMPARE(d.initialReserved, int64_t(0));
        QCOMPARE(d.reserved.back(), 20 * MiB);
        // Still counted between free_requested and free_completed (active, pending free).
        QCOMPARE(d.allocated[3], 5 * MiB);
        QCOMPARE(d.allocated[4], 1 * MiB);
    }

    void reconstructsWhatExistedBeforeRecording()
    {
        Builder b;
        b.ev(Action::Alloc, 0x9000, 1 * MiB)
            .ev(Action::FreeRequested, 0x5000, 3 * MiB) // allocated before recording began
            .ev(Action::FreeCompleted, 0x5000, 3 * MiB);
        b.segment(0x0, 40 * MiB, {active(0x100, 8 * MiB), active(0x9000, 1 * MiB)});
        const auto warnings = b.finish();
        const auto& d = b.dev;
        // Initially: the 8 MiB block never allocated in the trace and the 3 MiB freed in it.
        QCOMPARE(d.initialAllocated, 11 * MiB);
        QCOMPARE(d.orphanFreeBytes, 3 * MiB);
        QCOMPARE(d.allocated.back(), 9 * MiB);
        QCOMPARE(d.peakAllocated, 12 * MiB);
        QCOMPARE(d.initialReserved, 40 * MiB);
        int pre = 0;
        for (const auto& a : d.allocations)
            pre += a.preexisting();
        QCOMPARE(pre, 2);
        QVERIFY(d.allocations[0].preexisting() && d.allocations[1].preexisting()); // sorted first
        QCOMPARE(warnings.size(), size_t(1));
        QVERIFY(warnings[0].find("1 frees of addresses allocated before recording") != std::string::npos);
    }

    void doubleAllocIsWarnedAndClosed()
    {
        Builder b;
        b.ev(Action::Alloc, 0x1000, 1 * MiB).ev(Action::Alloc, 0x1000, 2 * MiB);
        const auto warnings = b.finish();
        QCOMPARE(b.dev.allocations[0].freeCompletedEvent, EventIndex(1));
        QCOMPARE(b.dev.allocated.back(), 2 * MiB);
        QCOMPARE(warnings.size(), size_t(1));
    }

    void segmentFreesBeyondFinalStateAreClamped()
    {
        Builder b;
        b.ev(Action::SegmentFree, 0x1000, 20 * MiB).ev(Action::SegmentFree, 0x2000, 20 * MiB);
        const auto warnings = b.finish();
        QCOMPARE(b.dev.initialReserved, 40 * MiB);
        QCOMPARE(b.dev.reserved.back(), int64_t(0));
        QVERIFY(warnings.empty());
    }

    // A history whose own live bytes outgrow every segment (the generated snapshot of a viewer's test
    // suite: random addresses, 250 MiB of segments, 2 GiB alive) cannot come from an allocator.
    void historyOutgrowingTheSegmentsIsNoReservedMeasurement()
    {
        Builder b;
        b.ev(Action::Alloc, 0x100000, 30 * MiB).ev(Action::Alloc, 0x9000000, 40 * MiB).ev(Action::FreeCompleted, 0x9000000, 40 * MiB);
        b.segment(0x0, 50 * MiB, {active(0x100000, 30 * MiB)});
        const auto warnings = b.finish();
        QCOMPARE(b.dev.segmentsContradicted, EventIndex(1));
        QVERIFY(!b.dev.reservedKnown());
        QVERIFY(b.dev.reservedUnknownWhy().find("event 1") != std::string::npos);
        QCOMPARE(warnings.size(), size_t(1));
        QVERIFY2(warnings[0].find("70.00 MiB") != std::string::npos && warnings[0].find("50.00 MiB") != std::string::npos, warnings[0].c_str());
    }

    // The same history where the segments hold it: no contradiction, and blocks from before recording
    // (whose rounding the initial state carries) never count against it.
    void historyInsideTheSegmentsIsConsistent()
    {
        Builder b;
        b.ev(Action::SegmentAlloc, 0x8000000, 64 * MiB)
            .ev(Action::Alloc, 0x100000, 30 * MiB)
            .ev(Action::Alloc, 0x8000000, 40 * MiB)
            .ev(Action::FreeCompleted, 0x8000000, 40 * MiB);
        b.segment(0x0, 50 * MiB, {active(0x100000, 30 * MiB), active(0x2000000, 19 * MiB)});
        b.segment(0x8000000, 64 * MiB, {});
        QVERIFY(b.finish().empty());
        QCOMPARE(b.dev.segmentsContradicted, kNoEvent);
        QVERIFY(b.dev.reservedKnown());
    }

    void oomEventsAreCollected()
    {
        Builder b;
        b.ev(Action::Alloc, 0x1000, 1 * MiB).ev(Action::Oom, 5 * MiB, 40 * MiB);
        b.finish();
        QCOMPARE(b.dev.ooms.size(), size_t(1));
        QCOMPARE(b.dev.ooms[0].index, EventIndex(1));
        QCOMPARE(b.dev.ooms[0].deviceFree, 5 * MiB);
        QCOMPARE(b.dev.ooms[0].requestedBytes, 40 * MiB);
    }
};

QTEST_APPLESS_MAIN(TestTraceBuilder)
#include "test_trace_builder.moc"
