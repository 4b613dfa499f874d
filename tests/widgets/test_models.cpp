// Every item model under QAbstractItemModelTester while it is driven the way the window drives it,
// plus the numbers it shows checked against core.
#include "core/timeline/synthetic_trace.h"
#include "widgets/breakdown_model.h"
#include "widgets/stack_model.h"
#include "widgets/tensor_model.h"

#include <QAbstractItemModelTester>
#include <QTest>

#include <random>

using namespace poolscope;

class TestModels : public QObject {
    Q_OBJECT
private:
    std::shared_ptr<const DeviceTimeline> m_timeline;
    testing::SynthResult m_synth;

private slots:
    void initTestCase()
    {
        m_synth = testing::synthesize(testing::SynthOptions{.targetEvents = 5000, .seed = 21});
        m_timeline = testing::documentOf(m_synth)->device(0).timelinePtr();
    }

    void breakdownModel()
    {
        BreakdownModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        const auto& d = m_timeline->device();
        for (EventIndex e : {kNoEvent, EventIndex(0), d.peakIndex, d.ooms.back().index}) {
            const Breakdown b = m_timeline->breakdownAt(e, int64_t(24) << 30);
            const SegmentLayout layout = segmentLayoutAt(d, m_timeline->alive(), e);
            model.setBreakdown(b, m_timeline->layers(), true, &layout);
            QVERIFY(model.rowCount() >= int(m_timeline->layers().size()) + 3);
            // Pool rows come first, top of the stack first, with the core's bytes.
            int64_t pools = 0;
            for (int r = 0; r < int(m_timeline->layers().size()); ++r) {
                const int pool = model.data(model.index(r, 0), BreakdownModel::kPoolRole).toInt();
                QCOMPARE(pool, int(m_timeline->layers()[m_timeline->layers().size() - 1 - size_t(r)]));
                const qint64 bytes = model.data(model.index(r, 0), BreakdownModel::kBytesRole).toLongLong();
                QCOMPARE(bytes, b.pool[size_t(pool)]);
                if (Pool(pool) != Pool::CachedFree)
                    pools += bytes;
            }
            QCOMPARE(pools, d.allocatedAt(e));
            const auto rows = model.rows();
            QCOMPARE(rows.size(), model.rowCount());
            QVERIFY(rows.back().at(0).contains(QStringLiteral("headroom")));
        }
        model.setBreakdown(m_timeline->breakdownAt(0, -1), m_timeline->layers(), true); // fewer rows: reset
        model.clear();
        QCOMPARE(model.rowCount(), 0);
    }

    void breakdownWithoutReservedBytes()
    {
        // A Kineto trace without totals: no cache row, reserved "unknown", shares of allocated, no headroom.
        BreakdownModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        Breakdown b = m_timeline->breakdownAt(m_timeline->device().peakIndex, int64_t(24) << 30);
        b.reservedKnown = false;
        model.setBreakdown(b, m_timeline->layers(), true);
        const auto rows = model.rows();
        bool sawReserved = false;
        for (const QStringList& r : rows) {
            QVERIFY2(!r.at(0).contains(QStringLiteral("cached free")), qPrintable(r.join(u'|')));
            QVERIFY2(!r.at(0).contains(QStringLiteral("headroom")), qPrintable(r.join(u'|')));
            if (r.at(0) == QStringLiteral("reserved")) {
                sawReserved = true;
                QCOMPARE(r.at(2), QStringLiteral("unknown"));
            }
            if (r.at(0) == QStringLiteral("allocated"))
                QCOMPARE(r.at(2), QStringLiteral("100.0%"));
        }
        QVERIFY(sawReserved);
    }

    // Private pools (CUDA graphs, MemPools) are a breakdown of what is allocated: indented under
    // "allocated", no share of their own, so the share column adds up to 100% over the pools (a
    // private-pool row beside the pools once made KV cache 83.2% and "in private pool" 83.2%).
    void breakdownPrivatePoolsAreABreakdown()
    {
        BreakdownModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        const Breakdown b = m_timeline->breakdownAt(m_timeline->device().peakIndex, int64_t(24) << 30);
        MomentEvidence evidence;
        evidence.privatePools.emplace_back(PrivatePoolId{0, 2}, b.allocated * 9 / 10);
        model.setBreakdown(b, m_timeline->layers(), true, nullptr, &evidence);
        QCOMPARE(model.header().value(2), QStringLiteral("of reserved"));
        const auto rows = model.rows();
        double poolShares = 0;
        int allocatedRow = -1, privateRow = -1;
        for (int r = 0; r < rows.size(); ++r) {
            if (model.data(model.index(r, 0), BreakdownModel::kPoolRole).toInt() >= 0) {
                QString share = rows[r].at(2);
                if (share != QStringLiteral("<0.1%"))
                    poolShares += share.remove(u'%').toDouble();
            }
            if (rows[r].at(0) == QStringLiteral("allocated"))
                allocatedRow = r;
            if (rows[r].at(0).contains(QStringLiteral("private pool (0,2)")))
                privateRow = r;
        }
        QVERIFY2(poolShares > 99.0 && poolShares < 100.5, qPrintable(QString::number(poolShares)));
        QVERIFY(allocatedRow >= 0);
        QCOMPARE(privateRow, allocatedRow + 1);
        QVERIFY2(rows[privateRow].at(0).startsWith(QStringLiteral("  of which in ")), qPrintable(rows[privateRow].at(0)));
        QVERIFY(rows[privateRow].at(2).isEmpty());
        // Without a reserved figure the shares are of allocated, and the header says so.
        Breakdown k = b;
        k.reservedKnown = false;
        model.setBreakdown(k, m_timeline->layers(), true);
        QCOMPARE(model.header().value(2), QStringLiteral("of allocated"));
    }

    void tensorModelAndProxy()
    {
        TensorModel model;
        TensorFilterProxy proxy;
        proxy.setSourceModel(&model);
        QAbstractItemModelTester t1(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester t2(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
        const auto& d = m_timeline->device();
        std::mt19937_64 rng(3);
        for (int q = 0; q < 12; ++q) {
            const EventIndex e = q == 0 ? d.peakIndex : EventIndex(rng() % d.eventCount());
            model.setMoment(m_timeline, e);
            int64_t sum = 0, expectBytes = 0;
            int expectAlive = 0;
            for (const auto& a : d.allocations)
                if (a.aliveAfter(e)) {
                    ++expectAlive;
                    expectBytes += a.size;
                }
            QCOMPARE(model.rowCount(), expectAlive);
            for (int r = 0; r < model.rowCount(); ++r)
                sum += model.data(model.index(r, TensorModel::Size), TensorModel::kSortRole).toLongLong();
            // Requested sizes; allocated(i) also counts the rounding slack of blocks alive at the end.
            QCOMPARE(sum, expectBytes);
            QVERIFY(sum <= d.allocatedAt(e) && d.allocatedAt(e) - sum < 512 * int64_t(expectAlive + 1));
            QCOMPARE(model.totalBytes(), sum);
        }
        model.setMoment(m_timeline, d.peakIndex);
        proxy.sort(TensorModel::Size, Qt::AscendingOrder);
        for (int r = 1; r < proxy.rowCount(); ++r)
            QVERIFY(proxy.data(proxy.index(r - 1, TensorModel::Size), TensorModel::kSortRole).toLongLong() <=
                    proxy.data(proxy.index(r, TensorModel::Size), TensorModel::kSortRole).toLongLong());
        proxy.sort(TensorModel::Age, Qt::DescendingOrder);

        // Pool filter: exactly the rows of that pool.
        proxy.setPoolFilter(int(Pool::Activation));
        int activations = 0;
        for (int r = 0; r < model.rowCount(); ++r)
            activations += model.poolAt(r) == Pool::Activation;
        QCOMPARE(proxy.rowCount(), activations);
        QVERIFY(activations > 0);
        for (int r = 0; r < proxy.rowCount(); ++r)
            QCOMPARE(proxy.data(proxy.index(r, TensorModel::PoolColumn)).toString(), QStringLiteral("activation"));
        // Frame text filter: any frame of the stack, case-insensitive; combined with the pool filter.
        proxy.setPoolFilter(-1);
        proxy.setFrameFilter(QStringLiteral("ADAMW"));
        int adam = 0;
        for (int r = 0; r < model.rowCount(); ++r)
            adam += model.poolAt(r) == Pool::OptimizerState;
        QCOMPARE(proxy.rowCount(), adam);
        proxy.setFrameFilter(QStringLiteral("train.py")); // the outermost frame: every stack has it
        QCOMPARE(proxy.rowCount(), model.rowCount());
        proxy.setFrameFilter(QStringLiteral("no such frame"));
        QCOMPARE(proxy.rowCount(), 0);
        proxy.setFrameFilter({});
        model.setMoment(m_timeline, 0); // reset while filtered and sorted
        model.clear();
        QCOMPARE(proxy.rowCount(), 0);
    }

    void stackModel()
    {
        StackModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        const Trace& t = *m_synth.trace;
        const Allocation& a = m_timeline->device().allocations.back();
        model.setStack(&t.frames, a.stack);
        // Python frames first (innermost first), then the collapsible C++ group.
        int python = 0;
        for (FrameId f : t.frames.stack(a.stack))
            python += t.frames.frame(f).isPython() ? 1 : 0;
        QVERIFY(python >= 2);
        QCOMPARE(model.pythonCount(), python);
        QCOMPARE(model.nativeCount(), 1);
        QCOMPARE(model.rowCount(), python + 1);
        const QModelIndex group = model.index(python, 0);
        QVERIFY(model.data(group).toString().startsWith(QStringLiteral("C++ frames (1)")));
        QCOMPARE(model.rowCount(group), 1);
        QCOMPARE(model.data(model.index(0, 0, group)).toString(), QStringLiteral("at::native::empty_cuda"));
        QCOMPARE(model.data(model.index(python - 1, 0)).toString(), QStringLiteral("main"));
        QCOMPARE(model.data(model.index(python - 1, 1)).toString(), QStringLiteral("train.py:42"));
        QCOMPARE(model.parent(model.index(0, 1, group)), group);
        model.setStack(&t.frames, StackId{});
        QCOMPARE(model.rowCount(), 0);
        model.clear();
    }
};

QTEST_MAIN(TestModels)
#include "test_models.moc"
