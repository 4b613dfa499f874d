#pragma once
#include <QWidget>

class QLabel;
class QTreeView;

namespace poolscope {

class StackModel;
class TextScroll;
class Workspace;

// "Stack and reason": the selected tensor's stack (Python first, C++ frames collapsed), why it is
// in its pool (rule, confidence, evidence) and its lifetime. Follows the workspace's selection.
class StackPanel : public QWidget {
    Q_OBJECT
public:
    explicit StackPanel(Workspace* workspace, QWidget* parent = nullptr);

    StackModel* model() const { return m_model; }
    QString reasonText() const;
    QLabel* reasonLabel() const { return m_reason; }
    QTreeView* view() const { return m_view; }

private:
    void refresh();

    Workspace* m_workspace;
    StackModel* m_model;
    TextScroll* m_text;
    QLabel* m_reason;
    QTreeView* m_view;
};

} // namespace poolscope
