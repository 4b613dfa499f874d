#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/report/gate.h"
#include "core/report/report.h"

#include <iostream>

namespace poolscope::app {
namespace {

// A limit checker from gate.h's parser, so that its own message ("expected a size such as 40GiB")
// reaches the user beside the option's name.
CLI::Validator limitCheck(bool withPool)
{
    return CLI::Validator(
        [withPool](std::string& v) {
            std::string why;
            return parseMemoryLimit(v, withPool, &why) ? std::string() : why;
        },
        withPool ? "POOL>SIZE" : "SIZE");
}

CommandBody defineReport(CLI::App& app)
{
    struct State {
        std::string file, rulesFile, at;
        std::optional<int> device;
        int top = 10;
        bool json = false, noPools = false;
        std::string failOver;
        std::vector<std::string> failPools;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the dump (pickle, JSON, zstd/gzip, memory_viz HTML) or a Kineto trace")->required();
    addOptionalInt(app, "--device", s->device, "only this CUDA device (default: every device)");
    app.add_option("--at", s->at, "the moment: peak, oom, end or an event INDEX (default: the OOM, else the peak)")->type_name("MOMENT");
    app.add_option("--top", s->top, "how many of the largest live tensors to list")->capture_default_str()->check(CLI::NonNegativeNumber);
    addRulesOption(app, s->rulesFile);
    const auto noPools = app.add_flag("--no-pools", s->noPools, "skip classification (faster; no pools, no verdict)");
    app.add_flag("--json", s->json, "one JSON object instead of text");
    app.add_option("--fail-over", s->failOver, "exit 3 when a device's peak allocated is over SIZE (CI)")->check(limitCheck(false));
    app.add_option("--fail-pool", s->failPools, "exit 3 when a pool's peak is over SIZE, e.g. optimizer_state>40GiB; may be repeated (CI)")
        ->check(limitCheck(true))
        ->allow_extra_args(false)
        ->excludes(noPools);
    return [s] {
        ReportOptions options;
        options.device = s->device;
        options.at = s->at;
        options.top = s->top;
        const bool classify = !s->noPools;
        std::vector<MemoryLimit> limits;
        if (!s->failOver.empty())
            limits.push_back(*parseMemoryLimit(s->failOver, false, nullptr));
        for (const auto& v : s->failPools)
            limits.push_back(*parseMemoryLimit(v, true, nullptr));
        const Report report = buildReport(*openDocument(s->file, s->rulesFile, classify), options);
        std::cout << (s->json ? reportJsonText(report) : reportText(report));
        const auto over = checkLimits(report, limits);
        if (over.empty())
            return 0;
        std::cout.flush();
        std::string line = "poolscope report: " + s->file + ": over the limit: " + over.front();
        for (size_t k = 1; k < over.size(); ++k)
            line += "; " + over[k];
        std::cerr << line << "\n";
        return kGateExitCode;
    };
}

const CommandRegistrar kRegister({"report",
                                  "per-device totals, peak and OOM, pools and the verdict at the moment (default: the OOM, else "
                                  "the peak), the largest live tensors; --fail-over/--fail-pool: exit 3 when a peak is over a limit (CI)",
                                  defineReport});

} // namespace
} // namespace poolscope::app
