#pragma once
#include <QWidget>

class QLabel;
class QTreeView;

namespace poolscope {

class StackModel;
class Workspace;

// "Stack and reason": the selected tensor's stack (Python first, C++ frames collapsed), why it is
// in its pool (rule, confidence, evidence) and its lifetime. Follows the workspace's selection.
class StackPanel : public QWidget {
    Q_OBJECT
public:
    explicit StackPanel(Workspace* workspace, QWidget* parent = nullptr);

    StackModel* model() const { return m_model; }
    QString reasonText() const;

private:
    void refresh();

    Workspace* m_workspace;
    StackModel* m_model;
    QLabel* m_reason;
    QTreeView* m_view;
};

} // namespace poolscope
