// What one cursor move costs in the whole window on a large dump: the chart's cursor layer, the
// breakdown panel, the tensors alive at the cursor (sorted, filtered), the allocator view, and the
// repaint of all of it, offscreen. Baseline measured in the same run: a full replot of the chart per
// move (what scrubbing would cost if the chart redrew everything).
//
//   build/tests/bench/bench_scrub [FILE=/tmp/poolscope-bench/snapshot_1000000.pickle] [moves=200]
// Make FILE with tests/bench/make_big_snapshot.py (see docs/performance.md).
#include "core/load.h"
#include "tests/bench/bench_stats.h"
#include "core/engine/document.h"
#include "widgets/main_window.h"
#include "widgets/timeline_plot.h"

#include <QApplication>
#include <QElapsedTimer>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace poolscope;
using poolscope::bench::Stats;
using poolscope::bench::stats;

namespace {

// Its labels are a little longer than bench_replot's.
void line(const char* what, const Stats& s, double target) { bench::print(what, s, target, 46); }

} // namespace

int main(int argc, char** argv)
{
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    const std::string file = argc > 1 ? argv[1] : "/tmp/poolscope-bench/snapshot_1000000.pickle";
    const int moves = argc > 2 ? std::max(10, std::atoi(argv[2])) : 200;
    // The offscreen platform says so on every dock re-layout; it is not a finding.
    qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& msg) {
        if (!msg.contains(QLatin1String("propagateSizeHints")) && !msg.contains(QLatin1String("XDG_RUNTIME_DIR")))
            std::fprintf(stderr, "%s%s\n", type == QtWarningMsg ? "warning: " : "", qPrintable(msg));
    });
    QApplication app(argc, argv);
    const double target = 33.0;

    QElapsedTimer t;
    t.start();
    std::shared_ptr<const Document> doc;
    try {
        DocumentOptions options;
        options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
        doc = Document::open(file, options);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_scrub: %s\n(make the file with tests/bench/make_big_snapshot.py)\n", e.what());
        return 2;
    }
    const double documentS = double(t.elapsed()) / 1e3;
    MainWindow w;
    w.resize(1600, 900);
    w.show();
    QApplication::processEvents(); // the empty window's first show is not the document's
    QElapsedTimer shown;
    shown.start();
    w.setDocument(doc, QString::fromStdString(file));
    QApplication::processEvents();
    const double windowS = double(shown.elapsed()) / 1e3;
    TimelinePlot* plot = w.plot();
    const auto n = EventIndex(plot->timeline()->device().eventCount());
    std::printf("bench_scrub: %s, %lld events, opened in %.3f s (document %.3f s, then the window's panels and first paint %.3f s), "
                "window 1600x900 offscreen, target %.0f ms per move\n",
                file.c_str(), static_cast<long long>(n), documentS + windowS, documentS, windowS, target);

    // Moves spread over the whole trace (each lands on a different set of alive tensors), then
    // single-event steps as the arrow keys make them.
    auto run = [&](bool fullReplot) {
        std::vector<double> spread, steps;
        auto move = [&](EventIndex e) {
            QElapsedTimer m;
            m.start();
            plot->setCursorEvent(e);
            if (fullReplot)
                plot->replot(QCustomPlot::rpImmediateRefresh);
            QApplication::processEvents(); // the coalesced panel update and every repaint it causes
            return double(m.nsecsElapsed()) / 1e6;
        };
        for (int i = 0; i < moves; ++i)
            spread.push_back(move(EventIndex((n - 1) * (i * 37 % moves) / moves)));
        const EventIndex from = plot->timeline()->device().peakIndex;
        for (int i = 0; i < moves; ++i)
            steps.push_back(move(std::max<EventIndex>(0, from - moves / 2 + i)));
        return std::pair(stats(spread), stats(steps));
    };
    const auto [spread, steps] = run(false);
    std::printf("\nPoolScope (cursor layer + panels):\n");
    line("jump anywhere (chart, breakdown, tensors, segments)", spread, target);
    line("arrow-key steps around the peak", steps, target);
    const auto [spreadFull, stepsFull] = run(true);
    std::printf("\nBaseline: the same moves with a full chart replot each:\n");
    line("jump anywhere", spreadFull, target);
    line("arrow-key steps around the peak", stepsFull, target);
    // Zooming towards the peak and back out in the window, as the wheel does: a new level-of-detail
    // query and a full chart replot per frame (the panels stay, the cursor does not move).
    auto zoomFrames = [&] {
        std::vector<double> zoom;
        plot->resetView();
        QApplication::processEvents();
        const double end = plot->xAxis->range().upper;
        const double peak = plot->eventKey(plot->timeline()->device().peakIndex);
        for (int i = 0; i < 120; ++i) {
            const double span = end * std::pow(0.85, double(i % 60 < 30 ? i % 60 : 60 - i % 60));
            QElapsedTimer m;
            m.start();
            plot->xAxis->setRange(peak - span / 2, peak + span / 2);
            plot->replot(QCustomPlot::rpImmediateRefresh);
            QApplication::processEvents();
            zoom.push_back(double(m.nsecsElapsed()) / 1e6);
        }
        return stats(zoom);
    };
    const Stats zoom = zoomFrames();
    // The same without the phase bands (one rectangle and one label item per band): what they cost.
    const size_t bands = plot->itemCount();
    plot->setTimeline(doc->device(doc->defaultDevice()).timelinePtr(), {});
    const Stats zoomNoBands = zoomFrames();
    std::printf("\nZoom frames in the window (LOD query + full chart replot):\n");
    line("zoom in and out around the peak", zoom, 16.0);
    std::printf("  (the same without the phase bands, %zu items before, %d after:)\n", bands, plot->itemCount());
    line("zoom in and out, no phase bands", zoomNoBands, 16.0);
    std::printf("\nratio baseline/PoolScope (median): jumps %.1fx, steps %.1fx\n", spreadFull.median / spread.median,
                stepsFull.median / steps.median);
    return 0;
}
