// poolscope_ablation: the redaction ablation table (issue 22) over the corpus or the files given.
//
//   poolscope_ablation [FILE|DIR]... [--rules FILE] [--flows] [--why] [--tsv]
//
// Without FILE or DIR: every dump in ../shared/corpus. Rules: the source tree's
// resources/classifier/rules.json (an edit shows without a rebuild), or --rules FILE instead.
// --flows also lists, per file and redaction, which pools the moved bytes went from and to; --why
// the same per deciding rule (original -> redacted), to see which decision the frames carried.
// --tsv prints one line per file, device, redaction and moment (default, peak, and "run": the run's
// worst moment, ablation_run.h) with the raw figures instead (save one before a classifier change and
// `diff` it with one after). --why also names the run's worst moment and the main allocations moved there.
// Prints a markdown table (docs/accuracy.md, "Redaction ablation"); exit 0 unless a file fails to load.
#include "core/classify/rules.h"
#include "core/load.h"
#include "core/redact/ablation.h"
#include "dump_files.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

using namespace poolscope;
namespace fs = std::filesystem;


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
    const auto found = tools::dumpFiles(inputs, "poolscope_ablation");
    if (!found)
        return 2;
    const std::vector<fs::path>& files = *found;

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
        // moment "run": the run's worst moment (ablation_run.h); its confident column is "-" (not
        // measured there) and flows lists the pools there (default: the flows at the default moment).
        auto flowText = [](const std::vector<std::pair<std::string, int64_t>>& flows) {
            std::string s;
            for (size_t k = 0; k < flows.size() && k < 3; ++k)
                s += (k ? ", " : "") + flows[k].first + " " + std::to_string(flows[k].second);
            return s.empty() ? std::string("-") : s;
        };
        std::cout << "file\tdevice\tvariant\tmoment\tevent\tbytes\tmoved\tmoved_fraction\tconfident_without_frames\tflows\n";
        for (const auto& r : results)
            for (const auto& d : r.devices)
                for (const auto& c : d.cells) {
                    const std::string name = fs::path(r.file).filename().string();
                    const char* file = name.c_str();
                    for (const auto& [moment, m] : {std::pair{"default", c.atDefault}, std::pair{"peak", c.atPeak}})
                        std::printf("%s\t%s\t%s\t%s\t%lld\t%lld\t%lld\t%.4f\t%lld\t%s\n", file, d.label.c_str(), c.variant.c_str(), moment,
                                    (long long)m.index, (long long)m.bytes, (long long)m.moved, m.movedFraction(),
                                    (long long)m.confidentWithoutFrames, std::string(moment) == "default" ? flowText(c.flows).c_str() : "-");
                    const AblationRunWorst& w = c.wholeRun;
                    std::printf("%s\t%s\t%s\trun\t%lld\t%lld\t%lld\t%.4f\t-\t%s\n", file, d.label.c_str(), c.variant.c_str(),
                                (long long)w.index, (long long)w.bytes, (long long)w.moved, w.movedFraction(), flowText(w.flows).c_str());
                }
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
        std::cout << "\nThe run's worst moment (the largest share of the alive bytes in another pool; moments under "
                  << int(kRunFloor * 100) << " % of the run's largest allocated bytes not judged) and what moved there:\n";
        for (const auto& r : results)
            for (const auto& d : r.devices)
                for (const auto& c : d.cells) {
                    const AblationRunWorst& w = c.wholeRun;
                    if (w.moved == 0)
                        continue;
                    const std::string at = w.beforeFirstEvent ? std::string("before the first event")
                                                              : "after event " + std::to_string(w.index) + (w.phase.empty() ? "" : " (" + w.phase + ")");
                    std::printf("  %s %s %s: %.1f %% %s: %.1f of %.1f MiB moved\n", fs::path(r.file).filename().c_str(), d.label.c_str(),
                                c.variant.c_str(), 100.0 * w.movedFraction(), at.c_str(), double(w.moved) / double(1 << 20),
                                double(w.bytes) / double(1 << 20));
                    for (size_t k = 0; k < w.flows.size() && k < 4; ++k)
                        std::printf("      %s %.1f MiB\n", w.flows[k].first.c_str(), double(w.flows[k].second) / double(1 << 20));
                    for (const MovedAllocation& m : w.allocations)
                        std::printf("      #%zu %.2f MiB %s -> %s%s%s\n", m.index, double(m.size) / double(1 << 20), m.from.c_str(), m.to.c_str(),
                                    m.site.empty() ? "" : " at ", m.site.c_str());
                }
    }
    return failures ? 1 : 0;
}
