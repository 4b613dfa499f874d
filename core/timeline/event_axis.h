#pragma once
#include "core/model/ids.h"

#include <cstdint>
#include <span>
#include <vector>

namespace poolscope {

// What the chart's x axis counts. Wall time exists only when the dump carries time_us.
enum class AxisMode : uint8_t { EventIndex, WallTime };

// Maps events to integer positions on the x axis and back (hotspot's TimeLineData idea: pure
// mapping code, unit-tested, no paint code). Positions are event indices, or microseconds since the
// first timed event. Event i's value ("after event i") holds from position(i) until the next event's
// position; before position(0) the initial state shows.
class EventAxis {
public:
    EventAxis() = default;
    static EventAxis byIndex(size_t eventCount);
    // Times need not be sorted nor present everywhere (kNoTime): a running maximum makes them
    // monotone, gaps take the previous event's time and leading gaps the first known time.
    static EventAxis byTime(std::span<const int64_t> timeUs);

    AxisMode mode() const { return m_mode; }
    size_t eventCount() const { return m_count; }
    int64_t originUs() const { return m_originUs; } // absolute time of position 0 (WallTime)
    int64_t position(EventIndex i) const;
    // The axis extent a "reset view" shows: [0, end()).
    int64_t end() const;

    // Number of events whose position is <= x (== sample index: 0 is the initial state, s > 0 the
    // state after event s-1). Doubles come from the plot; comparisons stay exact on integers.
    size_t countAtOrBefore(double x) const;
    size_t countBefore(double x) const;
    // countAtOrBefore(x) given before == countBefore(x): only events at exactly x lie between, so
    // the search starts there (a probe or two where the full search would walk the whole axis).
    size_t countAtOrBefore(double x, size_t before) const;
    // The event whose state shows at x; kNoEvent when x lies before every event.
    EventIndex eventAt(double x) const { return EventIndex(countAtOrBefore(x)) - 1; }

private:
    AxisMode m_mode = AxisMode::EventIndex;
    size_t m_count = 0;
    int64_t m_originUs = 0;
    std::vector<int64_t> m_pos; // WallTime only, monotone
};

// Pixel columns over an x range, for level-of-detail queries and pixel<->axis conversions.
struct PixelMap {
    double x0 = 0;
    double x1 = 1;
    int width = 1;

    double columnStart(int c) const { return x0 + (x1 - x0) * double(c) / double(width); }
    double toPixel(double x) const { return (x - x0) / (x1 - x0) * double(width); }
    double toAxis(double px) const { return x0 + px / double(width) * (x1 - x0); }
};

} // namespace poolscope
