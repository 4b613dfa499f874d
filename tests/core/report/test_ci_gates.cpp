// What a CI job relies on: report --fail-over/--fail-pool exit 3 with one line naming what went over
// and by how much (0 when within, 2 for a bad limit); `series` rows, thinned peak-keeping; and the
// progress line reaching stderr only on a terminal.
#include "core/run_poolscope.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <map>
#include <sstream>

using nlohmann::json;
using poolscope::testing::CliResult;
using poolscope::testing::runPoolscope;

namespace {

struct Table {
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
};

Table csv(const QByteArray& text)
{
    Table t;
    std::istringstream in(text.toStdString());
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
        std::vector<std::string> cells;
        std::istringstream l(line);
        std::string cell;
        while (std::getline(l, cell, ','))
            cells.push_back(cell);
        if (!line.empty() && line.back() == ',')
            cells.push_back({});
        (first ? t.header : t.rows.emplace_back()) = cells;
        first = false;
    }
    return t;
}

} // namespace

class TestCiGates : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_dump;
    json m_report;

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_dump = m_dir.filePath(QStringLiteral("step.pickle"));
        const CliResult s = runPoolscope({"synth", "-o", m_dump, "--layers", "4", "--hidden", "512", "--heads", "8", "--seq", "256", "--steps", "2"});
        QVERIFY2(s.exitCode == 0, s.err.constData());
        const CliResult r = runPoolscope({"report", m_dump, "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        m_report = json::parse(r.out.toStdString())["devices"][0];
    }

    void failOverAndFailPool()
    {
        const int64_t peak = m_report["peak_allocated"].get<int64_t>();
        const int64_t state = m_report["pool_peaks"]["optimizer_state"]["bytes"].get<int64_t>();
        QVERIFY(state > 0);
        auto run = [&](const QStringList& extra) { return runPoolscope(QStringList{"report", m_dump} + extra); };
        // Within: 0, and the report as usual.
        const CliResult ok = run({"--fail-over", QString::number(peak), "--fail-pool", QStringLiteral("optimizer_state>%1").arg(state)});
        QVERIFY2(ok.exitCode == 0 && ok.err.isEmpty() && ok.out.contains("peak allocated"), ok.err.constData());
        // One byte under the peak: 3, one line naming the device, what, the limit and by how much.
        const CliResult over = run({"--fail-over", QString::number(peak - 1)});
        QCOMPARE(over.exitCode, 3);
        QCOMPARE(over.err.count('\n'), 1);
        QVERIFY2(over.err.contains("cuda:0 peak allocated") && over.err.contains("by 1 B"), over.err.constData());
        QVERIFY(over.out.contains("peak allocated")); // the report still printed, for the log
        const CliResult pool = run({"--fail-pool", QStringLiteral("optimizer_state>%1").arg(state - 1024), "--fail-pool", "activation>1TiB"});
        QCOMPARE(pool.exitCode, 3);
        QVERIFY2(pool.err.contains("optimizer_state peak") && pool.err.contains("by 1.00 KiB") && !pool.err.contains("activation"),
                 pool.err.constData());
        // Both over: both named, still one line.
        const CliResult both = run({"--fail-over", "1MiB", "--fail-pool", QStringLiteral("optimizer_state>%1").arg(state - 1)});
        QCOMPARE(both.exitCode, 3);
        QCOMPARE(both.err.count('\n'), 1);
        QVERIFY(both.err.contains("peak allocated") && both.err.contains("optimizer_state peak"));
        // A limit that is not one: 2.
        for (const QStringList& bad : {QStringList{"--fail-over", "lots"}, QStringList{"--fail-pool", "optimizer_state"},
                                       QStringList{"--fail-pool", "moments>1GiB"}}) {
            const CliResult b = run(bad);
            QVERIFY2(b.exitCode == 2 && b.err.count('\n') == 1, b.err.constData());
        }
    }

    // compare BASELINE NEW --fail-if-grows: 3 with one line (what grew, by how much, the limit, and
    // the compare verdict) when the new run's peak (or a pool's) grew past the limit.
    void compareFailsIfGrows()
    {
        const QString longer = m_dir.filePath(QStringLiteral("longer.pickle"));
        const CliResult s = runPoolscope({"synth", "-o", longer, "--layers", "4", "--hidden", "512", "--heads", "8", "--seq", "512", "--steps", "2"});
        QVERIFY2(s.exitCode == 0, s.err.constData());
        const CliResult grew = runPoolscope({"compare", m_dump, longer, "--fail-if-grows", "5%"});
        QCOMPARE(grew.exitCode, 3);
        QCOMPARE(grew.err.count('\n'), 1);
        QVERIFY2(grew.err.contains("peak allocated grew") && grew.err.contains("limit 5.0%") && grew.err.contains("sequence x2"), grew.err.constData());
        QVERIFY(grew.out.contains("axes")); // the comparison itself, for the log
        const CliResult pool = runPoolscope({"compare", m_dump, longer, "--fail-if-grows", "optimizer_state:1%", "--fail-if-grows", "activation:1%"});
        QCOMPARE(pool.exitCode, 3);
        QVERIFY2(pool.err.contains("activation peak grew") && !pool.err.contains("optimizer_state peak grew"), pool.err.constData());
        QCOMPARE(runPoolscope({"compare", m_dump, longer, "--fail-if-grows", "1000%"}).exitCode, 0);
        QCOMPARE(runPoolscope({"compare", m_dump, m_dump, "--fail-if-grows", "0%"}).exitCode, 0);
        const CliResult bad = runPoolscope({"compare", m_dump, longer, "--fail-if-grows", "moments:5%"});
        QVERIFY2(bad.exitCode == 2 && bad.err.count('\n') == 1, bad.err.constData());
    }

    void seriesRowsAndThinning()
    {
        const CliResult full = runPoolscope({"series", m_dump, "--csv"});
        QVERIFY2(full.exitCode == 0, full.err.constData());
        const Table all = csv(full.out);
        QCOMPARE(all.header.front(), std::string("index"));
        QCOMPARE(all.rows.size(), size_t(m_report["entries"].get<int64_t>()));
        const auto column = [&](const Table& t, const std::string& name) {
            const auto at = size_t(std::find(t.header.begin(), t.header.end(), name) - t.header.begin());
            std::vector<int64_t> v;
            for (const auto& r : t.rows)
                v.push_back(r[at].empty() ? 0 : std::stoll(r[at]));
            return v;
        };
        // The full series agrees with the report: its peak, where the report puts it.
        const auto allocated = column(all, "allocated");
        const auto peakAt = std::max_element(allocated.begin(), allocated.end()) - allocated.begin();
        QCOMPARE(*std::max_element(allocated.begin(), allocated.end()), m_report["peak_allocated"].get<int64_t>());
        QCOMPARE(int64_t(peakAt), m_report["peak_index"].get<int64_t>());
        for (const int points : {7, 50, 400}) {
            const CliResult thin = runPoolscope({"series", m_dump, "--csv", "--points", QString::number(points)});
            QVERIFY2(thin.exitCode == 0, thin.err.constData());
            const Table t = csv(thin.out);
            QVERIFY(t.rows.size() < all.rows.size());
            // Every column keeps its peak (its maximum over the whole run) ...
            for (const std::string& name : all.header) {
                if (name == "index" || name == "time_us")
                    continue;
                const auto a = column(all, name), b = column(t, name);
                QVERIFY2(*std::max_element(a.begin(), a.end()) == *std::max_element(b.begin(), b.end()), name.c_str());
            }
            // ... and every row is a real event's row, unchanged.
            std::map<std::string, std::vector<std::string>> byIndex;
            for (const auto& r : all.rows)
                byIndex[r[0]] = r;
            for (const auto& r : t.rows)
                QVERIFY(byIndex.at(r[0]) == r);
        }
        const CliResult jsonl = runPoolscope({"series", m_dump, "--jsonl", "--every", "100"});
        QVERIFY2(jsonl.exitCode == 0, jsonl.err.constData());
        const auto lines = jsonl.out.split('\n');
        const json first = json::parse(lines.front().toStdString());
        QVERIFY(first.contains("index") && first.contains("allocated") && first["pools"].contains("optimizer_state"));
        QVERIFY(runPoolscope({"series", m_dump, "--every", "3", "--points", "4"}).exitCode == 2);
    }

    // Scripts and CI logs never see the progress line: stderr is not a terminal here. Forced on, it
    // is there (and the output on stdout is the same).
    void progressOnlyOnATerminal()
    {
        const CliResult quiet = runPoolscope({"report", m_dump});
        QVERIFY(quiet.exitCode == 0 && quiet.err.isEmpty());
        qputenv("POOLSCOPE_PROGRESS", "1");
        const CliResult forced = runPoolscope({"report", m_dump});
        qunsetenv("POOLSCOPE_PROGRESS");
        QVERIFY(forced.exitCode == 0);
        QVERIFY2(forced.err.contains("loading step.pickle"), forced.err.constData());
        QCOMPARE(forced.out, quiet.out);
    }
};

QTEST_GUILESS_MAIN(TestCiGates)
#include "test_ci_gates.moc"
