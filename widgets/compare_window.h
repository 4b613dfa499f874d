#pragma once
#include "core/compare/aligned_cursor.h"
#include "core/compare/compare_documents.h"
#include "widgets/compare_view.h"
#include "widgets/pool_palette.h"

#include <QFutureWatcher>
#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;

namespace poolscope {

class CompareView;

// File ▸ Compare with…: the current document (A) against another run (B) in a window of its own,
// computed off the GUI thread (core compareDevicesWithChart), exportable as the same image as
// `poolscope render A --compare B`.
//
// The chart scrubs and zooms like the main one; the moment the table is at is chosen above it (the
// OOMs, the peaks, a phase end, or the cursor: scrubbing switches to the cursor, whose table is
// read from each run's pool series at the events under it). Esc closes the window.
class CompareWindow : public QWidget {
    Q_OBJECT
public:
    explicit CompareWindow(QWidget* parent = nullptr);
    ~CompareWindow() override;

    // Compares device `deviceA` of A with B's device of the same number (else B's default one).
    void compare(std::shared_ptr<const Document> a, size_t deviceA, std::shared_ptr<const Document> b, const PoolPalette& palette,
                 std::optional<CompareMoment> at = std::nullopt);
    // The paired moment the table shows: a named one (computed again, asynchronously) or, with
    // std::nullopt, the cursor's.
    void chooseMoment(std::optional<CompareMoment> at);
    bool atCursor() const { return m_atCursor; }
    QComboBox* momentBox() const { return m_moment; }
    // The events of A and B under a position of the chart's axis.
    AlignedEvents eventsAt(double x) const;
    // The hover read-out's text at a position of the chart's axis.
    QString readoutAt(double x) const;
    bool isRunning() const { return m_watcher != nullptr; }
    const DocumentComparison* result() const { return m_result.get(); }
    CompareView* view() const { return m_view; }
    const Document* documentA() const { return m_a.get(); }
    const Document* documentB() const { return m_b.get(); }
    size_t deviceA() const { return m_deviceA; }
    size_t deviceB() const { return m_deviceB; }
    // The image of what the window shows: its zoom, and the cursor's moment when the user scrubbed
    // (else the named moment, as `render A --compare B` draws it).
    bool exportImage(const QString& path, QSize size, QString* error) const;
    CompareContent exportContent() const; // the title, verdict and table the export writes

signals:
    void finished();
    void failed(const QString& message);

protected:
    void keyPressEvent(QKeyEvent* event) override;

private:
    struct Outcome {
        std::shared_ptr<const DocumentComparison> result;
        QString error;
    };
    void exportDialog();
    void showResult();
    void cursorMoved(double x);

    CompareView* m_view;
    QLabel* m_status;
    QComboBox* m_moment;
    size_t m_deviceA = 0, m_deviceB = 0;
    bool m_atCursor = false;
    bool m_placingCursor = false; // the window moves the cursor itself: no switch to the cursor moment
    PoolPalette m_palette;
    std::shared_ptr<const Document> m_a, m_b; // kept alive while a job reads them
    std::shared_ptr<const DocumentComparison> m_result;
    QFutureWatcher<Outcome>* m_watcher = nullptr;
    quint64 m_job = 0;
};

} // namespace poolscope
