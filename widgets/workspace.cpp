#include "widgets/workspace.h"

#include <algorithm>

namespace poolscope {

Workspace::Workspace(QObject* parent) : QObject(parent)
{
    m_timer.setSingleShot(true);
    m_timer.setInterval(0); // coalesces a burst of moves into one refresh of every panel
    connect(&m_timer, &QTimer::timeout, this, &Workspace::flush);
}

void Workspace::setDocument(std::shared_ptr<const Document> doc, const QString& path)
{
    m_doc = std::move(doc);
    m_path = path;
    m_device = m_doc && m_doc->deviceCount() > 0 ? m_doc->defaultDevice() : 0;
    m_event = kNoEvent;
    m_selected = AllocId{};
    m_momentValid = false;
    m_adviceCache.clear();
    m_stepsCache.clear();
    emit documentChanged();
    schedule();
}

void Workspace::setComparison(std::shared_ptr<const Document> doc, const QString& path)
{
    m_comparison = std::move(doc);
    m_comparisonPath = path;
    emit comparisonChanged();
}

void Workspace::setDevice(size_t deviceIndex)
{
    if (!m_doc || deviceIndex >= m_doc->deviceCount())
        return;
    m_device = deviceIndex;
    m_event = kNoEvent;
    m_selected = AllocId{};
    m_momentValid = false;
    emit deviceChanged();
    schedule();
}

const StepTable& Workspace::steps()
{
    static const StepTable none;
    const DeviceDocument* dev = deviceDocument();
    if (!dev)
        return none;
    auto it = m_stepsCache.find(m_device);
    if (it == m_stepsCache.end())
        it = m_stepsCache.emplace(m_device, findSteps(*dev)).first;
    return it->second;
}

void Workspace::setEvent(EventIndex event)
{
    const DeviceDocument* dev = deviceDocument();
    if (!dev)
        return;
    const auto n = EventIndex(dev->device().eventCount());
    event = n == 0 ? kNoEvent : std::clamp<EventIndex>(event, 0, n - 1);
    if (event == m_event && m_momentValid)
        return;
    m_event = event;
    m_momentValid = false;
    emit eventChanged(event);
    schedule();
}

void Workspace::setCapacity(int64_t bytes, const QString& label)
{
    m_capacity = bytes;
    m_capacityLabel = label;
    m_momentValid = false;
    schedule();
}

void Workspace::select(AllocId id)
{
    if (id == m_selected)
        return;
    m_selected = id;
    emit selectionChanged();
}

void Workspace::schedule() { m_timer.start(); }

const CursorMoment& Workspace::moment()
{
    if (m_momentValid)
        return m_moment;
    m_moment = CursorMoment{};
    m_moment.event = m_event;
    if (const DeviceDocument* dev = deviceDocument()) {
        // The report's own moment (no table of live tensors: the tensor panel lists them all).
        // The window's capacity is the device's total when the user picked it (a preset, a custom
        // size); reserved + free at the OOM is what PyTorch could use, not a total.
        std::optional<DeviceTotal> total;
        if (m_capacity > 0 && m_capacity != dev->oomCapacity())
            total = DeviceTotal{m_capacity, "the window's capacity", 0};
        m_moment.report = momentReport(*dev, m_event, {}, 0, total, /*adviseAllocator=*/false);
        if (m_moment.report.oom && dev->classified())
            if (const auto model = dev->traceModel()) {
                auto [it, fresh] = m_adviceCache.try_emplace({m_device, m_event});
                if (fresh)
                    it->second = adviseAllocatorAtOom(dev->trace(), dev->device(), *model, m_event);
                applyAllocatorAdvice(m_moment.report, it->second);
            }
        m_moment.breakdown = dev->timeline().breakdownAt(m_event, m_capacity);
        m_moment.layout = segmentLayoutAt(dev->device(), dev->alive(), m_event);
        m_moment.sentence = momentSentence(m_moment.report, m_capacity);
    }
    m_momentValid = true;
    return m_moment;
}

void Workspace::flush()
{
    m_timer.stop();
    moment();
    emit momentChanged();
}

} // namespace poolscope
