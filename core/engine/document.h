#pragma once
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/load.h"
#include "core/timeline/alive_index.h"
#include "core/timeline/device_timeline.h"
#include "core/whatif/trace_model.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// How a Document is built. The rules are the caller's: core never reads a configuration file of
// its own accord (the app decides which rules files apply: shipped, per-user, --rules).
struct DocumentOptions {
    std::shared_ptr<const RuleSet> rules; // null: the pools stay unclassified (and a note says why)
    std::string rulesProblem;             // why there are no rules, for that note (e.g. a bad rules file)
    // Build every device's timeline (layers, level of detail, axes) now, the alive index and time
    // axis on a second thread while the classifier runs: what a window needs for its first chart.
    // Off, they are built on first use: `report`, `explain` or `ranks` never draw.
    bool eagerTimelines = true;
    // The per-pool series over every event (and each pool's peak). Off, poolsAt() scans the
    // allocations for the one moment asked (poolsAtEvent): for commands that ask about a moment or two
    // of many dumps (ranks). A timeline asked for later builds the series then.
    bool poolSeries = true;
    // With poolSeries: keep the series' columns (poolsAt reads them; a timeline takes them). Off,
    // each pool's peak is found in one pass that keeps no columns (computePoolPeaks), the alive index
    // is built beside the classifier, and poolsAt scans the allocations for the moment asked: what
    // `report` reads (the peaks and a moment or two) without the 240 MB of columns of a 6M-event dump.
    bool seriesColumns = true;
    const std::atomic<bool>* cancel = nullptr; // polled between devices; open() returns null when set
};

// Each pool's highest bytes over the trace and the first event that reaches it (kNoEvent: the
// initial state), and its bytes before the first event.
struct PoolPeaks {
    PoolBytes bytes{};
    std::array<EventIndex, kPoolCount> index{};
    PoolBytes initial{};
};

// One device of a Document: its classification and pool series, and what views and commands derive
// from them, each built at most once (a Document is shared by threads; the lazy parts are built
// under a once-flag).
class DeviceDocument {
public:
    DeviceDocument(std::shared_ptr<const Trace> trace, size_t index);
    DeviceDocument(const DeviceDocument&) = delete;
    DeviceDocument& operator=(const DeviceDocument&) = delete;

    const Trace& trace() const { return *m_trace; }
    const DeviceTrace& device() const { return m_trace->devices[m_index]; }
    size_t index() const { return m_index; } // into Trace::devices and Document's devices
    std::string label() const { return device().label(); }

    // Null when the pools are unclassified (no rules).
    const Classification* classification() const { return m_classification.get(); }
    const std::shared_ptr<const Classification>& classificationPtr() const { return m_classification; }
    bool classified() const { return m_classification != nullptr; }
    // The run's structure (core/facts/run_facts.h), built once with the classification; null when
    // the pools are unclassified (no rules: phases need the rules' phase evidence).
    const RunFacts* facts() const { return m_classification ? &m_classification->facts : nullptr; }

    // Bytes per pool after event i (i < 0: before the first event). Unclassified: all allocated bytes
    // count as unknown; cached_free is reserved - allocated wherever reserved is known.
    PoolBytes poolsAt(EventIndex i) const;
    // Zero when the document was opened without pool series (DocumentOptions::poolSeries).
    const PoolPeaks& poolPeaks() const { return m_peaks; }
    // The pool series itself: the document's own when it kept one (no eager timeline took its
    // columns), else built now, once, and kept (the comparison reads whole series).
    const PoolSeries* series() const;

    const DeviceTimeline& timeline() const { return *timelinePtr(); }
    std::shared_ptr<const DeviceTimeline> timelinePtr() const;
    const AliveIndex& alive() const;
    // The what-if engine's model of this device (size laws, layers, optimizer), built on first use.
    std::shared_ptr<const TraceModel> traceModel() const;

    // Capacity the last OOM reported: reserved + device_free there; -1 without one.
    int64_t oomCapacity() const;

private:
    friend class Document;
    void prepare(const RuleSet* rules, bool eagerTimeline, bool poolSeries, bool seriesColumns = true);

    std::shared_ptr<const Trace> m_trace;
    size_t m_index = 0;
    std::shared_ptr<const Classification> m_classification;
    PoolPeaks m_peaks;
    // Until a timeline takes them, the series' columns live here (commands that never draw).
    std::optional<PoolSeries> m_series;
    bool m_eager = false; // m_timeline was built by prepare(), before anyone else could see this document
    mutable std::once_flag m_timelineOnce, m_aliveOnce, m_modelOnce, m_seriesOnce;
    mutable std::optional<PoolSeries> m_lateSeries; // series() when m_series was not kept
    mutable std::shared_ptr<const DeviceTimeline> m_timeline;
    mutable std::optional<AliveIndex> m_alive; // only when there is no timeline to ask
    mutable std::shared_ptr<const TraceModel> m_model;
};

// A loaded dump with every device classified: what every face of PoolScope reads. The CLI
// commands, the window and the benchmarks open one, and never classify on their own. Immutable once
// open (lazy parts aside, which are built once and then shared), so threads read it concurrently.
class Document {
public:
    // Loads `path` (LoadError on bad input) and prepares it. Null when `options.cancel` was set.
    static std::shared_ptr<const Document> open(const std::string& path, const DocumentOptions& options, Progress& progress);
    static std::shared_ptr<const Document> open(const std::string& path, const DocumentOptions& options);
    static std::shared_ptr<const Document> fromTrace(std::shared_ptr<const Trace> trace, const DocumentOptions& options);

    const Trace& trace() const { return *m_trace; }
    const std::shared_ptr<const Trace>& tracePtr() const { return m_trace; }
    const std::string& path() const { return m_trace->path; }
    size_t deviceCount() const { return m_devices.size(); }
    const DeviceDocument& device(size_t index) const { return *m_devices[index]; }
    const RuleSet* rules() const { return m_rules.get(); }
    // What preparation noted (e.g. why the pools are unclassified); the loader's own warnings are the
    // trace's.
    const std::vector<std::string>& notes() const { return m_notes; }

    // The device a user means when they name none: one that ran out of memory, else a CUDA device
    // before a CPU one, else the one with the most events, then the most segments.
    size_t defaultDevice() const;
    // Index of device number `device` (CUDA first, then any kind); npos when absent.
    size_t findDevice(int device) const;
    // The device `wanted` names, else the default one; std::invalid_argument naming the devices the
    // dump has when `wanted` is not among them, or when there are none.
    const DeviceDocument& pickDevice(std::optional<int> wanted) const;

private:
    std::shared_ptr<const Trace> m_trace;
    std::shared_ptr<const RuleSet> m_rules;
    std::vector<std::unique_ptr<DeviceDocument>> m_devices;
    std::vector<std::string> m_notes;
};

} // namespace poolscope
