// The redaction ablation over every real dump (issue 22's proof; skipped without ../shared/corpus):
// pools of each file against the same file with its code renamed, with Python frames only, and
// with no frames but its history. Targets, at the default moment and at the peak: at most 2 % of
// the bytes move pool when renamed, 2 % Python-only, 15 % frameless (where the history is kept),
// and no byte keeps a confidence of 70 % or more once the frames that were its evidence are gone.
// The whole table is printed every run (docs/accuracy.md, "Redaction ablation", regenerates it
// with poolscope_ablation). The same targets hold at the run's worst moment ("run": the largest moved
// share over every event, ablation_run.h), where a misreading whose tensors are gone by the peak shows.
#include "core/classify/rules.h"
#include "core/load.h"
#include "core/redact/ablation.h"
#include "support/corpus.h"

#include <QtTest>

#include <map>

using namespace poolscope;

namespace {

std::shared_ptr<const RuleSet> shippedRules()
{
    static const auto rules = std::make_shared<const RuleSet>(RuleSet::fromFile(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
    return rules;
}

// Misses that remain with the classifier working from the run's structure (issue 22,
// h22b, f22; the kineto host, zl frameless, k_ctx256 / nh_forward_mixed Python-only ones were fixed by f22, hta
// cuda:1 frameless by e22 (structural_graph_release.cpp), dd_ditext8_oom frameless at its worst moment by
// stop 60 (a model moved just before a forward that ran out: structural_phases.cpp), and are
// hard checks now). Key: "file variant check"; value: the figure measured. Each is a QEXPECT_FAIL: once the
// classifier meets the target the test reports XPASS, and the line goes.
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {
        {"nh_forward_fp32.pickle cuda:0 none default moved", "54.6 %"},
        {"nh_forward_fp32.pickle cuda:0 none peak moved", "54.6 %"},
        {"nh_forward_mixed.pickle cuda:0 none default moved", "55.1 %"},
        {"nh_forward_mixed.pickle cuda:0 none peak moved", "55.1 %"},
        // At the run's worst moment (r22, the whole-run measure):
        {"kineto_resnet50_w0.pt.trace.json.gz cpu none run moved", "55.6 %"},
        {"nh_forward_fp32.pickle cuda:0 none run moved", "74.8 %"},
        {"nh_forward_mixed.pickle cuda:0 none run moved", "74.9 %"},
    };
    return misses;
}

std::string pct(double f) { return QString::number(100.0 * f, 'f', 1).toStdString() + " %"; }

} // namespace

class TestAblationCorpus : public QObject {
    Q_OBJECT
private slots:
    void targets_data();
    void targets();
    void cleanupTestCase();

private:
    std::vector<AblationResult> m_results;
};

void TestAblationCorpus::targets_data()
{
    testing::addCorpusRows();
}

void TestAblationCorpus::targets()
{
    QFETCH(QString, name);
    if (name.isEmpty())
        QSKIP("../shared/corpus not available");
    const auto trace = load(testing::corpusPath(name).toStdString());
    const AblationResult r = ablate(trace, shippedRules());
    m_results.push_back(r);
    struct Check {
        std::string key; // "file device variant moment moved|confident"
        bool ok;
        std::string figure, message;
    };
    std::vector<Check> checks;
    for (const AblationDevice& d : r.devices) {
        for (const AblationCell& c : d.cells) {
            const double limit = c.variant == "none" ? 0.15 : 0.02;
            // Without history a frameless copy has nothing but sizes: reported, not held to the target.
            const bool judged = c.variant != "none" || d.history;
            for (const auto& [moment, m] : {std::pair{"default", c.atDefault}, std::pair{"peak", c.atPeak}}) {
                const std::string key = name.toStdString() + " " + d.label + " " + c.variant + " " + moment;
                std::string flows;
                for (size_t k = 0; k < c.flows.size() && k < 3; ++k)
                    flows += (k ? ", " : "") + c.flows[k].first + " " + std::to_string(c.flows[k].second >> 20) + " MiB";
                if (m.moved > 0)
                    qInfo("%s: %s moved (%lld of %lld bytes)%s%s", key.c_str(), pct(m.movedFraction()).c_str(), qint64(m.moved),
                          qint64(m.bytes), flows.empty() ? "" : "; ", flows.c_str());
                if (judged)
                    checks.push_back({key + " moved", m.movedFraction() <= limit, pct(m.movedFraction()),
                                      key + ": " + pct(m.movedFraction()) + " of the bytes move pool, target " + pct(limit)});
                const std::string mib = QString::number(double(m.confidentWithoutFrames) / double(1 << 20), 'f', 1).toStdString() + " MiB";
                checks.push_back({key + " confident", m.confidentWithoutFrames == 0, mib,
                                  key + ": " + mib + " at confidence >= 70 % although the frames that were their evidence are gone"});
            }
            // Every moment of the run (ablation_run.h): a misreading gone by the peak shows here.
            const AblationRunWorst& w = c.wholeRun;
            const std::string key = name.toStdString() + " " + d.label + " " + c.variant + " run";
            std::string where = w.beforeFirstEvent ? "before the first event" : "after event " + std::to_string(w.index) + " (" + w.phase + ")";
            for (size_t k = 0; k < w.flows.size() && k < 3; ++k)
                where += (k ? ", " : "; ") + w.flows[k].first + " " + std::to_string(w.flows[k].second >> 20) + " MiB";
            if (w.moved > 0)
                qInfo("%s: %s moved (%lld of %lld bytes) %s", key.c_str(), pct(w.movedFraction()).c_str(), qint64(w.moved), qint64(w.bytes),
                      where.c_str());
            if (judged)
                checks.push_back({key + " moved", w.movedFraction() <= limit, pct(w.movedFraction()),
                                  key + ": " + pct(w.movedFraction()) + " of the bytes move pool " + where + ", target " + pct(limit)});
        }
    }
    // Every miss, in the form knownMisses() takes, before the first unexpected one stops this row.
    for (const Check& c : checks)
        if (!c.ok)
            qInfo("miss: {\"%s\", \"%s\"},", c.key.c_str(), c.figure.c_str());
    for (const Check& c : checks) {
        auto miss = knownMisses().find(c.key);
        if (miss != knownMisses().end())
            QEXPECT_FAIL("", ("measured " + miss->second + " before the classifier works from structure (issue 22)").c_str(), Continue);
        QVERIFY2(c.ok, c.message.c_str());
    }
}

void TestAblationCorpus::cleanupTestCase()
{
    if (!m_results.empty())
        qInfo("\n%s", ablationMarkdown(m_results).c_str());
}

QTEST_GUILESS_MAIN(TestAblationCorpus)
#include "test_ablation_corpus.moc"
