#include "app/report_sites.h"


#include "core/report/json_text.h"
#include "core/report/report.h"
#include "core/sites/between.h"
#include "core/sites/site_tree.h"
#include "core/steps/step_gate.h"

#include <stdexcept>

namespace poolscope::app {
namespace {

std::vector<const DeviceDocument*> devicesOf(const Document& doc, std::optional<int> device)
{
    std::vector<const DeviceDocument*> out;
    if (device) {
        out.push_back(&doc.pickDevice(device));
        return out;
    }
    for (size_t i = 0; i < doc.deviceCount(); ++i)
        out.push_back(&doc.device(i));
    if (out.empty())
        doc.pickDevice(std::nullopt); // throws the "no devices" error
    return out;
}

std::pair<EventIndex, std::string> moment(const DeviceDocument& dev, const std::string& spec)
{
    std::string why;
    auto m = resolveStepMoment(dev, spec, &why);
    if (!m)
        throw std::invalid_argument(dev.label() + ": " + why);
    return *m;
}

} // namespace

std::string reportBetween(const Document& doc, std::optional<int> device, const std::string& a, const std::string& b, bool json)
{
    nlohmann::json arr = nlohmann::json::array();
    std::string text;
    for (const DeviceDocument* dev : devicesOf(doc, device)) {
        const auto ma = moment(*dev, a), mb = moment(*dev, b);
        const Between d = betweenMoments(*dev, ma.first, ma.second, mb.first, mb.second);
        if (json) {
            nlohmann::json j = betweenJson(d);
            j["device"] = dev->device().device;
            j["label"] = dev->label();
            arr.push_back(std::move(j));
        } else {
            text += betweenText(dev->label(), d);
        }
    }
    return json ? jsonText(nlohmann::json{{"file", doc.path()}, {"devices", arr}}) + "\n" : text;
}

std::string reportBySite(const Document& doc, std::optional<int> device, const std::string& at, bool json, int top)
{
    nlohmann::json arr = nlohmann::json::array();
    std::string text;
    for (const DeviceDocument* dev : devicesOf(doc, device)) {
        const auto m = moment(*dev, at.empty() ? defaultMomentSpec(dev->device()) : at);
        const SiteTree here = siteTreeAt(*dev, m.first);
        const SiteTree run = siteTreeOverRun(*dev);
        if (json) {
            nlohmann::json j{{"device", dev->device().device}, {"label", dev->label()}};
            j["at"] = siteTreeJson(here);
            j["at"]["label"] = m.second;
            j["over_run"] = siteTreeJson(run);
            arr.push_back(std::move(j));
        } else {
            text += dev->label() + ": bytes alive at " + m.second + " by call site (user code first, library frames folded)\n";
            text += siteTreeText(here, top);
            text += dev->label() + ": over the whole run, weighted by bytes x time (" + run.weightUnit + ")\n";
            text += siteTreeText(run, top);
        }
    }
    return json ? jsonText(nlohmann::json{{"file", doc.path()}, {"devices", arr}}) + "\n" : text;
}

} // namespace poolscope::app
