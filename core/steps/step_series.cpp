#include "core/steps/step_series.h"

#include "core/report/json_text.h"

namespace poolscope {

void writeStepSeriesCsv(std::ostream& out, const DeviceDocument& dev, const StepTable& steps)
{
    const DeviceTrace& d = dev.device();
    const bool classified = dev.classified();
    out << "step,start_event,end_event,complete,peak_allocated,peak_event,peak_phase,alive_at_start,alive_at_end,growth,reserved_at_end";
    if (classified)
        for (auto name : kPoolNames)
            out << ',' << name << "_at_end";
    out << '\n';
    for (const Step& s : steps.steps) {
        out << s.index << ',' << s.start << ',' << s.end << ',' << (s.complete ? 1 : 0) << ',' << s.peakAllocated << ',' << s.peakEvent << ','
            << phaseName(s.peakPhase) << ',' << s.aliveAtStart << ',' << s.aliveAtEnd << ',' << s.growth() << ',';
        if (d.reservedKnown())
            out << d.reservedAt(s.end);
        if (classified) {
            const PoolBytes b = dev.poolsAt(s.end);
            for (size_t p = 0; p < kPoolCount; ++p)
                out << ',' << b[p];
        }
        out << '\n';
    }
}

void writeStepSeriesJsonl(std::ostream& out, const DeviceDocument& dev, const StepTable& steps)
{
    const DeviceTrace& d = dev.device();
    for (const Step& s : steps.steps) {
        nlohmann::json row{{"step", s.index},
                           {"start_event", s.start},
                           {"end_event", s.end},
                           {"complete", s.complete},
                           {"peak_allocated", s.peakAllocated},
                           {"peak_event", s.peakEvent},
                           {"peak_phase", std::string(phaseName(s.peakPhase))},
                           {"alive_at_start", s.aliveAtStart},
                           {"alive_at_end", s.aliveAtEnd},
                           {"growth", s.growth()},
                           {"found_by", std::string(stepSourceName(steps.source))}};
        row["reserved_at_end"] = d.reservedKnown() ? nlohmann::json(d.reservedAt(s.end)) : nlohmann::json(nullptr);
        if (dev.classified()) {
            const PoolBytes b = dev.poolsAt(s.end);
            nlohmann::json pools = nlohmann::json::object();
            for (size_t p = 0; p < kPoolCount; ++p)
                pools[std::string(kPoolNames[p])] = b[p];
            row["pools_at_end"] = pools;
        }
        out << jsonText(row, -1) << '\n';
    }
}

} // namespace poolscope
