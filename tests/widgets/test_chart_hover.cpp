// What the pointer alone shows on the main chart: the event under it, its action, each pool's bytes
// there, read from the same series the report prints (DeviceDocument::poolsAt). And a dump without
// history drawn as what it is: one moment, one stacked bar, no time axis.
#include "core/synth/synth_stacks.h"
#include "core/util/units.h"
#include "synth_document.h"
#include "widgets/timeline_plot.h"

#include <QTest>

using namespace poolscope;

namespace {

std::shared_ptr<const Document> open(Trace trace)
{
    DocumentOptions options;
    options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    return Document::fromTrace(std::make_shared<Trace>(std::move(trace)), options);
}

QString bytes(int64_t b) { return QString::fromStdString(formatBytes(b)); }

} // namespace

class TestChartHover : public QObject {
    Q_OBJECT
private slots:
    void readoutIsTheSeriesAtTheEventUnderThePointer()
    {
        const auto doc = poolscope::testing::synthDocument();
        const DeviceDocument& dev = doc->device(0);
        TimelinePlot plot;
        plot.resize(1000, 500);
        plot.setTimeline(dev.timelinePtr());
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        plot.replot();
        QVERIFY(!plot.oneMoment());
        const QRect r = plot.axisRect()->rect();
        int checked = 0;
        for (int i = 1; i < 10; ++i) {
            const QPoint at(r.left() + r.width() * i / 10, r.center().y());
            QTest::mouseMove(&plot, at);
            QTRY_VERIFY(plot.hoverVisible());
            const EventIndex e = plot.hoverEvent();
            QCOMPARE(e, plot.eventAtPixel(at.x()));
            const PoolBytes pools = dev.poolsAt(e);
            const TimelinePlot::Readout readout = plot.readoutAt(e);
            QCOMPARE(readout.event, e);
            QCOMPARE(plot.hoverText(), readout.text);
            QVERIFY2(plot.hoverText().startsWith(QStringLiteral("event %1 of ").arg(e)), qPrintable(plot.hoverText()));
            const QString action = QString::fromStdString(std::string(actionName(dev.device().events.action[size_t(e)]))).replace('_', ' ');
            QVERIFY2(plot.hoverText().contains(action), qPrintable(plot.hoverText()));
            for (Pool p : dev.timeline().layers()) {
                QCOMPARE(readout.breakdown.pool[size_t(p)], pools[size_t(p)]);
                if (pools[size_t(p)] > 0) {
                    const QString line = QStringLiteral("%1: %2").arg(PoolPalette::label(p), bytes(pools[size_t(p)]));
                    QVERIFY2(plot.hoverText().contains(line), qPrintable(plot.hoverText() + " lacks " + line));
                    ++checked;
                }
            }
            QVERIFY(plot.hoverText().contains(QStringLiteral("allocated %1").arg(bytes(dev.device().allocatedAt(e)))));
        }
        QVERIFY(checked > 10);
        // Off the chart, the read-out goes; a click scrubs instead of hovering.
        QTest::mouseMove(&plot, QPoint(2, 2));
        QTRY_VERIFY(!plot.hoverVisible());
        QTest::mouseMove(&plot, r.center());
        QTRY_VERIFY(plot.hoverVisible());
        QTest::mousePress(&plot, Qt::LeftButton, {}, r.center());
        QVERIFY(!plot.hoverVisible());
        QCOMPARE(plot.cursorEvent(), plot.eventAtPixel(r.center().x()));
        QTest::mouseRelease(&plot, Qt::LeftButton, {}, r.center());
    }

    void historyLessDumpIsOneMomentWithoutATimeAxis()
    {
        for (StackScenario s : {StackScenario::NoHistory, StackScenario::NoHistoryBare}) {
            const auto doc = open(synthesizeScenario(s, 1).trace);
            const DeviceDocument& dev = doc->device(0);
            TimelinePlot plot;
            plot.resize(1000, 500);
            plot.setTimeline(dev.timelinePtr());
            plot.replot();
            QVERIFY(plot.oneMoment());
            // No time axis: no ticks, no numbers, and the axis says why.
            QVERIFY(!plot.xAxis->ticks());
            QVERIFY(!plot.xAxis->tickLabels());
            QVERIFY(!plot.xAxis->label().contains(QStringLiteral("event index")));
            QVERIFY(plot.xAxis->label().contains(QStringLiteral("one moment")));
            // No band across the chart: the layers' graphs draw nothing, one bar of rectangles does.
            for (int g = 0; g < plot.graphCount(); ++g)
                QCOMPARE(plot.graph(g)->data()->size(), 0);
            const Breakdown b = dev.timeline().breakdownAt(EventIndex(dev.device().eventCount()) - 1, -1);
            double stacked = 0;
            int rects = 0;
            QString label;
            for (int i = 0; i < plot.itemCount(); ++i) {
                if (auto* rect = qobject_cast<QCPItemRect*>(plot.item(i)); rect && rect->visible() && rect->topLeft->coords().x() > 0.05 && rect->bottomRight->coords().x() < 0.5) { // the bar, not a full-width band
                    stacked += rect->topLeft->coords().y() - rect->bottomRight->coords().y();
                    ++rects;
                }
                if (auto* text = qobject_cast<QCPItemText*>(plot.item(i)); text && text->text().startsWith(QStringLiteral("snapshot only")))
                    label = text->text();
            }
            QVERIFY(rects >= 1);
            const double unit = double(kGiB) <= double(b.reserved) ? double(kGiB) : b.reserved >= kMiB ? double(kMiB) : double(kKiB);
            QVERIFY2(std::abs(stacked - double(b.reserved) / unit) < 1e-6 * std::max(1.0, double(b.reserved) / unit),
                     qPrintable(QStringLiteral("%1 vs %2").arg(stacked).arg(double(b.reserved) / unit)));
            QVERIFY2(label.contains(QStringLiteral("no allocation history")), qPrintable(label));
            QVERIFY(label.contains(bytes(b.allocated)));
            // Zoom and scrub have nothing to move: the range stays the one moment.
            plot.xAxis->setRange(0.4, 0.45);
            QCOMPARE(plot.xAxis->range().lower, 0.0);
            QCOMPARE(plot.xAxis->range().upper, 1.0);
            // The read-out anywhere is the dump's state.
            const TimelinePlot::Readout r = plot.readoutAt(0);
            QCOMPARE(r.breakdown.allocated, b.allocated);
            QVERIFY(r.text.contains(QStringLiteral("no allocation history")));
        }
        // A dump with history keeps its axis.
        const auto doc = poolscope::testing::synthDocument();
        TimelinePlot plot;
        plot.resize(1000, 500);
        plot.setTimeline(doc->device(0).timelinePtr());
        QVERIFY(!plot.oneMoment());
        QVERIFY(plot.xAxis->ticks() && plot.xAxis->tickLabels());
    }

    void corpusSegmentsOnlyDumpsAreOneMoment()
    {
        const QString dir = QStringLiteral(POOLSCOPE_CORPUS_DIR);
        if (!QFileInfo::exists(dir + QStringLiteral("/yiyi_oom_snapshot.pickle")))
            QSKIP("../shared/corpus is absent");
        DocumentOptions options;
        options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
        for (const char* name : {"yiyi_oom_snapshot.pickle", "muduard_2dev.pickle", "docubox.pickle"}) {
            const auto doc = Document::open((dir + QLatin1Char('/') + QLatin1String(name)).toStdString(), options);
            QVERIFY(doc && doc->deviceCount() > 0);
            TimelinePlot plot;
            plot.resize(1000, 500);
            plot.setTimeline(doc->device(doc->defaultDevice()).timelinePtr());
            QVERIFY2(plot.oneMoment(), name);
            QVERIFY(!plot.xAxis->tickLabels());
        }
        const auto doc = Document::open((dir + QStringLiteral("/wed_training_128.pickle")).toStdString(), options);
        TimelinePlot plot;
        plot.setTimeline(doc->device(doc->defaultDevice()).timelinePtr());
        QVERIFY(!plot.oneMoment());
    }
};

QTEST_MAIN(TestChartHover)
#include "test_chart_hover.moc"
