#pragma once
#include "core/model/ids.h"
#include "core/model/trace.h"

#include <vector>

namespace poolscope {

// Where every device of a dump stood at one moment of one of them: that device at its event, each
// other device at its last event up to the moment's time. The devices a process drives (DataParallel,
// several models) share one clock, so time is what pairs their events; event indices do not.
struct DeviceAtMoment {
    enum class How : uint8_t {
        Self,            // the device the moment belongs to, at its own event
        ByTime,          // its last event at or before the moment's time
        BeforeFirst,     // its first event came after the moment: its state before recording (kNoEvent)
        NoHistory,       // it has no events: the state the dump was taken in (kNoEvent)
        OwnPeak,         // neither device has times to pair by: its own peak, not the moment
    };
    EventIndex event = kNoEvent;
    How how = How::OwnPeak;
};

// One entry per device of `trace`, in its order. `device` and `event` name the moment (kNoEvent: the
// initial state of `device`, paired with every device's initial state).
std::vector<DeviceAtMoment> devicesAtMoment(const Trace& trace, size_t device, EventIndex event);

// The moment a multi-device dump failed: `device`'s last OOM. False when that device has none.
bool oomMoment(const Trace& trace, size_t device, EventIndex* event);

} // namespace poolscope
