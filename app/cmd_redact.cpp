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
        std::string file, out, frames = "all", rulesFile;
        bool renameCode = false;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the snapshot to copy (pickle, JSON, zstd/gzip, memory_viz HTML)")->required();
    app.add_option("-o,--output", s->out, "the copy to write, the same kind of file (.zst/.gz by its name)")->required()->type_name("OUT");
    app.add_flag("--rename-code", s->renameCode,
                 "your files, functions and annotations become stable tokens (line numbers kept); library paths lose the "
                 "folders above the package");
    app.add_option("--frames", s->frames, "which frames stay: all, python (drop C++ frames) or none (keep the history)")
        ->capture_default_str()
        ->check(choiceCheck([](const std::string& v) { return parseFrameKeep(v); }, "all|python|none"));
    addRulesOption(app, s->rulesFile); // the annotation patterns that say which annotations are phase markers
    return [s] {
        RedactOptions options;
        options.renameCode = s->renameCode;
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
                                  "frames; every number stays",
                                  defineRedact});

} // namespace
} // namespace poolscope::app
