#include "app/args.h"
#include "app/commands.h"

#include "core/load.h"
#include "core/report/info_report.h"

#include <iostream>

namespace poolscope::app {
namespace {

CommandBody defineInfo(CLI::App& app)
{
    struct State {
        std::string file;
        bool json = false;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the dump or trace")->required();
    app.add_flag("--json", s->json, "one JSON object instead of text");
    return [s] {
        const auto trace = load(s->file);
        std::cout << (s->json ? infoJsonText(*trace) : infoText(*trace));
        return 0;
    };
}

const CommandRegistrar kRegister({"info", "format detected, version hints, devices, entries, time span, warnings", defineInfo});

} // namespace
} // namespace poolscope::app
