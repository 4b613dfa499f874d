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

// The synthetic step with a clock of our own: event i at `stepUs` × i after an epoch-sized origin;
// without one (stepUs < 0) as a dump of an older PyTorch, which records no time_us.
std::shared_ptr<const Document> timedSynth(int64_t stepUs)
{
    Trace t = synthesize(poolscope::testing::smallWindowModel()).trace;
    for (DeviceTrace& d : t.devices) {
        d.hasTime = stepUs >= 0;
        for (size_t i = 0; i < d.events.count(); ++i)
            d.events.timeUs[i] = stepUs >= 0 ? 1'733'000'000'000'000 + int64_t(i) * stepUs : kNoTime;
    }
    return open(std::move(t));
}

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

    // The read-out says when, not only which event: the time since the first event in the unit the
    // time axis counts in (seconds on a run of 2 s or more, else milliseconds), whichever axis is
    // shown; a dump without times says so.
    void readoutSaysTheTimeInTheAxisUnit()
    {
        struct Case {
            int64_t stepUs;
            bool seconds;
        };
        // A step long enough for the run to last 3 s, and one short enough for half a second.
        const auto events = int64_t(poolscope::testing::synthDocument()->device(0).device().eventCount());
        QVERIFY(events > 100);
        for (const Case c : {Case{3'000'000 / events + 1, true}, Case{500'000 / events, false}}) {
            const auto doc = timedSynth(c.stepUs);
            const DeviceDocument& dev = doc->device(0);
            const auto n = EventIndex(dev.device().eventCount());
            QCOMPARE(n, events);
            TimelinePlot plot;
            plot.resize(1000, 500);
            plot.setTimeline(dev.timelinePtr());
            for (AxisMode mode : {AxisMode::EventIndex, AxisMode::WallTime}) {
                plot.setAxisMode(mode);
                for (EventIndex e : {EventIndex(0), n / 3, n - 1}) {
                    const double us = double(e * c.stepUs);
                    const QString when = c.seconds ? QString::number(us / 1e6, 'f', 3) + QStringLiteral(" s")
                                                   : QString::number(us / 1e3, 'f', 2) + QStringLiteral(" ms");
                    const QString head = plot.readoutAt(e).text.section(QLatin1Char('\n'), 0, 0);
                    QCOMPARE(head, QStringLiteral("event %1 of %2 · %3 since the first event").arg(e).arg(n).arg(when));
                }
            }
            // The axis it agrees with.
            QVERIFY2(plot.xAxis->label().endsWith(c.seconds ? QStringLiteral("(s)") : QStringLiteral("(ms)")), qPrintable(plot.xAxis->label()));
            // Hovering shows it.
            plot.show();
            QVERIFY(QTest::qWaitForWindowExposed(&plot));
            plot.replot();
            // (From off the chart: a move to where the pointer already is sends nothing.)
            const QPoint at = plot.axisRect()->rect().center() + QPoint(c.seconds ? 7 : -7, 3);
            QTest::mouseMove(&plot, QPoint(2, 2));
            QTest::mouseMove(&plot, at);
            QTRY_VERIFY(plot.hoverVisible());
            QVERIFY2(plot.hoverText().contains(QStringLiteral(" since the first event\n")), qPrintable(plot.hoverText()));
        }
        // No times recorded: said, not left out.
        const auto doc = timedSynth(-1);
        TimelinePlot plot;
        plot.setTimeline(doc->device(0).timelinePtr());
        QVERIFY2(plot.readoutAt(5).text.startsWith(QStringLiteral("event 5 of %1 · no times in this dump\n").arg(doc->device(0).device().eventCount())),
                 qPrintable(plot.readoutAt(5).text));
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
