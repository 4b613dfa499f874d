#pragma once
#include <QWidget>

class QComboBox;
class QLabel;
class QLineEdit;
class QTableView;

namespace poolscope {

class TensorFilterProxy;
class TensorModel;
class Workspace;

// "Tensors alive at cursor": every allocation alive at the cursor, sortable, filtered by pool or by
// text in any frame. The row the user picks becomes the workspace's selection (and stays selected
// while the cursor moves, as long as the tensor is alive).
class TensorPanel : public QWidget {
    Q_OBJECT
public:
    explicit TensorPanel(Workspace* workspace, QWidget* parent = nullptr);

    TensorModel* model() const { return m_model; }
    TensorFilterProxy* proxy() const { return m_proxy; }
    QTableView* view() const { return m_view; }

private:
    void refresh();
    void currentRowChanged();
    void fitStreamColumn(); // as wide as the device's longest stream id

    Workspace* m_workspace;
    TensorModel* m_model;
    TensorFilterProxy* m_proxy;
    QComboBox* m_poolFilter;
    QLineEdit* m_frameFilter;
    QLabel* m_summary;
    QTableView* m_view;
    bool m_refreshing = false;
};

} // namespace poolscope
