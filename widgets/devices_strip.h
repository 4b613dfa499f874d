#pragma once
#include "core/classify/pool_series.h"
#include "core/timeline/devices_at_moment.h"
#include "widgets/pool_palette.h"

#include <QWidget>

#include <vector>

namespace poolscope {

class Workspace;

// Above the chart for a dump of several devices: one cell per device with its pools as a small
// stacked bar (all bars on one scale, so that an imbalance shows at a glance), its name and bytes, the
// device that ran out of memory marked. When a device ran out of memory, every device is shown at that
// moment (the others at their last event up to its time: devicesAtMoment), so a DataParallel imbalance
// reads at the moment that failed; otherwise each at its own peak. A click shows that device. Hidden
// when the dump holds one device.
class DevicesStrip : public QWidget {
    Q_OBJECT
public:
    struct Entry {
        size_t index = 0; // the device's index in the document
        QString name;     // "cuda:1"
        EventIndex event = kNoEvent; // the moment drawn: the OOM's (see how), else the device's peak
        // How `event` was found: at the OOM moment (Self for the device that failed), or OwnPeak.
        DeviceAtMoment::How how = DeviceAtMoment::How::OwnPeak;
        bool atOom = false; // the strip shows the moment of an OOM
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
    QString momentText(size_t i) const; // which moment entry i shows, in words (its tooltip)
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    bool event(QEvent* event) override;

private:
    void rebuild();
    QString baseText(size_t i) const; // the cell's first line, without the OOM mark
    int cellAt(QPoint p) const;

    Workspace* m_workspace;
    PoolPalette m_palette;
    std::vector<Entry> m_entries;
};

} // namespace poolscope
