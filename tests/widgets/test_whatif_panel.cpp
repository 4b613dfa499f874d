// The what-if panel: knobs round-trip to a Scenario, a run happens off the GUI thread and shows the
// engine's own answer, a newer run makes an older one stale, a new trace clears everything.
#include "core/whatif/python_frames.h"
#include "synth_document.h"
#include "widgets/whatif_panel.h"
#include "widgets/whatif_range.h"

#include "core/synth/synth.h"

#include <QAbstractItemModelTester>
#include <QLabel>
#include <QTextDocument>
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
    void fitRangeIsSaid();
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
// Element sizes a Python-only dump cannot tell make the prediction a range: the reserved peak and the
// fit get it too. With a capacity between the two ends the verdict says that the fit depends on the
// guess, in whole sentences, with the reserved range in its units.
void TestWhatIfPanel::fitRangeIsSaid()
{
    SynthModel m;
    m.layers = 6;
    m.hidden = 512;
    m.heads = 8;
    m.seq = 320;
    m.microBatch = 4;
    m.vocab = 8000;
    m.positions = 2048;
    m.steps = 2;
    m.dtype = SynthDtype::Fp32;
    m.attention = SynthAttention::Manual;
    DocumentOptions options;
    options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    const auto doc = Document::fromTrace(pythonFramesOnly(synthesize(m).trace), options);
    Scenario s;
    s.autocast = AutocastKind::Bf16;
    const WhatIfResult open = runWhatIf(doc->trace(), doc->device(0).device(), *doc->device(0).classification(), s);
    QVERIFY(open.hasRange() && open.peakReservedLow < open.peakAllocatedHigh);
    s.capacity = (open.peakReservedLow + open.peakAllocatedHigh) / 2;
    WhatIfPanel panel;
    panel.resize(900, 700);
    panel.setTrace(doc, 0);
    panel.setScenario(s);
    QSignalSpy done(&panel, &WhatIfPanel::finished);
    panel.run();
    QVERIFY(done.wait(60000));
    const std::shared_ptr<const WhatIfResult> held = panel.result(); // a later job replaces the panel's
    const WhatIfResult& r = *held;
    QVERIFY(r.fitUncertain());
    auto* label = panel.findChild<QLabel*>(QStringLiteral("whatIfVerdict"));
    QVERIFY(label);
    QTextDocument html;
    html.setHtml(label->text());
    const QString verdict = html.toPlainText().replace(QChar(0x2028), QLatin1Char('\n')); // <br> is a line separator
    QVERIFY2(verdict.contains(QStringLiteral("peak reserved ") + reservedRangeText(r) + QStringLiteral(" over the same guess.")),
             qPrintable(verdict));
    QVERIFY2(verdict.contains(QStringLiteral("Whether it fits depends on the guess: with every tensor of unknown element size 16-bit "
                                             "it fits, with every one fp32 it does not fit (reserved peak ")),
             qPrintable(verdict));
    QVERIFY(reservedRangeText(r).contains(QChar(0x2013)) && (reservedRangeText(r).endsWith(QStringLiteral(" MiB")) ||
                                                             reservedRangeText(r).endsWith(QStringLiteral(" GiB"))));
    // Every line of the verdict is a whole sentence.
    for (const QString& line : verdict.split(QLatin1Char('\n'), Qt::SkipEmptyParts))
        QVERIFY2(line.trimmed().endsWith(QLatin1Char('.')), qPrintable(line));
    if (const QByteArray out = qgetenv("POOLSCOPE_PANEL_PNG"); !out.isEmpty()) {
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        panel.grab().save(QString::fromLocal8Bit(out));
    }
}

#include "test_whatif_panel.moc"
