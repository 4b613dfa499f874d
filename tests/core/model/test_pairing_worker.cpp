// Pairing on a second thread while entries are still appended (core/model/pairing_worker.h) gives
// exactly what finalizeDevice gives afterwards: on a hand-made stream full of oddities, published in
// uneven batches with the columns reallocating under the protocol, and on a whole synthetic dump
// loaded both ways.
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/model/pairing_worker.h"
#include "core/synth/synth.h"
#include "core/util/load_error.h"

#include <QtTest>

#include <fstream>
#include <random>

using namespace poolscope;

namespace {

// A stream with everything finalizeDevice counts: reused live addresses, frees of addresses never
// allocated, double frees, completed frees without a request, segment events, OOMs, times going
// backwards and one impossible time.
EventColumns oddStream(size_t n, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    EventColumns ev;
    int64_t t = 1'700'000'000'000'000;
    for (size_t i = 0; i < n; ++i) {
        const uint64_t addr = 0x7f0000000000ull + (rng() % 512) * 4096;
        const int64_t size = int64_t(rng() % (1 << 22)) + 512;
        Action a;
        switch (rng() % 10) {
        case 0: case 1: case 2: case 3: a = Action::Alloc; break;
        case 4: case 5: a = Action::FreeRequested; break;
        case 6: case 7: a = Action::FreeCompleted; break;
        case 8: a = rng() % 2 ? Action::SegmentAlloc : Action::SegmentFree; break;
        default: a = rng() % 4 == 0 ? Action::Oom : Action::Snapshot; break;
        }
        t += int64_t(rng() % 50) - 5; // now and then earlier than the entry before
        const int64_t time = i == n / 3 ? (int64_t(1) << 60) : t;
        ev.push(a, addr, size, int64_t(rng() % 2), time, StackId(uint32_t(rng() % 7)));
    }
    return ev;
}

DeviceTrace withSegments(EventColumns ev)
{
    DeviceTrace d;
    d.device = 0;
    d.events = std::move(ev);
    Segment s;
    s.address = 0x7f0000000000ull;
    s.totalSize = int64_t(1) << 31;
    s.blocks.push_back(Block{0x7f0000000000ull, 4096, 4096, BlockState::ActiveAllocated, StackId{}});
    s.blocks.push_back(Block{0x7f0000100000ull, 8192, 8192, BlockState::ActiveAllocated, StackId{}});
    d.segments.push_back(std::move(s));
    return d;
}

// Every field finalizeDevice sets, compared; the first difference named.
QString differences(const DeviceTrace& a, const DeviceTrace& b)
{
    if (a.allocations.size() != b.allocations.size())
        return QStringLiteral("allocations %1 vs %2").arg(a.allocations.size()).arg(b.allocations.size());
    for (size_t i = 0; i < a.allocations.size(); ++i) {
        const Allocation& x = a.allocations[i];
        const Allocation& y = b.allocations[i];
        if (x.address != y.address || x.size != y.size || x.blockSize != y.blockSize || x.stream != y.stream || x.stack != y.stack ||
            x.allocEvent != y.allocEvent || x.freeRequestedEvent != y.freeRequestedEvent ||
            x.freeCompletedEvent != y.freeCompletedEvent || x.allocTimeUs != y.allocTimeUs || x.freeTimeUs != y.freeTimeUs)
            return QStringLiteral("allocation %1 differs").arg(i);
    }
    if (a.eventAlloc != b.eventAlloc)
        return QStringLiteral("eventAlloc");
    if (a.allocated != b.allocated || a.reserved != b.reserved)
        return QStringLiteral("allocated/reserved series");
    if (a.events.timeUs != b.events.timeUs)
        return QStringLiteral("times");
    if (a.ooms.size() != b.ooms.size())
        return QStringLiteral("ooms");
    for (size_t i = 0; i < a.ooms.size(); ++i)
        if (a.ooms[i].index != b.ooms[i].index || a.ooms[i].requestedBytes != b.ooms[i].requestedBytes ||
            a.ooms[i].deviceFree != b.ooms[i].deviceFree || a.ooms[i].timeUs != b.ooms[i].timeUs)
            return QStringLiteral("oom %1").arg(i);
    if (a.initialAllocated != b.initialAllocated || a.initialReserved != b.initialReserved || a.peakAllocated != b.peakAllocated ||
        a.peakIndex != b.peakIndex || a.endReserved != b.endReserved || a.orphanFreeBytes != b.orphanFreeBytes || a.hasTime != b.hasTime)
        return QStringLiteral("totals");
    return {};
}

// Plays the decoder: pushes `events` in uneven batches into columns reserved far too small, growing
// them only inside whileIdle, publishing after each batch, as SnapshotDecoder::onAppend does.
EventPairing pairWhileAppending(const EventColumns& events, uint64_t seed, EventColumns& into)
{
    std::mt19937_64 rng(seed);
    into.reserve(64);
    PairingWorker worker(into, 64);
    const size_t n = events.count();
    for (size_t i = 0; i < n;) {
        const size_t batch = std::min(n - i, size_t(rng() % 3000) + 1);
        const size_t need = into.count() + batch;
        if (need > into.capacity())
            worker.whileIdle([&] { into.reserve(std::max(need, 2 * into.capacity())); });
        for (size_t k = i; k < i + batch; ++k)
            into.push(events.action[k], events.addr[k], events.size[k], events.stream[k], events.timeUs[k], events.stack[k]);
        i += batch;
        worker.publish(into.count());
    }
    return worker.finish();
}

} // namespace

class TestPairingWorker : public QObject {
    Q_OBJECT
private slots:
    void sameAsFinalizeAfterwards_data()
    {
        QTest::addColumn<int>("events");
        QTest::newRow("empty") << 0;
        QTest::newRow("one chunk") << 5000;
        QTest::newRow("many chunks") << 120000;
    }
    void sameAsFinalizeAfterwards()
    {
        QFETCH(int, events);
        const EventColumns stream = oddStream(size_t(events), uint64_t(events) + 1);
        DeviceTrace sequential = withSegments(stream);
        std::vector<std::string> wantWarnings;
        finalizeDevice(sequential, wantWarnings);

        EventColumns appended;
        EventPairing pairing = pairWhileAppending(stream, 7, appended);
        QCOMPARE(pairing.consumed(), size_t(events));
        DeviceTrace pipelined = withSegments(std::move(appended));
        std::vector<std::string> gotWarnings;
        finalizeDevice(pipelined, std::move(pairing), gotWarnings);

        const QString diff = differences(pipelined, sequential);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        QCOMPARE(gotWarnings, wantWarnings);
        if (events > 0) // the stream is odd on purpose: the warnings must be there to compare
            QVERIFY(wantWarnings.size() >= 4);
    }

    // A byte count beyond 8 PiB stops the pairing; finalizeDevice then fails with the device's name
    // and the same words as without the worker.
    void damageIsReportedByFinalize()
    {
        EventColumns stream = oddStream(20000, 3);
        stream.size[12345] = int64_t(1) << 60;
        stream.action[12345] = Action::Alloc;
        std::string want;
        try {
            DeviceTrace d = withSegments(stream);
            std::vector<std::string> w;
            finalizeDevice(d, w);
        } catch (const LoadError& e) {
            want = e.what();
        }
        QVERIFY(want.find("beyond 8 PiB") != std::string::npos);

        EventColumns appended;
        EventPairing pairing = pairWhileAppending(stream, 11, appended);
        QVERIFY(pairing.consumed() < stream.count());
        DeviceTrace d = withSegments(std::move(appended));
        std::vector<std::string> w;
        try {
            finalizeDevice(d, std::move(pairing), w);
            QFAIL("finalizeDevice accepted a byte count beyond 8 PiB");
        } catch (const LoadError& e) {
            QCOMPARE(std::string(e.what()), want);
            QVERIFY(std::string(e.what()).find("cuda:0") != std::string::npos);
        }
    }

    // A parse that fails midway destroys the worker with entries unpaired: no hang, no crash.
    void abandonedMidway()
    {
        const EventColumns stream = oddStream(50000, 5);
        EventColumns into;
        into.reserve(stream.count());
        {
            PairingWorker worker(into, stream.count());
            for (size_t k = 0; k < 30000; ++k)
                into.push(stream.action[k], stream.addr[k], stream.size[k], stream.stream[k], stream.timeUs[k], stream.stack[k]);
            worker.publish(into.count());
        }
        QCOMPARE(into.count(), size_t(30000));
    }

    // A whole dump: the pickle reader pairs on the worker (well above kPairingWorkerMinEntries) and
    // the result equals a load that pairs afterwards.
    void loadBothWays()
    {
        SynthModel m;
        m.layers = 2;
        m.hidden = 256;
        m.heads = 4;
        m.seq = 128;
        m.microBatch = 2;
        m.vocab = 1000;
        m.targetEntries = 150000;
        const SynthResult r = synthesize(m);
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/synth.pickle").toStdString();
        {
            std::ofstream out(path, std::ios::binary);
            writeSnapshot(r.trace, out);
        }
        QVERIFY(std::filesystem::file_size(path) / 100 >= 50000); // the reader's estimate starts a worker

        LoadOptions withWorker, without;
        without.pairWhileParsing = false;
        Progress p1, p2;
        const auto a = load(path, withWorker, p1);
        const auto b = load(path, without, p2);
        QCOMPARE(a->devices.size(), b->devices.size());
        QVERIFY(a->devices[0].eventCount() >= 100000);
        const QString diff = differences(a->devices[0], b->devices[0]);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        QCOMPARE(a->warnings, b->warnings);
        QCOMPARE(a->devices[0].allocations.size(), r.trace.devices[0].allocations.size());
    }
};

QTEST_GUILESS_MAIN(TestPairingWorker)
#include "test_pairing_worker.moc"
