#pragma once
#include "core/timeline/device_timeline.h"
#include "core/timeline/segment_layout.h"
#include "widgets/pool_palette.h"

#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QScrollArea;

namespace poolscope {

// Segments at the cursor as rows of blocks coloured by pool; free gaps hatched. Bars to scale by
// default (the largest segment spans the row), or each spanning the full width so that a 2 MiB
// segment's crumbs are as visible as a 2 GiB segment's; the label gives every segment's size.
class SegmentRowsWidget : public QWidget {
    Q_OBJECT
public:
    enum class Order { FreeBytes, Size, Address };
    explicit SegmentRowsWidget(QWidget* parent = nullptr);
    void setLayoutData(std::shared_ptr<const DeviceTimeline> timeline, SegmentLayout layout);
    void setOrder(Order order);
    void setPoolPalette(const PoolPalette& palette);
    QSize sizeHint() const override;
    void setToScale(bool on);
    bool toScale() const { return m_toScale; }
    QString rowLabel(const LayoutSegment& segment) const;
    int labelWidth() const { return m_labelWidth; }
    // The bar of a segment drawn in the row at y.
    QRectF barRect(const LayoutSegment& segment, int y) const;
    static constexpr int kRowHeight = 18;

protected:
    void paintEvent(QPaintEvent* event) override;
    bool event(QEvent* event) override;

private:
    void sortRows();
    const LayoutSegment* rowAt(int y) const;

    std::shared_ptr<const DeviceTimeline> m_timeline;
    SegmentLayout m_layout;
    std::vector<size_t> m_order;
    Order m_orderBy = Order::FreeBytes;
    PoolPalette m_palette;
    bool m_toScale = true;
    int m_labelWidth = 120;
    int64_t m_largest = 1;
};

// The allocator dock: fragmentation figures over the rows, and the order to list segments in.
class Workspace;

class AllocatorView : public QWidget {
    Q_OBJECT
public:
    explicit AllocatorView(QWidget* parent = nullptr);
    // Shows the workspace's device at its cursor from now on (the layout it computed once per move).
    void follow(Workspace* workspace);
    void setMoment(std::shared_ptr<const DeviceTimeline> timeline, EventIndex event);
    // The same with a layout the caller already computed (the breakdown needs it too).
    void showLayout(std::shared_ptr<const DeviceTimeline> timeline, SegmentLayout layout);
    void clear();
    void setPoolPalette(const PoolPalette& palette) { m_rows->setPoolPalette(palette); }
    const SegmentLayout& layoutData() const { return m_layout; }
    QString summaryText() const;
    int64_t tensorBytes() const { return m_tensorBytes; }
    SegmentRowsWidget* rows() const { return m_rows; }

private:
    SegmentLayout m_layout;
    int64_t m_allocated = 0;   // the breakdown's allocated bytes at the layout's event
    int64_t m_tensorBytes = 0; // of which the alive allocations' requested bytes
    QLabel* m_summary;
    QComboBox* m_order;
    QComboBox* m_scale;
    QScrollArea* m_scroll;
    SegmentRowsWidget* m_rows;
};

} // namespace poolscope
