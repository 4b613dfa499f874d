// The allocator simulator's real test: replaying a recorded alloc/free stream must reproduce the
// recorded segment_alloc/segment_free events, in order, with the same sizes (and, given the device's
// own segment addresses, every block at its recorded address).
#include "core/allocator/replay.h"
#include "core/load.h"

#include <QtTest>

using namespace poolscope;

namespace {

QString corpusFile(const char* name)
{
    return QString(POOLSCOPE_CORPUS_DIR) + "/" + name;
}

void describe(const char* what, const ReplayResult& r)
{
    const auto& c = r.comparison;
    qInfo("%s: segment events matched %lld / %lld recorded (%lld simulated, %lld at the same address); "
          "requests identical %lld / %lld; allocs at recorded address %lld / %lld; reserved equal after %lld / %lld events",
          what, qint64(c.matched), qint64(c.recorded), qint64(c.simulated), qint64(c.matchedWithAddress),
          qint64(c.anchorsEqual), qint64(c.anchors), qint64(r.allocAddressMatches), qint64(r.replayedAllocs),
          qint64(r.reservedMatches), qint64(r.reservedCompared));
    if (c.firstMismatch != kNoEvent)
        qInfo("  first difference: %s", c.firstMismatchText.c_str());
}

} // namespace

class TestReplayCorpus : public QObject {
    Q_OBJECT
private slots:
    void replayMatchesRecordedSegments_data();
    void replayMatchesRecordedSegments();
    void initialStateMatters();
    void capacityForcesReleaseAndOom();
};

void TestReplayCorpus::replayMatchesRecordedSegments_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("emptyCacheRuns");
    QTest::newRow("k_ctx128_fullstep") << corpusFile("k_ctx128_fullstep.pickle") << 0;
    QTest::newRow("k_ctx256_fullstep") << corpusFile("k_ctx256_fullstep.pickle") << 1;
    QTest::newRow("k_ctx128_forward_mixed") << corpusFile("k_ctx128_forward_mixed.pickle") << 0;
    QTest::newRow("k_ctx256_forward_mixed") << corpusFile("k_ctx256_forward_mixed.pickle") << 1;
    QTest::newRow("cranberrii") << corpusFile("cranberrii_snapshot.pickle") << 0;
    QTest::newRow("yiyi_oom") << corpusFile("yiyi_oom_snapshot.pickle") << 0;
    QTest::newRow("muduard_2dev") << corpusFile("muduard_2dev.pickle") << 0;
}

void TestReplayCorpus::replayMatchesRecordedSegments()
{
    QFETCH(QString, file);
    QFETCH(int, emptyCacheRuns);
    if (!QFileInfo::exists(file))
        QSKIP("corpus not available");
    auto trace = load(file.toStdString());
    QVERIFY(!trace->devices.empty());
    for (const DeviceTrace& dev : trace->devices) {
        if (dev.kind != DeviceKind::Cuda)
            continue;
        const ReplayResult r = replayTraceDevice(*trace, dev);
        describe(qPrintable(QFileInfo(file).fileName() + " " + QString::fromStdString(dev.label())), r);
        const auto& c = r.comparison;
        QCOMPARE(c.matched, c.recorded);
        QCOMPARE(c.simulated, c.recorded);
        QCOMPARE(c.matchedWithAddress, c.recorded);
        QCOMPARE(c.anchorsEqual, c.anchors);
        QCOMPARE(r.allocAddressMatches, r.replayedAllocs);
        QCOMPARE(r.reservedMatches, r.reservedCompared);
        QCOMPARE(r.emptyCacheCalls, int64_t(emptyCacheRuns));
        QVERIFY(!r.oom.has_value());
        QCOMPARE(r.initialReserved, dev.initialReserved);
        // Every final segment is accounted for: the replay ends with the dump's reserved bytes.
        QCOMPARE(r.finalStats.reserved, dev.endReserved);
        for (const auto& w : r.warnings)
            qInfo("  warning: %s", w.c_str());

        // Without the device's addresses the allocator picks its own; sizes and order still agree.
        ReplayOptions synthetic;
        synthetic.useRecordedAddresses = false;
        const ReplayResult s = replayTraceDevice(*trace, dev, synthetic);
        describe("  synthetic addresses", s);
        QCOMPARE(s.comparison.matched, s.comparison.recorded);
        QCOMPARE(s.comparison.simulated, s.comparison.recorded);
    }
}

void TestReplayCorpus::initialStateMatters()
{
    // The fullstep runs allocated their parameters before recording began: replaying from an empty
    // device misplaces the first requests, which must show in the comparison.
    const QString file = corpusFile("k_ctx128_fullstep.pickle");
    if (!QFileInfo::exists(file))
        QSKIP("corpus not available");
    auto trace = load(file.toStdString());
    const DeviceTrace& dev = trace->devices.at(0);
    ReplayOptions bare;
    bare.seedInitialState = false;
    const ReplayResult r = replayTraceDevice(*trace, dev, bare);
    describe("k_ctx128_fullstep from an empty device", r);
    QVERIFY(r.comparison.matched < r.comparison.recorded || r.comparison.simulated != r.comparison.recorded);
    const ReplayResult seeded = replayTraceDevice(*trace, dev);
    QCOMPARE(seeded.seededSegments, int64_t(227));
    QVERIFY(seeded.seededAllocations > 0);
}

void TestReplayCorpus::capacityForcesReleaseAndOom()
{
    // k_ctx256_fullstep starts with empty_cache() and then grows the cache; a device smaller than
    // its peak must make the simulated allocator release cached segments, retry, and finally fail.
    const QString file = corpusFile("k_ctx256_fullstep.pickle");
    if (!QFileInfo::exists(file))
        QSKIP("corpus not available");
    auto trace = load(file.toStdString());
    const DeviceTrace& dev = trace->devices.at(0);
    const ReplayResult full = replayTraceDevice(*trace, dev);
    // The series starts after event 0, where empty_cache() already ran: the dump's initial 61 GB of
    // cache are not part of the run's own peak.
    QVERIFY(!full.reserved.empty());
    const int64_t peakReserved = *std::max_element(full.reserved.begin(), full.reserved.end());
    // 2 GiB less: the cache holds more than that unused, so releasing it and retrying gets by.
    ReplayOptions tight;
    tight.capacity = peakReserved - (int64_t(2) << 30);
    const ReplayResult r = replayTraceDevice(*trace, dev, tight);
    QVERIFY(r.finalStats.numAllocRetries > 0);
    QVERIFY(*std::max_element(r.reserved.begin(), r.reserved.end()) <= *tight.capacity);
    qInfo("capacity %lld: %lld retries after releasing the cache, oom: %s", qint64(*tight.capacity),
          qint64(r.finalStats.numAllocRetries), r.oom ? "yes" : "no");
    // Below the bytes the program really holds at its peak: nothing can save it.
    const int64_t peakAllocated = *std::max_element(full.allocated.begin(), full.allocated.end());
    ReplayOptions small;
    small.capacity = peakAllocated - (int64_t(1) << 30);
    const ReplayResult o = replayTraceDevice(*trace, dev, small);
    QVERIFY(o.oom.has_value());
    QVERIFY(o.oom->reserved <= *small.capacity);
    QVERIFY(o.oom->wantedBytes > *small.capacity - o.oom->reserved);
    QCOMPARE(o.oom->deviceFree, *small.capacity - o.oom->reserved);
    QCOMPARE(o.stoppedAt, o.oom->index);
    QCOMPARE(o.allocated.size(), size_t(o.oom->index));
    qInfo("capacity %lld: OOM at event %lld asking for %lld bytes with %lld reserved, %lld allocated",
          qint64(*small.capacity), qint64(o.oom->index), qint64(o.oom->wantedBytes), qint64(o.oom->reserved),
          qint64(o.oom->allocated));
}

QTEST_GUILESS_MAIN(TestReplayCorpus)
#include "test_replay_corpus.moc"
