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
