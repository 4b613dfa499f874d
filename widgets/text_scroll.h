#pragma once
#include <QScrollArea>

#include <QString>

class QLabel;
class QVBoxLayout;

namespace poolscope {

// `plain` with a zero-width space after the separators (::, \, ., _, :, =, ,) of each word longer
// than `longWord` characters: a C++ frame name or a Windows path is one word to Qt's line breaker,
// and a word wider than the column set the whole column's width, every line cut at the right edge.
// Short words are left as they are, so that what a reader copies is unchanged there.
QString breakableWords(const QString& plain, int longWord = 28);

// Word-wrapped text that scrolls rather than being cut: a panel's verdict or reason. It asks for
// the height its text needs at its width, up to `maxShare` of its parent's height; below that it
// scrolls, so that the text's end is always one scroll away, never clipped.
class TextScroll : public QScrollArea {
    Q_OBJECT
public:
    explicit TextScroll(double maxShare, QWidget* parent = nullptr);
    // A word-wrapped, selectable label appended to the column.
    QLabel* addLabel();
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;
    // Height the column needs at the viewport's width.
    int contentHeight() const;
    // The largest height up to `limit` (column pixels from its top) that ends below a whole line of
    // text: where the viewport ends when the text scrolls.
    int wholeLinesWithin(int limit) const;
    // The share of its parent's height it may take before it scrolls.
    double maxShare() const { return m_maxShare; }

protected:
    void resizeEvent(QResizeEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    double m_maxShare;
    QWidget* m_column;
    QVBoxLayout* m_layout;
    int m_lastWidth = -1;
};

} // namespace poolscope
