#include "widgets/text_scroll.h"

#include <QEvent>
#include <QLabel>
#include <QResizeEvent>
#include <QVBoxLayout>

#include <algorithm>

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

QSize TextScroll::sizeHint() const
{
    int h = contentHeight() + 2 * frameWidth();
    if (parentWidget() && parentWidget()->height() > 0)
        h = std::min(h, int(parentWidget()->height() * m_maxShare));
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
