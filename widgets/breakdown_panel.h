#pragma once
#include "widgets/pool_palette.h"

#include <QWidget>

class QLabel;
class QTableView;

namespace poolscope {

class BreakdownModel;
class FragmentationView;
class TextScroll;
class Workspace;

// "Breakdown at cursor": the moment (event, time, peak, OOM), the verdict sentence and the table of
// pools and totals. Follows the workspace's cursor.
class BreakdownPanel : public QWidget {
    Q_OBJECT
public:
    explicit BreakdownPanel(Workspace* workspace, QWidget* parent = nullptr);

    BreakdownModel* model() const { return m_model; }
    QString verdictText() const;
    QLabel* verdictLabel() const { return m_verdictLabel; }
    TextScroll* textArea() const { return m_text; }
    void setPoolPalette(const PoolPalette& palette);

private:
    void refresh();

    Workspace* m_workspace;
    BreakdownModel* m_model;
    TextScroll* m_text;
    QLabel* m_momentLabel;
    QLabel* m_verdictLabel;
    QTableView* m_view;
    FragmentationView* m_fragmentation; // issue 25: free bytes against the failing request, memory outside PyTorch
};

} // namespace poolscope
