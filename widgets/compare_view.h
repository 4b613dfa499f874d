#pragma once
#include "core/compare/comparison.h"
#include "core/compare/comparison_chart.h"
#include "widgets/pool_palette.h"

#include <QImage>
#include <QList>
#include <QString>
#include <QStringList>
#include <QWidget>

class QLabel;
class QTableWidget;

class QCPPainter;

namespace poolscope {

class ComparePlot;

// What the comparison shows besides the chart, as text: the title, the verdict, the axes with their
// evidence, and the per-pool table at the compared moment (pool, A, B, delta, ratio).
struct CompareContent {
    QString title; // runs and moment
    QString runs;  // "A: …   B: …"
    QString at;    // "the peak"
    QString verdict;
    QStringList axes;     // "sequence x2", one per axis
    QStringList evidence; // parallel to axes
    QStringList header{QStringLiteral("pool"), QStringLiteral("A"), QStringLiteral("B"), QStringLiteral("delta"), QStringLiteral("ratio")};
    QList<QStringList> rows;
    QList<bool> changed; // parallel to rows: moved by more than 10 % and 64 MiB
    QString tableNote;   // under the table: what the bold rows mean, and where the moments fall
    bool dark = false;
};

CompareContent compareContentFor(const Comparison& c, bool dark);
// The table's rows from each pool's bytes in A and B (pools absent from both left out).
void setPoolRows(CompareContent& content, const std::array<PoolChange, kPoolCount>& pools);

// Two runs side by side: A's stack as outlines over B's filled stack on one aligned axis, the
// per-pool diff table, the axes that changed with their evidence, and the verdict.
class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    void setComparison(const Comparison& comparison, const ComparisonChart& chart, const PoolPalette& palette);
    // The table at a cursor's pair of events instead of the comparison's moment (the verdict stays
    // the moment's, and the note under the table says so); showNamedMoment() goes back.
    void showCursorMoment(const std::array<PoolChange, kPoolCount>& pools, EventIndex eventA, EventIndex eventB);
    void showNamedMoment();

    ComparePlot* plot() const { return m_plot; }
    QTableWidget* table() const { return m_table; }
    const CompareContent& content() const { return m_content; }

private:
    void fillTable();
    ComparePlot* m_plot = nullptr;
    QLabel* m_title = nullptr;
    QLabel* m_verdict = nullptr;
    QLabel* m_axes = nullptr;
    QTableWidget* m_table = nullptr;
    QLabel* m_tableNote = nullptr;
    CompareContent m_content;
    CompareContent m_momentContent; // the comparison's own moment
};

// The comparison as one image: title, verdict, chart with the table beside it, axes below.
QImage renderComparisonImage(ComparePlot& plot, const CompareContent& content, QSize size);
// The same painted on `painter`'s device (the text-fit test paints into a TextProbe), laid out for
// `size`: the canvas is `size`, taller where the wrapped text and a readable chart need more.
void paintComparisonImage(QCPPainter& painter, ComparePlot& plot, const CompareContent& content, QSize size);
QSize comparisonImageSize(ComparePlot& plot, const CompareContent& content, QSize size);
// PNG, SVG or PDF by the file's extension; false and a message on failure.
bool saveComparisonImage(const QString& path, ComparePlot& plot, const CompareContent& content, QSize size, QString* error);
// The same from the comparison alone (what `render A --compare B` and an export need): the plot is
// made, sized and drawn here with the light or dark palette.
bool saveComparisonImage(const QString& path, const Comparison& comparison, const ComparisonChart& chart, QSize size, bool dark,
                         QString* error);

} // namespace poolscope
