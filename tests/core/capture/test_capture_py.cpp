// Runs the Python tests of resources/capture/poolscope_capture.py (tests/capture/test_capture.py)
// under CTest, so the capture helper is checked by the same `ctest` run as the C++ code. The Python
// suite stubs torch, so it needs neither torch nor a GPU; only python3 itself is required.
#include <QFile>
#include <QProcess>
#include <QStandardPaths>
#include <QString>
#include <QTest>

class TestCapturePy : public QObject {
    Q_OBJECT

private slots:
    void pythonSuitePasses()
    {
        const QString python = QStandardPaths::findExecutable(QStringLiteral("python3"));
        if (python.isEmpty())
            QSKIP("python3 is not installed");
        const QString script = QStringLiteral(POOLSCOPE_SOURCE_DIR "/tests/capture/test_capture.py");
        QVERIFY2(QFile::exists(script), qPrintable(script));

        QProcess process;
        process.setProcessChannelMode(QProcess::MergedChannels);
        process.start(python, {script});
        QVERIFY2(process.waitForStarted(30'000), qPrintable(process.errorString()));
        // The suite takes well under a second; the bound only stops a hang from stalling CTest.
        const bool finished = process.waitForFinished(300'000);
        const QByteArray output = process.readAll();
        if (!finished)
            process.kill();
        QVERIFY2(finished, output.constData());
        QCOMPARE(process.exitStatus(), QProcess::NormalExit);
        if (process.exitCode() != 0)
            qWarning("%s", output.constData());
        QCOMPARE(process.exitCode(), 0);
        // unittest ends with "OK" or "OK (skipped=N)" only when every test passed.
        QVERIFY2(output.contains("\nOK"), output.constData());
    }
};

QTEST_GUILESS_MAIN(TestCapturePy)
#include "test_capture_py.moc"
