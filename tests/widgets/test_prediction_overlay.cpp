// The what-if answer on the chart: block maxima keep every peak, the predicted lines reach the
// predicted peak at any zoom, the y range makes room for a prediction above the recording, a
// prediction for another trace draws nothing, and the panel predicts as a knob turns.
#include "synth_document.h"
#include "core/synth/synth.h"
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "widgets/timeline_plot.h"
#include "widgets/whatif_panel.h"
#include "widgets/whatif_review.h"
#include "core/whatif/whatif.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QSignalSpy>
#include <QTest>

#include <random>

using namespace poolscope;

namespace {

std::shared_ptr<const Document> synthDoc()
{
    SynthModel m = poolscope::testing::smallWindowModel();
    m.vocab = 4000;
    m.positions = 1024;
    return poolscope::testing::synthDocument(m);
}

double graphMax(const QCPGraph* g)
{
    double top = 0;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
        top = std::max(top, it->value);
    return top;
}

const QCPGraph* graphNamed(const QCustomPlot& plot, const QString& name)
{
    for (int k = 0; k < plot.graphCount(); ++k)
        if (plot.graph(k)->name() == name)
            return plot.graph(k);
    return nullptr;
}

} // namespace

class TestPredictionOverlay : public QObject {
    Q_OBJECT
private slots:
    void blockMaxKeepsEveryPeak();
    void predictionDrawnOverTheRecording();
    void predictionForAnotherTraceIsIgnored();
    void panelPredictsAsAKnobTurns();
    void reviewImageCarriesTheCaveats();
};

void TestPredictionOverlay::blockMaxKeepsEveryPeak()
{
    std::mt19937_64 rng(7);
    std::vector<int64_t> v(10'000);
    for (auto& x : v)
        x = int64_t(rng() % 1'000'000);
    const BlockMax bm(&v);
    for (int t = 0; t < 2000; ++t) {
        int64_t a = int64_t(rng() % v.size()), b = int64_t(rng() % v.size());
        if (a > b)
            std::swap(a, b);
        const int64_t expected = *std::max_element(v.begin() + a, v.begin() + b + 1);
        QCOMPARE(bm.max(a, b), expected);
    }
    QCOMPARE(bm.max(-5, 3), *std::max_element(v.begin(), v.begin() + 4)); // clamped
    QCOMPARE(BlockMax().max(0, 10), int64_t(0));
}

void TestPredictionOverlay::predictionDrawnOverTheRecording()
{
    const auto doc = synthDoc();
    const DeviceDocument& dd = doc->device(0);
    const DeviceTrace& dev = dd.device();
    TimelinePlot plot;
    plot.resize(1200, 600);
    plot.setTimeline(dd.timelinePtr());
    plot.replot();
    const int recordedGraphs = plot.graphCount();
    const double recordedTop = plot.yAxis->range().upper;
    // Twice the sequence: a prediction far above the recording.
    Scenario s;
    s.seqScale = Ratio{4, 1};
    WhatIfOptions options;
    options.keepPoolSeries = true;
    auto r = std::make_shared<const WhatIfResult>(runWhatIf(doc->trace(), dev, *dd.traceModel(), s, options));
    QVERIFY(r->peakAllocated > dev.peakAllocated);
    plot.setPrediction(r);
    plot.replot();
    QCOMPARE(plot.graphCount(), recordedGraphs + 2);
    const QCPGraph* allocated = graphNamed(plot, "predicted allocated");
    const QCPGraph* reserved = graphNamed(plot, "predicted reserved");
    QVERIFY(allocated && reserved);
    QCOMPARE(allocated->data()->size(), plot.axisRect()->width() + 1);
    const double unit = double(int64_t(1) << 30) >= double(r->peakReserved) ? double(int64_t(1) << 20) : double(int64_t(1) << 30);
    // Zoomed out, every column holds many events: the line still reaches the predicted peak.
    QVERIFY(std::abs(graphMax(allocated) - double(r->peakAllocated) / unit) < 1e-9 * double(r->peakAllocated));
    QVERIFY(graphMax(reserved) >= graphMax(allocated));
    // The y range makes room for it.
    QVERIFY(plot.yAxis->range().upper > recordedTop);
    QVERIFY(plot.yAxis->range().upper >= double(r->peakReserved) / unit);
    // Zoomed in on the predicted peak, the line still shows it.
    plot.xAxis->setRange(plot.eventKey(std::max<EventIndex>(0, r->peakAt - 20)), plot.eventKey(r->peakAt + 20));
    plot.replot();
    QVERIFY(std::abs(graphMax(allocated) - double(r->peakAllocated) / unit) < 1e-9 * double(r->peakAllocated));
    // The predicted stack adds a line per pool; clearing takes everything away.
    plot.setPredictedStackVisible(true);
    QVERIFY(plot.graphCount() > recordedGraphs + 2);
    // Legible: each pool's line at least 2 px, dashed (not dotted), over a wider halo, and named
    // once in the legend.
    int poolLines = 0;
    for (int g = 0; g < plot.graphCount(); ++g) {
        const QCPGraph* graph = plot.graph(g);
        if (!graph->property("pool").isValid())
            continue;
        ++poolLines;
        QVERIFY(graph->pen().widthF() >= 2.0);
        QCOMPARE(graph->pen().style(), Qt::DashLine);
        const QCPGraph* halo = plot.graph(g - 1);
        QVERIFY(!halo->property("pool").isValid() && halo->pen().widthF() > graph->pen().widthF());
        QCOMPARE(halo->data()->size(), graph->data()->size());
    }
    QVERIFY(poolLines >= 3);
    QVERIFY(graphNamed(plot, "predicted stack (each pool's top)"));
    plot.setPrediction(nullptr);
    QCOMPARE(plot.graphCount(), recordedGraphs);
    QVERIFY(!graphNamed(plot, "predicted allocated"));
}

void TestPredictionOverlay::predictionForAnotherTraceIsIgnored()
{
    const auto doc = synthDoc();
    TimelinePlot plot;
    plot.resize(800, 400);
    plot.setTimeline(doc->device(0).timelinePtr());
    auto other = std::make_shared<WhatIfResult>();
    other->events = int64_t(doc->device(0).device().eventCount()) + 1;
    other->allocated.assign(size_t(other->events), 1);
    plot.setPrediction(other);
    QVERIFY(!plot.prediction());
    QVERIFY(!graphNamed(plot, "predicted allocated"));
}

void TestPredictionOverlay::panelPredictsAsAKnobTurns()
{
    const auto doc = synthDoc();
    WhatIfPanel panel;
    panel.setTrace(doc, 0);
    QVERIFY(panel.livePrediction()); // a few thousand events replay in well under 100 ms
    QSignalSpy predicted(&panel, &WhatIfPanel::predictionChanged);
    QSignalSpy done(&panel, &WhatIfPanel::finished);
    // Setting the knobs from code runs nothing.
    Scenario s;
    s.seqScale = Ratio{2, 1};
    panel.setScenario(s);
    QTest::qWait(400);
    QCOMPARE(done.count(), 0);
    // A user turning one does.
    auto* seq = panel.findChildren<QDoubleSpinBox*>().at(1);
    seq->setValue(3.0);
    QVERIFY(done.wait(10000));
    QVERIFY(predicted.count() >= 1);
    const auto r = predicted.last().at(0).value<std::shared_ptr<const WhatIfResult>>();
    QVERIFY(r);
    QCOMPARE(r->allocated.size(), doc->device(0).device().eventCount());
    QVERIFY(r->scenario.seqScale == (Ratio{3, 1}));
    // A new trace clears the chart's prediction.
    panel.setTrace(nullptr, 0);
    QVERIFY(!predicted.last().at(0).value<std::shared_ptr<const WhatIfResult>>());
}

// The review image is what reaches a postmortem: a knob asking for half of the one recorded
// sequence, and laws nothing decided, must be on it, not only in the notes.
void TestPredictionOverlay::reviewImageCarriesTheCaveats()
{
    SynthModel m = poolscope::testing::smallWindowModel();
    m.microBatch = 1;
    m.attention = SynthAttention::Inline; // a causal mask gives s, so b = T / s = 1 is known
    const auto doc = poolscope::testing::synthDocument(m);
    const DeviceDocument& dev = doc->device(0);
    auto contentFor = [&](Ratio batch) {
        Scenario s;
        s.batchScale = batch;
        return whatIfReviewContent(runWhatIf(doc->trace(), dev.device(), *dev.traceModel(), s), QStringLiteral("x.json"), false);
    };
    const ReviewContent half = contentFor(Ratio{1, 2});
    QVERIFY2(half.subtitle.contains(QStringLiteral("Caveat: the recorded micro-batch is 1 sequence of")), qPrintable(half.subtitle));
    QVERIFY(half.subtitle.contains(QStringLiteral("which no run can have")));
    // Two positions-or-tokens embeddings at b = 1: their bytes are on the image.
    QVERIFY2(half.subtitle.contains(QStringLiteral("fit two size laws")), qPrintable(half.subtitle));
    QVERIFY(!contentFor(Ratio{2, 1}).subtitle.contains(QStringLiteral("Caveat")));
}

QTEST_MAIN(TestPredictionOverlay)
#include "test_prediction_overlay.moc"
