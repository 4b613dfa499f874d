// Replot time of the stacked timeline while scrubbing and zooming a ~1M-event trace, offscreen.
// Prints per-frame figures and, as the baseline measured in the same run, the same chart fed with
// every event (QCustomPlot's own adaptive sampling) instead of the core level of detail.
//
//   build/tests/bench/bench_replot [events=1000000] [width=1600] [height=900]
#include "tests/core/timeline/synthetic_trace.h"
#include "widgets/timeline_plot.h"

#include <QApplication>
#include <QElapsedTimer>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace poolscope;

namespace {

struct Stats {
    double median, p95, max;
};

Stats stats(std::vector<double> ms)
{
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 95 / 100)], ms.back()};
}

void print(const char* what, const Stats& s, double target)
{
    std::printf("  %-44s median %7.2f ms  p95 %7.2f ms  max %7.2f ms  %s\n", what, s.median, s.p95, s.max,
                s.p95 <= target ? "(within target)" : "(OVER target)");
}

template <typename F>
double timeMs(F&& f)
{
    QElapsedTimer t;
    t.start();
    f();
    return double(t.nsecsElapsed()) / 1e6;
}

} // namespace

int main(int argc, char** argv)
{
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    const size_t events = argc > 1 ? size_t(std::atoll(argv[1])) : 1'000'000;
    const int width = argc > 2 ? std::atoi(argv[2]) : 1600;
    const int height = argc > 3 ? std::atoi(argv[3]) : 900;
    QApplication app(argc, argv);
    const double target = 16.0;

    std::printf("bench_replot: synthetic trace, %zu events, %dx%d offscreen, target %.0f ms per frame\n", events, width, height, target);
    QElapsedTimer t;
    t.start();
    auto synth = testing::synthesize(testing::SynthOptions{.targetEvents = events, .seed = 42});
    std::printf("  generated %zu events, %zu allocations in %.2f s\n", synth.trace->devices[0].eventCount(),
                synth.trace->devices[0].allocations.size(), double(t.elapsed()) / 1e3);
    std::shared_ptr<const DeviceTimeline> tl;
    const double buildMs = timeMs([&] { tl = std::make_shared<DeviceTimeline>(synth.trace, 0, synth.pools); });
    std::printf("  DeviceTimeline (pool layers, LOD pyramid, alive index): %.1f ms, %zu layers\n", buildMs, tl->layers().size());

    TimelinePlot plot;
    plot.resize(width, height);
    plot.show();
    plot.setTimeline(tl);
    plot.setAxisMode(AxisMode::WallTime);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    const auto n = EventIndex(tl->device().eventCount());

    // Scrubbing: the cursor moves, the chart stays; only the buffered cursor layer repaints.
    std::vector<double> scrubLayer, scrubFull, zoomQuery, zoomFrame, panFrame;
    for (int i = 0; i < 300; ++i) {
        const EventIndex e = (n / 300) * i;
        scrubLayer.push_back(timeMs([&] {
            plot.setCursorEvent(e);
            plot.repaint();
        }));
    }
    for (int i = 0; i < 100; ++i) {
        const EventIndex e = (n / 100) * i + 7;
        scrubFull.push_back(timeMs([&] {
            plot.setCursorEvent(e);
            plot.replot(QCustomPlot::rpImmediateRefresh);
        }));
    }
    // Zooming in towards the peak and back out: every frame re-queries the LOD and redraws all.
    const double end = plot.xAxis->range().upper;
    const double peakKey = plot.eventKey(tl->device().peakIndex);
    for (int i = 0; i < 120; ++i) {
        const double f = std::pow(0.88, double(i % 60 < 30 ? i % 60 : 60 - i % 60));
        const double span = end * f;
        zoomFrame.push_back(timeMs([&] {
            plot.xAxis->setRange(peakKey - span / 2, peakKey + span / 2);
            plot.replot(QCustomPlot::rpImmediateRefresh);
        }));
        zoomQuery.push_back(timeMs([&] { plot.refreshData(); }));
    }
    plot.xAxis->setRange(0, end / 50);
    for (int i = 0; i < 100; ++i)
        panFrame.push_back(timeMs([&] {
            plot.xAxis->moveRange(end / 120);
            plot.replot(QCustomPlot::rpImmediateRefresh);
        }));

    std::printf("\nPoolScope (core LOD, %d columns):\n", plot.axisRect()->width());
    print("scrub, cursor layer only", stats(scrubLayer), target);
    print("scrub, full replot", stats(scrubFull), target);
    print("zoom, LOD query alone", stats(zoomQuery), target);
    print("zoom, query + full replot", stats(zoomFrame), target);
    print("pan, query + full replot", stats(panFrame), target);

    // Baseline: every event handed to QCustomPlot (its adaptive sampling on), same stack and fills.
    QCustomPlot naive;
    naive.resize(width, height);
    naive.show();
    const StackLod& lod = tl->lod();
    const auto& axis = tl->axis(AxisMode::WallTime);
    QCPGraph* below = nullptr;
    for (size_t k = 0; k < lod.layerCount(); ++k) {
        QVector<QCPGraphData> data(qsizetype(lod.eventCount()));
        for (size_t i = 0; i < lod.eventCount(); ++i)
            data[qsizetype(i)] = QCPGraphData(double(axis.position(EventIndex(i))) / 1e6, double(lod.cumulative(k, i + 1)) / double(int64_t(1) << 30));
        QCPGraph* g = naive.addGraph();
        g->data()->set(data, true);
        g->setLineStyle(QCPGraph::lsStepLeft);
        g->setBrush(QColor(100, 100, 200, 120));
        if (below)
            g->setChannelFillGraph(below);
        below = g;
    }
    naive.rescaleAxes();
    std::vector<double> naiveFull, naiveZoom;
    for (int i = 0; i < 5; ++i)
        naiveFull.push_back(timeMs([&] { naive.replot(QCustomPlot::rpImmediateRefresh); }));
    const double nend = naive.xAxis->range().upper;
    for (int i = 0; i < 10; ++i)
        naiveZoom.push_back(timeMs([&] {
            naive.xAxis->setRange(0, nend * std::pow(0.7, i));
            naive.replot(QCustomPlot::rpImmediateRefresh);
        }));
    std::printf("\nBaseline (all %zu events per graph, QCustomPlot adaptive sampling):\n", lod.eventCount());
    print("full view replot", stats(naiveFull), target);
    print("zoom + replot", stats(naiveZoom), target);
    std::printf("\nratio baseline/PoolScope, full-view frame (median): %.1fx\n", stats(naiveFull).median / stats(scrubFull).median);
    std::printf("ratio baseline/PoolScope, zoom frame (median): %.1fx\n", stats(naiveZoom).median / stats(zoomFrame).median);
    return 0;
}
