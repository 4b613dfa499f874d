// File > Export redacted copy… in the window, offscreen: the action opens the dialog, Export writes
// the copy off the GUI thread, the copy loads with the same history and without the frames asked
// away; a copy that cannot be written says so in one line.
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/timeline/synthetic_trace.h"
#include "snapshot_writer.h"
#include "open_and_wait.h"
#include "widgets/main_window.h"
#include "widgets/redact_dialog.h"

#include <QAction>
#include <QMenu>
#include <QFileInfo>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

using namespace poolscope;
using testing::openAndWait;

class TestRedactDialog : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_dump;

    static RedactDialog* openDialog(MainWindow& w)
    {
        auto* action = w.findChild<QAction*>(QStringLiteral("exportRedactedAction"));
        if (!action)
            return nullptr;
        // As a user opens File: the menu enables the action when a dump is open.
        for (QObject* o : action->associatedObjects())
            if (auto* menu = qobject_cast<QMenu*>(o))
                emit menu->aboutToShow();
        if (!action->isEnabled())
            return nullptr;
        action->trigger();
        return w.findChild<RedactDialog*>();
    }

private slots:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName(QStringLiteral("PoolScopeTests"));
        QSettings().clear();
        QVERIFY(m_dir.isValid());
        auto synth = testing::synthesize(testing::SynthOptions{.targetEvents = 3000, .seed = 5});
        m_dump = m_dir.filePath(QStringLiteral("run.json"));
        testing::writeSnapshotJson(*synth.trace, m_dump.toStdString());
    }

    void suggestsABesideName()
    {
        QCOMPARE(RedactDialog::suggestedTarget(QStringLiteral("/d/run.pickle.zst")), QStringLiteral("/d/run.redacted.pickle.zst"));
        QCOMPARE(RedactDialog::suggestedTarget(QStringLiteral("/d/snap")), QStringLiteral("/d/snap.redacted"));
        QCOMPARE(RedactDialog::suggestedTarget(QStringLiteral("/d/viz.html")), QStringLiteral("/d/viz.redacted.pickle"));
    }

    void actionWritesACopyThatLoads()
    {
        MainWindow w;
        w.resize(1280, 720);
        auto* action = w.findChild<QAction*>(QStringLiteral("exportRedactedAction"));
        QVERIFY(action);
        QVERIFY(!action->isEnabled()); // nothing open yet
        openAndWait(w, m_dump);
        RedactDialog* dialog = openDialog(w);
        QVERIFY(dialog);
        QCOMPARE(dialog->target(), m_dir.filePath(QStringLiteral("run.redacted.json")));
        QVERIFY(dialog->options().renameCode); // the point of the dialog: on by default
        const QString target = m_dir.filePath(QStringLiteral("shared.pickle.zst"));
        dialog->setTarget(target);
        dialog->setFrames(FrameKeep::Python);
        dialog->grab().save(m_dir.filePath(QStringLiteral("dialog.png")));
        if (qEnvironmentVariableIsSet("POOLSCOPE_SCREENSHOT_DIR"))
            dialog->grab().save(qEnvironmentVariable("POOLSCOPE_SCREENSHOT_DIR") + QStringLiteral("/redact_dialog.png"));
        dialog->accept();
        QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(target), 60000);

        const auto copy = load(target.toStdString());
        const Trace& original = w.document()->trace();
        QCOMPARE(copy->devices.size(), original.devices.size());
        QCOMPARE(copy->devices[0].events.action, original.devices[0].events.action);
        QCOMPARE(copy->devices[0].events.size, original.devices[0].events.size);
        for (size_t i = 0; i < copy->frames.frameCount(); ++i)
            QVERIFY(isPythonRecordedFrame(copy->frames.frame(FrameId(uint32_t(i)))));
        QTRY_VERIFY(w.statusBar()->currentMessage().contains(QStringLiteral("Wrote the redacted copy")));
    }

    void anErrorIsOneLine()
    {
        MainWindow w;
        openAndWait(w, m_dump);
        RedactDialog* dialog = openDialog(w);
        QVERIFY(dialog);
        dialog->setTarget(m_dir.filePath(QStringLiteral("no/such/folder/copy.pickle")));
        dialog->accept();
        QMessageBox* box = nullptr;
        QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>(QStringLiteral("redactError"))) != nullptr, 60000);
        QVERIFY2(!box->text().contains(QLatin1Char('\n')), qPrintable(box->text()));
        QVERIFY2(box->text().contains(QStringLiteral("copy.pickle")), qPrintable(box->text()));
    }
};

QTEST_MAIN(TestRedactDialog)
#include "test_redact_dialog.moc"
