#include "core/timeline/moment.h"

#include <cctype>
#include <charconv>

namespace poolscope {

std::optional<Moment> resolveMoment(const DeviceTrace& device, std::string_view spec, std::string* error)
{
    auto fail = [&](std::string message) -> std::optional<Moment> {
        if (error)
            *error = std::move(message);
        return std::nullopt;
    };
    const EventIndex last = lastEvent(device);
    auto at = [&](EventIndex e, std::string_view what) {
        Moment m;
        m.event = e;
        m.label = e == kNoEvent ? std::string(what) + " (initial state)" : std::string(what) + " (event " + std::to_string(e) + ")";
        return m;
    };
    if (spec == "peak")
        return at(device.peakIndex, "peak");
    if (spec == "end")
        return at(last, "end");
    if (spec == "oom") {
        if (device.ooms.empty())
            return fail(device.label() + " has no OOM event");
        return at(device.ooms.back().index, "OOM");
    }
    int64_t index = 0;
    const auto* b = spec.data();
    const auto* e = spec.data() + spec.size();
    auto [p, ec] = std::from_chars(b, e, index);
    if (spec.empty() || ec != std::errc() || p != e)
        return fail("expected peak, oom, end or an event index, got '" + std::string(spec) + "'");
    if (index < 0 || index > last)
        return fail("event index " + std::to_string(index) + " is out of range (" + device.label() + " has " +
                    std::to_string(device.eventCount()) + " events)");
    Moment m;
    m.event = index;
    m.label = "event " + std::to_string(index);
    return m;
}

std::string momentWords(const DeviceTrace& device, EventIndex event)
{
    for (const OomEvent& o : device.ooms)
        if (o.index == event)
            return "At the OOM";
    if (device.eventCount() == 0)
        return "In the snapshot";
    if (event == device.peakIndex)
        return "At the peak";
    if (event >= 0 && size_t(event) < device.eventCount() && device.events.action[size_t(event)] == Action::Snapshot)
        return "At the snapshot";
    if (event == lastEvent(device))
        return "At the end";
    return "At event #" + std::to_string(event);
}

std::string momentTitle(const DeviceTrace& device, EventIndex event)
{
    if (device.eventCount() == 0)
        return "in the snapshot (the dump holds no events)";
    std::string words = momentWords(device, event);
    words[0] = char(std::tolower(static_cast<unsigned char>(words[0])));
    if (words.find('#') == std::string::npos)
        words += event < 0 ? " (initial state)" : " (event " + std::to_string(event) + ")";
    return words;
}

} // namespace poolscope
