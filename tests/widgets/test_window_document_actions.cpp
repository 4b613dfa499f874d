// What a window without a document offers, and what a new document starts with: Export image…,
// Copy image and the OOM/peak jumps are disabled until a dump is open (they did nothing before), and
// the tensor table's filters do not carry over to the next file ("0 of 543 alive").
#include "core/timeline/synthetic_trace.h"
#include "snapshot_writer.h"
#include "open_and_wait.h"
#include "widgets/main_window.h"
#include "widgets/tensor_model.h"

#include <QAction>
#include <QLineEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

using namespace poolscope;
using testing::openAndWait;

namespace {

QAction* action(MainWindow& w, const QString& text)
{
    for (QAction* a : w.findChildren<QAction*>())
        if (a->text() == text)
            return a;
    return nullptr;
}

} // namespace

class TestWindowDocumentActions : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_a, m_b;

private slots:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName(QStringLiteral("PoolScopeTests"));
        QSettings().clear();
        QVERIFY(m_dir.isValid());
        m_a = m_dir.filePath(QStringLiteral("a.json"));
        m_b = m_dir.filePath(QStringLiteral("b.json"));
        testing::writeSnapshotJson(*testing::synthesize(testing::SynthOptions{.targetEvents = 3000, .seed = 5}).trace, m_a.toStdString());
        testing::writeSnapshotJson(*testing::synthesize(testing::SynthOptions{.targetEvents = 3000, .seed = 6}).trace, m_b.toStdString());
    }

    void actionsNeedADocument()
    {
        MainWindow w;
        w.resize(1280, 720);
        const QStringList needing{tr("&Export image…"), tr("&Copy image"), tr("Jump to &OOM"), tr("Jump to &peak")};
        for (const QString& text : needing) {
            QAction* a = action(w, text);
            QVERIFY2(a, qPrintable(text));
            QVERIFY2(!a->isEnabled(), qPrintable(text + " is enabled without a document"));
        }
        QVERIFY(action(w, tr("&Open…")) == nullptr || action(w, tr("&Open…"))->isEnabled());
        openAndWait(w, m_a);
        const bool oom = !w.document()->device(w.currentDevice()).device().ooms.empty();
        for (const QString& text : needing)
            QVERIFY2(action(w, text)->isEnabled() == (text != tr("Jump to &OOM") || oom), qPrintable(text));
    }

    void tensorFiltersResetPerDocument()
    {
        MainWindow w;
        w.resize(1280, 720);
        openAndWait(w, m_a);
        w.flushPanels();
        QLineEdit* filter = nullptr;
        for (QLineEdit* e : w.findChildren<QLineEdit*>())
            if (e->placeholderText().startsWith(tr("Filter by text in frames")))
                filter = e;
        QVERIFY(filter);
        filter->setText(QStringLiteral("no frame is called this"));
        w.flushPanels();
        QCOMPARE(w.tensorProxy()->rowCount(), 0);
        QVERIFY(w.tensorModel()->rowCount() > 0);
        openAndWait(w, m_b);
        w.flushPanels();
        QVERIFY(filter->text().isEmpty());
        QCOMPARE(w.tensorProxy()->rowCount(), w.tensorModel()->rowCount());
    }
};

QTEST_MAIN(TestWindowDocumentActions)
#include "test_window_document_actions.moc"
