// The alive-set index against a brute-force scan, on random interval sets and on a paired trace.
#include "core/model/trace_builder.h"
#include "core/timeline/alive_index.h"

#include <QTest>

#include <algorithm>
#include <random>

using namespace poolscope;

namespace {

std::vector<uint32_t> brute(const std::vector<Allocation>& allocs, EventIndex i)
{
    std::vector<uint32_t> out;
    for (size_t a = 0; a < allocs.size(); ++a)
        if (allocs[a].aliveAfter(i))
            out.push_back(uint32_t(a));
    return out;
}

std::vector<uint32_t> sortedIds(const std::vector<AllocId>& ids)
{
    std::vector<uint32_t> out;
    for (AllocId id : ids)
        out.push_back(id.value);
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace

class TestAliveIndex : public QObject {
    Q_OBJECT
private slots:
    void randomIntervals_data()
    {
        QTest::addColumn<int>("count");
        QTest::addColumn<int>("events");
        QTest::newRow("empty") << 0 << 10;
        QTest::newRow("one") << 1 << 10;
        QTest::newRow("dense") << 500 << 50;
        QTest::newRow("sparse") << 2000 << 100000;
        QTest::newRow("many") << 20000 << 5000;
    }
    void randomIntervals()
    {
        QFETCH(int, count);
        QFETCH(int, events);
        std::mt19937_64 rng(uint64_t(count) * 7 + uint64_t(events));
        std::uniform_int_distribution<int64_t> at(-1, events - 1), len(1, events / 3 + 1), kind(0, 9);
        std::vector<Allocation> allocs(static_cast<size_t>(count));
        for (auto& a : allocs) {
            a.allocEvent = kind(rng) == 0 ? kNoEvent : at(rng);
            const int k = int(kind(rng));
            if (k < 2)
                a.freeCompletedEvent = kNoEvent; // alive at the end
            else
                a.freeCompletedEvent = std::min<int64_t>(events, std::max<int64_t>(a.allocEvent, 0) + len(rng));
        }
        const AliveIndex index(allocs);
        std::vector<EventIndex> queries{kNoEvent, 0, events - 1};
        for (int q = 0; q < 300; ++q)
            queries.push_back(at(rng));
        for (EventIndex q : queries) {
            const auto got = sortedIds(index.aliveAfter(q));
            const auto want = brute(allocs, q);
            if (got != want)
                QFAIL(qPrintable(QStringLiteral("at event %1: index has %2 alive, brute force %3").arg(q).arg(got.size()).arg(want.size())));
        }
    }

    // The usual input: allocations in allocation order (pre-existing first), as finalizeDevice makes
    // them; enough of them to cross many blocks and superblocks, short and long lifetimes mixed.
    void orderedAllocations_data()
    {
        QTest::addColumn<int>("count");
        QTest::newRow("one block") << 31;
        QTest::newRow("superblock edge") << 1025;
        QTest::newRow("many") << 50000;
    }
    void orderedAllocations()
    {
        QFETCH(int, count);
        std::mt19937_64 rng{uint64_t(count)};
        std::uniform_int_distribution<int64_t> kind(0, 99), shortLife(1, 40), longLife(100, 20000);
        std::vector<Allocation> allocs(static_cast<size_t>(count));
        int64_t t = -1;
        for (size_t a = 0; a < allocs.size(); ++a) {
            if (a >= size_t(count) / 20) // the first 5% predate recording
                t += 1 + kind(rng) % 3;
            allocs[a].allocEvent = t;
            const int64_t k = kind(rng);
            allocs[a].freeCompletedEvent = k < 5 ? kNoEvent : std::max<int64_t>(t, 0) + (k < 30 ? longLife(rng) : shortLife(rng));
        }
        const int64_t events = t + 20001;
        const AliveIndex index(allocs);
        std::uniform_int_distribution<int64_t> at(-1, events);
        std::vector<EventIndex> queries{kNoEvent, 0, t, events};
        for (int q = 0; q < 200; ++q)
            queries.push_back(at(rng));
        for (EventIndex q : queries) {
            const auto got = sortedIds(index.aliveAfter(q));
            const auto want = brute(allocs, q);
            if (got != want)
                QFAIL(qPrintable(QStringLiteral("at event %1: index has %2 alive, brute force %3").arg(q).arg(got.size()).arg(want.size())));
        }
    }

    // On a paired trace the alive sizes plus the initial residue must track allocated(i).
    void pairedTrace()
    {
        DeviceTrace d;
        auto push = [&](Action a, uint64_t addr, int64_t size) { d.events.push(a, addr, size, 0, kNoTime, StackId{}); };
        push(Action::SegmentAlloc, 0x1000, 1 << 20);
        push(Action::Alloc, 0x1000, 512);
        push(Action::Alloc, 0x1200, 1024);
        push(Action::FreeRequested, 0x1000, 512);
        push(Action::FreeCompleted, 0x1000, 512);
        push(Action::Alloc, 0x1000, 256);
        push(Action::FreeRequested, 0x9000, 4096); // allocated before recording began
        push(Action::FreeCompleted, 0x9000, 4096);
        // The final segments hold what is still alive at the end; they anchor the initial state.
        Segment seg;
        seg.address = 0x1000;
        seg.totalSize = 1 << 20;
        seg.blocks.push_back(Block{0x1000, 256, 256, BlockState::ActiveAllocated, StackId{}});
        seg.blocks.push_back(Block{0x1200, 1024, 1024, BlockState::ActiveAllocated, StackId{}});
        d.segments.push_back(seg);
        std::vector<std::string> warnings;
        finalizeDevice(d, warnings);
        const AliveIndex index(d.allocations);
        for (EventIndex i = -1; i < EventIndex(d.eventCount()); ++i) {
            int64_t sum = 0;
            for (AllocId id : index.aliveAfter(i))
                sum += d.allocations[id.value].size;
            QCOMPARE(sortedIds(index.aliveAfter(i)), brute(d.allocations, i));
            QCOMPARE(sum, d.allocatedAt(i));
        }
        QCOMPARE(index.aliveAfter(kNoEvent).size(), size_t(1)); // only the pre-existing 4 KiB
        QCOMPARE(index.aliveAfter(4).size(), size_t(2));
    }
};

QTEST_APPLESS_MAIN(TestAliveIndex)
#include "test_alive_index.moc"
