#pragma once
#include "core/engine/document.h"
#include "core/report/report.h"
#include "core/steps/steps.h"
#include "core/timeline/segment_layout.h"

#include <QObject>
#include <QString>
#include <QTimer>

#include <map>
#include <memory>
#include <utility>

namespace poolscope {

// What every panel shows at the cursor, computed once per cursor move and shared: the moment as the
// report builds it (pools, confidence, verdict, the OOM there), the chart's breakdown (with the
// capacity), the allocator's segment layout, and the sentence the window shows.
struct CursorMoment {
    EventIndex event = kNoEvent;
    MomentReport report;
    Breakdown breakdown;
    SegmentLayout layout;
    std::string sentence;
};

// The documents a window holds and the cursor its panels follow. The window's panels (breakdown,
// tensors, stack, allocator, what-if) each listen to it instead of being fed by the window: a cursor
// move becomes one momentChanged() however many moves a drag makes in one event-loop turn.
class Workspace : public QObject {
    Q_OBJECT
public:
    explicit Workspace(QObject* parent = nullptr);

    // Replaces the current document (null clears) and picks its default device.
    void setDocument(std::shared_ptr<const Document> doc, const QString& path);
    const Document* document() const { return m_doc.get(); }
    const std::shared_ptr<const Document>& documentPtr() const { return m_doc; }
    QString path() const { return m_path; }

    // A second document to compare the current one against (null clears).
    void setComparison(std::shared_ptr<const Document> doc, const QString& path);
    const Document* comparison() const { return m_comparison.get(); }
    const std::shared_ptr<const Document>& comparisonPtr() const { return m_comparison; }
    QString comparisonPath() const { return m_comparisonPath; }

    void setDevice(size_t deviceIndex);
    size_t device() const { return m_device; }
    const DeviceDocument* deviceDocument() const { return m_doc && m_device < m_doc->deviceCount() ? &m_doc->device(m_device) : nullptr; }

    // Clamped to the device's events (kNoEvent only when it has none).
    void setEvent(EventIndex event);
    EventIndex event() const { return m_event; }
    // Capacity line and headroom: bytes < 0 means unknown.
    void setCapacity(int64_t bytes, const QString& label);
    int64_t capacity() const { return m_capacity; }
    QString capacityLabel() const { return m_capacityLabel; }

    // The allocation the user picked (tensor table), invalid when none.
    void select(AllocId id);
    AllocId selected() const { return m_selected; }

    // The current device's steps, found once per document and device: the steps strip and the Leaks
    // tab read the same table, so they cannot disagree (each used to find its own).
    const StepTable& steps();

    // The numbers at the cursor; computes them now if a move is pending.
    const CursorMoment& moment();
    // Applies a pending cursor move now (tests, exports); otherwise it happens on the next event-loop turn.
    void flush();

signals:
    void documentChanged();   // a new current document (device and cursor follow)
    void comparisonChanged();
    void deviceChanged();     // another device of the same document
    void eventChanged(qint64 event); // at once, for the chart's cursor line
    void momentChanged();     // coalesced: the panels' cue to refresh
    void selectionChanged();

private:
    void schedule();

    std::shared_ptr<const Document> m_doc;
    QString m_path;
    std::shared_ptr<const Document> m_comparison;
    QString m_comparisonPath;
    size_t m_device = 0;
    EventIndex m_event = kNoEvent;
    int64_t m_capacity = -1;
    QString m_capacityLabel;
    AllocId m_selected;
    CursorMoment m_moment;
    bool m_momentValid = false;
    QTimer m_timer;
    // The allocator advice at each OOM (a few replays of the trace): once per document, device and OOM.
    std::map<std::pair<size_t, EventIndex>, AllocatorAdvice> m_adviceCache;
    std::map<size_t, StepTable> m_stepsCache; // by device, for the current document
};

} // namespace poolscope
