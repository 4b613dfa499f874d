// `poolscope explain`: one allocation's pool, reason, evidence and stack; exit codes 0 / 2.
// Runs the real executable on a dump this test writes itself (JSON snapshot form), and on the
// corpus when present.
#include "core/run_poolscope.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>

namespace {

using poolscope::testing::poolscopeBinary;

struct Result {
    int code = -1;
    QString out, err;
};

// The shared runner (tests/core/run_poolscope.h), with text instead of bytes for these assertions.
Result runPoolscope(const QStringList& args)
{
    const auto r = poolscope::testing::runPoolscope(args);
    return {r.exitCode, QString::fromUtf8(r.out), QString::fromUtf8(r.err)};
}

// A small snapshot in the JSON form users json.dump: one weight allocated before recording (in the
// final segments only), a gradient born in backward, and an activation freed in backward.
const char* kSnapshot = R"json({
 "segments": [{"device": 0, "address": 4096, "total_size": 4194304, "allocated_size": 2097152, "active_size": 2097152,
   "requested_size": 2097152, "stream": 0, "segment_type": "large", "segment_pool_id": [0, 0], "is_expandable": false, "frames": [],
   "blocks": [
     {"address": 4096, "size": 1048576, "requested_size": 1048576, "state": "active_allocated", "frames": []},
     {"address": 1052672, "size": 1048576, "requested_size": 1048576, "state": "active_allocated",
      "frames": [{"filename": "??", "name": "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)", "line": 0},
                 {"filename": "??", "name": "torch::autograd::Engine::evaluate_function(...)", "line": 0}]},
     {"address": 2101248, "size": 2097152, "requested_size": 0, "state": "inactive", "frames": []}]}],
 "device_traces": [[
   {"action": "alloc", "addr": 2101248, "size": 2097152, "stream": 0, "time_us": 100,
    "frames": [{"filename": "/home/u/model.py", "name": "forward", "line": 12},
               {"filename": "/env/torch/nn/modules/module.py", "name": "_call_impl", "line": 1750}]},
   {"action": "alloc", "addr": 1052672, "size": 1048576, "stream": 0, "time_us": 200,
    "frames": [{"filename": "??", "name": "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)", "line": 0},
               {"filename": "??", "name": "torch::autograd::Engine::evaluate_function(...)", "line": 0}]},
   {"action": "free_requested", "addr": 2101248, "size": 2097152, "stream": 0, "time_us": 300,
    "frames": [{"filename": "??", "name": "torch::autograd::Engine::evaluate_function(...)", "line": 0}]},
   {"action": "free_completed", "addr": 2101248, "size": 2097152, "stream": 0, "time_us": 301,
    "frames": [{"filename": "??", "name": "torch::autograd::Engine::evaluate_function(...)", "line": 0}]}
 ]]
})json";

} // namespace

class TestExplainCli : public QObject {
    Q_OBJECT
private slots:
    void initTestCase()
    {
        if (!QFileInfo::exists(poolscopeBinary()))
            QSKIP("the poolscope executable is not built");
        QVERIFY(m_dir.isValid());
        m_file = m_dir.filePath("snapshot.json");
        QFile f(m_file);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(kSnapshot);
    }

    void explainsEachAllocation_data()
    {
        QTest::addColumn<QString>("addr");
        QTest::addColumn<QString>("pool");
        QTest::addColumn<QString>("rule");
        QTest::newRow("gradient") << "0x101000" << "gradient"
                                  << "backward-gradient";
        QTest::newRow("activation") << "0x201000" << "activation"
                                    << "forward-saved-for-backward";
        // The gradient has the weight's size: one to one, as gradients mirror parameters.
        QTest::newRow("weight before recording") << "0x1000" << "parameter"
                                                 << "preexisting-mirrors-gradient";
        QTest::newRow("inside a block") << "0x1800" << "parameter"
                                        << "preexisting-mirrors-gradient";
    }
    void explainsEachAllocation()
    {
        QFETCH(QString, addr);
        QFETCH(QString, pool);
        QFETCH(QString, rule);
        const Result r = runPoolscope({"explain", m_file, "--addr", addr, "--json"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
        QCOMPARE(j["pool"].toString(), pool);
        QCOMPARE(j["rule"].toString(), rule);
        QVERIFY(!j["reason"].toString().isEmpty());
        QVERIFY(j["evidence"].toArray().size() >= 4);
        QCOMPARE(j["device"].toString(), QString("cuda:0"));
        QVERIFY(j["confidence"].toInt() > 0);
        if (pool == "gradient")
            QVERIFY(j["stack"].toArray().at(0).toObject()["name"].toString().startsWith("torch::autograd::generated::MmBackward0"));
    }

    void textOutput()
    {
        const Result r = runPoolscope({"explain", m_file, "--addr", "0x101000"});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.contains("pool        gradient"));
        QVERIFY(r.out.contains("stack (innermost first)"));
        QVERIFY(r.out.contains("#0 torch::autograd::generated::MmBackward0::apply"));
        QVERIFY(r.err.isEmpty());
    }

    // --index picks among allocations that reused an address: the one alive at that event.
    void indexSelectsTheMoment()
    {
        Result r = runPoolscope({"explain", m_file, "--addr", "0x201000", "--index", "1", "--json"});
        QCOMPARE(r.code, 0);
        QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).object()["allocation"].toObject()["alloc_event"].toInt(), 0);
        r = runPoolscope({"explain", m_file, "--addr", "0x101000", "--index", "0"});
        QCOMPARE(r.code, 2); // the gradient is born at event 1
        QVERIFY(r.err.contains("no allocation at 0x101000"));
    }

    void badInputExitsTwo_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("no --addr") << QStringList{"explain", "FILE"} << "--addr is required";
        QTest::newRow("bad address") << QStringList{"explain", "FILE", "--addr", "0xZZ"} << "--addr: expects an address";
        QTest::newRow("nothing there") << QStringList{"explain", "FILE", "--addr", "0x9990000"} << "no allocation at 0x9990000";
        QTest::newRow("no such device") << QStringList{"explain", "FILE", "--addr", "0x1000", "--device", "3"} << "no device 3";
        QTest::newRow("missing file") << QStringList{"explain", "/nonexistent.pickle", "--addr", "0x1000"} << "/nonexistent.pickle";
        QTest::newRow("bad rules") << QStringList{"explain", "FILE", "--addr", "0x1000", "--rules", "RULES"} << "rule 0 'broken': field 'pool'";
    }
    void badInputExitsTwo()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        const QString rules = m_dir.filePath("bad_rules.json");
        QFile f(rules);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"rules": [{"name": "broken", "pool": "weights", "reason": "x"}]})");
        f.close();
        for (auto& a : args) {
            if (a == "FILE")
                a = m_file;
            if (a == "RULES")
                a = rules;
        }
        const Result r = runPoolscope(args);
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(message), qPrintable(r.err));
        QCOMPARE(r.err.count('\n'), 1); // one line
        QVERIFY(r.out.isEmpty());
    }

    void corpusDump()
    {
        const QString file = QString(POOLSCOPE_CORPUS_DIR) + "/k_ctx128_fullstep.pickle";
        if (!QFileInfo::exists(file))
            QSKIP("corpus not present");
        // A gradient BmmBackward0 made in backward (event 4744), still alive at the peak.
        const Result r = runPoolscope({"explain", file, "--addr", "0x7f2b57888000", "--json"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
        QCOMPARE(j["pool"].toString(), QString("gradient"));
        QCOMPARE(j["allocation"].toObject()["alloc_event"].toInt(), 4744);
    }

private:
    QTemporaryDir m_dir;
    QString m_file;
};

QTEST_GUILESS_MAIN(TestExplainCli)
#include "test_explain_cli.moc"
