// `poolscope compare A B` as a user runs it: two dumps `poolscope synth` wrote with one knob apart,
// the JSON it prints, and one line on stderr with exit 2 for what it refuses.
#include "core/run_poolscope.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace poolscope::testing;

class TestCompareCli : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_a, m_b;

    QString synth(const QString& name, const QStringList& knobs)
    {
        const QString path = m_dir.path() + "/" + name;
        const CliResult r = runPoolscope(QStringList{"synth", "-o", path, "--layers", "4", "--hidden", "512", "--heads", "8", "--vocab", "8000",
                                                     "--batch", "4", "--dtype", "fp32"} +
                                         knobs);
        if (r.exitCode != 0)
            qWarning() << r.err;
        return path;
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_a = synth("a.pickle", {"--seq", "256"});
        m_b = synth("b.pickle.zst", {"--seq", "1024"});
    }

    void json()
    {
        const CliResult r = runPoolscope({"compare", m_a, m_b, "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject j = QJsonDocument::fromJson(r.out).object();
        const QJsonArray axes = j["axes"].toArray();
        QCOMPARE(axes.size(), 1);
        QCOMPARE(axes[0].toObject()["name"].toString(), QStringLiteral("sequence"));
        QCOMPARE(axes[0].toObject()["ratio"].toDouble(), 4.0);
        QVERIFY(j["one_axis"].toBool());
        QVERIFY(j["changed"].toArray().contains(QStringLiteral("activation")));
        QCOMPARE(j["peak_pool_b"].toString(), QStringLiteral("activation"));
        const QJsonObject act = j["pools"].toObject()["activation"].toObject();
        QVERIFY(act["b"].toDouble() > act["a"].toDouble());
        QVERIFY(act["ratio"].toDouble() > 1);
        QVERIFY(j["pool_peaks"].toObject().contains("optimizer_state"));
        QVERIFY(j["verdict"].toString().startsWith("One axis changed: sequence x4."));
    }

    void text()
    {
        const CliResult r = runPoolscope({"compare", m_a, m_b, "--at", "backward_end"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QString out = QString::fromUtf8(r.out);
        QVERIFY(out.contains("at the end of backward"));
        QVERIFY(out.contains("axes (one axis)"));
        QVERIFY(out.contains("  sequence: "));
        QVERIFY(out.contains("One axis changed: sequence x4."));
    }

    void refusals_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("says");
        QTest::newRow("one file") << QStringList{"compare", "A"} << "B is required";
        QTest::newRow("bad moment") << QStringList{"compare", "A", "B", "--at", "middle"} << "--at: expects one of peak, oom, end";
        QTest::newRow("missing file") << QStringList{"compare", "A", "/nonexistent/b.pickle"} << "/nonexistent/b.pickle";
        QTest::newRow("no OOM") << QStringList{"compare", "A", "B", "--at", "oom"} << "cannot compare at the OOM: neither run has an OOM";
        QTest::newRow("no such device") << QStringList{"compare", "A", "B", "--device-b", "3"} << "device 3 is not in this dump";
    }

    void refusals()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, says);
        args.replaceInStrings(QRegularExpression("^A$"), m_a);
        args.replaceInStrings(QRegularExpression("^B$"), m_b);
        const CliResult r = runPoolscope(args);
        QCOMPARE(r.exitCode, 2);
        const QString err = QString::fromUtf8(r.err);
        QVERIFY2(err.contains(says), qPrintable(err));
        QCOMPARE(err.count('\n'), 1);
        QVERIFY(r.out.isEmpty());
    }
};

QTEST_GUILESS_MAIN(TestCompareCli)
#include "test_compare_cli.moc"
