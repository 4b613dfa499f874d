// TraceLoader: loads off the GUI thread, reports failures with the loader's message, cancels
// mid-way, and drops a superseded job's result. Waits on signals, never sleeps.
#include "core/timeline/synthetic_trace.h"
#include "snapshot_writer.h"
#include "widgets/trace_loader.h"

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

using namespace poolscope;

class TestLoader : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_big;

private slots:
    void initTestCase()
    {
        qRegisterMetaType<std::shared_ptr<const poolscope::Document>>();
        QVERIFY(m_dir.isValid());
        // Big enough that parsing takes a while on this machine (tens of MB of JSON).
        auto synth = testing::synthesize(testing::SynthOptions{.targetEvents = 250'000, .seed = 5});
        m_big = m_dir.filePath(QStringLiteral("big.json"));
        testing::writeSnapshotJson(*synth.trace, m_big.toStdString());
    }

    void loadsAFixture()
    {
        TraceLoader loader;
        QSignalSpy loaded(&loader, &TraceLoader::loaded);
        QSignalSpy failed(&loader, &TraceLoader::failed);
        QSignalSpy running(&loader, &TraceLoader::runningChanged);
        const QString path = QStringLiteral(POOLSCOPE_TEST_DATA "/snapshots/train_p4.pickle");
        loader.start(path);
        QVERIFY(loader.isRunning());
        QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), 1, 30000);
        QCOMPARE(failed.count(), 0);
        QVERIFY(!loader.isRunning());
        QCOMPARE(running.count(), 2);
        const auto doc = loaded.at(0).at(0).value<std::shared_ptr<const Document>>();
        QVERIFY(doc);
        QCOMPARE(loaded.at(0).at(1).toString(), path);
        QCOMPARE(doc->deviceCount(), doc->trace().devices.size());
        QCOMPARE(doc->trace().devices[0].eventCount(), size_t(17));
        QVERIFY(doc->device(0).timelinePtr());
        // No rules given: the loader opens it unclassified, and the document says so.
        QVERIFY(!doc->device(0).classified());
        QVERIFY(!doc->notes().empty());

        // With the application's rules it classifies every device.
        loader.setRules(std::make_shared<const RuleSet>(RuleSet::builtin()));
        loader.start(path);
        QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), 2, 30000);
        const auto classified = loaded.at(1).at(0).value<std::shared_ptr<const Document>>();
        QVERIFY(classified && classified->device(0).classified());
        QVERIFY(classified->notes().empty());
    }

    void reportsFailures()
    {
        TraceLoader loader;
        QSignalSpy failed(&loader, &TraceLoader::failed);
        loader.start(m_dir.filePath(QStringLiteral("missing.pickle")));
        QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 30000);
        QVERIFY(failed.at(0).at(0).toString().contains(QStringLiteral("missing.pickle")));

        const QString junk = m_dir.filePath(QStringLiteral("junk.pickle"));
        QFile f(junk);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("\x80\x04\x95garbage that is not a pickle");
        f.close();
        loader.start(junk);
        QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 2, 30000);
        QVERIFY(!failed.at(1).at(0).toString().isEmpty());
    }

    void cancelsMidWay()
    {
        TraceLoader loader;
        QSignalSpy loaded(&loader, &TraceLoader::loaded);
        QSignalSpy cancelled(&loader, &TraceLoader::cancelled);
        QSignalSpy progress(&loader, &TraceLoader::progressChanged);
        loader.start(m_big);
        QTRY_VERIFY_WITH_TIMEOUT(progress.count() >= 2, 30000); // the poll timer has seen the job run
        loader.cancel();
        QTRY_COMPARE_WITH_TIMEOUT(cancelled.count(), 1, 60000);
        QCOMPARE(loaded.count(), 0);
        QVERIFY(!loader.isRunning());
    }

    void dropsSupersededJob()
    {
        TraceLoader loader;
        QSignalSpy loaded(&loader, &TraceLoader::loaded);
        QSignalSpy cancelled(&loader, &TraceLoader::cancelled);
        const QString small = QStringLiteral(POOLSCOPE_TEST_DATA "/snapshots/train_p2.pickle");
        loader.start(m_big);
        loader.start(small);
        QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), 1, 60000);
        QCOMPARE(loaded.at(0).at(1).toString(), small);
        QCOMPARE(cancelled.count(), 0); // the stale job ends silently
    }
};

QTEST_MAIN(TestLoader)
#include "test_loader.moc"
