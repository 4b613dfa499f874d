#pragma once
#include "core/sites/site_tree.h"

#include <QPointer>
#include <QWidget>

#include <functional>

class QComboBox;
class QLabel;
class QCPGraph;

namespace poolscope {

class TimelinePlot;
class Workspace;

// An icicle view of a SiteTree: the root across the top, each node's children below it, widths by
// weight. Click selects a node, double-click makes it the view's root, right-click goes back up.
class IcicleView : public QWidget {
    Q_OBJECT
public:
    explicit IcicleView(QWidget* parent = nullptr);
    void setTree(const SiteTree* tree); // not owned; null clears
    uint32_t selected() const { return m_selected; }
    void select(uint32_t node);
    uint32_t viewRoot() const { return m_root; }
    void setViewRoot(uint32_t node);
    uint32_t nodeAt(QPointF pos) const; // 0 when none (or the root)
    QSize sizeHint() const override { return {400, 220}; }

signals:
    void nodeSelected(quint32 node);

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    bool event(QEvent* event) override;

private:
    struct Box {
        QRectF rect;
        uint32_t node;
    };
    void layoutBoxes();
    const SiteTree* m_tree = nullptr;
    uint32_t m_root = 0, m_selected = 0;
    std::vector<Box> m_boxes;
    static constexpr int kRow = 20;
};

// "By call site": the bytes alive at the cursor (or over the whole run, bytes x time) by stack,
// as an icicle. Selecting a node filters the tensor table to its allocations and draws its bytes
// over time on the chart.
class SiteTreePanel : public QWidget {
    Q_OBJECT
public:
    SiteTreePanel(Workspace* workspace, TimelinePlot* plot, QWidget* parent = nullptr);

    const SiteTree& tree() const { return m_tree; }
    bool overRun() const;
    void setOverRun(bool on);
    IcicleView* view() const { return m_view; }
    // The allocations under the selected node (all when nothing is selected).
    std::function<bool(const Allocation&)> selectionFilter() const;

signals:
    // A node was picked (0: the selection was cleared); the filter above says which tensors.
    void selectionChanged(const QString& label);

protected:
    void showEvent(QShowEvent* event) override; // a tab raised after the cursor moved catches up

private:
    void rebuild();
    void nodeSelected(quint32 node);
    void drawSelection();

    Workspace* m_workspace;
    TimelinePlot* m_plot;
    QComboBox* m_mode;
    QLabel* m_label;
    IcicleView* m_view;
    SiteTree m_tree;
    EventIndex m_builtAt = kNoEvent - 1;
    QPointer<QCPGraph> m_overlay;
    int m_overlayMode = -1; // the chart's axis mode the overlay's keys were computed for
    std::vector<std::string> m_selectedPath; // labels from the root: the selection survives a rebuild
};

} // namespace poolscope
