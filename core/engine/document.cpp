#include "core/engine/document.h"

#include "core/util/column_stock.h"

#include <exception>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace poolscope {

DeviceDocument::DeviceDocument(std::shared_ptr<const Trace> trace, size_t index) : m_trace(std::move(trace)), m_index(index) {}

namespace {
// Columns the second thread makes ahead for the pool series while the classifier runs. The series
// takes one per pool that holds bytes, and which pools do is known only once classified: the corpus
// dumps use 3 to 10 (7 in the median, 8 in the benchmark's real training step). Making all twelve
// zeroed 48 MB columns of a 6M-entry dump ahead wrote some 300 MB that was freed unused; past eight
// the series makes the rest itself, on two threads.
constexpr size_t kStockColumns = 8;
} // namespace

void DeviceDocument::prepare(const RuleSet* rules, bool eagerTimeline, bool poolSeries, bool seriesColumns)
{
    const DeviceTrace& dev = device();
    if (!rules) {
        if (eagerTimeline) {
            m_timeline = std::make_shared<DeviceTimeline>(m_trace, m_index);
            m_eager = true;
        }
        return;
    }
    if (!poolSeries && !eagerTimeline) { // one moment at a time: the classification is all there is to keep
        m_classification = std::make_shared<const Classification>(classify(*m_trace, dev, *rules));
        return;
    }
    if (!eagerTimeline && !seriesColumns) { // the peaks alone, and the alive index built meanwhile
        std::exception_ptr sideError;
        std::thread side([&] {
            try {
                std::call_once(m_aliveOnce, [this] { m_alive.emplace(device().allocations); });
            } catch (...) {
                sideError = std::current_exception();
            }
        });
        std::shared_ptr<Classification> c;
        try {
            c = std::make_shared<Classification>(classify(*m_trace, dev, *rules));
        } catch (...) {
            side.join();
            throw;
        }
        side.join();
        if (sideError)
            std::rethrow_exception(sideError);
        const PoolPeakScan peaks = computePoolPeaks(dev, *c);
        m_peaks.bytes = peaks.peak;
        m_peaks.index = peaks.peakIndex;
        m_peaks.initial = peaks.initial;
        m_classification = std::move(c);
        return;
    }
    // The alive-set index and the time axis read only the trace, not the pools: built on a second
    // thread while this one classifies (see TimelineParts). Then that thread makes zeroed columns
    // for the pool series until the classifier is done (see ColumnStock). Without a timeline to build
    // now, only the columns are made ahead.
    TimelineParts parts;
    ColumnStock stock(dev.eventCount());
    std::atomic<bool> classified{false};
    std::exception_ptr sideError;
    std::thread side([&] {
        try {
            if (eagerTimeline) {
                parts.alive.emplace(dev.allocations);
                if (dev.hasTime)
                    parts.timeAxis = EventAxis::byTime(dev.events.timeUs);
            }
            stock.fill(kStockColumns, classified);
        } catch (...) {
            sideError = std::current_exception();
        }
    });
    std::shared_ptr<Classification> c;
    try {
        c = std::make_shared<Classification>(classify(*m_trace, dev, *rules));
    } catch (...) {
        classified = true;
        side.join();
        throw;
    }
    classified = true;
    side.join();
    if (sideError)
        std::rethrow_exception(sideError);
    PoolSeries series = computePoolSeries(dev, *c, PoolSeriesOptions{.stock = &stock});
    stock.clear();
    m_peaks.bytes = series.peak();
    m_peaks.initial = series.initial();
    for (size_t p = 0; p < kPoolCount; ++p)
        m_peaks.index[p] = series.peakIndex(Pool(p));
    m_classification = std::move(c);
    if (eagerTimeline) {
        m_timeline = std::make_shared<DeviceTimeline>(m_trace, m_index, m_classification, std::move(series), std::move(parts));
        m_eager = true;
    } else {
        m_series.emplace(std::move(series));
    }
}

std::shared_ptr<const DeviceTimeline> DeviceDocument::timelinePtr() const
{
    std::call_once(m_timelineOnce, [this] {
        if (m_timeline)
            return; // built eagerly
        if (m_series) // a copy: poolsAt keeps reading the series this document holds
            m_timeline = std::make_shared<DeviceTimeline>(m_trace, m_index, m_classification, PoolSeries(*m_series));
        else if (m_classification) // opened without series
            m_timeline = std::make_shared<DeviceTimeline>(m_trace, m_index, m_classification, computePoolSeries(device(), *m_classification));
        else
            m_timeline = std::make_shared<DeviceTimeline>(m_trace, m_index);
    });
    return m_timeline;
}

const AliveIndex& DeviceDocument::alive() const
{
    // An eager timeline (set before the document was shared, never changed) holds the index; a lazy
    // one is never built just for this, nor read here while another thread may be building it.
    if (m_eager)
        return m_timeline->alive();
    std::call_once(m_aliveOnce, [this] { m_alive.emplace(device().allocations); });
    return *m_alive;
}

std::shared_ptr<const TraceModel> DeviceDocument::traceModel() const
{
    std::call_once(m_modelOnce, [this] {
        // Unclassified, the model still knows the allocation stream; it only cannot tell pools apart.
        m_model = std::make_shared<const TraceModel>(buildTraceModel(*m_trace, device(), m_classification ? *m_classification : Classification{}));
    });
    return m_model;
}

const PoolSeries* DeviceDocument::series() const
{
    if (m_series)
        return &*m_series;
    if (!m_classification)
        return nullptr;
    std::call_once(m_seriesOnce, [this] { m_lateSeries.emplace(computePoolSeries(device(), *m_classification)); });
    return &*m_lateSeries;
}

PoolBytes DeviceDocument::poolsAt(EventIndex i) const
{
    const DeviceTrace& d = device();
    if (m_series)
        return m_series->at(i);
    if (m_eager && m_classification)
        return m_timeline->breakdownAt(i, -1).pool;
    if (m_classification)
        return poolsAtEvent(d, *m_classification, i);
    // Unclassified and never drawn: everything allocated is unknown.
    PoolBytes b{};
    b[size_t(Pool::Unknown)] = d.allocatedAt(i);
    b[size_t(Pool::CachedFree)] = cachedFreeBytes(d.reservedKnown(), d.reservedAt(i), d.allocatedAt(i));
    return b;
}

int64_t DeviceDocument::oomCapacity() const
{
    const DeviceTrace& d = device();
    if (d.ooms.empty() || d.ooms.back().deviceFree < 0)
        return -1;
    const OomEvent& oom = d.ooms.back();
    return oom.capacity(d.reservedAt(oom.index));
}

std::shared_ptr<const Document> Document::open(const std::string& path, const DocumentOptions& options, Progress& progress)
{
    auto trace = load(path, LoadOptions{}, progress);
    if (progress.cancel || (options.cancel && options.cancel->load()))
        return nullptr;
    return fromTrace(std::move(trace), options);
}

std::shared_ptr<const Document> Document::open(const std::string& path, const DocumentOptions& options)
{
    Progress progress;
    return open(path, options, progress);
}

std::shared_ptr<const Document> Document::fromTrace(std::shared_ptr<const Trace> trace, const DocumentOptions& options)
{
    auto doc = std::make_shared<Document>();
    doc->m_trace = std::move(trace);
    doc->m_rules = options.rules;
    if (!options.rules)
        doc->m_notes.push_back("pools are unclassified" + (options.rulesProblem.empty() ? std::string() : ": " + options.rulesProblem));
    for (size_t i = 0; i < doc->m_trace->devices.size(); ++i) {
        if (options.cancel && options.cancel->load())
            return nullptr;
        auto dev = std::make_unique<DeviceDocument>(doc->m_trace, i);
        dev->prepare(options.rules.get(), options.eagerTimelines, options.poolSeries, options.seriesColumns);
        doc->m_devices.push_back(std::move(dev));
    }
    return doc;
}

size_t Document::defaultDevice() const
{
    size_t best = 0;
    auto score = [&](size_t i) {
        const DeviceTrace& d = m_trace->devices[i];
        return std::tuple(!d.ooms.empty(), d.kind == DeviceKind::Cuda, d.eventCount(), d.segments.size());
    };
    for (size_t i = 1; i < m_devices.size(); ++i)
        if (score(i) > score(best))
            best = i;
    return best;
}

size_t Document::findDevice(int device) const
{
    for (size_t i = 0; i < m_trace->devices.size(); ++i)
        if (m_trace->devices[i].device == device && m_trace->devices[i].kind == DeviceKind::Cuda)
            return i;
    for (size_t i = 0; i < m_trace->devices.size(); ++i)
        if (m_trace->devices[i].device == device)
            return i;
    return std::string::npos;
}

const DeviceDocument& Document::pickDevice(std::optional<int> wanted) const
{
    if (m_devices.empty())
        throw std::invalid_argument(path() + ": the dump holds no device data");
    if (!wanted)
        return device(defaultDevice());
    if (const size_t i = findDevice(*wanted); i != std::string::npos)
        return device(i);
    std::string have;
    for (const auto& d : m_trace->devices)
        have += (have.empty() ? "" : ", ") + std::to_string(d.device);
    throw std::invalid_argument("device " + std::to_string(*wanted) + " is not in this dump (devices: " + have + ")");
}

} // namespace poolscope
