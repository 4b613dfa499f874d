// The command line of issue 24 as a user runs it: `steps --json` (the documented fields), the CI
// gate `report --fail-if-step-growth` (exit 3 and one line naming the growth and the line of code),
// `report --between`, `report --by-site --json` and `series --per-step`, on a run `poolscope synth
// --leaks` wrote and on a real three-step dump.
#include "core/run_poolscope.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

using nlohmann::json;
using poolscope::testing::runPoolscope;

class TestStepsCli : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_leaky, m_clean;

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_leaky = m_dir.filePath(QStringLiteral("leaky.pickle"));
        m_clean = m_dir.filePath(QStringLiteral("clean.pickle"));
        const QStringList model = {QStringLiteral("--layers"), QStringLiteral("2"), QStringLiteral("--hidden"), QStringLiteral("64"),
                                   QStringLiteral("--heads"), QStringLiteral("4"), QStringLiteral("--seq"), QStringLiteral("32"),
                                   QStringLiteral("--batch"), QStringLiteral("2"), QStringLiteral("--vocab"), QStringLiteral("128"),
                                   QStringLiteral("--steps"), QStringLiteral("6"), QStringLiteral("--dtype"), QStringLiteral("bf16")};
        auto r = runPoolscope(QStringList{QStringLiteral("synth"), QStringLiteral("-o"), m_leaky, QStringLiteral("--leaks"),
                                          QStringLiteral("growing-cache,warmup,bank=2")} + model);
        QVERIFY2(r.exitCode == 0, r.err.constData());
        r = runPoolscope(QStringList{QStringLiteral("synth"), QStringLiteral("-o"), m_clean, QStringLiteral("--leaks"), QStringLiteral("warmup,bank=2")} + model);
        QVERIFY2(r.exitCode == 0, r.err.constData());
    }

    void stepsJson()
    {
        const auto r = runPoolscope({QStringLiteral("steps"), m_leaky, QStringLiteral("--json")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const json j = json::parse(r.out.toStdString());
        const json& d = j["devices"][0];
        QCOMPARE(d["device"].get<int>(), 0);
        QCOMPARE(d["steps"].size(), size_t(6));
        for (const char* key : {"index", "start_event", "end_event", "peak_allocated", "peak_event", "alive_at_start", "alive_at_end", "growth"})
            QVERIFY2(d["steps"][0].contains(key), key);
        QCOMPARE(d["leak_suspects"].size(), size_t(1));
        const json& s = d["leak_suspects"][0];
        QVERIFY(s["site"].get<std::string>().find("train.py:138 train_step") != std::string::npos);
        QCOMPARE(s["bytes_per_step"].get<int64_t>(), int64_t(32 * 2 * 64 * 2));
        QVERIFY(s["steps"].get<int>() >= 4);
        QVERIFY(s.contains("pool"));

        const auto clean = runPoolscope({QStringLiteral("steps"), m_clean, QStringLiteral("--json")});
        QCOMPARE(json::parse(clean.out.toStdString())["devices"][0]["leak_suspects"].size(), size_t(0));
    }

    void stepGrowthGate()
    {
        auto r = runPoolscope({QStringLiteral("report"), m_leaky, QStringLiteral("--fail-if-step-growth"), QStringLiteral("1KiB")});
        QCOMPARE(r.exitCode, 3);
        const QString line = QString::fromUtf8(r.err).trimmed();
        QVERIFY2(line.contains(QStringLiteral("memory alive at step ends grows by 8.")) && line.contains(QStringLiteral("KiB per step")) && line.contains(QStringLiteral("train.py:138")), qPrintable(line));
        QCOMPARE(line.count(QLatin1Char('\n')), 0);
        r = runPoolscope({QStringLiteral("report"), m_leaky, QStringLiteral("--fail-if-step-growth"), QStringLiteral("16KiB")});
        QCOMPARE(r.exitCode, 0);
        r = runPoolscope({QStringLiteral("report"), m_clean, QStringLiteral("--fail-if-step-growth"), QStringLiteral("1KiB")});
        QCOMPARE(r.exitCode, 0);
        r = runPoolscope({QStringLiteral("report"), m_clean, QStringLiteral("--fail-if-step-growth"), QStringLiteral("lots")});
        QCOMPARE(r.exitCode, 2);
    }

    void betweenAndBySite()
    {
        auto r = runPoolscope({QStringLiteral("report"), m_leaky, QStringLiteral("--between"), QStringLiteral("step:1"), QStringLiteral("step:4"),
                               QStringLiteral("--json")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        json j = json::parse(r.out.toStdString());
        const json& d = j["devices"][0];
        bool cache = false;
        for (const json& row : d["by_site"])
            if (row["site"].get<std::string>().find("train.py:138") != std::string::npos)
                cache = row["born"].get<int64_t>() == 3 * 8192 && row["died"].get<int64_t>() == 0;
        QVERIFY(cache);
        int64_t net = 0;
        for (const json& row : d["by_pool"])
            net += row["net"].get<int64_t>();
        QCOMPARE(net, d["b"]["allocated"].get<int64_t>() - d["a"]["allocated"].get<int64_t>());
        r = runPoolscope({QStringLiteral("report"), m_leaky, QStringLiteral("--between"), QStringLiteral("step:9")});
        QCOMPARE(r.exitCode, 2);
        r = runPoolscope({QStringLiteral("report"), m_leaky, QStringLiteral("--between"), QStringLiteral("step:9"), QStringLiteral("end")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.contains("step:K"));

        r = runPoolscope({QStringLiteral("report"), m_leaky, QStringLiteral("--by-site"), QStringLiteral("--json"), QStringLiteral("--at"), QStringLiteral("peak")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = json::parse(r.out.toStdString());
        const json& at = j["devices"][0]["at"];
        double kids = 0;
        for (const json& c : at["root"]["children"])
            kids += c["weight"].get<double>();
        QVERIFY(kids <= at["total"].get<double>() + 0.5);
        QVERIFY(at["total"].get<double>() > 0);
        QCOMPARE(j["devices"][0]["over_run"]["weight_unit"].get<std::string>(), std::string("byte-seconds"));
    }

    void seriesPerStep()
    {
        const auto r = runPoolscope({QStringLiteral("series"), m_leaky, QStringLiteral("--per-step"), QStringLiteral("--csv")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QList<QByteArray> lines = r.out.trimmed().split('\n');
        QCOMPARE(lines.size(), 7); // header + six steps
        QVERIFY(lines[0].startsWith("step,start_event,end_event,complete,peak_allocated"));
    }

    void realThreeSteps()
    {
        const QString f = QStringLiteral(POOLSCOPE_CORPUS_DIR "/niu_fb_100.pickle");
        if (!QFile::exists(f))
            QSKIP("../shared/corpus is absent");
        const auto r = runPoolscope({QStringLiteral("steps"), f});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("3 steps, each optimizer step's annotation ends a step"), r.out.constData());
        QVERIFY2(r.out.contains("no leak suspect"), r.out.constData());
        const auto gate = runPoolscope({QStringLiteral("report"), f, QStringLiteral("--fail-if-step-growth"), QStringLiteral("1MiB")});
        QCOMPARE(gate.exitCode, 0);
    }
};

QTEST_GUILESS_MAIN(TestStepsCli)
#include "test_steps_cli.moc"
