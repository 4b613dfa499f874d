#pragma once
#include "core/engine/document.h"
#include "core/whatif/whatif.h"
#include "widgets/whatif_result_model.h"

#include <QFutureWatcher>
#include <QWidget>

#include <atomic>
#include <memory>
#include <optional>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableView;
class QTimer;

namespace poolscope {

// "What if I checkpoint / shard / change the optimizer / change the batch?" The knobs of a
// Scenario beside the answer: recorded vs predicted peaks, per-pool peaks, whether it fits at the
// capacity, what the prediction assumed; the prediction itself goes to the chart
// (predictionChanged). A trace small enough to replay in ~100 ms is predicted as the knobs change;
// larger ones on Predict. The replay runs off the GUI thread (QtConcurrent); a newer run or a new
// trace makes a running one stale: it is cancelled and its result dropped. The trace model (size
// laws, layers) is the document's, built once per device.
class WhatIfPanel : public QWidget {
    Q_OBJECT
public:
    explicit WhatIfPanel(QWidget* parent = nullptr);
    ~WhatIfPanel() override;

    // The document and the device (an index into trace->devices and devices) to ask about. A null
    // trace clears the panel. Nothing runs until run() (or the Run button).
    void setTrace(std::shared_ptr<const Document> trace, size_t deviceIndex);
    std::shared_ptr<const Document> trace() const { return m_trace; }
    size_t deviceIndex() const { return m_device; }

    // The knobs as a Scenario, and back. A capacity field that does not parse counts as empty.
    Scenario scenario() const;
    void setScenario(const Scenario& scenario);
    // Every knob as recorded (Scenario{}) and the prediction cleared.
    void resetKnobs();

    bool isRunning() const { return m_running; }
    // Predicting as the knobs change: on for traces that replay within ~100 ms.
    bool livePrediction() const { return m_live; }
    bool predictedStack() const;
    // The last finished result for the current trace and device; null before the first one.
    std::shared_ptr<const WhatIfResult> result() const { return m_result; }
    WhatIfResultModel* resultModel() const { return m_model; }

public slots:
    void run();

signals:
    void finished(); // a new result is shown
    // The result to draw over the chart (with its per-event series), or null when there is none.
    void predictionChanged(std::shared_ptr<const WhatIfResult> result);
    void predictedStackToggled(bool on);
    void failed(const QString& message);
    void runningChanged(bool running);

private:
    struct Outcome {
        std::shared_ptr<const WhatIfResult> result;
        QString error;
    };
    void buildUi();
    void jobFinished(quint64 id, QFutureWatcher<Outcome>* watcher);
    void setRunning(bool running);
    void cancelJob();
    void showResult();
    void knobChanged();
    void updateLive();

    std::shared_ptr<const Document> m_trace;
    size_t m_device = 0;
    std::shared_ptr<const WhatIfResult> m_result;
    quint64 m_jobId = 0;
    std::shared_ptr<std::atomic<bool>> m_cancel;
    QFutureWatcher<Outcome>* m_watcher = nullptr;
    bool m_running = false;

    QDoubleSpinBox* m_batch = nullptr;
    QDoubleSpinBox* m_seq = nullptr;
    QDoubleSpinBox* m_activation = nullptr;
    QComboBox* m_checkpoint = nullptr;
    QComboBox* m_optimizer = nullptr;
    QComboBox* m_sharding = nullptr;
    QSpinBox* m_ranks = nullptr;
    QCheckBox* m_offload = nullptr;
    QComboBox* m_autocast = nullptr;
    QComboBox* m_autocastRegion = nullptr; // --autocast-region: around each forward, or one over the run
    QDoubleSpinBox* m_trainable = nullptr;
    QLineEdit* m_freeze = nullptr;
    QSpinBox* m_accumulate = nullptr;
    QCheckBox* m_liveBox = nullptr;
    QCheckBox* m_stackBox = nullptr;
    QTimer* m_liveTimer = nullptr;
    bool m_live = false;
    bool m_settingScenario = false;
    int64_t m_lastReplayUs = -1;
    QLineEdit* m_capacity = nullptr;
    // The allocator (PYTORCH_CUDA_ALLOC_CONF), each "as recorded" by default (issue 25).
    QComboBox* m_expandable = nullptr;
    QSpinBox* m_maxSplit = nullptr;       // MiB; 0: as recorded
    QDoubleSpinBox* m_gcThreshold = nullptr; // 0: as recorded
    QComboBox* m_roundup = nullptr;
    QPushButton* m_runButton = nullptr;
    QLabel* m_verdict = nullptr;
    QTableView* m_table = nullptr;
    QPlainTextEdit* m_notes = nullptr;
    WhatIfResultModel* m_model = nullptr;
};

} // namespace poolscope
