#include "core/report/info_report.h"

#include "core/report/json_text.h"
#include "core/util/units.h"

#include <algorithm>
#include <optional>

namespace poolscope {
namespace {

std::optional<int64_t> timeSpanUs(const DeviceTrace& d)
{
    if (!d.hasTime || d.eventCount() == 0)
        return std::nullopt;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t us : d.events.timeUs)
        if (us != kNoTime) {
            lo = std::min(lo, us);
            hi = std::max(hi, us);
        }
    return hi - lo;
}

} // namespace

std::string infoJsonText(const Trace& t)
{
    nlohmann::json j;
    j["file"] = t.path;
    j["format"] = std::string(formatName(t.format));
    j["format_detail"] = t.formatDetail;
    j["decoded_bytes"] = t.inputBytes;
    j["version_hints"] = t.versionHints;
    j["frames"] = t.frames.frameCount();
    j["stacks"] = t.frames.stackCount();
    j["annotations"] = t.annotations.size();
    j["allocator_settings"] = t.allocatorSettings;
    j["warnings"] = t.warnings;
    j["devices"] = nlohmann::json::array();
    for (const auto& d : t.devices) {
        nlohmann::json dj = {{"device", d.device}, {"label", d.label()}, {"entries", d.eventCount()},
                             {"segments", d.segments.size()}, {"allocations", d.allocations.size()},
                             {"has_time_us", d.hasTime}, {"ooms", d.ooms.size()}};
        if (const auto span = timeSpanUs(d))
            dj["time_span_us"] = *span;
        j["devices"].push_back(dj);
    }
    return jsonText(j) + "\n";
}

std::string infoText(const Trace& t)
{
    std::string out = t.path + "\n  format      " + std::string(formatName(t.format)) + " (" + t.formatDetail + ")\n";
    for (const auto& h : t.versionHints)
        out += "  version     " + h + "\n";
    out += "  frames      " + std::to_string(t.frames.frameCount()) + " distinct, " + std::to_string(t.frames.stackCount()) + " stacks\n";
    if (!t.annotations.empty())
        out += "  annotations " + std::to_string(t.annotations.size()) + "\n";
    for (const auto& d : t.devices) {
        out += "  " + d.label() + "  " + std::to_string(d.eventCount()) + " entries, " + std::to_string(d.segments.size()) + " segments, " +
               std::to_string(d.allocations.size()) + " allocations";
        if (const auto span = timeSpanUs(d))
            out += ", spanning " + formatDurationUs(*span);
        if (!d.ooms.empty())
            out += ", " + std::to_string(d.ooms.size()) + " OOM event(s)";
        out += "\n";
    }
    if (!t.warnings.empty()) {
        out += "  warnings:\n";
        for (const auto& w : t.warnings)
            out += "    " + w + "\n";
    }
    return out;
}

} // namespace poolscope
