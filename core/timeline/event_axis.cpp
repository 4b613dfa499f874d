#include "core/timeline/event_axis.h"

#include "core/util/huge_pages.h"

#include <algorithm>
#include <cmath>

namespace poolscope {

EventAxis EventAxis::byIndex(size_t eventCount)
{
    EventAxis a;
    a.m_mode = AxisMode::EventIndex;
    a.m_count = eventCount;
    return a;
}

EventAxis EventAxis::byTime(std::span<const int64_t> timeUs)
{
    EventAxis a;
    a.m_mode = AxisMode::WallTime;
    a.m_count = timeUs.size();
    auto first = std::find_if(timeUs.begin(), timeUs.end(), [](int64_t t) { return t != kNoTime; });
    a.m_originUs = first == timeUs.end() ? 0 : *first;
    reserveHuge(a.m_pos, timeUs.size());
    a.m_pos.resize(timeUs.size());
    int64_t last = 0;
    for (size_t i = 0; i < timeUs.size(); ++i) {
        if (timeUs[i] != kNoTime)
            last = std::max(last, timeUs[i] - a.m_originUs);
        a.m_pos[i] = last;
    }
    return a;
}

int64_t EventAxis::position(EventIndex i) const
{
    if (i < 0)
        return -1;
    if (m_mode == AxisMode::EventIndex)
        return i;
    return m_pos[size_t(i)];
}

int64_t EventAxis::end() const
{
    if (m_count == 0)
        return 1;
    if (m_mode == AxisMode::EventIndex)
        return int64_t(m_count);
    // A sliver after the last event so that its state is visible at all.
    const int64_t span = m_pos.back();
    return span + std::max<int64_t>(1, span / 200);
}

size_t EventAxis::countAtOrBefore(double x) const
{
    if (std::isnan(x) || x < 0)
        return 0;
    if (x >= 9.0e18)
        return m_count;
    const auto xi = int64_t(std::floor(x)); // p <= x  <=>  p <= floor(x) for integer p
    if (m_mode == AxisMode::EventIndex)
        return size_t(std::min<int64_t>(xi + 1, int64_t(m_count)));
    return size_t(std::upper_bound(m_pos.begin(), m_pos.end(), xi) - m_pos.begin());
}

size_t EventAxis::countAtOrBefore(double x, size_t before) const
{
    if (m_mode == AxisMode::EventIndex || !(x >= 0) || x >= 9.0e18 || before >= m_count)
        return countAtOrBefore(x);
    const auto xi = int64_t(std::floor(x));
    if (m_pos[before] > xi)
        return before;
    return size_t(std::upper_bound(m_pos.begin() + std::ptrdiff_t(before), m_pos.end(), xi) - m_pos.begin());
}

size_t EventAxis::countBefore(double x) const
{
    if (std::isnan(x) || x <= 0)
        return 0;
    if (x >= 9.0e18)
        return m_count;
    const auto xi = int64_t(std::ceil(x)); // p < x  <=>  p < ceil(x) for integer p
    if (m_mode == AxisMode::EventIndex)
        return size_t(std::min<int64_t>(xi, int64_t(m_count)));
    return size_t(std::lower_bound(m_pos.begin(), m_pos.end(), xi) - m_pos.begin());
}

} // namespace poolscope
