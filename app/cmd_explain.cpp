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

uint64_t parseAddress(const std::string& text)
{
    try {
        size_t used = 0;
        const bool hex = text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0;
        const uint64_t v = std::stoull(hex ? text.substr(2) : text, &used, hex ? 16 : 10);
        if (used != text.size() - (hex ? 2 : 0) || text.empty())
            throw std::invalid_argument("");
        return v;
    } catch (const std::exception&) {
        throw UsageError("--addr expects an address such as 0x7f2a3c000000, got '" + text + "'");
    }
}

int runExplain(const std::vector<std::string>& argv)
{
    return guarded("explain", [&] {
        Args args(argv);
        const auto addrText = args.option("--addr");
        if (!addrText)
            throw UsageError("explain needs --addr ADDRESS");
        const uint64_t addr = parseAddress(*addrText);
        std::optional<EventIndex> index;
        if (auto v = args.option("--index"))
            index = Args({"--index", *v}).intOption("--index", 0);
        std::optional<int> deviceNumber;
        if (auto v = args.option("--device"))
            deviceNumber = Args({"--device", *v}).intOption("--device", 0);
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool asJson = args.flag("--json");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("explain expects one FILE");
        ExplainQuery query;
        query.address = addr;
        query.index = index;
        query.device = deviceNumber;
        const bool law = args.flag("--law");
        const auto doc = openDocument(files[0], rulesFile);
        const ExplainReport r = explainAllocation(*doc, query);
        if (!law) {
            std::cout << (asJson ? explainJsonText(r) : explainText(r));
            return 0;
        }
        // --law: why the what-if engine gave the allocation its size law.
        for (size_t i = 0; i < doc->deviceCount(); ++i) {
            const DeviceDocument& d = doc->device(i);
            if (d.label() != r.device)
                continue;
            const LawExplanation e = explainLaw(d.trace(), d.device(), *d.traceModel(), r.id.value);
            if (asJson) {
                auto j = nlohmann::json::parse(explainJsonText(r));
                j["size_law"] = lawExplanationJson(e);
                std::cout << j.dump(2) << "\n";
            } else {
                std::cout << explainText(r) << lawExplanationText(e);
            }
        }
        return 0;
    });
}

const CommandRegistrar kRegister({"explain", "explain FILE --addr 0x... [--index N] [--device N] [--rules FILE] [--law] [--json]",
                                  "one allocation's pool, the rule and evidence that decided it, and its stack; --law: why the what-if gave it its size law", runExplain});

} // namespace
} // namespace poolscope::app
