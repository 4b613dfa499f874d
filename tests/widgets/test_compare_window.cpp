// File ▸ Compare with…: the current document against another run, computed off the GUI thread,
// shown in its own window with the axis that changed, and exported as the same image
// `poolscope render A --compare B` writes.
#include "core/run_poolscope.h"
#include "widgets/compare_view.h"
#include "widgets/compare_window.h"
#include "widgets/main_window.h"
#include "widgets/trace_loader.h"

#include <QAction>
#include <QSignalSpy>
#include <QTest>

using namespace poolscope;

class TestCompareWindow : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_a, m_b;

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_a = m_dir.filePath(QStringLiteral("seq256.pickle"));
        m_b = m_dir.filePath(QStringLiteral("seq512.pickle"));
        for (const auto& [file, seq] : {std::pair{m_a, "256"}, std::pair{m_b, "512"}}) {
            const auto r = poolscope::testing::runPoolscope({"synth", "-o", file, "--layers", "4", "--hidden", "512", "--heads", "8", "--seq", seq, "--steps", "2"});
            QVERIFY2(r.exitCode == 0, r.err.constData());
        }
    }

    void comparesTheOpenDocumentWithAnotherRun()
    {
        MainWindow w;
        QSignalSpy opened(&w, &MainWindow::documentChanged);
        w.openFile(m_a);
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 60000);
        w.compareWith(m_b);
        QTRY_VERIFY_WITH_TIMEOUT(w.compareWindow() != nullptr, 60000);
        CompareWindow* cw = w.compareWindow();
        QTRY_VERIFY_WITH_TIMEOUT(cw->result() != nullptr, 60000);
        const Comparison& c = cw->result()->comparison;
        QVERIFY2(c.oneAxis && c.axes.size() == 1 && c.axes[0].name == "sequence", c.verdict.c_str());
        QVERIFY(cw->view()->content().verdict.contains(QStringLiteral("sequence")));
        QVERIFY(w.document() && w.documentPath() == m_a); // A stays the window's document
        // The export is the image `render --compare` makes.
        const QString fromWindow = m_dir.filePath(QStringLiteral("window.png"));
        QString error;
        QVERIFY2(cw->exportImage(fromWindow, QSize(1600, 900), &error), qPrintable(error));
        const QString fromCli = m_dir.filePath(QStringLiteral("cli.png"));
        const auto r = poolscope::testing::runPoolscope({"render", m_a, "--compare", m_b, "-o", fromCli});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(QImage(fromWindow), QImage(fromCli));
        if (const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !dir.isEmpty()) {
            cw->resize(1400, 900);
            cw->show();
            QVERIFY(QTest::qWaitForWindowExposed(cw));
            cw->grab().save(QString::fromLocal8Bit(dir) + QStringLiteral("/compare-window.png"));
        }
    }
};

QTEST_MAIN(TestCompareWindow)
#include "test_compare_window.moc"
