#include "core/timeline/devices_at_moment.h"

#include <algorithm>

namespace poolscope {

std::vector<DeviceAtMoment> devicesAtMoment(const Trace& trace, size_t device, EventIndex event)
{
    std::vector<DeviceAtMoment> out(trace.devices.size());
    if (device >= trace.devices.size())
        return out;
    const DeviceTrace& self = trace.devices[device];
    const int64_t when = event >= 0 && size_t(event) < self.eventCount() ? self.events.timeUs[size_t(event)] : kNoTime;
    for (size_t d = 0; d < trace.devices.size(); ++d) {
        const DeviceTrace& dev = trace.devices[d];
        DeviceAtMoment& m = out[d];
        if (d == device) {
            m = {event, DeviceAtMoment::How::Self};
            continue;
        }
        if (dev.eventCount() == 0) {
            m = {kNoEvent, DeviceAtMoment::How::NoHistory};
            continue;
        }
        if (event < 0) { // the initial state pairs with the initial states
            m = {kNoEvent, DeviceAtMoment::How::BeforeFirst};
            continue;
        }
        if (when == kNoTime || !dev.hasTime) {
            m = {std::max<EventIndex>(kNoEvent, dev.peakIndex), DeviceAtMoment::How::OwnPeak};
            continue;
        }
        // The events before the first one that is later than the moment (an entry without a time
        // goes with the ones around it).
        const auto& t = dev.events.timeUs;
        size_t i = 0;
        while (i < t.size() && (t[i] == kNoTime || t[i] <= when))
            ++i;
        m = i == 0 ? DeviceAtMoment{kNoEvent, DeviceAtMoment::How::BeforeFirst} : DeviceAtMoment{EventIndex(i) - 1, DeviceAtMoment::How::ByTime};
    }
    return out;
}

bool oomMoment(const Trace& trace, size_t device, EventIndex* event)
{
    if (device >= trace.devices.size() || trace.devices[device].ooms.empty())
        return false;
    *event = trace.devices[device].ooms.back().index;
    return true;
}

} // namespace poolscope
