#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"
#include "app/terminal_progress.h"

#include "core/classify/rules.h"
#include "core/redact/redacted_copy.h"

#include <iostream>

namespace poolscope::app {
namespace {

CommandBody defineRedact(CLI::App& app)
{
    struct State {
        std::string file, out, frames, rulesFile;
        bool renameCode = false;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the snapshot to redact")->required();
    app.add_option("-o,--output", s->out, "the file to write (.zst/.gz by its name)")->required()->type_name("OUT");
    app.add_flag("--rename-code", s->renameCode,
                 "replace your files, functions and annotations with stable tokens; cut library paths to the package");
    app.add_option("--frames", s->frames, "all (default), python (drop C++ frames) or none (drop every frame, keep the history)")
        ->check(choiceCheck(parseFrameKeep, "all|python|none"));
    // The rules say which annotations are phase markers (kept by --rename-code as markers).
    addRulesOption(app, s->rulesFile);
    return [s] {
        RedactOptions options;
        options.renameCode = s->renameCode;
        if (!s->frames.empty())
            options.frames = *parseFrameKeep(s->frames);
        const auto rules = loadRules(s->rulesFile);
        options.markers = rules.get();
        RedactStats stats;
        {
            TerminalProgress progress("redact " + s->file);
            stats = redactFile(s->file, s->out, options, progress.progress());
        }
        std::cout << "wrote " << s->out << ": " << stats.framesRenamed << " frames renamed, " << stats.pathsCut
                  << " library paths cut to their package, " << stats.framesDropped << " frames dropped, " << stats.stacksEmptied
                  << " stacks emptied, " << stats.annotationsRenamed << " annotations renamed; every allocation, size, address, "
                  << "stream, time, segment and OOM kept\n";
        return 0;
    };
}

const CommandRegistrar kRegister({"redact",
                                  "a copy of a snapshot to share: --rename-code replaces your files, functions and annotations "
                                  "with tokens and cuts library paths to the package; --frames python|none drops C++ or all "
                                  "frames; every number stays (.zst/.gz by OUT's name)",
                                  defineRedact});

} // namespace
} // namespace poolscope::app
