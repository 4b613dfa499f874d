#pragma once
#include "core/classify/pool_series.h"
#include "widgets/pool_palette.h"

#include <QWidget>

#include <vector>

namespace poolscope {

class Workspace;

// Above the chart for a dump of several devices: one cell per device with its peak as a small
// stacked bar of pools (all bars on one scale, so that an imbalance shows at a glance), its name
// and bytes, the device that ran out of memory marked. A click shows that device. Hidden when the
// dump holds one device.
class DevicesStrip : public QWidget {
    Q_OBJECT
public:
    struct Entry {
        size_t index = 0; // the device's index in the document
        QString name;     // "cuda:1"
        EventIndex event = kNoEvent; // the moment drawn: the device's peak of allocated bytes
        PoolBytes pools{};
        int64_t total = 0; // allocated + cached free there (reserved when known)
        bool oom = false;
        bool classified = true;
    };

    explicit DevicesStrip(Workspace* workspace, QWidget* parent = nullptr);
    void setPoolPalette(const PoolPalette& palette);
    const std::vector<Entry>& entries() const { return m_entries; }
    // The cell of entry i in widget coordinates (for clicks in tests).
    QRect cellRect(size_t i) const;
    QString cellText(size_t i) const;
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    bool event(QEvent* event) override;

private:
    void rebuild();
    int cellAt(QPoint p) const;

    Workspace* m_workspace;
    PoolPalette m_palette;
    std::vector<Entry> m_entries;
};

} // namespace poolscope
