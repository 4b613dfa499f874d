#pragma once
// When an event happened as a reader is told (the chart's read-outs), worked out here from the dump's
// own time_us rather than through the chart's axis: its time since the run's first timed event, in
// seconds (three decimals) for a run of 2 s or more, else in milliseconds (two).
#include "core/model/trace.h"

#include <QString>

#include <algorithm>

namespace poolscope::testing {

inline QString sinceFirstEvent(const DeviceTrace& d, EventIndex e)
{
    int64_t first = kNoTime, last = kNoTime;
    for (int64_t t : d.events.timeUs)
        if (t != kNoTime) {
            if (first == kNoTime)
                first = t;
            last = std::max(last, t);
        }
    const double us = double(d.events.timeUs[size_t(e)] - first);
    return last - first >= 2'000'000 ? QString::number(us / 1e6, 'f', 3) + QStringLiteral(" s")
                                     : QString::number(us / 1e3, 'f', 2) + QStringLiteral(" ms");
}

} // namespace poolscope::testing
