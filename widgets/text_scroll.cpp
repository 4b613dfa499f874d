#include "widgets/text_scroll.h"

#include <QAbstractTextDocumentLayout>
#include <QEvent>
#include <QLabel>
#include <QResizeEvent>
#include <QTextBlock>
#include <QTextDocument>
#include <QTextLayout>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace poolscope {

QString breakableWords(const QString& plain, int longWord)
{
    QString out;
    out.reserve(plain.size() + plain.size() / 8);
    qsizetype start = 0;
    while (start < plain.size()) {
        qsizetype end = start;
        while (end < plain.size() && !plain.at(end).isSpace())
            ++end;
        const QStringView word = QStringView(plain).mid(start, end - start);
        if (word.size() <= longWord) {
            out += word;
        } else {
            for (qsizetype i = 0; i < word.size(); ++i) {
                out += word.at(i);
                const QChar c = word.at(i);
                const bool pairColon = c == QLatin1Char(':') && i + 1 < word.size() && word.at(i + 1) == QLatin1Char(':');
                if (!pairColon && i + 1 < word.size() && QStringView(u"\\.:_=,").contains(c))
                    out += QChar(0x200B);
            }
        }
        while (end < plain.size() && plain.at(end).isSpace())
            out += plain.at(end++);
        start = end;
    }
    return out;
}

TextScroll::TextScroll(double maxShare, QWidget* parent) : QScrollArea(parent), m_maxShare(maxShare), m_column(new QWidget), m_layout(new QVBoxLayout(m_column))
{
    m_layout->setContentsMargins(0, 0, 0, 0);
    m_layout->setSpacing(4);
    m_layout->addStretch(1);
    setWidget(m_column);
    setWidgetResizable(true);
    setFrameShape(QFrame::NoFrame);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Maximum);
    m_column->installEventFilter(this); // a new text: ask for the height it needs
    if (parent)
        parent->installEventFilter(this); // a taller panel: the share grows
}

QLabel* TextScroll::addLabel()
{
    auto* label = new QLabel(m_column);
    label->setWordWrap(true);
    label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    label->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_layout->insertWidget(m_layout->count() - 1, label);
    return label;
}

int TextScroll::contentHeight() const
{
    const int w = std::max(60, viewport()->width());
    const int h = m_column->layout()->heightForWidth(w);
    return h >= 0 ? h : m_column->sizeHint().height();
}

int TextScroll::wholeLinesWithin(int limit) const
{
    // The bottom of every line of every label, in the column's pixels: the label's text laid out
    // as QLabel lays it out (a document without margins at the label's width, in its font).
    int best = 0;
    for (const QLabel* label : m_column->findChildren<QLabel*>(QString(), Qt::FindDirectChildrenOnly)) {
        if (label->isHidden() || label->text().isEmpty())
            continue;
        const QRect text = label->contentsRect().translated(label->pos());
        QTextDocument doc;
        doc.setDocumentMargin(0);
        doc.setDefaultFont(label->font());
        if (label->textFormat() == Qt::RichText || (label->textFormat() == Qt::AutoText && Qt::mightBeRichText(label->text())))
            doc.setHtml(label->text());
        else
            doc.setPlainText(label->text());
        doc.setTextWidth(text.width());
        for (QTextBlock b = doc.begin(); b.isValid(); b = b.next()) {
            const QRectF block = doc.documentLayout()->blockBoundingRect(b);
            const QTextLayout* layout = b.layout();
            for (int i = 0; layout && i < layout->lineCount(); ++i) {
                const int bottom = text.top() + int(std::ceil(block.top() + layout->lineAt(i).y() + layout->lineAt(i).height()));
                if (bottom <= limit)
                    best = std::max(best, bottom);
            }
        }
    }
    return best > 0 ? best : limit;
}

QSize TextScroll::sizeHint() const
{
    int h = contentHeight() + 2 * frameWidth();
    // Taller than its share: it scrolls, and shows whole lines down to the share's edge (a line cut
    // through its letters at the bottom reads as the end of the text).
    if (parentWidget() && parentWidget()->height() > 0 && h > int(parentWidget()->height() * m_maxShare))
        h = wholeLinesWithin(int(parentWidget()->height() * m_maxShare) - 2 * frameWidth()) + 2 * frameWidth();
    return {QScrollArea::sizeHint().width(), std::max(h, minimumSizeHint().height())};
}

QSize TextScroll::minimumSizeHint() const { return {60, fontMetrics().lineSpacing() * 2 + 2 * frameWidth()}; }

void TextScroll::resizeEvent(QResizeEvent* event)
{
    QScrollArea::resizeEvent(event);
    if (event->size().width() != m_lastWidth) {
        m_lastWidth = event->size().width();
        updateGeometry(); // the text's height at the new width
    }
}

bool TextScroll::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == parentWidget() ? event->type() == QEvent::Resize : event->type() == QEvent::LayoutRequest)
        updateGeometry();
    return QScrollArea::eventFilter(watched, event);
}

} // namespace poolscope
