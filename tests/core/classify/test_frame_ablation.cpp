// How much of every real dump's classification rests on frames: each corpus file is classified as
// recorded, with Python frames only (what stacks='python' and Windows captures record) and with no
// frames at all (history kept), and the bytes that change pool are measured at the default moment
// (the OOM, else the peak) and at the peak. Targets (issue 22): at most 2 % of the allocated bytes
// move under Python-only frames, at most 15 % without frames where the dump has history; and no
// block whose pool changed is held at 70 % confidence or more once the frames are gone. Skipped
// where ../shared/corpus is absent.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/frame_ablation.h"
#include "core/load.h"
#include "core/timeline/alive_index.h"

#include <QtTest>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <filesystem>

using namespace poolscope;
using poolscope::testing::KeepFrames;

namespace {

const std::string kCorpus = POOLSCOPE_CORPUS_DIR;

struct Moved {
    double share = 0;          // moved bytes / allocated bytes alive
    int64_t confidentWrong = 0; // moved bytes held at >= 70 % once frames are gone
};

Moved compare(const DeviceTrace& dev, const Classification& a, const Classification& b, EventIndex at)
{
    const std::vector<AllocId> alive = AliveIndex(dev.allocations).aliveAfter(at);
    int64_t total = 0, moved = 0;
    Moved m;
    for (AllocId id : alive) {
        const size_t i = id.value;
        const int64_t bytes = dev.allocations[i].size;
        total += bytes;
        if (a.pool[i] == b.pool[i])
            continue;
        moved += bytes;
        if (b.confidence[i] >= 70)
            m.confidentWrong += bytes;
    }
    m.share = total > 0 ? double(moved) / double(total) : 0.0;
    if (m.share > 0.02 && std::getenv("POOLSCOPE_ABLATION_DETAIL")) { // which decisions moved, largest first
        std::map<std::string, int64_t> by;
        for (AllocId id : alive)
            if (a.pool[id.value] != b.pool[id.value])
                by[a.rules[a.rule[id.value]].name + " -> " + b.rules[b.rule[id.value]].name] += dev.allocations[id.value].size;
        std::vector<std::pair<int64_t, std::string>> top;
        for (const auto& [k, v] : by)
            top.emplace_back(v, k);
        std::sort(top.rbegin(), top.rend());
        for (size_t k = 0; k < top.size() && k < 4; ++k)
            std::printf("    %6.1f%%  %s\n", 100.0 * double(top[k].first) / double(total), top[k].second.c_str());
    }
    return m;
}

std::vector<std::string> corpusFiles()
{
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(kCorpus)) {
        const std::string name = e.path().filename().string();
        if (name == "expected.json" || name == "README.md")
            continue;
        for (const char* ext : {".pickle", ".pkl", ".gz", ".json", ".zst"})
            if (name.size() > std::strlen(ext) && name.compare(name.size() - std::strlen(ext), std::strlen(ext), ext) == 0) {
                out.push_back(name);
                break;
            }
    }
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace

class TestFrameAblation : public QObject {
    Q_OBJECT
private slots:
    void initTestCase()
    {
        if (!std::filesystem::is_directory(kCorpus))
            QSKIP("corpus not present (../shared/corpus)");
    }

    void everyCorpusFile_data()
    {
        QTest::addColumn<QString>("file");
        if (!std::filesystem::is_directory(kCorpus))
            return;
        for (const auto& f : corpusFiles())
            QTest::newRow(f.c_str()) << QString::fromStdString(f);
    }

    void everyCorpusFile()
    {
        QFETCH(QString, file);
        const auto trace = load(kCorpus + "/" + file.toStdString());
        const auto python = poolscope::testing::ablateFrames(*trace, KeepFrames::Python);
        const auto none = poolscope::testing::ablateFrames(*trace, KeepFrames::None);
        const auto renamed = poolscope::testing::ablateFrames(*trace, KeepFrames::Renamed);
        const RuleSet& rules = poolscope::testing::shippedRules();
        for (size_t d = 0; d < trace->devices.size(); ++d) {
            const DeviceTrace& dev = trace->devices[d];
            if (dev.allocations.empty())
                continue;
            const Classification orig = classify(*trace, dev, rules);
            const Classification py = classify(*python, python->devices[d], rules);
            const Classification bare = classify(*none, none->devices[d], rules);
            const Classification ren = classify(*renamed, renamed->devices[d], rules);
            const EventIndex moment = dev.ooms.empty() ? dev.peakIndex : dev.ooms.back().index;
            const Moved pyAt = compare(dev, orig, py, moment), pyPeak = compare(dev, orig, py, dev.peakIndex);
            const Moved noneAt = compare(dev, orig, bare, moment), nonePeak = compare(dev, orig, bare, dev.peakIndex);
            const Moved renAt = compare(dev, orig, ren, moment), renPeak = compare(dev, orig, ren, dev.peakIndex);
            std::printf("ABLATION %-36s dev %2d  renamed %5.1f%% %5.1f%%  python %5.1f%% %5.1f%%  none %5.1f%% %5.1f%%  confident-wrong none %.3f GiB%s\n",
                        file.toStdString().c_str(), dev.device, 100 * renAt.share, 100 * renPeak.share, 100 * pyAt.share, 100 * pyPeak.share, 100 * noneAt.share,
                        100 * nonePeak.share, double(std::max(noneAt.confidentWrong, nonePeak.confidentWrong)) / double(1 << 30),
                        orig.history ? "" : "  (no history)");
        }
    }
};

QTEST_GUILESS_MAIN(TestFrameAblation)
#include "test_frame_ablation.moc"
