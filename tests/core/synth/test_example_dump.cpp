// The example ./run.sh opens without a FILE: the synth command line is read from run.sh itself, so
// the script and this test cannot drift apart. The example must tell the story PoolScope exists for:
// an OOM in the optimizer step where optimizer state, not activations, is the wall.
#include "core/run_poolscope.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

namespace {

using poolscope::testing::CliResult;
using poolscope::testing::runPoolscope;

// The arguments between `"$bin" synth` and `-o` in run.sh, continuation lines joined.
QStringList exampleArguments()
{
    QFile f(QStringLiteral(POOLSCOPE_SOURCE_DIR "/run.sh"));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    QString script = QString::fromUtf8(f.readAll());
    script.replace(QStringLiteral("\\\n"), QStringLiteral(" "));
    const QRegularExpressionMatch m = QRegularExpression(QStringLiteral(R"("\$bin" synth (.*?) -o )")).match(script);
    if (!m.hasMatch())
        return {};
    return m.captured(1).split(QLatin1Char(' '), Qt::SkipEmptyParts);
}

} // namespace

class TestExampleDump : public QObject {
    Q_OBJECT
private slots:
    void exampleRunsOutOfMemoryOnOptimizerState()
    {
        const QStringList args = exampleArguments();
        QVERIFY2(args.contains(QStringLiteral("--capacity")), "run.sh has no `\"$bin\" synth ... -o` line with --capacity");
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString file = dir.filePath(QStringLiteral("example_oom.pickle.zst"));
        const CliResult synth = runPoolscope(QStringList{QStringLiteral("synth")} + args + QStringList{QStringLiteral("-o"), file});
        QVERIFY2(synth.exitCode == 0, synth.err.constData());

        const CliResult report = runPoolscope({QStringLiteral("report"), file, QStringLiteral("--at"), QStringLiteral("oom"), QStringLiteral("--json")});
        QVERIFY2(report.exitCode == 0, report.err.constData());
        const QJsonObject device = QJsonDocument::fromJson(report.out).object()[QStringLiteral("devices")].toArray().at(0).toObject();
        QCOMPARE(device[QStringLiteral("ooms")].toArray().size(), 1);
        const QJsonObject moment = device[QStringLiteral("moment")].toObject();
        const QString verdict = moment[QStringLiteral("verdict")].toString();
        QVERIFY2(verdict.contains(QStringLiteral("The wall is optimizer state")), qPrintable(verdict));
        // AdamW's two moments per fp32 parameter are in the pools when it fails; activations are gone.
        const QJsonObject pools = moment[QStringLiteral("pools")].toObject();
        const double optimizer = pools[QStringLiteral("optimizer_state")].toDouble();
        const double params = pools[QStringLiteral("parameter")].toDouble();
        QVERIFY2(optimizer > params, qPrintable(QString::fromUtf8(QJsonDocument(pools).toJson())));
        QVERIFY2(pools[QStringLiteral("activation")].toDouble() < 0.01 * optimizer, qPrintable(QString::fromUtf8(QJsonDocument(pools).toJson())));
    }
};

QTEST_GUILESS_MAIN(TestExampleDump)
#include "test_example_dump.moc"
