#pragma once
// Every piece of text a window shows, as a reader meets it, and what is wrong with it: the window
// (every child widget) painted into a TextProbe with QWidget::render, and each chart (QCustomPlot
// draws through a pixmap the probe cannot read) painted again at its place with toPainter.
//
// A problem is text that is elided ("…" standing in for words), cut by the region it is drawn in,
// off the window, or lying on other text. Two things a reader can still get at are not problems:
// - text cut at the edge of an area that scrolls further that way (a table's last visible row, a
//   scrolled panel): the scroll bar reaches it;
// - an elided cell in a table's last column (the one that takes the rest of the width, e.g. a
//   frame's path) when the cell's tooltip holds the whole text;
// - an elided label in the call-site icicle (IcicleView): its boxes are as wide as their bytes, a
//   flame graph's labels elide by design, and the box's tooltip holds the whole frame.
// Pools are named as people say them ("KV cache"), never by their identifiers (`kv_cache`), in
// every text outside the tables of frames (a frame may name a user's own function or file).
// Text that carries "…" itself (an action "Export image…", a placeholder) is recognised from the
// widgets' own strings.
#include "core/classify/pool.h"
#include "widgets/text_probe.h"

#include <QAbstractItemView>
#include <QAbstractButton>
#include <QAction>
#include <QComboBox>
#include <QDockWidget>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QRegularExpression>
#include <QScrollBar>
#include <QTabBar>
#include <QWidget>
#include <qcustomplot.h>

#include <set>

namespace poolscope::testing {

struct WindowText {
    ProbedText probed;
    QWidget* widget = nullptr; // the widget the text's centre lies on
};

inline QString windowTextWhere(const QRectF& r)
{
    return QStringLiteral("(%1,%2 %3x%4)").arg(r.x(), 0, 'f', 0).arg(r.y(), 0, 'f', 0).arg(r.width(), 0, 'f', 0).arg(r.height(), 0, 'f', 0);
}

// The window's strings that end in "…" of their own: actions, buttons, tabs, placeholders, titles.
inline std::set<QString> ownEllipses(QWidget& window)
{
    std::set<QString> own;
    auto add = [&](QString s) {
        s.remove(QLatin1Char('&'));
        if (s.contains(QChar(0x2026)))
            own.insert(s);
    };
    for (QAction* a : window.findChildren<QAction*>())
        add(a->text());
    for (QAbstractButton* b : window.findChildren<QAbstractButton*>())
        add(b->text());
    for (QTabBar* t : window.findChildren<QTabBar*>())
        for (int i = 0; i < t->count(); ++i)
            add(t->tabText(i));
    for (QLineEdit* e : window.findChildren<QLineEdit*>())
        add(e->placeholderText());
    for (QDockWidget* d : window.findChildren<QDockWidget*>())
        add(d->windowTitle());
    for (QLabel* l : window.findChildren<QLabel*>())
        add(l->text());
    for (QComboBox* c : window.findChildren<QComboBox*>())
        for (int i = 0; i < c->count(); ++i)
            add(c->itemText(i));
    return own;
}

// Every text the window shows now, in window pixels.
inline std::vector<WindowText> windowTexts(QWidget& window)
{
    std::vector<WindowText> out;
    TextProbe probe(window.size());
    window.render(&probe);
    for (const ProbedText& t : probe.texts())
        out.push_back({t, nullptr});
    for (QCustomPlot* plot : window.findChildren<QCustomPlot*>()) {
        if (!plot->isVisible() || plot->width() <= 0 || plot->height() <= 0)
            continue;
        // Only the part of the chart the window shows (a chart in a scrolled area may be cut).
        const QRect shown = plot->visibleRegion().boundingRect().translated(plot->mapTo(&window, QPoint(0, 0)));
        if (shown.isEmpty())
            continue;
        TextProbe chart(plot->size());
        {
            QCPPainter painter(&chart);
            plot->toPainter(&painter, plot->width(), plot->height());
        }
        const QPointF at = plot->mapTo(&window, QPoint(0, 0));
        for (ProbedText t : chart.texts()) {
            t.box.translate(at);
            t.clip = t.clip.isNull() ? QRectF(shown) : t.clip.translated(at).intersected(QRectF(shown));
            out.push_back({t, nullptr});
        }
    }
    for (WindowText& t : out) {
        // Where it is seen; a text wholly outside its clip is looked for where the clip is, and so
        // is one that shows a sliver of a pixel (a scrolled text's next line, starting on the
        // viewport's last row: the sliver's centre rounds onto the widget below the viewport).
        QRectF seen = t.probed.clip.isNull() ? t.probed.box : t.probed.box.intersected(t.probed.clip);
        if (seen.isEmpty() || seen.height() < 2 || seen.width() < 2)
            seen = t.probed.clip;
        t.widget = window.childAt(seen.center().toPoint());
    }
    return out;
}

// A scroll area around `w` whose bar can still move the way the text is cut.
inline bool scrollsTo(QWidget* w, const ProbedText& t)
{
    const bool cutVertically = t.box.top() < t.clip.top() - 1 || t.box.bottom() > t.clip.bottom() + 1;
    const bool cutHorizontally = t.box.left() < t.clip.left() - 1 || t.box.right() > t.clip.right() + 1;
    for (; w; w = w->parentWidget())
        if (auto* area = qobject_cast<QAbstractScrollArea*>(w)) {
            // A bar turned off keeps its range but lets no reader get there.
            const bool v = area->verticalScrollBarPolicy() != Qt::ScrollBarAlwaysOff && area->verticalScrollBar()->maximum() > 0;
            const bool h = area->horizontalScrollBarPolicy() != Qt::ScrollBarAlwaysOff && area->horizontalScrollBar()->maximum() > 0;
            if ((!cutVertically || v) && (!cutHorizontally || h) && (v || h))
                return true;
        }
    return false;
}

// An elided cell of a table's last column whose tooltip has the whole text.
inline bool elidedWithTooltip(QWidget* w, const QRectF& box, QWidget& window)
{
    for (; w; w = w->parentWidget())
        if (auto* view = qobject_cast<QAbstractItemView*>(w)) {
            const QPoint p = view->viewport()->mapFrom(&window, box.center().toPoint());
            const QModelIndex index = view->indexAt(p);
            if (!index.isValid() || !view->model())
                return false;
            int last = view->model()->columnCount(index.parent()) - 1;
            if (auto* table = qobject_cast<QTableView*>(view))
                while (last > 0 && table->isColumnHidden(last))
                    --last;
            return index.column() == last && !index.data(Qt::ToolTipRole).toString().isEmpty();
        }
    return false;
}

// What a reader would trip over in the window as it is shown now; one line each, empty when none.
inline QStringList windowTextProblems(QWidget& window)
{
    const std::vector<WindowText> texts = windowTexts(window);
    const std::set<QString> own = ownEllipses(window);
    const QSize canvas = window.size();
    QStringList problems;
    auto name = [](const WindowText& t) {
        QString n = t.widget ? QString::fromLatin1(t.widget->metaObject()->className()) : QStringLiteral("?");
        for (QWidget* w = t.widget; w; w = w->parentWidget())
            if (!w->objectName().isEmpty() && !w->objectName().startsWith(QLatin1String("qt_"))) {
                n += QLatin1Char('@') + w->objectName();
                break;
            }
        return n;
    };
    for (const WindowText& t : texts) {
        const ProbedText& p = t.probed;
        const double tolerance = std::max(1.5, 0.1 * p.box.height());
        if (p.elided) {
            bool itsOwn = false;
            for (const QString& s : own)
                if (s == p.text || s.endsWith(p.text) || s.startsWith(p.text))
                    itsOwn = true;
            const bool icicle = t.widget && t.widget->inherits("poolscope::IcicleView");
            if (!itsOwn && !icicle && !elidedWithTooltip(t.widget, p.box, window))
                problems << QStringLiteral("elided in %1: '%2' %3").arg(name(t), p.text, windowTextWhere(p.box));
        }
        bool inTable = false;
        for (QWidget* w = t.widget; w && !inTable; w = w->parentWidget())
            inTable = qobject_cast<QAbstractItemView*>(w) || w->inherits("poolscope::IcicleView");
        if (!inTable)
            for (size_t k = 0; k < kPoolCount; ++k) {
                const QString id = QString::fromLatin1(poolName(Pool(k)).data(), int(poolName(Pool(k)).size()));
                if (id.contains(QLatin1Char('_')) && p.text.contains(QRegularExpression(QStringLiteral("\\b%1\\b").arg(id))))
                    problems << QStringLiteral("identifier '%1' in %2: '%3'").arg(id, name(t), p.text);
            }
        if (p.clipped(tolerance)) {
            if (!scrollsTo(t.widget, p))
                problems << QStringLiteral("cut in %1: '%2' %3 by %4").arg(name(t), p.text, windowTextWhere(p.box), windowTextWhere(p.clip));
        } else if (p.outside(canvas, tolerance)) {
            problems << QStringLiteral("off the window in %1: '%2' %3").arg(name(t), p.text, windowTextWhere(p.box));
        }
    }
    // Text on text: what each shows (its box within its clip) lies on another's. Lines of one
    // paragraph may share a pixel row of leading.
    for (size_t i = 0; i < texts.size(); ++i)
        for (size_t j = i + 1; j < texts.size(); ++j) {
            const ProbedText& a = texts[i].probed;
            const ProbedText& b = texts[j].probed;
            const QRectF sa = a.clip.isNull() ? a.box : a.box.intersected(a.clip);
            const QRectF sb = b.clip.isNull() ? b.box : b.box.intersected(b.clip);
            const QRectF both = sa.intersected(sb);
            const double minH = std::min(a.box.height(), b.box.height());
            if (both.width() > 2.0 && both.height() > std::max(1.5, 0.1 * minH))
                problems << QStringLiteral("overlap in %1 / %2: '%3' %4 and '%5' %6")
                                .arg(name(texts[i]), name(texts[j]), a.text, windowTextWhere(a.box), b.text, windowTextWhere(b.box));
        }
    return problems;
}

} // namespace poolscope::testing
