#include "core/compare/comparison_chart.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace poolscope {

MomentAlignment::MomentAlignment(const Comparison& c, EventIndex lastA, EventIndex lastB)
{
    m_anchors.emplace_back(kNoEvent, kNoEvent);
    // The end pairs with the end only when both runs recorded the whole of the same window.
    bool window = false;
    for (const auto& x : c.axes)
        window |= x.name == "recorded_window";
    std::vector<CompareMoment> kinds = {CompareMoment::ForwardEnd, CompareMoment::BackwardEnd, CompareMoment::StepEnd};
    if (c.cutShort.empty() && !window)
        kinds.push_back(CompareMoment::End);
    std::vector<std::pair<EventIndex, EventIndex>> pairs;
    for (CompareMoment k : kinds) {
        const MomentPair& m = c.moment(k);
        if (m.paired())
            pairs.emplace_back(k == CompareMoment::End ? lastA : m.a, k == CompareMoment::End ? lastB : m.b);
    }
    std::sort(pairs.begin(), pairs.end());
    for (const auto& p : pairs)
        if (p.first > m_anchors.back().first && p.second > m_anchors.back().second)
            m_anchors.push_back(p);
}

double MomentAlignment::position(EventIndex a) const
{
    auto next = std::upper_bound(m_anchors.begin(), m_anchors.end(), a, [](EventIndex x, const auto& p) { return x < p.first; });
    if (next == m_anchors.end()) {
        const auto& last = m_anchors.back();
        return double(last.second) + double(a - last.first);
    }
    const auto& hi = *next;
    const auto& lo = *(next - 1);
    const double t = double(a - lo.first) / double(hi.first - lo.first);
    return double(lo.second) + t * double(hi.second - lo.second);
}

namespace {

void fillRun(ChartRun& out, const RunInput& run, const std::vector<Pool>& layers, const std::function<double(EventIndex)>& pos, double xMin,
             double width, size_t columns)
{
    const DeviceTrace& dev = run.device;
    std::vector<EventIndex> best(columns, kNoEvent - 1); // kNoEvent - 1: no event in the column
    for (EventIndex e = kNoEvent; e < EventIndex(dev.eventCount()); ++e) {
        const double x = pos(e);
        const size_t col = size_t(std::clamp<double>(std::floor((x - xMin) / width), 0.0, double(columns - 1)));
        if (best[col] < kNoEvent || dev.allocatedAt(e) > dev.allocatedAt(best[col]))
            best[col] = e;
    }
    // Columns past a run's last event stay empty (the run had ended); gaps inside hold the state
    // of the event before them.
    const double end = pos(EventIndex(dev.eventCount()) - 1);
    EventIndex carry = kNoEvent;
    out.x.clear();
    out.top.assign(layers.size(), {});
    for (size_t col = 0; col < columns; ++col) {
        const double x = xMin + double(col) * width;
        if (best[col] >= kNoEvent)
            carry = best[col];
        else if (x > end)
            break;
        out.x.push_back(x);
        int64_t sum = 0;
        for (size_t l = 0; l < layers.size(); ++l) {
            sum += run.series.bytes(layers[l], carry);
            out.top[l].push_back(sum);
        }
        out.highest = std::max(out.highest, sum);
    }
}

std::string markLabel(CompareMoment k)
{
    switch (k) {
    case CompareMoment::ForwardEnd:
        return "end of forward";
    case CompareMoment::BackwardEnd:
        return "end of backward";
    case CompareMoment::StepEnd:
        return "end of step";
    default:
        return std::string(compareMomentName(k));
    }
}

} // namespace

ComparisonChart comparisonChart(const RunInput& a, const RunInput& b, const Comparison& c, size_t columns)
{
    ComparisonChart chart;
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (a.series.holdsBytes(Pool(p)) || b.series.holdsBytes(Pool(p)))
            chart.layers.push_back(Pool(p));
    const EventIndex lastA = EventIndex(a.device.eventCount()) - 1, lastB = EventIndex(b.device.eventCount()) - 1;
    const MomentAlignment align(c, lastA, lastB);
    chart.xMin = -1;
    chart.xMax = std::max(double(lastB), align.position(lastA)) + 1;
    columns = std::max<size_t>(columns, 2);
    const double width = (chart.xMax - chart.xMin) / double(columns);
    fillRun(chart.a, a, chart.layers, [&](EventIndex e) { return align.position(e); }, chart.xMin, width, columns);
    fillRun(chart.b, b, chart.layers, [](EventIndex e) { return double(e); }, chart.xMin, width, columns);
    using Kind = ComparisonChart::MarkKind;
    for (CompareMoment k : {CompareMoment::ForwardEnd, CompareMoment::BackwardEnd, CompareMoment::StepEnd})
        if (c.moment(k).paired())
            chart.marks.push_back({double(c.moment(k).b), markLabel(k), Kind::PhaseEnd});
    const MomentPair& at = c.moment(c.at);
    const std::string name = c.at == CompareMoment::Peak ? "peak" : c.at == CompareMoment::Oom ? "OOM" : std::string(compareMomentName(c.at));
    const double atA = align.position(at.a), atB = double(at.b);
    if (std::abs(atA - atB) <= width)
        chart.marks.push_back({atB, name, Kind::Moment});
    else {
        chart.marks.push_back({atA, name + " (A)", Kind::Moment});
        chart.marks.push_back({atB, name + " (B)", Kind::Moment});
    }
    if (c.at != CompareMoment::Oom) {
        if (!a.device.ooms.empty())
            chart.marks.push_back({align.position(a.device.ooms.back().index), "OOM (A)", Kind::Oom});
        if (!b.device.ooms.empty())
            chart.marks.push_back({double(b.device.ooms.back().index), "OOM (B)", Kind::Oom});
    }
    return chart;
}

} // namespace poolscope
