// Which classifier rules a run uses is the application's decision, made in one place for every face:
// the shipped rules, then the per-user file ($XDG_CONFIG_HOME/poolscope/rules.json), then --rules.
// A bad rules file is one error (exit 2, naming the file, the rule and the field) for every command
// and for the window, before any dump is read.
#include "core/run_poolscope.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <fstream>

using nlohmann::json;
using poolscope::testing::CliResult;
using poolscope::testing::poolscopeBinary;

namespace {

CliResult runWithEnv(const QStringList& args, const QString& xdg)
{
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), xdg);
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    p.setProcessEnvironment(env);
    p.start(poolscopeBinary(), args);
    if (!p.waitForFinished(120000)) {
        p.kill();
        p.waitForFinished();
        return {};
    }
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(), p.readAllStandardError()};
}

} // namespace

class TestRulesCli : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_dump, m_xdg, m_emptyXdg;

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_dump = m_dir.filePath(QStringLiteral("step.pickle"));
        const CliResult synth = runWithEnv({"synth", "-o", m_dump, "--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "64", "--steps", "1"}, m_dir.path());
        QVERIFY2(synth.exitCode == 0, synth.err.constData());
        m_xdg = m_dir.filePath(QStringLiteral("config"));
        m_emptyXdg = m_dir.filePath(QStringLiteral("empty"));
        QVERIFY(QDir().mkpath(m_xdg + "/poolscope"));
        QVERIFY(QDir().mkpath(m_emptyXdg));
        // The user's file renames the gradient rule's pool; the --rules file, applied after it, wins
        // over it for the same rule name.
        std::ofstream(m_xdg.toStdString() + "/poolscope/rules.json")
            << R"({"rules": [{"name": "accumulate-grad", "pool": "other", "reason": "user says so", "frames_any": [{"function": "AccumulateGrad"}]}]})";
        std::ofstream(m_dir.filePath("extra.json").toStdString())
            << R"({"rules": [{"name": "accumulate-grad", "pool": "input", "reason": "extra says so", "frames_any": [{"function": "AccumulateGrad"}]}]})";
        std::ofstream(m_dir.filePath("bad.json").toStdString()) << R"({"rules": [{"name": "oops", "pool": "gradient"}]})";
    }

    void userFileThenExtraFile()
    {
        auto report = [&](const QStringList& extra, const QString& xdg) {
            const CliResult r = runWithEnv(QStringList{"report", m_dump, "--json"} + extra, xdg);
            return r.exitCode == 0 ? json::parse(r.out.toStdString())["devices"][0] : json();
        };
        // The moment the shipped rules hold the most gradient bytes (AccumulateGrad's .grad tensors).
        const json shipped = report({}, m_emptyXdg);
        QVERIFY(shipped.is_object());
        const std::string at = std::to_string(shipped["pool_peaks"]["gradient"]["index"].get<int64_t>());
        const json base = report({"--at", QString::fromStdString(at)}, m_emptyXdg)["moment"]["pools"];
        const int64_t gradients = base["gradient"].get<int64_t>();
        QVERIFY(gradients > 0);
        // The user's file moves them to `other`; the --rules file, applied after it, to `input`.
        // (Gradients another rule names, such as backward-gradient's, stay.)
        const json user = report({"--at", QString::fromStdString(at)}, m_xdg)["moment"]["pools"];
        const int64_t moved = gradients - user["gradient"].get<int64_t>();
        QVERIFY2(moved > gradients / 2, user.dump().c_str());
        QCOMPARE(user["other"].get<int64_t>(), base["other"].get<int64_t>() + moved);
        const json both = report({"--at", QString::fromStdString(at), "--rules", m_dir.filePath("extra.json")}, m_xdg)["moment"]["pools"];
        QCOMPARE(both["gradient"].get<int64_t>(), user["gradient"].get<int64_t>());
        QCOMPARE(both["other"].get<int64_t>(), base["other"].get<int64_t>());
        QCOMPARE(both["input"].get<int64_t>(), base["input"].get<int64_t>() + moved);
    }

    void badRulesAreOneErrorEverywhere_data()
    {
        QTest::addColumn<QStringList>("args");
        const QString bad = m_dir.filePath(QStringLiteral("bad.json"));
        QTest::newRow("report") << QStringList{"report", m_dump, "--rules", bad};
        QTest::newRow("explain") << QStringList{"explain", m_dump, "--addr", "0x1", "--rules", bad};
        QTest::newRow("whatif") << QStringList{"whatif", m_dump, "--checkpoint", "--rules", bad};
        QTest::newRow("render") << QStringList{"render", m_dump, "-o", m_dir.filePath("x.png"), "--rules", bad};
        QTest::newRow("window") << QStringList{m_dump, "--rules", bad};
    }
    void badRulesAreOneErrorEverywhere()
    {
        QFETCH(QStringList, args);
        const CliResult r = runWithEnv(args, m_emptyXdg);
        QCOMPARE(r.exitCode, 2);
        const QString err = QString::fromUtf8(r.err);
        QVERIFY2(err.contains(QStringLiteral("bad.json")) && err.contains(QStringLiteral("rule 0 'oops': field 'reason'")), r.err.constData());
        QCOMPARE(err.count(QLatin1Char('\n')), 1); // one line
        QVERIFY(!QFile::exists(m_dir.filePath("x.png")));
    }
};

QTEST_GUILESS_MAIN(TestRulesCli)
#include "test_rules_cli.moc"
