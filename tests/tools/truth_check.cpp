// poolscope_truth_check: real dumps against the truth their own run recorded (issue 22). A run on a
// GPU (tests/capture/truth_runs.py) writes, beside each dump, which live tensors were parameters,
// gradients, optimizer state, inputs, a KV cache, autocast weight casts or saved for backward, by
// storage address, at the moment of the dump. This tool classifies each dump as written and after
// each redaction (all, renamed, python, none: the copies the synth suites use) and reports, over
// the allocations alive at the dump's moment that the run named:
//   the share of their bytes in a wrong pool, and of those decided at 70 % or more ("sure");
//   the largest "truth->got (rule)" misfilings;
// and, apart from the score, what the classifier called the bytes the run could not name.
//
//   poolscope_truth_check [--rules FILE] [--top N] [--show COPY] DUMP...
// (truth: DUMP minus .gz/.pickle, plus .truth.json or .truth.json.gz; tests/data/gpu_runs holds a
// set). --show lists each misfiled allocation of 1 MiB or more in that copy, with its address and
// event, for `poolscope explain`.
#include "tests/core/classify/gpu_truth.h"

#include <cstdio>
#include <filesystem>
#include <iostream>

using namespace poolscope;
using namespace poolscope::gpu_truth;

namespace {

std::string pct(double f)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%5.1f %%", 100.0 * f);
    return buf;
}

std::string mib(int64_t b)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / 1048576.0);
    return buf;
}

} // namespace

int main(int argc, char** argv)
{
    std::string rulesFile = POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json";
    size_t top = 4;
    std::string show;
    std::vector<std::string> dumps;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--rules" && i + 1 < argc)
            rulesFile = argv[++i];
        else if (a == "--top" && i + 1 < argc)
            top = size_t(std::stoul(argv[++i]));
        else if (a == "--show" && i + 1 < argc)
            show = argv[++i];
        else if (a.starts_with("-")) {
            std::cout << "usage: poolscope_truth_check [--rules FILE] [--top N] [--show COPY] DUMP...\n";
            return a == "-h" || a == "--help" ? 0 : 2;
        } else
            dumps.push_back(a);
    }
    const auto rules = std::make_shared<const RuleSet>(RuleSet::fromFile(rulesFile));
    std::map<std::string, std::pair<int64_t, int64_t>> byCopy; // copy -> named, wrong
    std::map<std::string, int64_t> totalsOffByCopy;
    for (const std::string& path : dumps) {
        std::vector<Named> truth;
        std::shared_ptr<const Trace> original;
        try {
            for (const std::string& t : truthPaths(path))
                if (std::filesystem::exists(t)) {
                    truth = readTruth(t);
                    break;
                }
            if (truth.empty())
                throw std::runtime_error("no truth beside it (" + truthPaths(path)[0] + ")");
            original = load(path);
        } catch (const std::exception& e) {
            std::cout << path << ": " << e.what() << "\n";
            continue;
        }
        const DeviceTrace& odev = original->devices.at(0);
        std::cout << "== " << path << "  (" << odev.allocations.size() << " allocations" << (odev.ooms.empty() ? "" : ", OOM")
                  << "; the moment: event " << EventIndex(odev.eventCount()) - 1 << ")\n";
        for (std::string_view copyName : kCopies) {
            const std::string copy(copyName);
            const auto t = copyOf(original, copy, *rules);
            const DeviceTrace& dev = t->devices.at(0);
            const Classification c = classify(*t, dev, *rules);
            const Score s = score(dev, c, truth);
            std::vector<std::pair<std::string, int64_t>> worst(s.by.begin(), s.by.end());
            std::sort(worst.begin(), worst.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
            std::string line = "   " + copy + std::string(8 - copy.size(), ' ') + "named " + mib(s.named) + ", wrong " + pct(s.wrongShare()) +
                               " (sure " + pct(s.named ? double(s.sure) / double(s.named) : 0) + ", totals off " +
                               pct(s.named ? double(s.totalsOff()) / double(s.named) : 0) + ")";
            for (size_t k = 0; k < worst.size() && k < top; ++k)
                line += (k ? "; " : "  ") + worst[k].first + " " + mib(worst[k].second);
            std::cout << line << "\n";
            if (show == copy)
                for (const Misfiled& m : s.misfiled) {
                    const Allocation& a = dev.allocations[m.allocation];
                    if (a.size < (1 << 20))
                        continue;
                    char buf[64];
                    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a.address));
                    std::cout << "      " << buf << " event " << a.allocEvent << " " << mib(a.size) << " " << poolName(m.truth) << "->"
                              << poolName(m.got) << " (" << c.rules[c.rule[m.allocation]].name << ", " << int(c.confidence[m.allocation])
                              << " %)\n";
                }
            if (copy == "all" || copy == "none") {
                std::string u;
                for (const auto& [pool, bytes] : s.unnamed)
                    u += (u.empty() ? "" : ", ") + std::string(poolName(pool)) + " " + mib(bytes);
                if (!u.empty())
                    std::cout << "            not named by the run (" << copy << "): " << u << "\n";
            }
            byCopy[copy].first += s.named;
            byCopy[copy].second += s.wrong;
            totalsOffByCopy[copy] += s.totalsOff();
        }
    }
    std::cout << "\nover every dump (bytes the runs named):";
    for (std::string_view copy : kCopies) {
        const auto& nw = byCopy[std::string(copy)];
        std::cout << "  " << copy << " " << pct(nw.first ? double(nw.second) / double(nw.first) : 0);
    }
    std::cout << "  (of " << mib(byCopy["all"].first) << ")\n";
    std::cout << "pool totals off by (same bytes):         ";
    for (std::string_view copy : kCopies) {
        const auto& nw = byCopy[std::string(copy)];
        std::cout << "  " << copy << " " << pct(nw.first ? double(totalsOffByCopy[std::string(copy)]) / double(nw.first) : 0);
    }
    std::cout << "\n";
    return 0;
}
