// Replot time of the stacked timeline while scrubbing, zooming (to a fiftieth of the trace, and on to
// a few tens of events) and panning a ~1M-event trace, offscreen.
// Prints per-frame figures and, as baselines measured in the same run: the same level-of-detail data
// filled by QCustomPlot's own polygon fills, and the chart fed with every event (QCustomPlot's adaptive
// sampling) instead of the core level of detail.
//
//   build/tests/bench/bench_replot [events=1000000] [width=1600] [height=900]
//   BENCH_REPLOT_SKIP_ALL_EVENTS=1 skips the all-events baseline (minutes at 1M events).
#include "tests/bench/bench_stats.h"
#include "tests/core/timeline/synthetic_trace.h"
#include "widgets/stack_fill.h"
#include "widgets/timeline_plot.h"

#include <QApplication>
#include <QElapsedTimer>

#include <ctime>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace poolscope;
using poolscope::bench::print;
using poolscope::bench::Stats;
using poolscope::bench::stats;

namespace {

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
    const double buildMs = timeMs([&] { tl = testing::documentOf(synth)->device(0).timelinePtr(); });
    std::printf("  DeviceTimeline (pool layers, LOD pyramid, alive index): %.1f ms, %zu layers\n", buildMs, tl->layers().size());

    TimelinePlot plot;
    plot.resize(width, height);
    plot.show();
    plot.setTimeline(tl);
    plot.setAxisMode(AxisMode::WallTime);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    const auto n = EventIndex(tl->device().eventCount());

    // One set of frames: scrubbing (cursor layer alone, then full replots), zooming towards the peak
    // and back out (every frame re-queries the LOD and redraws all), panning a zoomed view.
    struct Frames {
        std::vector<double> scrubLayer, scrubFull, zoomQuery, zoomFrame, deepZoomFrame, panFrame;
    };
    const double end = plot.xAxis->range().upper;
    const double peakKey = plot.eventKey(tl->device().peakIndex);
    auto measure = [&] {
        Frames f;
        plot.resetView();
        plot.replot(QCustomPlot::rpImmediateRefresh);
        for (int i = 0; i < 300; ++i) {
            const EventIndex e = (n / 300) * i;
            f.scrubLayer.push_back(timeMs([&] {
                plot.setCursorEvent(e);
                plot.repaint();
            }));
        }
        for (int i = 0; i < 100; ++i) {
            const EventIndex e = (n / 100) * i + 7;
            f.scrubFull.push_back(timeMs([&] {
                plot.setCursorEvent(e);
                plot.replot(QCustomPlot::rpImmediateRefresh);
            }));
        }
        for (int i = 0; i < 120; ++i) {
            const double z = std::pow(0.88, double(i % 60 < 30 ? i % 60 : 60 - i % 60));
            const double span = end * z;
            f.zoomFrame.push_back(timeMs([&] {
                plot.xAxis->setRange(peakKey - span / 2, peakKey + span / 2);
                plot.replot(QCustomPlot::rpImmediateRefresh);
            }));
            f.zoomQuery.push_back(timeMs([&] { plot.refreshData(); }));
        }
        // Deeper, to a few tens of events around the peak and back (0.7^30 of the trace).
        for (int i = 0; i < 60; ++i) {
            const double span = end * std::pow(0.7, double(i < 30 ? i : 60 - i));
            f.deepZoomFrame.push_back(timeMs([&] {
                plot.xAxis->setRange(peakKey - span / 2, peakKey + span / 2);
                plot.replot(QCustomPlot::rpImmediateRefresh);
            }));
        }
        plot.xAxis->setRange(0, end / 50);
        for (int i = 0; i < 100; ++i)
            f.panFrame.push_back(timeMs([&] {
                plot.xAxis->moveRange(end / 120);
                plot.replot(QCustomPlot::rpImmediateRefresh);
            }));
        return f;
    };
    auto report = [&](const Frames& f) {
        print("scrub, cursor layer only", stats(f.scrubLayer), target);
        print("scrub, full replot", stats(f.scrubFull), target);
        print("zoom, LOD query alone", stats(f.zoomQuery), target);
        print("zoom, query + full replot", stats(f.zoomFrame), target);
        print("deep zoom (to ~20 events), query + replot", stats(f.deepZoomFrame), target);
        print("pan, query + full replot", stats(f.panFrame), target);
    };

    // The fill image alone: wall time, and CPU time of the whole process (less disturbed by other
    // processes than wall time; it counts both painting threads), then the same on one thread.
    if (auto* fill = plot.layer(QStringLiteral("fills")) ? dynamic_cast<StackFill*>(plot.layer(QStringLiteral("fills"))->children().value(0)) : nullptr) {
        plot.resetView();
        plot.replot(QCustomPlot::rpImmediateRefresh);
        std::printf("\n");
        for (bool parallel : {true, false}) {
            fill->setParallel(parallel);
            std::vector<double> wall, cpu;
            for (int i = 0; i < 200; ++i) {
                timespec a{}, b{};
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
                wall.push_back(timeMs([&] { (void)fill->render(plot.axisRect()->rect(), 1.0); }));
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
                cpu.push_back(double(b.tv_sec - a.tv_sec) * 1e3 + double(b.tv_nsec - a.tv_nsec) / 1e6);
            }
            print(parallel ? "fill image alone, two threads (wall)" : "fill image alone, one thread (wall)", stats(wall), target);
            print(parallel ? "fill image alone, two threads (CPU)" : "fill image alone, one thread (CPU)", stats(cpu), target);
        }
        fill->setParallel(true);
    }
    plot.setRasterFill(true);
    const Frames raster = measure();
    std::printf("\nPoolScope (core LOD, %d columns, fills written as pixel columns):\n", plot.axisRect()->width());
    report(raster);

    // Baseline 1: the same LOD data, filled by QCustomPlot's channel-fill polygons (QPainter).
    plot.setRasterFill(false);
    const Frames polygons = measure();
    plot.setRasterFill(true);
    std::printf("\nBaseline: same LOD, QCustomPlot polygon fills:\n");
    report(polygons);
    std::printf("ratio polygon/raster fills, median: full replot %.1fx, zoom frame %.1fx, pan frame %.1fx\n",
                stats(polygons.scrubFull).median / stats(raster.scrubFull).median,
                stats(polygons.zoomFrame).median / stats(raster.zoomFrame).median,
                stats(polygons.panFrame).median / stats(raster.panFrame).median);
    if (std::getenv("BENCH_REPLOT_SKIP_ALL_EVENTS"))
        return 0; // the all-events baseline below takes minutes

    // Baseline 2: every event handed to QCustomPlot (its adaptive sampling on), same stack and fills.
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
    std::printf("\nBaseline: all %zu events per graph, QCustomPlot adaptive sampling):\n", lod.eventCount());
    print("full view replot", stats(naiveFull), target);
    print("zoom + replot", stats(naiveZoom), target);
    std::printf("\nratio baseline/PoolScope, full-view frame (median): %.1fx\n", stats(naiveFull).median / stats(raster.scrubFull).median);
    std::printf("ratio baseline/PoolScope, zoom frame (median): %.1fx\n", stats(naiveZoom).median / stats(raster.zoomFrame).median);
    return 0;
}
