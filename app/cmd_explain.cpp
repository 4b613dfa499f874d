#include "app/args.h"
#include "app/commands.h"

#include "app/rules_config.h"

#include "core/report/explain_report.h"
#include "core/whatif/law_explain.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <stdexcept>

namespace poolscope::app {
namespace {

std::optional<uint64_t> parseAddress(const std::string& text)
{
    try {
        size_t used = 0;
        const bool hex = text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0;
        const uint64_t v = std::stoull(hex ? text.substr(2) : text, &used, hex ? 16 : 10);
        if (used != text.size() - (hex ? 2 : 0) || text.empty())
            return std::nullopt;
        return v;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

CommandBody defineExplain(CLI::App& app)
{
    struct State {
        std::string file, address, rulesFile;
        std::optional<int> index, device;
        bool json = false;
        bool law = false;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the dump")->required();
    app.add_option("--addr", s->address, "the allocation's address, hex (0x7f2a3c000000) or decimal")
        ->required()
        ->check(valueCheck([](const std::string& v) { return bool(parseAddress(v)); }, "ADDRESS", "an address such as 0x7f2a3c000000"))
        ->type_name("ADDRESS");
    addOptionalInt(app, "--index", s->index, "the allocation alive at this event INDEX (addresses are reused; default: the one alive at the peak, else the latest)");
    addDeviceOption(app, s->device);
    addRulesOption(app, s->rulesFile);
    app.add_flag("--json", s->json, "one JSON object instead of text");
    app.add_flag("--law", s->law, "also why the what-if engine gave the allocation its size law (the step that decided it)");
    return [s] {
        ExplainQuery query;
        query.address = *parseAddress(s->address);
        if (s->index)
            query.index = EventIndex(*s->index);
        query.device = s->device;
        const auto doc = openDocument(s->file, s->rulesFile);
        const ExplainReport r = explainAllocation(*doc, query);
        if (!s->law) {
            std::cout << (s->json ? explainJsonText(r) : explainText(r));
            return 0;
        }
        // --law: why the what-if engine gave the allocation its size law.
        for (size_t i = 0; i < doc->deviceCount(); ++i) {
            const DeviceDocument& d = doc->device(i);
            if (d.label() != r.device)
                continue;
            const LawExplanation e = explainLaw(d.trace(), d.device(), *d.traceModel(), r.id.value);
            if (s->json) {
                auto j = nlohmann::json::parse(explainJsonText(r));
                j["size_law"] = lawExplanationJson(e);
                std::cout << j.dump(2) << "\n";
            } else {
                std::cout << explainText(r) << lawExplanationText(e);
            }
        }
        return 0;
    };
}

const CommandRegistrar kRegister({"explain", "one allocation's pool, the rule and evidence that decided it, and its stack (--law: its size law and why)", defineExplain});

} // namespace
} // namespace poolscope::app
