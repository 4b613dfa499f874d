#include "app/args.h"
#include "app/commands.h"

#include "core/load.h"
#include "core/util/units.h"

#include <iostream>
#include <nlohmann/json.hpp>

namespace poolscope::app {
namespace {

nlohmann::json infoJson(const Trace& t)
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
        if (d.hasTime && d.eventCount() > 0) {
            int64_t lo = INT64_MAX, hi = INT64_MIN;
            for (int64_t us : d.events.timeUs)
                if (us != kNoTime) {
                    lo = std::min(lo, us);
                    hi = std::max(hi, us);
                }
            dj["time_span_us"] = hi - lo;
        }
        j["devices"].push_back(dj);
    }
    return j;
}

int runInfo(const std::vector<std::string>& argv)
{
    return guarded("info", [&] {
        Args args(argv);
        const bool asJson = args.flag("--json");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("info expects one FILE");
        const auto trace = load(files[0]);
        const auto j = infoJson(*trace);
        if (asJson) {
            std::cout << j.dump(2) << "\n";
            return 0;
        }
        std::cout << trace->path << "\n  format      " << j["format"].get<std::string>() << " (" << trace->formatDetail << ")\n";
        for (const auto& h : trace->versionHints)
            std::cout << "  version     " << h << "\n";
        std::cout << "  frames      " << trace->frames.frameCount() << " distinct, " << trace->frames.stackCount() << " stacks\n";
        if (!trace->annotations.empty())
            std::cout << "  annotations " << trace->annotations.size() << "\n";
        for (const auto& d : j["devices"]) {
            std::cout << "  " << d["label"].get<std::string>() << "  " << d["entries"] << " entries, " << d["segments"]
                      << " segments, " << d["allocations"] << " allocations";
            if (d.contains("time_span_us"))
                std::cout << ", spanning " << formatDurationUs(d["time_span_us"].get<int64_t>());
            if (d["ooms"].get<int>() > 0)
                std::cout << ", " << d["ooms"] << " OOM event(s)";
            std::cout << "\n";
        }
        if (!trace->warnings.empty()) {
            std::cout << "  warnings:\n";
            for (const auto& w : trace->warnings)
                std::cout << "    " << w << "\n";
        }
        return 0;
    });
}

const CommandRegistrar kRegister({"info", "info FILE [--json]", "format detected, version hints, devices, entries, time span, warnings",
                                  runInfo});

} // namespace
} // namespace poolscope::app
