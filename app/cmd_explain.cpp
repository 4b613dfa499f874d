#include "app/args.h"
#include "app/commands.h"

#include "app/rules_config.h"

#include "core/report/explain_report.h"

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
        const ExplainReport r = explainAllocation(*openDocument(files[0], rulesFile), query);
        std::cout << (asJson ? explainJsonText(r) : explainText(r));
        return 0;
    });
}

const CommandRegistrar kRegister({"explain", "explain FILE --addr 0x... [--index N] [--device N] [--rules FILE] [--json]",
                                  "one allocation's pool, the rule and evidence that decided it, and its stack", runExplain});

} // namespace
} // namespace poolscope::app
