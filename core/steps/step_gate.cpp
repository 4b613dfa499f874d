#include "core/steps/step_gate.h"

#include "core/timeline/moment.h"
#include "core/util/units.h"

#include <charconv>

namespace poolscope {

StepGrowthCheck checkStepGrowth(const std::vector<DeviceSteps>& devices, int64_t limitPerStep)
{
    StepGrowthCheck out;
    for (const DeviceSteps& d : devices) {
        const size_t n = d.table.completeSteps();
        if (n < 2) {
            out.unjudged.push_back(d.label + " has " + std::to_string(n) + " complete step" + (n == 1 ? "" : "s") +
                                   ": growth per step cannot be judged (" + d.table.how + ")");
            continue;
        }
        const int64_t g = d.table.growthPerStep();
        if (g <= limitPerStep)
            continue;
        std::string line = d.label + " memory alive at step ends grows by " + formatBytes(g) + " per step over " + std::to_string(n) +
                           " steps, over the limit " + formatBytes(limitPerStep) + " by " + formatBytes(g - limitPerStep);
        if (!d.leaks.suspects.empty())
            line += "; most from " + d.leaks.suspects.front().site;
        out.over.push_back(std::move(line));
    }
    return out;
}

std::optional<std::pair<EventIndex, std::string>> resolveStepMoment(const DeviceDocument& dev, const std::string& spec, std::string* error)
{
    if (spec.rfind("step:", 0) != 0) {
        auto m = resolveMoment(dev.device(), spec, error);
        if (!m)
            return std::nullopt;
        return std::make_pair(m->event, m->label);
    }
    const std::string rest = spec.substr(5);
    const bool start = rest.size() > 6 && rest.compare(rest.size() - 6, 6, ":start") == 0;
    const std::string num = start ? rest.substr(0, rest.size() - 6) : rest;
    int k = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), k);
    const StepTable table = findSteps(dev);
    if (ec != std::errc() || p != num.data() + num.size() || k < 0 || size_t(k) >= table.steps.size()) {
        if (error)
            *error = "expected step:K or step:K:start with K from 0 to " + std::to_string(int(table.steps.size()) - 1) + " (" +
                     std::to_string(table.steps.size()) + " steps, " + table.how + "), got '" + spec + "'";
        return std::nullopt;
    }
    const Step& s = table.steps[size_t(k)];
    if (start)
        return std::make_pair(s.start - 1, "start of step " + std::to_string(k) + " (event " + std::to_string(s.start - 1) + ")");
    return std::make_pair(s.end, "end of step " + std::to_string(k) + " (event " + std::to_string(s.end) + ")");
}

} // namespace poolscope
