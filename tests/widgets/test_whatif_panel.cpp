// The what-if panel: knobs round-trip to a Scenario, a run happens off the GUI thread and shows the
// engine's own answer, a newer run makes an older one stale, a new trace clears everything.
#include "synth_document.h"
#include "widgets/whatif_panel.h"

#include "core/synth/synth.h"

#include <QAbstractItemModelTester>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QtTest>

using namespace poolscope;

namespace {

std::shared_ptr<const Document> prepared() { return poolscope::testing::synthDocument(); }

} // namespace

class TestWhatIfPanel : public QObject {
    Q_OBJECT
private slots:
    void knobsRoundTrip();
    void runShowsTheEngineResult();
    void newerRunWins();
    void newTraceClears();
    void capacityText();
};

void TestWhatIfPanel::knobsRoundTrip()
{
    WhatIfPanel panel;
    QVERIFY(panel.scenario().isIdentity());
    Scenario s;
    s.batchScale = Ratio{3, 2};
    s.seqScale = Ratio{2, 1};
    s.checkpoint = CheckpointKind::Selective;
    s.optimizer = OptimizerKind::Lion;
    s.sharding = ShardingKind::FsdpHybrid;
    s.ranks = 16;
    s.offloadOptimizer = true;
    s.capacity = int64_t(80) << 30;
    panel.setScenario(s);
    const Scenario back = panel.scenario();
    QVERIFY(back.batchScale == s.batchScale);
    QVERIFY(back.seqScale == s.seqScale);
    QCOMPARE(back.checkpoint, s.checkpoint);
    QCOMPARE(back.optimizer, s.optimizer);
    QCOMPARE(back.sharding, s.sharding);
    QCOMPARE(back.ranks, 16);
    QCOMPARE(back.offloadOptimizer, true);
    QCOMPARE(back.capacity, s.capacity);
    QCOMPARE(back.describe(), s.describe());
}

void TestWhatIfPanel::runShowsTheEngineResult()
{
    WhatIfPanel panel;
    QAbstractItemModelTester tester(panel.resultModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    const auto doc = prepared();
    panel.setTrace(doc, 0);
    Scenario s;
    s.seqScale = Ratio{2, 1};
    s.sharding = ShardingKind::Zero2;
    s.ranks = 4;
    s.capacity = int64_t(1) << 30;
    panel.setScenario(s);
    QSignalSpy done(&panel, &WhatIfPanel::finished);
    QSignalSpy running(&panel, &WhatIfPanel::runningChanged);
    panel.run();
    QVERIFY(panel.isRunning());
    QVERIFY(done.wait(30000));
    QVERIFY(!panel.isRunning());
    QCOMPARE(running.count(), 2);
    const auto r = panel.result();
    QVERIFY(r);
    const WhatIfResult direct = runWhatIf(doc->trace(), doc->device(0).device(), *doc->device(0).classification(), s);
    QCOMPARE(r->peakAllocated, direct.peakAllocated);
    QCOMPARE(r->peakReserved, direct.peakReserved);
    QCOMPARE(r->fits(), direct.fits());
    // The table: peak allocated first, with the raw bytes under UserRole.
    auto* m = panel.resultModel();
    QVERIFY(m->rowCount() >= 4);
    QCOMPARE(m->data(m->index(0, WhatIfResultModel::Predicted), Qt::UserRole).toLongLong(), direct.peakAllocated);
    QCOMPARE(m->data(m->index(0, WhatIfResultModel::Recorded), Qt::UserRole).toLongLong(), direct.recordedPeakAllocated);
    QVERIFY(m->data(m->index(0, WhatIfResultModel::Change)).toString().endsWith('%'));
    bool sawState = false;
    for (int row = 0; row < m->rowCount(); ++row)
        sawState |= m->data(m->index(row, WhatIfResultModel::Quantity)).toString().trimmed() == "optimizer state";
    QVERIFY(sawState);
    // A second run reuses the trace model and gives the same answer.
    panel.run();
    QVERIFY(done.wait(30000));
    QCOMPARE(panel.result()->peakAllocated, direct.peakAllocated);
}

void TestWhatIfPanel::newerRunWins()
{
    WhatIfPanel panel;
    panel.setTrace(prepared(), 0);
    QSignalSpy done(&panel, &WhatIfPanel::finished);
    Scenario first;
    first.batchScale = Ratio{4, 1};
    panel.setScenario(first);
    panel.run();
    Scenario second;
    second.optimizer = OptimizerKind::Sgd;
    panel.setScenario(second);
    panel.run();
    QVERIFY(done.wait(30000));
    QTRY_VERIFY_WITH_TIMEOUT(!panel.isRunning(), 30000);
    QTest::qWait(200); // a stale first job, had it been shown, would have emitted again
    QCOMPARE(done.count(), 1);
    QCOMPARE(panel.result()->scenario.optimizer, OptimizerKind::Sgd);
    QVERIFY(panel.result()->scenario.batchScale.isOne());
}

void TestWhatIfPanel::newTraceClears()
{
    WhatIfPanel panel;
    panel.setTrace(prepared(), 0);
    QSignalSpy done(&panel, &WhatIfPanel::finished);
    panel.run();
    QVERIFY(done.wait(30000));
    QVERIFY(panel.resultModel()->rowCount() > 0);
    panel.setTrace(nullptr, 0);
    QVERIFY(!panel.result());
    QCOMPARE(panel.resultModel()->rowCount(), 0);
    QVERIFY(!panel.isRunning());
    panel.run(); // nothing to run on: ignored
    QVERIFY(!panel.isRunning());
    // A running job dropped by a new trace never shows.
    panel.setTrace(prepared(), 0);
    panel.run();
    panel.setTrace(prepared(), 0);
    QTest::qWait(500);
    QVERIFY(!panel.result());
}

void TestWhatIfPanel::capacityText()
{
    WhatIfPanel panel;
    auto* edit = panel.findChild<QLineEdit*>(QStringLiteral("capacity"));
    QVERIFY(edit);
    edit->setText("24 GiB");
    QCOMPARE(panel.scenario().capacity, std::optional<int64_t>(int64_t(24) << 30));
    edit->setText("lots");
    QVERIFY(!panel.scenario().capacity); // not a size: the recorded OOM's capacity applies
    edit->clear();
    QVERIFY(!panel.scenario().capacity);
    // Without a trace the Predict button is off.
    auto* button = panel.findChild<QPushButton*>();
    QVERIFY(button);
    QVERIFY(!button->isEnabled());
    panel.setTrace(prepared(), 0);
    QVERIFY(button->isEnabled());
}

QTEST_MAIN(TestWhatIfPanel)
#include "test_whatif_panel.moc"
