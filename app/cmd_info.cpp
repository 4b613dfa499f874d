#include "app/args.h"
#include "app/commands.h"

#include "core/load.h"
#include "core/report/info_report.h"

#include <iostream>

namespace poolscope::app {
namespace {

int runInfo(const std::vector<std::string>& argv)
{
    return guarded("info", [&] {
        Args args(argv);
        const bool asJson = args.flag("--json");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("info expects one FILE");
        const auto trace = load(files[0]);
        std::cout << (asJson ? infoJsonText(*trace) : infoText(*trace));
        return 0;
    });
}

const CommandRegistrar kRegister({"info", "info FILE [--json]", "format detected, version hints, devices, entries, time span, warnings",
                                  runInfo});

} // namespace
} // namespace poolscope::app
