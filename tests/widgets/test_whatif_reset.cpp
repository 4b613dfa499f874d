// The what-if panel's Reset: every knob back to the run as recorded, and the prediction taken off
// the chart.
#include "synth_document.h"
#include "widgets/timeline_plot.h"
#include "widgets/whatif_panel.h"

#include <QComboBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>

using namespace poolscope;

class TestWhatIfReset : public QObject {
    Q_OBJECT
private slots:
    void resetPutsEveryKnobBack()
    {
        const auto doc = poolscope::testing::synthDocument();
        WhatIfPanel panel;
        panel.setTrace(doc, 0);
        Scenario s;
        s.batchScale = Ratio{2, 1};
        s.seqScale = Ratio{3, 2};
        s.checkpoint = CheckpointKind::Full;
        s.optimizer = OptimizerKind::Sgd;
        s.sharding = ShardingKind::Zero2;
        s.ranks = 4;
        s.offloadOptimizer = true;
        s.autocast = AutocastKind::Bf16;
        s.autocastWholeRun = true;
        s.freeze = "Embedding";
        s.accumulate = 4;
        s.capacity = int64_t(8) << 30;
        panel.setScenario(s);
        QVERIFY(!panel.scenario().isIdentity());
        QSignalSpy done(&panel, &WhatIfPanel::finished);
        panel.run();
        QVERIFY(done.wait(60000));
        QVERIFY(panel.result());
        if (const QByteArray shots = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !shots.isEmpty()) { // the predicted stack, to look at
            TimelinePlot plot;
            plot.resize(1200, 600);
            plot.setTimeline(doc->device(0).timelinePtr());
            plot.setPredictedStackVisible(true);
            plot.setPrediction(panel.result());
            plot.replot();
            plot.grab().save(QString::fromLocal8Bit(shots) + QStringLiteral("/predicted-stack.png"));
        }
        // What the chart is handed from now on.
        int handed = 0;
        bool cleared = false;
        connect(&panel, &WhatIfPanel::predictionChanged, this, [&](std::shared_ptr<const WhatIfResult> r) {
            ++handed;
            cleared = !r;
        });
        auto* reset = panel.findChild<QPushButton*>(QStringLiteral("resetKnobs"));
        QVERIFY(reset);
        QTest::mouseClick(reset, Qt::LeftButton);
        const Scenario now = panel.scenario();
        QVERIFY2(now.isIdentity(), now.describe().c_str());
        QCOMPARE(now.describe(), Scenario{}.describe());
        QVERIFY(!now.capacity);
        QVERIFY(now.freeze.empty());
        QCOMPARE(now.accumulate, 1);
        // The answer goes: the chart shows the run as recorded.
        QVERIFY(handed > 0 && cleared);
        QVERIFY(!panel.result());
    }

    // The command line's --autocast-region forward|run as a knob: offered for bf16 and fp16 only,
    // and what it says reaches the scenario the panel replays.
    void autocastRegionIsAKnob()
    {
        const auto doc = poolscope::testing::synthDocument();
        WhatIfPanel panel;
        panel.setTrace(doc, 0);
        auto* region = panel.findChild<QComboBox*>(QStringLiteral("autocastRegion"));
        QVERIFY(region);
        QVERIFY(!region->isEnabled()); // as recorded: no region to choose
        Scenario s;
        s.autocast = AutocastKind::Bf16;
        s.autocastWholeRun = true;
        panel.setScenario(s);
        QVERIFY(region->isEnabled());
        QVERIFY(panel.scenario().autocastWholeRun);
        if (const QByteArray shots = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !shots.isEmpty()) { // the knobs, to look at
            panel.resize(1100, 420);
            panel.grab().save(QString::fromLocal8Bit(shots) + QStringLiteral("/whatif-autocast-region.png"));
        }
        QCOMPARE(panel.scenario().describe(), s.describe());
        region->setCurrentIndex(region->findData(false));
        QVERIFY(!panel.scenario().autocastWholeRun);
        s.autocast = AutocastKind::Off;
        s.autocastWholeRun = false;
        panel.setScenario(s);
        QVERIFY(!region->isEnabled());
        QVERIFY(!panel.scenario().autocastWholeRun);
        QVERIFY(panel.scenario().validate().empty());
    }
};

QTEST_MAIN(TestWhatIfReset)
#include "test_whatif_reset.moc"
