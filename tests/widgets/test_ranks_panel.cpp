// The Ranks dock: many dumps summarised off the GUI thread into a sortable table with a pool bar per
// rank; activating a row opens that rank's dump in the window at that device.
#include "core/formats/pickle_writer.h"
#include "core/ranks/rank_fixtures.h"
#include "widgets/main_window.h"
#include "widgets/ranks_panel.h"

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>

#include <fstream>

using namespace poolscope;

namespace {

Trace rankTrace(int batch, std::optional<int64_t> capacity) { return synthesize(testing::rankModel(batch, capacity)).trace; }

void writeDump(const Trace& t, const QString& path)
{
    std::ofstream out(path.toStdString(), std::ios::binary);
    writeSnapshot(t, out);
}

} // namespace

class TestRanksPanel : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        writeDump(rankTrace(4, std::nullopt), m_dir.filePath("rank0.pickle"));
        writeDump(rankTrace(8, int64_t(450) << 20), m_dir.filePath("rank1.pickle"));
        writeDump(rankTrace(5, std::nullopt), m_dir.filePath("rank2.pickle"));
    }

    void summarisesAFolder()
    {
        RanksPanel panel;
        panel.setRules(std::make_shared<const RuleSet>(RuleSet::builtin()));
        QAbstractItemModelTester tester(panel.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        QSignalSpy done(&panel, &RanksPanel::finished);
        panel.start({m_dir.path()});
        QVERIFY(panel.isRunning());
        QVERIFY(done.wait(60000));
        QCOMPARE(panel.model()->rowCount(), 3);
        QVERIFY2(panel.summaryText().contains(QStringLiteral("First OOM")) && panel.summaryText().contains(QStringLiteral("rank1.pickle")),
                 qPrintable(panel.summaryText()));
        // Sorting by peak (numbers, not text): rank1 (batch 8) holds the largest.
        panel.view()->sortByColumn(RanksModel::Peak, Qt::DescendingOrder);
        QCOMPARE(panel.view()->model()->index(0, RanksModel::File).data().toString(), QStringLiteral("rank1.pickle"));
        // The pool bars are painted in pool colours.
        panel.resize(1200, 300);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        const QImage shot = panel.grab().toImage();
        const QColor state = PoolPalette().color(Pool::OptimizerState);
        int statePixels = 0;
        for (int y = 0; y < shot.height(); ++y)
            for (int x = 0; x < shot.width(); ++x)
                statePixels += shot.pixelColor(x, y) == state;
        QVERIFY2(statePixels > 100, qPrintable(QString::number(statePixels)));
        if (const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !dir.isEmpty())
            shot.save(QString::fromLocal8Bit(dir) + QStringLiteral("/ranks-panel.png"));
        // Activating a row asks for that rank and device.
        QSignalSpy open(&panel, &RanksPanel::openRequested);
        emit panel.view()->activated(panel.view()->model()->index(0, 0));
        QCOMPARE(open.count(), 1);
        QVERIFY(open.at(0).at(0).toString().endsWith(QStringLiteral("rank1.pickle")));
        QCOMPARE(open.at(0).at(1).toInt(), 0);
    }

    void windowOpensTheRank()
    {
        MainWindow w;
        QSignalSpy changed(&w, &MainWindow::documentChanged);
        w.openFileAt(m_dir.filePath("rank1.pickle"), 0);
        QTRY_COMPARE_WITH_TIMEOUT(changed.count(), 1, 60000);
        QVERIFY(w.documentPath().endsWith(QStringLiteral("rank1.pickle")));
        QCOMPARE(w.document()->device(w.currentDevice()).device().device, 0);
    }
};

QTEST_MAIN(TestRanksPanel)
#include "test_ranks_panel.moc"
