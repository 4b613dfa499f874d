#pragma once
#include "core/compare/compare_documents.h"
#include "widgets/pool_palette.h"

#include <QFutureWatcher>
#include <QWidget>

#include <memory>

class QLabel;

namespace poolscope {

class CompareView;

// File ▸ Compare with…: the current document (A) against another run (B) in a window of its own,
// computed off the GUI thread (core compareDevicesWithChart), exportable as the same image as
// `poolscope render A --compare B`.
class CompareWindow : public QWidget {
    Q_OBJECT
public:
    explicit CompareWindow(QWidget* parent = nullptr);
    ~CompareWindow() override;

    // Compares device `deviceA` of A with B's device of the same number (else B's default one).
    void compare(std::shared_ptr<const Document> a, size_t deviceA, std::shared_ptr<const Document> b, const PoolPalette& palette);
    bool isRunning() const { return m_watcher != nullptr; }
    const DocumentComparison* result() const { return m_result.get(); }
    CompareView* view() const { return m_view; }
    bool exportImage(const QString& path, QSize size, QString* error) const;

signals:
    void finished();
    void failed(const QString& message);

private:
    struct Outcome {
        std::shared_ptr<const DocumentComparison> result;
        QString error;
    };
    void exportDialog();

    CompareView* m_view;
    QLabel* m_status;
    PoolPalette m_palette;
    std::shared_ptr<const Document> m_a, m_b; // kept alive while a job reads them
    std::shared_ptr<const DocumentComparison> m_result;
    QFutureWatcher<Outcome>* m_watcher = nullptr;
    quint64 m_job = 0;
};

} // namespace poolscope
