// The compare view: the chart of two runs on one axis, the per-pool table, the axes and the verdict,
// and the comparison's review image in each format.
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/compare/comparison_chart.h"
#include "core/synth/synth.h"
#include "widgets/compare_plot.h"
#include "widgets/compare_view.h"

#include "core/compare/compare_runs.h"

#include <QLabel>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

using namespace poolscope;

namespace {

std::shared_ptr<poolscope::testing::CompareRun> make(int64_t seq)
{
    auto run = poolscope::testing::compareRun(poolscope::testing::smallCompareModel(seq));
    run->trace->path = seq == 256 ? "a.pickle" : "b.pickle";
    return run;
}

// Distinct colours in a region: a blank or one-colour image has one or two.
int colours(const QImage& image, QRect r)
{
    QSet<QRgb> seen;
    for (int y = r.top(); y < r.bottom(); y += 3)
        for (int x = r.left(); x < r.right(); x += 3)
            seen.insert(image.pixel(x, y));
    return int(seen.size());
}

} // namespace

class TestCompareView : public QObject {
    Q_OBJECT
    std::shared_ptr<poolscope::testing::CompareRun> m_a, m_b;
    Comparison m_comparison;
    ComparisonChart m_chart;

private slots:
    void initTestCase()
    {
        m_a = make(256);
        m_b = make(1024);
        m_comparison = compareRuns(m_a->input(), m_b->input());
        m_chart = comparisonChart(m_a->input(), m_b->input(), m_comparison);
        QVERIFY(m_comparison.oneAxis);
    }

    void showsTableAxesAndVerdict()
    {
        CompareView view;
        view.resize(1200, 800);
        view.setComparison(m_comparison, m_chart, PoolPalette(false));
        const CompareContent& c = view.content();
        QCOMPARE(view.table()->rowCount(), int(c.rows.size()));
        QCOMPARE(view.table()->columnCount(), 5);
        int activationRow = -1;
        for (int r = 0; r < view.table()->rowCount(); ++r)
            if (view.table()->item(r, 0)->text() == QLatin1String("activation"))
                activationRow = r;
        QVERIFY(activationRow >= 0);
        QVERIFY(view.table()->item(activationRow, 0)->font().bold()); // moved by more than 10 % and 64 MiB
        QVERIFY(view.table()->item(activationRow, 3)->text().startsWith(QStringLiteral("+")));
        QVERIFY(view.table()->item(activationRow, 4)->text().startsWith(QStringLiteral("×")));
        QCOMPARE(c.axes, QStringList{QStringLiteral("sequence ×4")});
        QVERIFY(c.verdict.startsWith(QStringLiteral("One axis changed: sequence ×4.")));
        QVERIFY(c.title.contains(QStringLiteral("a.pickle")) && c.title.contains(QStringLiteral("b.pickle")));
        bool verdictShown = false, axesShown = false;
        for (QLabel* l : view.findChildren<QLabel*>()) {
            verdictShown |= l->text() == c.verdict;
            axesShown |= l->text().contains(QStringLiteral("sequence ×4"));
        }
        QVERIFY(verdictShown);
        QVERIFY(axesShown);
    }

    void chartHasBothRuns()
    {
        ComparePlot plot;
        plot.resize(900, 500);
        plot.setChart(m_chart, PoolPalette(false));
        // One filled graph per layer for B, one outline per layer for A, and the two legend keys.
        QCOMPARE(plot.graphCount(), int(2 * m_chart.layers.size() + 2));
        int filled = 0, outlined = 0;
        for (int i = 0; i < plot.graphCount(); ++i) {
            const QCPGraph* g = plot.graph(i);
            if (g->brush().style() != Qt::NoBrush && g->data()->size() > 0)
                ++filled;
            else if (g->pen().style() != Qt::NoPen && g->data()->size() > 0)
                ++outlined;
        }
        QCOMPARE(filled, int(m_chart.layers.size()));
        QCOMPARE(outlined, int(m_chart.layers.size()));
        QVERIFY(plot.yAxis->range().upper * plot.unitBytes() >= double(m_b->trace->devices[0].peakAllocated));
        QCOMPARE(plot.yAxis->label(), QStringLiteral("memory (GiB)"));
    }

    void imageInEveryFormat()
    {
        ComparePlot plot;
        plot.resize(1200, 700);
        plot.setChart(m_chart, PoolPalette(false));
        const CompareContent content = compareContentFor(m_comparison, false);
        const QImage image = renderComparisonImage(plot, content, QSize(1600, 1000));
        QCOMPARE(image.size(), QSize(1600, 1000));
        QVERIFY(colours(image, QRect(40, 150, 800, 600)) > 20); // the chart's fills, outlines and text
        QVERIFY(colours(image, QRect(1150, 100, 400, 200)) > 4); // the table's text
        QTemporaryDir dir;
        for (const char* ext : {"png", "svg", "pdf"}) {
            const QString path = dir.filePath(QStringLiteral("compare.") + ext);
            QString error;
            QVERIFY2(saveComparisonImage(path, plot, content, QSize(1600, 1000), &error), qPrintable(error));
            QVERIFY(QFileInfo(path).size() > 10000);
        }
        QFile svg(dir.filePath(QStringLiteral("compare.svg")));
        QVERIFY(svg.open(QIODevice::ReadOnly));
        const QByteArray text = svg.readAll();
        QVERIFY(text.contains("<path")); // vectors, not a picture of the chart
        QString error;
        QVERIFY(saveComparisonImage(dir.filePath(QStringLiteral("dark.png")), m_comparison, m_chart, QSize(1200, 800), true, &error));
        QImage dark(dir.filePath(QStringLiteral("dark.png")));
        QCOMPARE(dark.size(), QSize(1200, 800));
        QVERIFY(qGray(dark.pixel(5, 5)) < 64); // the dark palette's background
        QVERIFY(!saveComparisonImage(dir.filePath(QStringLiteral("compare.bmp")), plot, content, QSize(800, 600), &error));
        QVERIFY(error.contains(QStringLiteral("expected png, svg or pdf")));
    }
};

QTEST_MAIN(TestCompareView)
#include "test_compare_view.moc"
