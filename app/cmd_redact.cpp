#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"
#include "app/terminal_progress.h"

#include "core/classify/rules.h"
#include "core/redact/redacted_copy.h"

#include <iostream>

namespace poolscope::app {
namespace {

int runRedact(const std::vector<std::string>& argv)
{
    return guarded("redact", [&] {
        Args args(argv);
        auto out = args.option("-o");
        if (auto longForm = args.option("--output")) {
            if (out)
                throw UsageError("give the output once (-o or --output)");
            out = longForm;
        }
        RedactOptions options;
        options.renameCode = args.flag("--rename-code");
        if (auto frames = args.option("--frames")) {
            const auto keep = parseFrameKeep(*frames);
            if (!keep)
                throw UsageError("--frames expects all, python or none, got '" + *frames + "'");
            options.frames = *keep;
        }
        // The rules say which annotations are phase markers (kept by --rename-code as markers).
        const std::string rulesFile = args.option("--rules").value_or("");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("redact expects one FILE");
        if (!out || out->empty())
            throw UsageError("redact needs -o OUT, the file to write");
        const auto rules = loadRules(rulesFile);
        options.markers = rules.get();
        RedactStats stats;
        {
            TerminalProgress progress("redact " + files[0]);
            stats = redactFile(files[0], *out, options, progress.progress());
        }
        std::cout << "wrote " << *out << ": " << stats.framesRenamed << " frames renamed, " << stats.pathsCut
                  << " library paths cut to their package, " << stats.framesDropped << " frames dropped, " << stats.stacksEmptied
                  << " stacks emptied, " << stats.annotationsRenamed << " annotations renamed; every allocation, size, address, "
                  << "stream, time, segment and OOM kept\n";
        return 0;
    });
}

const CommandRegistrar kRegister({"redact", "redact FILE -o OUT [--rename-code] [--frames all|python|none] [--rules FILE]",
                                  "a copy of a snapshot to share: --rename-code replaces your files, functions and annotations "
                                  "with tokens and cuts library paths to the package; --frames python|none drops C++ or all "
                                  "frames; every number stays (.zst/.gz by OUT's name)",
                                  runRedact});

} // namespace
} // namespace poolscope::app
