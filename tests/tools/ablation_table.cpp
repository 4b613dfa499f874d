// poolscope_ablation: the redaction ablation table (issue 22) over the corpus or the files given.
//
//   poolscope_ablation [FILE|DIR]... [--rules FILE] [--flows] [--why] [--tsv]
//
// Without FILE or DIR: every dump in ../shared/corpus. Rules: the source tree's
// resources/classifier/rules.json (an edit shows without a rebuild), or --rules FILE instead.
// --flows also lists, per file and redaction, which pools the moved bytes went from and to; --why
// the same per deciding rule (original -> redacted), to see which decision the frames carried.
// --tsv prints one line per file, device, redaction and moment with the raw figures instead (save
// one before a classifier change and `diff` it with one after).
// Prints a markdown table (docs/accuracy.md, "Redaction ablation"); exit 0 unless a file fails to load.
#include "core/classify/rules.h"
#include "core/load.h"
#include "core/redact/ablation.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

using namespace poolscope;
namespace fs = std::filesystem;

namespace {

bool isDump(const fs::path& p)
{
    const std::string name = p.filename().string();
    return fs::is_regular_file(p) && name != "expected.json" && name != "README.md" && name.front() != '.';
}

} // namespace

int main(int argc, char** argv)
{
    std::string rulesFile = POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json";
    bool flows = false, why = false, tsv = false;
    std::vector<fs::path> inputs;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--rules" && i + 1 < argc)
            rulesFile = argv[++i];
        else if (a == "--flows")
            flows = true;
        else if (a == "--why")
            why = true;
        else if (a == "--tsv")
            tsv = true;
        else if (a == "--help" || a == "-h") {
            std::cout << "usage: poolscope_ablation [FILE|DIR]... [--rules FILE] [--flows] [--why] [--tsv]\n";
            return 0;
        } else if (!a.empty() && a.front() == '-') {
            std::cerr << "poolscope_ablation: unknown option " << a << "\n";
            return 2;
        } else
            inputs.emplace_back(a);
    }
    if (inputs.empty())
        inputs.emplace_back(POOLSCOPE_CORPUS_DIR);
    std::vector<fs::path> files;
    for (const auto& in : inputs) {
        if (fs::is_directory(in)) {
            for (const auto& e : fs::directory_iterator(in))
                if (isDump(e.path()))
                    files.push_back(e.path());
        } else if (fs::exists(in)) {
            files.push_back(in);
        } else {
            std::cerr << "poolscope_ablation: " << in.string() << ": no such file or directory\n";
            return 2;
        }
    }
    std::sort(files.begin(), files.end());

    std::shared_ptr<const RuleSet> rules;
    try {
        rules = std::make_shared<const RuleSet>(RuleSet::fromFile(rulesFile));
    } catch (const std::exception& e) {
        std::cerr << "poolscope_ablation: " << e.what() << "\n";
        return 2;
    }
    std::vector<AblationResult> results;
    int failures = 0;
    for (const auto& f : files) {
        try {
            results.push_back(ablate(load(f.string()), rules));
        } catch (const std::exception& e) {
            std::cerr << "poolscope_ablation: " << e.what() << "\n";
            ++failures;
        }
    }
    if (tsv) {
        std::cout << "file\tdevice\tvariant\tmoment\tevent\tbytes\tmoved\tmoved_fraction\tconfident_without_frames\n";
        for (const auto& r : results)
            for (const auto& d : r.devices)
                for (const auto& c : d.cells)
                    for (const auto& [moment, m] : {std::pair{"default", c.atDefault}, std::pair{"peak", c.atPeak}})
                        std::printf("%s\t%s\t%s\t%s\t%lld\t%lld\t%lld\t%.4f\t%lld\n", fs::path(r.file).filename().c_str(), d.label.c_str(),
                                    c.variant.c_str(), moment, (long long)m.index, (long long)m.bytes, (long long)m.moved,
                                    m.movedFraction(), (long long)m.confidentWithoutFrames);
        return failures ? 1 : 0;
    }
    std::cout << ablationMarkdown(results);
    if (flows) {
        std::cout << "\nWhere the moved bytes went (at the default moment):\n";
        for (const auto& r : results)
            for (const auto& d : r.devices)
                for (const auto& c : d.cells)
                    for (size_t k = 0; k < c.flows.size() && k < 4; ++k)
                        std::printf("  %s %s %s: %s %.1f MiB\n", fs::path(r.file).filename().c_str(), d.label.c_str(), c.variant.c_str(),
                                    c.flows[k].first.c_str(), double(c.flows[k].second) / double(1 << 20));
    }
    if (why) {
        std::cout << "\nWhich decisions moved them (original pool (rule) -> redacted pool (rule), at the default moment):\n";
        for (const auto& r : results)
            for (const auto& d : r.devices)
                for (const auto& c : d.cells)
                    for (size_t k = 0; k < c.ruleFlows.size() && k < 8; ++k)
                        std::printf("  %s %s %s: %s %.1f MiB\n", fs::path(r.file).filename().c_str(), d.label.c_str(), c.variant.c_str(),
                                    c.ruleFlows[k].first.c_str(), double(c.ruleFlows[k].second) / double(1 << 20));
    }
    return failures ? 1 : 0;
}
