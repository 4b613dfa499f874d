// `poolscope steps`: the JSON field names are part of the interface (documented in the README).
#include "core/steps/steps_report.h"

#include "core/util/units.h"

#include <sstream>
#include <utility>

namespace poolscope {

using nlohmann::json;

DeviceSteps deviceSteps(const DeviceDocument& dev) { return deviceSteps(dev, findSteps(dev)); }

DeviceSteps deviceSteps(const DeviceDocument& dev, StepTable table)
{
    DeviceSteps d;
    d.device = dev.device().device;
    d.label = dev.label();
    d.table = std::move(table);
    d.leaks = findLeaks(dev, d.table);
    return d;
}

std::vector<DeviceSteps> buildSteps(const Document& doc, std::optional<int> device)
{
    std::vector<DeviceSteps> out;
    if (device) {
        out.push_back(deviceSteps(doc.pickDevice(device)));
        return out;
    }
    for (size_t i = 0; i < doc.deviceCount(); ++i)
        out.push_back(deviceSteps(doc.device(i)));
    return out;
}

std::string stepsText(const std::vector<DeviceSteps>& devices)
{
    std::ostringstream o;
    for (const DeviceSteps& d : devices) {
        const StepTable& t = d.table;
        o << d.label << ": " << t.steps.size() << " step" << (t.steps.size() == 1 ? "" : "s") << ", " << t.how << "\n";
        if (t.setupEnd != kNoEvent)
            o << "  set-up before the first step: events 0-" << t.setupEnd << "\n";
        if (!t.steps.empty()) {
            o << "  step  events              peak         at event (phase)          alive at start  alive at end   growth\n";
            for (const Step& s : t.steps) {
                char line[320];
                std::snprintf(line, sizeof line, "  %-5d %-19s %-12s %-25s %-15s %-14s %s%s%s\n", s.index,
                              (std::to_string(s.start) + "-" + std::to_string(s.end)).c_str(), formatBytes(s.peakAllocated).c_str(),
                              (std::to_string(s.peakEvent) + " (" + std::string(phaseName(s.peakPhase)) + ")").c_str(),
                              formatBytes(s.aliveAtStart).c_str(), formatBytes(s.aliveAtEnd).c_str(),
                              ((s.growth() >= 0 ? "+" : "-") + formatBytes(std::abs(s.growth()))).c_str(),
                              s.complete ? "" : "  (incomplete)", (s.name.empty() ? std::string() : "  " + s.name).c_str());
                o << line;
            }
        }
        if (t.completeSteps() >= 2)
            o << "  memory alive at step ends " << (t.growthPerStep() >= 0 ? "grows" : "falls") << " by "
              << formatBytes(std::abs(t.growthPerStep())) << " per step\n";
        for (const std::string& n : t.notes)
            o << "  note: " << n << "\n";
        const LeakReport& l = d.leaks;
        if (l.judged)
            o << "  leaks: " << l.verdict << "\n";
        for (const LeakSuspect& s : l.suspects) {
            o << "    suspect " << s.site << ": +" << formatBytes(s.bytesPerStep) << " per step, kept in " << s.steps << " steps";
            if (s.pool)
                o << ", " << poolName(*s.pool);
            o << ", born in " << (s.bornInCallerCode ? "the caller's code" : std::string(phaseName(s.birthPhase))) << "\n";
            if (!s.calledFrom.empty())
                o << "      called from " << s.calledFrom << "\n";
            o << "      usual cause: " << s.cause << "\n";
        }
        if (l.judged) // unjudged: the step table's notes said why already
            for (const std::string& n : l.notes)
                o << "  note: " << n << "\n";
    }
    return o.str();
}

json stepsJson(const std::vector<DeviceSteps>& devices)
{
    json arr = json::array();
    for (const DeviceSteps& d : devices) {
        json dj;
        dj["device"] = d.device;
        dj["label"] = d.label;
        dj["found_by"] = std::string(stepSourceName(d.table.source));
        dj["how"] = d.table.how;
        dj["notes"] = d.table.notes;
        dj["setup_end_event"] = d.table.setupEnd == kNoEvent ? json(nullptr) : json(d.table.setupEnd);
        if (d.table.period > 0)
            dj["allocations_per_step"] = d.table.period;
        dj["growth_per_step"] = d.table.growthPerStep();
        json steps = json::array();
        for (const Step& s : d.table.steps) {
            json sj;
            sj["index"] = s.index;
            sj["start_event"] = s.start;
            sj["end_event"] = s.end;
            sj["peak_allocated"] = s.peakAllocated;
            sj["peak_event"] = s.peakEvent;
            sj["peak_phase"] = std::string(phaseName(s.peakPhase));
            sj["alive_at_start"] = s.aliveAtStart;
            sj["alive_at_end"] = s.aliveAtEnd;
            sj["growth"] = s.growth();
            sj["complete"] = s.complete;
            if (!s.name.empty())
                sj["name"] = s.name;
            steps.push_back(std::move(sj));
        }
        dj["steps"] = std::move(steps);
        json suspects = json::array();
        for (const LeakSuspect& s : d.leaks.suspects) {
            json sj;
            sj["site"] = s.site;
            if (!s.calledFrom.empty())
                sj["called_from"] = s.calledFrom;
            sj["bytes_per_step"] = s.bytesPerStep;
            sj["steps"] = s.steps;
            sj["pool"] = s.pool ? json(std::string(poolName(*s.pool))) : json(nullptr);
            sj["birth_phase"] = std::string(phaseName(s.birthPhase));
            sj["born_in_caller_code"] = s.bornInCallerCode;
            sj["held_at_step_ends"] = s.heldAtStepEnds;
            sj["cause"] = s.cause;
            suspects.push_back(std::move(sj));
        }
        dj["leak_suspects"] = std::move(suspects);
        dj["leaks_judged"] = d.leaks.judged;
        dj["leak_verdict"] = d.leaks.verdict;
        dj["leak_notes"] = d.leaks.notes;
        arr.push_back(std::move(dj));
    }
    return json{{"devices", std::move(arr)}};
}

} // namespace poolscope
