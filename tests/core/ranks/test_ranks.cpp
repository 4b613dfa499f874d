// `ranks`: one row per (dump, device), made from dumps or from the reports `report --json` wrote, in
// input order whatever the number of workers; a broken file is a row with its error; the first OOM
// in time and the imbalance come from the rows. Fixtures: poolscope synth runs with known OOMs.
#include "core/formats/pickle_writer.h"
#include "core/ranks/ranks.h"
#include "core/engine/document.h"
#include "core/report/report.h"
#include "core/run_poolscope.h"
#include "core/ranks/rank_fixtures.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace poolscope;
using nlohmann::json;
using poolscope::testing::rankModel;

namespace {

void writeDump(const Trace& t, const std::string& path)
{
    std::ofstream out(path, std::ios::binary);
    writeSnapshot(t, out);
}

std::shared_ptr<const RuleSet> rules() { return std::make_shared<const RuleSet>(RuleSet::builtin()); }

} // namespace

class TestRanks : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::vector<std::string> m_files;
    int64_t m_fitPeak = 0;

    std::string path(const char* name) { return m_dir.filePath(name).toStdString(); }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        // rank0 fits; rank1 runs out at a 450 MiB capacity; rank2 runs out later in time
        // (it started later), at a smaller batch: rank1's OOM comes first.
        const SynthResult fit = synthesize(rankModel(4, std::nullopt, 1'700'000'000'000'000));
        const SynthResult early = synthesize(rankModel(8, int64_t(450) << 20, 1'700'000'000'000'000));
        const SynthResult late = synthesize(rankModel(6, int64_t(400) << 20, 1'700'000'100'000'000));
        QVERIFY(!fit.oom);
        QVERIFY(early.oom && late.oom);
        m_fitPeak = fit.trace.devices[0].peakAllocated;
        writeDump(fit.trace, path("rank0.pickle"));
        writeDump(early.trace, path("rank1.pickle"));
        writeDump(late.trace, path("rank2.pickle"));
        // A node's dump with two devices: rank0's run on cuda:0 and the early one on cuda:1.
        Trace two = fit.trace;
        DeviceTrace second = early.trace.devices[0];
        second.device = 1;
        for (Segment& s : second.segments)
            s.device = 1;
        // Stacks index the frame table of their own trace: rebuild them in this one.
        auto restack = [&](StackId s) {
            if (!s.valid())
                return s;
            std::vector<FrameId> frames;
            for (FrameId f : early.trace.frames.stack(s))
                frames.push_back(two.frames.internFrame(early.trace.frames.frame(f)));
            return two.frames.internStack(frames);
        };
        for (StackId& s : second.events.stack)
            s = restack(s);
        for (Segment& seg : second.segments)
            for (Block& b : seg.blocks)
                b.stack = restack(b.stack);
        two.devices.push_back(std::move(second));
        writeDump(two, path("node.pickle"));
        std::ofstream(path("junk.pickle"), std::ios::binary) << "not a dump at all";
        m_files = {path("rank0.pickle"), path("rank1.pickle"), path("junk.pickle"), path("rank2.pickle"), path("node.pickle")};
    }

    void rowsPerDumpAndDevice()
    {
        RanksOptions options;
        options.rules = rules();
        const RankTable t = summarizeRanks(m_files, options);
        QCOMPARE(t.rows.size(), size_t(6)); // rank0, rank1, junk, rank2, node cuda:0 and cuda:1
        QCOMPARE(t.rows[0].peakAllocated, m_fitPeak);
        QVERIFY(!t.rows[0].oom);
        QVERIFY(t.rows[1].oom && t.rows[3].oom);
        QVERIFY2(!t.rows[2].error.empty() && t.rows[2].error.find("junk.pickle") != std::string::npos, t.rows[2].error.c_str());
        QCOMPARE(t.rows[4].label, std::string("cuda:0"));
        QCOMPARE(t.rows[5].label, std::string("cuda:1"));
        QCOMPARE(t.rows[4].peakAllocated, t.rows[0].peakAllocated);
        QCOMPARE(t.rows[5].peakAllocated, t.rows[1].peakAllocated);
        // Pools at the peak are the document's own, and sum to what was allocated there.
        for (size_t i : {size_t(0), size_t(1), size_t(3)}) {
            const RankRow& r = t.rows[i];
            QVERIFY(r.classified && r.peakPool);
            int64_t sum = 0;
            for (size_t p = 0; p < kAllocationPoolCount; ++p)
                sum += r.poolsAtPeak[p];
            QCOMPARE(sum, r.peakAllocated);
        }
        // rank1 (and its copy on node's cuda:1, at the same times) ran out first in time.
        QVERIFY(t.firstOom);
        QCOMPARE(t.rows[*t.firstOom].oom->timeUs, t.rows[1].oom->timeUs);
        QVERIFY(t.rows[1].oom->timeUs < t.rows[3].oom->timeUs);
        // Imbalance: the largest peak over the median of the five rows that loaded.
        std::vector<int64_t> peaks;
        for (const RankRow& r : t.rows)
            if (r.error.empty())
                peaks.push_back(r.peakAllocated);
        std::sort(peaks.begin(), peaks.end());
        QCOMPARE(t.maxOverMedian, double(peaks.back()) / double(peaks[2]));
        QVERIFY(t.imbalancePool);
    }

    void workersKeepTheOrder()
    {
        RanksOptions one, two;
        one.rules = two.rules = rules();
        one.workers = 1;
        two.workers = 2;
        QCOMPARE(ranksJsonText(summarizeRanks(m_files, one)), ranksJsonText(summarizeRanks(m_files, two)));
    }

    // A report written elsewhere (one per rank, under a scheduler) gives the same row as the dump.
    void reportsAreRowsToo()
    {
        DocumentOptions d;
        d.rules = rules();
        d.eagerTimelines = false;
        const auto doc = Document::open(path("rank1.pickle"), d);
        std::ofstream(path("rank1.report.json")) << reportJsonText(buildReport(*doc, {}));
        RanksOptions options;
        options.rules = rules();
        const auto fromDump = rankRows(path("rank1.pickle"), options);
        const auto fromReport = rankRows(path("rank1.report.json"), options);
        QCOMPARE(fromReport.size(), size_t(1));
        QCOMPARE(fromReport[0].file, fromDump[0].file);
        QCOMPARE(fromReport[0].peakAllocated, fromDump[0].peakAllocated);
        QCOMPARE(fromReport[0].reserved, fromDump[0].reserved);
        QVERIFY(fromReport[0].poolsAtPeak == fromDump[0].poolsAtPeak);
        QCOMPARE(fromReport[0].oom->timeUs, fromDump[0].oom->timeUs);
        QCOMPARE(fromReport[0].oom->requested, fromDump[0].oom->requested);
        QCOMPARE(fromReport[0].peakPool, fromDump[0].peakPool);
    }

    // Every real dump at once: a row per device that holds anything, its peak the independent
    // reader's, and a row with the loader's error for what is not a dump (expected.json).
    void wholeCorpus()
    {
        const std::string corpus = POOLSCOPE_CORPUS_DIR;
        if (!std::filesystem::exists(corpus + "/expected.json"))
            QSKIP("../shared/corpus is absent");
        const json expected = json::parse(std::ifstream(corpus + "/expected.json"));
        RanksOptions options;
        options.rules = rules();
        const RankTable t = summarizeRanks(expandRankInputs({corpus}), options);
        size_t errors = 0, checked = 0;
        for (const RankRow& r : t.rows) {
            const std::string name = std::filesystem::path(r.file).filename().string();
            if (!r.error.empty()) {
                ++errors;
                QVERIFY2(name == "expected.json", r.error.c_str());
                continue;
            }
            const json& facts = expected[name];
            if (facts.value("kind", "") != "allocator_snapshot")
                continue;
            for (const json& d : facts["devices"])
                if (d["device"].get<int>() == r.device) {
                    QCOMPARE(r.peakAllocated, d["peak_allocated"].get<int64_t>());
                    ++checked;
                }
        }
        QCOMPARE(errors, size_t(1));
        QVERIFY2(checked >= 15, qPrintable(QString::number(checked)));
        QVERIFY(t.maxOverMedian > 1);
    }

    // The JSON the issue fixes, through the binary: rows, first_oom, imbalance; a directory expands.
    void commandLine()
    {
        const auto r = poolscope::testing::runPoolscope({"ranks", m_dir.path(), "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const json j = json::parse(r.out.toStdString());
        QVERIFY(j["rows"].is_array() && j["rows"].size() >= 6);
        for (const json& row : j["rows"]) {
            QVERIFY(row.contains("file") && row.contains("error"));
            if (!row["error"].is_null())
                continue;
            for (const char* k : {"device", "peak_allocated", "peak_pool", "pools_at_peak", "reserved", "oom"})
                QVERIFY2(row.contains(k), k);
        }
        QVERIFY(j["first_oom"].is_object() && j["first_oom"].contains("file") && j["first_oom"].contains("device"));
        QVERIFY(j["imbalance"]["max_over_median"].get<double>() >= 1.0);
        const auto text = poolscope::testing::runPoolscope({"ranks", QString::fromStdString(path("rank0.pickle")), QString::fromStdString(path("rank1.pickle"))});
        QVERIFY2(text.exitCode == 0 && text.out.contains("first OOM: ") && text.out.contains("rank1.pickle"), text.out.constData());
        QVERIFY(text.err.isEmpty()); // no progress line where stderr is not a terminal
    }
};

QTEST_GUILESS_MAIN(TestRanks)
#include "test_ranks.moc"
