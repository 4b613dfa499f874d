#include "widgets/compare_view.h"

#include "core/util/units.h"
#include "widgets/compare_plot.h"
#include "widgets/review_image.h"

#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QSplitter>
#include <QScrollBar>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString bytes(int64_t b) { return qs(formatBytes(b)); }

QString delta(int64_t d)
{
    if (d == 0)
        return QStringLiteral("0");
    return (d < 0 ? QStringLiteral("−") : QStringLiteral("+")) + bytes(d < 0 ? -d : d);
}

QString ratio(const PoolChange& pc)
{
    if (auto r = pc.ratio()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "×%.2f", *r);
        return QString::fromUtf8(buf);
    }
    return pc.b > 0 ? QObject::tr("new") : QStringLiteral("–");
}

// The verdict's ASCII for the screen: "x2" as "×2", "->" as an arrow.
QString typeset(QString s)
{
    static const QRegularExpression times(QStringLiteral("\\bx(\\d)"));
    s.replace(times, QStringLiteral("×\\1"));
    s.replace(QStringLiteral(" -> "), QStringLiteral(" → "));
    return s;
}

} // namespace

void setPoolRows(CompareContent& content, const std::array<PoolChange, kPoolCount>& pools)
{
    content.rows.clear();
    content.changed.clear();
    for (size_t p = 0; p < kPoolCount; ++p) {
        const PoolChange& pc = pools[p];
        if (pc.a == 0 && pc.b == 0)
            continue;
        content.rows << QStringList{PoolPalette::label(Pool(p)), bytes(pc.a), bytes(pc.b), delta(pc.delta()), ratio(pc)};
        content.changed << pc.changed();
    }
}

CompareContent compareContentFor(const Comparison& c, bool dark)
{
    CompareContent content;
    content.dark = dark;
    content.runs = QObject::tr("A: %1   B: %2").arg(qs(c.runA), qs(c.runB));
    content.at = qs(std::string(compareMomentLabel(c.at)));
    content.title = QObject::tr("%1   at %2").arg(content.runs, content.at);
    content.verdict = typeset(qs(c.verdict));
    for (const CompareAxis& a : c.axes) {
        content.axes << typeset(qs(a.phrase));
        content.evidence << typeset(qs(a.evidence));
    }
    if (c.axes.empty())
        content.axes << QObject::tr("no axis changed");
    setPoolRows(content, c.pools);
    content.tableNote = QObject::tr("bold: moved by more than 10% and 64 MiB");
    const MomentPair& m = c.moment(c.at);
    auto phase = [](Phase p) { return qs(std::string(phaseName(p))).replace(QLatin1Char('_'), QLatin1Char(' ')); };
    if (m.phaseA != m.phaseB)
        content.tableNote += QObject::tr("; A's moment is in its %1, B's in its %2").arg(phase(m.phaseA), phase(m.phaseB));
    return content;
}

CompareView::CompareView(QWidget* parent) : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    m_title = new QLabel(this);
    QFont bold = m_title->font();
    bold.setBold(true);
    m_title->setFont(bold);
    m_title->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_verdict = new QLabel(this);
    m_verdict->setWordWrap(true);
    m_verdict->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_title);
    layout->addWidget(m_verdict);

    auto* split = new QSplitter(Qt::Vertical, this);
    m_plot = new ComparePlot(split);
    m_plot->setMinimumHeight(240);
    auto* bottom = new QSplitter(Qt::Horizontal, split);
    auto* tableBox = new QWidget(bottom);
    auto* tableLayout = new QVBoxLayout(tableBox);
    tableLayout->setContentsMargins(0, 0, 0, 0);
    m_table = new QTableWidget(tableBox);
    m_table->setFocusPolicy(Qt::NoFocus);
    m_tableNote = new QLabel(tableBox);
    m_tableNote->setWordWrap(true);
    tableLayout->addWidget(m_table, 1);
    tableLayout->addWidget(m_tableNote);
    m_table->setColumnCount(5);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->setVisible(false);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    auto* scroll = new QScrollArea(bottom);
    m_axes = new QLabel(scroll);
    m_axes->setWordWrap(true);
    m_axes->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_axes->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_axes->setMargin(6);
    scroll->setWidget(m_axes);
    scroll->setWidgetResizable(true);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    // Sizes as proportions (a splitter scales them to what it gets): the chart is the point, and the
    // axes' evidence reads as prose beside the table, not as a column of broken words.
    split->setSizes({640, 360});
    bottom->setSizes({560, 640});
    layout->addWidget(split, 1);
}

void CompareView::setComparison(const Comparison& comparison, const ComparisonChart& chart, const PoolPalette& palette)
{
    m_content = compareContentFor(comparison, palette.dark());
    m_momentContent = m_content;
    m_title->setText(m_content.title);
    m_verdict->setText(m_content.verdict);
    m_plot->setChart(chart, palette);
    fillTable();
}

void CompareView::showCursorMoment(const std::array<PoolChange, kPoolCount>& pools, EventIndex eventA, EventIndex eventB)
{
    m_content = m_momentContent;
    setPoolRows(m_content, pools);
    const QString at = tr("at the cursor (A event %1, B event %2)").arg(eventA).arg(eventB);
    m_content.title = m_momentContent.runs + QStringLiteral("   ") + at;
    m_content.tableNote = tr("%1; the verdict above speaks of %2").arg(at, m_momentContent.at);
    m_title->setText(m_content.title);
    fillTable();
}

void CompareView::showNamedMoment()
{
    m_content = m_momentContent;
    m_title->setText(m_content.title);
    fillTable();
}

void CompareView::fillTable()
{
    m_table->clear();
    m_table->setHorizontalHeaderLabels(m_content.header);
    m_table->setRowCount(int(m_content.rows.size()));
    m_tableNote->setText(m_content.tableNote);
    for (int r = 0; r < int(m_content.rows.size()); ++r)
        for (int col = 0; col < 5; ++col) {
            auto* item = new QTableWidgetItem(m_content.rows[r].value(col));
            item->setTextAlignment(col == 0 ? Qt::AlignLeft | Qt::AlignVCenter : Qt::AlignRight | Qt::AlignVCenter);
            if (m_content.changed.value(r)) {
                QFont f = item->font();
                f.setBold(true);
                item->setFont(f);
                item->setToolTip(tr("moved by more than 10% and 64 MiB"));
            }
            m_table->setItem(r, col, item);
        }
    // The table keeps its columns whole (delta and ratio are what it is read for): its side of the
    // splitter does not shrink below them, the axes' prose beside it wraps instead.
    m_table->setMinimumWidth(m_table->horizontalHeader()->length() + m_table->verticalScrollBar()->sizeHint().width() + 2 * m_table->frameWidth());
    QString axes;
    for (int i = 0; i < m_content.axes.size(); ++i)
        axes += QStringLiteral("<p><b>%1</b><br>%2</p>").arg(m_content.axes[i].toHtmlEscaped(), m_content.evidence.value(i).toHtmlEscaped());
    m_axes->setText(axes);
}

namespace {

// Lays the comparison out on `size` and returns the canvas height it needs: `size`'s, or taller
// where the wrapped text and a readable chart need more (as the review image grows). Paints it
// when `painter` is given.
int layoutComparison(QCPPainter* painter, ComparePlot& plot, const CompareContent& c, QSize size)
{
    const ImageCanvas canvas = ImageCanvas::make(plot.font(), size, c.dark, 20, 12);
    const QColor fg = canvas.foreground, rule = canvas.rule;
    const int margin = canvas.margin;
    const double scale = canvas.scale;
    const QFont& titleFont = canvas.title;
    const QFont& textFont = canvas.text;
    const QFont& smallFont = canvas.small;
    const int innerW = size.width() - 2 * margin;

    // Wrapped text is measured, never elided or held to a number of lines: the title (the two
    // files' names), the verdict and each axis's evidence are what the image is for (a five-line
    // verdict lost its fifth line, the evidence its end and a title its middle to "…", on real
    // pairs at 1000x600); the chart takes what is left, and the canvas grows below a readable chart.
    auto wrapped = [](const QFontMetrics& fm, const QString& text, int width) {
        constexpr int kTall = 1 << 20;
        int flags = Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap;
        if (fm.boundingRect(QRect(0, 0, width, kTall), flags, text).width() > width) // one word wider than the line
            flags = Qt::AlignLeft | Qt::AlignTop | Qt::TextWrapAnywhere;
        return std::pair<int, int>(flags, text.isEmpty() ? 0 : fm.boundingRect(QRect(0, 0, width, kTall), flags, text).height() + 1);
    };
    const auto [titleFlags, titleH] = wrapped(QFontMetrics(titleFont), c.title, innerW);
    const auto [verdictFlags, verdictH] = wrapped(QFontMetrics(textFont), c.verdict, innerW);
    const int chartTop = margin + titleH + 4 + verdictH + 8;

    // The axes at the bottom: each phrase in bold and its evidence in full under it.
    const QFontMetrics sm(smallFont);
    QFont axisFont = smallFont;
    axisFont.setBold(true);
    const QFontMetrics axisM(axisFont);
    int axesH = 0;
    for (int i = 0; i < c.axes.size(); ++i)
        axesH += wrapped(axisM, c.axes[i], innerW).second + wrapped(sm, c.evidence.value(i), innerW).second + 4;

    // Table on the right of the chart, sized to its widest cells.
    QFont smallBold = smallFont;
    smallBold.setBold(true);
    const QFontMetrics smb(smallBold);
    QList<int> widths;
    for (int col = 0; col < c.header.size(); ++col) {
        int w = smb.horizontalAdvance(c.header[col]);
        for (int r = 0; r < c.rows.size(); ++r)
            w = std::max(w, (c.changed.value(r) ? smb : sm).horizontalAdvance(c.rows[r].value(col)));
        widths << w;
    }
    const int gap = sm.horizontalAdvance(QStringLiteral("   "));
    int tableW = 0;
    for (int w : widths)
        tableW += w + gap;
    // The table beside the chart when that leaves the chart more than half the width; under it
    // otherwise (a 1000x600 image at full text size), so the chart keeps its legend and axis title.
    const int rowH = sm.height() + int(5 * scale);
    const bool beside = tableW <= innerW * 45 / 100;
    const int noteW = beside ? tableW - gap : innerW;
    const auto [noteFlags, noteH] = wrapped(sm, c.tableNote, noteW);
    const int tableH = int(c.rows.size() + 1) * rowH + 4 + noteH + 8; // rows, then the note
    const int minChartH = std::max(int(240 * scale), beside ? tableH : 0);
    const int height = std::max(size.height(), chartTop + minChartH + 8 + (beside ? 0 : tableH + margin) + axesH + margin);
    if (!painter)
        return height;

    painter->fillRect(QRect(0, 0, size.width(), height), canvas.background);
    painter->setPen(fg);
    painter->setFont(titleFont);
    painter->drawText(QRect(margin, margin, innerW, titleH), titleFlags, c.title);
    painter->setFont(textFont);
    painter->drawText(QRect(margin, margin + titleH + 4, innerW, verdictH), verdictFlags, c.verdict);
    const int y = chartTop;
    const int axesTop = height - margin - axesH;
    const int chartW = beside ? innerW - tableW - margin : innerW;
    const int chartH = std::max(minChartH, axesTop - y - 8 - (beside ? 0 : tableH + margin));
    // The chart at the text's scale, so its labels match the text around it at every size.
    painter->save();
    painter->translate(margin, y);
    painter->scale(scale, scale);
    plot.toPainter(painter, int(std::max(200, chartW) / scale), int(chartH / scale));
    painter->restore();

    int ty = beside ? y + 4 : y + chartH + margin, x0 = beside ? size.width() - margin - tableW : margin;
    auto drawRow = [&](const QStringList& r, bool strong) {
        QFont f = smallFont;
        f.setBold(strong);
        painter->setFont(f);
        painter->setPen(fg);
        int x = x0;
        for (int col = 0; col < widths.size(); ++col) {
            painter->drawText(QRect(x, ty, widths[col], rowH), (col == 0 ? Qt::AlignLeft : Qt::AlignRight) | Qt::AlignVCenter, r.value(col));
            x += widths[col] + gap;
        }
        ty += rowH;
        painter->setPen(QPen(rule, 1));
        painter->drawLine(QLineF(x0, ty, x0 + tableW - gap, ty));
    };
    drawRow(c.header, true);
    for (int i = 0; i < c.rows.size(); ++i)
        drawRow(c.rows[i], c.changed.value(i));
    painter->setFont(smallFont);
    painter->setPen(fg);
    painter->drawText(QRect(x0, ty + 4, noteW, noteH), noteFlags, c.tableNote);

    int ay = axesTop;
    for (int i = 0; i < c.axes.size(); ++i) {
        painter->setFont(axisFont);
        const auto [axisFlags, axisH] = wrapped(axisM, c.axes[i], innerW);
        painter->drawText(QRect(margin, ay, innerW, axisH), axisFlags, c.axes[i]);
        ay += axisH;
        if (!c.evidence.value(i).isEmpty()) {
            painter->setFont(smallFont);
            const auto [evidenceFlags, evidenceH] = wrapped(sm, c.evidence[i], innerW);
            painter->drawText(QRect(margin, ay, innerW, evidenceH), evidenceFlags, c.evidence[i]);
            ay += evidenceH;
        }
        ay += 4;
    }
    return height;
}

} // namespace

QSize comparisonImageSize(ComparePlot& plot, const CompareContent& content, QSize size)
{
    return {size.width(), layoutComparison(nullptr, plot, content, size)};
}

void paintComparisonImage(QCPPainter& painter, ComparePlot& plot, const CompareContent& content, QSize size)
{
    layoutComparison(&painter, plot, content, size);
}

QImage renderComparisonImage(ComparePlot& plot, const CompareContent& content, QSize size)
{
    QImage image(comparisonImageSize(plot, content, size), QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::white);
    QCPPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setRenderHint(QPainter::TextAntialiasing);
    layoutComparison(&painter, plot, content, size);
    painter.end();
    return image;
}

bool saveComparisonImage(const QString& path, ComparePlot& plot, const CompareContent& content, QSize size, QString* error)
{
    return savePaintedImage(path, comparisonImageSize(plot, content, size), content.title, content.verdict,
                            [&](QCPPainter& painter) { layoutComparison(&painter, plot, content, size); }, error);
}

bool saveComparisonImage(const QString& path, const Comparison& comparison, const ComparisonChart& chart, QSize size, bool dark,
                         QString* error)
{
    ComparePlot plot;
    plot.resize(size);
    plot.setChart(chart, PoolPalette(dark));
    return saveComparisonImage(path, plot, compareContentFor(comparison, dark), size, error);
}

} // namespace poolscope
