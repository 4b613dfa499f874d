#include "core/report/report.h"

#include "core/allocator/allocator_config.h"
#include "core/sites/site_key.h"
#include "core/timeline/moment.h"
#include "core/timeline/segment_layout.h"
#include "core/util/units.h"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace poolscope {
namespace {

std::string frameText(const Trace& trace, const Allocation& a)
{
    if (!trace.opName(a).empty())
        return trace.opName(a);
    const FrameId f = trace.frames.userFrame(a.stack);
    if (!f)
        return {};
    const Frame& fr = trace.frames.frame(f);
    if (fr.isPython())
        return fr.filename + ":" + std::to_string(fr.line) + " " + fr.name;
    return fr.name;
}

std::vector<LiveAllocation> largestAlive(const DeviceDocument& doc, EventIndex at, std::vector<AllocId> alive, int top)
{
    const DeviceTrace& dev = doc.device();
    const size_t k = std::min<size_t>(alive.size(), size_t(std::max(top, 0)));
    // Largest first; address breaks ties so the order is stable across runs.
    std::partial_sort(alive.begin(), alive.begin() + ptrdiff_t(k), alive.end(), [&](AllocId x, AllocId y) {
        const auto& a = dev.allocations[x.value];
        const auto& b = dev.allocations[y.value];
        return a.size != b.size ? a.size > b.size : a.address < b.address;
    });
    const int64_t nowUs = at >= 0 ? dev.events.timeUs[size_t(at)] : kNoTime;
    std::vector<LiveAllocation> rows;
    for (size_t i = 0; i < k; ++i) {
        const Allocation& a = dev.allocations[alive[i].value];
        LiveAllocation row;
        row.id = alive[i];
        row.size = a.size;
        row.address = a.address;
        row.stream = a.stream;
        row.allocIndex = a.allocEvent;
        row.preexisting = a.preexisting();
        row.frame = frameText(doc.trace(), a);
        if (const Classification* c = doc.classification())
            row.pool = c->pool[alive[i].value];
        if (!a.preexisting())
            row.ageEvents = at - a.allocEvent;
        if (nowUs != kNoTime && a.allocTimeUs != kNoTime)
            row.ageUs = nowUs - a.allocTimeUs;
        rows.push_back(std::move(row));
    }
    return rows;
}

// Fragmentation, allocator advice and memory outside PyTorch at the moment (issue 25).
void addAllocatorFacts(const DeviceDocument& doc, EventIndex at, const std::optional<DeviceTotal>& deviceTotal, bool advise,
                       MomentReport& m)
{
    const DeviceTrace& dev = doc.device();
    // Where the history contradicts the segments, a replay of one against the other measures nothing.
    const bool consistent = dev.segmentsContradicted == kNoEvent;
    if (consistent && (!dev.segments.empty() || dev.eventCount() > 0)) {
        // Exact: the trace replayed up to the moment (milliseconds up to a few hundred thousand events).
        // Past that, or where expandable segments existed before recording (the replay cannot seed
        // their pages), the window's layout: block sizes of tensors freed before the dump's end are
        // estimated there (512-byte rounding, no unsplit slack), so free bytes can read a little high.
        constexpr size_t kExactUpTo = 300'000;
        const bool seedable = std::none_of(dev.segments.begin(), dev.segments.end(), [](const Segment& s) { return s.isExpandable; });
        if (seedable && dev.eventCount() <= kExactUpTo) {
            m.fragmentation = fragmentationAt(doc.trace(), dev, at, m.oom ? m.oom->requestedBytes : 0);
        } else {
            const int64_t request = m.oom ? roundSize(allocatorConfigFromSettings(doc.trace().allocatorSettings), m.oom->requestedBytes) : 0;
            m.fragmentation = fragmentationOfLayout(segmentLayoutAt(dev, doc.alive(), at), dev, request);
            m.fragmentation.source += " (sizes of blocks freed later estimated)";
        }
    }
    if (!m.oom)
        return;
    if (advise && consistent && doc.classified())
        if (const auto model = doc.traceModel())
            applyAllocatorAdvice(m, adviseAllocatorAtOom(doc.trace(), dev, *model, at));
    m.outside = outsideMemory(deviceTotalFor(doc.trace(), dev.device, deviceTotal), m.reserved, m.oom->deviceFree);
}

} // namespace

std::string defaultMomentSpec(const DeviceTrace& device) { return device.ooms.empty() ? "peak" : "oom"; }

void applyAllocatorAdvice(MomentReport& m, AllocatorAdvice advice)
{
    // What is alive plus the request over what PyTorch could use: the cache is no wall, whatever its
    // size, so the verdict that named it is made again with the largest allocated pool.
    if (m.classified && advice.nothingHelps && !m.evidence.overCapacityAlive) {
        m.evidence.overCapacityAlive = true;
        m.verdict = makeVerdict(m.words, m.pools, m.evidence);
    }
    // The verdict names an allocator setting only when the replay shows it fits.
    if (m.classified && !advice.sentence.empty()) {
        m.verdict.advice += " " + advice.sentence;
        m.verdict.sentence += " " + advice.sentence;
    }
    m.allocatorAdvice = std::move(advice);
}

MomentReport momentReport(const DeviceDocument& doc, EventIndex at, const std::string& spec, int top,
                          const std::optional<DeviceTotal>& deviceTotal, bool adviseAllocator)
{
    const DeviceTrace& dev = doc.device();
    MomentReport m;
    m.at = spec;
    m.label = at < 0 ? "initial state" : "event " + std::to_string(at);
    if (!spec.empty())
        if (auto resolved = resolveMoment(dev, spec); resolved && resolved->event == at)
            m.label = resolved->label;
    m.words = momentWords(dev, at);
    m.index = at;
    m.timeUs = at >= 0 ? dev.events.timeUs[size_t(at)] : kNoTime;
    m.allocated = dev.allocatedAt(at);
    m.reserved = dev.reservedAt(at);
    m.reservedKnown = dev.reservedKnown();
    m.reservedUnknownWhy = dev.reservedUnknownWhy();
    m.cachedFree = m.reservedKnown ? m.reserved - m.allocated : 0;
    for (const OomEvent& o : dev.ooms)
        if (o.index == at)
            m.oom = o;
    if (m.oom && at >= 0 && size_t(at) < dev.events.count()) {
        m.oomSite = shortStackSite(doc.trace(), dev.events.stack[size_t(at)]);
        // The OOM's own entry may carry no phase (no frames): the last event that has one says where,
        // if it is near (a few hundred events: past that the run may have left that pass).
        if (const Classification* c = doc.classification())
            m.oomPhase = phaseAtOrBefore(c->phases, at, 256);
    }
    std::vector<AllocId> alive = doc.alive().aliveAfter(at);
    m.classified = doc.classified();
    if (const Classification* c = doc.classification()) {
        m.pools = doc.poolsAt(at);
        m.evidence = momentEvidence(*c, dev.allocations, alive);
        m.evidence.atOom = m.oom.has_value();
        addStateSinceFirstStep(m.evidence, *c, dev, alive, at);
        // A wall is named at an OOM or near the device's memory: the user's total when given, else what
        // the OOM showed PyTorch could use.
        m.evidence.capacity = deviceTotal && deviceTotal->bytes > 0 ? deviceTotal->bytes : doc.oomCapacity();
        m.evidence.reserved = m.reservedKnown ? m.reserved : -1;
        m.confidence = m.evidence.confidence;
        m.verdict = makeVerdict(m.words, m.pools, m.evidence);
    }
    addAllocatorFacts(doc, at, deviceTotal, adviseAllocator, m);
    m.top = largestAlive(doc, at, std::move(alive), top);
    return m;
}

std::string oomRequestWhere(const MomentReport& m)
{
    std::string where;
    if (!m.oomSite.empty())
        where = " from " + m.oomSite;
    if (m.oomPhase != Phase::Unknown)
        where += std::string(where.empty() ? "" : ",") + " in the " +
                 (m.oomPhase == Phase::Teardown ? std::string("graph's teardown") : std::string(phaseWords(m.oomPhase)));
    return where.empty() ? where : " (" + where.substr(1) + ")";
}

std::string momentSentence(const MomentReport& m, int64_t capacity)
{
    std::string text;
    if (m.classified)
        text = m.verdict.sentence;
    else if (m.reservedKnown)
        text = m.words + ": " + formatBytes(m.allocated) + " allocated of " + formatBytes(m.reserved) + " reserved (pools unclassified).";
    else
        text = m.words + ": " + formatBytes(m.allocated) + " allocated (pools unclassified).";
    if (m.oom) {
        text += " The failed request asked for " + formatBytes(m.oom->requestedBytes) + oomRequestWhere(m);
        text += m.oom->deviceFree >= 0 ? " with " + formatBytes(m.oom->deviceFree) + " free on the device." : std::string(".");
        if (m.oom->atProcessLimit())
            text += " The device had room for it: a limit of this process refused it (torch.cuda.set_per_process_memory_fraction, "
                    "or the share of the GPU a framework keeps for itself), at most " +
                    formatBytes(m.oom->capacity(m.reserved)) + " (reserved + the request): raise that limit, or fit under it.";
    } else if (capacity >= 0) {
        text += " Headroom to capacity: " + formatBytes(capacity - m.reserved) + ".";
    }
    return text;
}

DeviceReport deviceReport(const DeviceDocument& doc, const ReportOptions& options)
{
    const DeviceTrace& dev = doc.device();
    DeviceReport d;
    d.device = dev.device;
    d.label = dev.label();
    d.kind = dev.kind;
    d.entries = dev.eventCount();
    d.allocations = dev.allocations.size();
    d.segments = dev.segments.size();
    d.hasTime = dev.hasTime;
    d.initialAllocated = dev.initialAllocated;
    d.peakAllocated = dev.peakAllocated;
    d.peakIndex = dev.peakIndex;
    d.endReserved = dev.endReserved;
    d.orphanFreeBytes = dev.orphanFreeBytes;
    // Counted per action first: a map lookup with a string made per entry was a tenth of a 6M-entry
    // report's time.
    std::array<int64_t, size_t(Action::Unknown) + 1> counts{};
    for (Action a : dev.events.action)
        ++counts[size_t(a)];
    for (size_t a = 0; a < counts.size(); ++a)
        if (counts[a] > 0)
            d.actions[std::string(actionName(Action(a)))] = counts[a];
    d.ooms = dev.ooms;
    d.classified = doc.classified();
    d.poolPeaks = doc.poolPeaks();
    if (d.classified)
        d.poolsAtPeak = doc.poolsAt(dev.peakIndex);
    d.reservedAtPeak = dev.reservedAt(dev.peakIndex);

    const std::string spec = options.at.empty() ? defaultMomentSpec(dev) : options.at;
    std::string error;
    const auto moment = resolveMoment(dev, spec, &error);
    if (!moment)
        throw std::invalid_argument(dev.label() + ": " + error);
    d.moment = momentReport(doc, moment->event, spec, options.top, options.deviceTotal);
    return d;
}

Report buildReport(const Document& doc, const ReportOptions& options)
{
    Report r;
    const Trace& trace = doc.trace();
    r.file = trace.path;
    r.format = std::string(formatName(trace.format));
    r.formatDetail = trace.formatDetail;
    r.warnings = trace.warnings;
    if (options.device)
        r.devices.push_back(deviceReport(doc.pickDevice(options.device), options));
    else
        for (size_t i = 0; i < doc.deviceCount(); ++i)
            r.devices.push_back(deviceReport(doc.device(i), options));
    return r;
}

} // namespace poolscope
