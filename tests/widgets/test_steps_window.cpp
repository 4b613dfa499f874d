// The window's parts for issue 24, offscreen: the steps strip finds the steps `poolscope steps`
// finds and zooms to one; the "By call site" tree agrees with `report --by-site --json`; the A/B
// panel's diff adds up; selecting a site filters the tensor table. With POOLSCOPE_SCREENSHOTS=DIR
// it also writes the screenshots the note shows.
#include "core/formats/pickle_writer.h"
#include "core/sites/site_tree.h"
#include "core/steps/steps.h"
#include "core/synth/synth.h"
#include "core/steps/steps_report.h"
#include "widgets/ab_panel.h"
#include "widgets/leaks_panel.h"
#include "widgets/main_window.h"
#include "widgets/site_tree_panel.h"
#include "widgets/steps_strip.h"
#include "widgets/workspace.h"
#include "widgets/tensor_model.h"
#include "widgets/timeline_plot.h"

#include <QDockWidget>
#include <QLabel>
#include <QTreeWidget>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <fstream>

using namespace poolscope;

namespace {

void shoot(QWidget& w, const QString& name)
{
    const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOTS");
    if (dir.isEmpty())
        return;
    QTest::qWait(50);
    w.grab().save(QString::fromLocal8Bit(dir) + QLatin1Char('/') + name);
}

void raiseDock(MainWindow& w, const char* name)
{
    if (auto* d = w.findChild<QDockWidget*>(QString::fromLatin1(name)))
        d->raise();
}

} // namespace

class TestStepsWindow : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_dump;

private slots:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName(QStringLiteral("PoolScopeTests"));
        QSettings().clear();
        SynthModel m;
        m.layers = 4;
        m.hidden = 256;
        m.heads = 4;
        m.seq = 128;
        m.microBatch = 2;
        m.vocab = 1024;
        m.steps = 6;
        m.leaks.growingCache = true;
        m.leaks.capturingHook = true;
        m.leaks.warmup = true;
        m.leaks.bankSize = 2;
        const SynthResult r = synthesize(m);
        m_dump = m_dir.filePath(QStringLiteral("leaky.pickle"));
        std::ofstream out(m_dump.toStdString(), std::ios::binary);
        writeSnapshot(r.trace, out);
    }

    void stripSiteTreeAndDiff()
    {
        MainWindow w;
        w.resize(1600, 1000);
        w.show();
        QSignalSpy changed(&w, &MainWindow::documentChanged);
        w.openFile(m_dump);
        QTRY_COMPARE_WITH_TIMEOUT(changed.count(), 1, 60000);
        const DeviceDocument& dev = w.document()->device(0);

        // Steps: the strip holds what findSteps says, and a click on a step zooms the chart to it.
        StepsStrip* strip = w.stepsStrip();
        QVERIFY(strip && strip->isVisible());
        QCOMPARE(int(strip->steps().completeSteps()), 6);
        QCOMPARE(strip->steps().steps.size(), findSteps(dev).steps.size());
        shoot(w, QStringLiteral("steps_strip_whole.png"));
        const Step s2 = strip->steps().steps[2];
        const QPoint inside(int(w.plot()->xAxis->coordToPixel(w.plot()->eventKey((s2.start + s2.end) / 2))), strip->height() / 2);
        QCOMPARE(strip->stepAtPixel(inside.x()), 2);
        QTest::mouseClick(strip, Qt::LeftButton, {}, inside);
        QCOMPARE(w.plot()->xAxis->range().lower, w.plot()->eventKey(s2.start));
        QCOMPARE(w.plot()->xAxis->range().upper, w.plot()->eventKey(s2.end + 1));
        QCOMPARE(w.cursorEvent(), s2.peakEvent);
        w.flushPanels();
        shoot(w, QStringLiteral("steps_strip_zoomed.png"));

        // By call site at the cursor: the window's tree is the one `report --by-site --json` prints.
        raiseDock(w, "siteTreeDock");
        w.flushPanels();
        SiteTreePanel* sites = w.siteTreePanel();
        QTRY_VERIFY(sites->isVisible());
        w.flushPanels();
        QCoreApplication::processEvents();
        const SiteTree& tree = sites->tree();
        QCOMPARE(tree.at, s2.peakEvent);
        QCOMPARE(int64_t(tree.nodes[0].weight), dev.device().allocatedAt(s2.peakEvent));
        QProcess p;
        p.start(QStringLiteral(POOLSCOPE_BINARY), {QStringLiteral("report"), m_dump, QStringLiteral("--by-site"), QStringLiteral("--json"),
                                                   QStringLiteral("--at"), QString::number(s2.peakEvent)});
        QVERIFY(p.waitForFinished(120000));
        QCOMPARE(p.exitCode(), 0);
        const auto j = nlohmann::json::parse(p.readAllStandardOutput().toStdString());
        const auto& root = j["devices"][0]["at"]["root"];
        QCOMPARE(root["weight"].get<double>(), tree.nodes[0].weight);
        QCOMPARE(root["count"].get<int64_t>(), tree.nodes[0].count);
        const auto& kids = root["children"];
        QVERIFY(kids.size() >= 2);
        for (size_t k = 0; k < kids.size() && k < 5; ++k) {
            const SiteNode& n = tree.nodes[tree.nodes[0].children[k]];
            QCOMPARE(QString::fromStdString(kids[k]["label"].get<std::string>()), QString::fromStdString(n.label));
            QCOMPARE(kids[k]["weight"].get<double>(), n.weight);
        }
        shoot(w, QStringLiteral("site_tree.png"));

        // Picking a node filters the tensor table to that node's allocations.
        const uint32_t first = tree.nodes[0].children[0];
        const int before = w.tensorProxy()->rowCount();
        sites->view()->select(first);
        QVERIFY(w.tensorProxy()->hasAllocationFilter());
        QVERIFY(w.tensorProxy()->rowCount() <= before);
        QCOMPARE(int64_t(w.tensorProxy()->rowCount()), tree.nodes[first].count);
        shoot(w, QStringLiteral("site_tree_selected.png"));
        sites->view()->select(0);
        QVERIFY(!w.tensorProxy()->hasAllocationFilter());

        // A/B: ends of steps 1 and 4; the diff's pools add up to the change in allocated bytes, and
        // the planted cache's line has grown by three entries.
        raiseDock(w, "abDock");
        AbPanel* ab = w.abPanel();
        const auto& steps = strip->steps().steps;
        w.plot()->resetView();
        ab->setA(steps[1].end);
        ab->setB(steps[4].end);
        QVERIFY(ab->hasDiff());
        int64_t net = 0;
        for (const auto& row : ab->diff().byPool)
            net += row.net();
        QCOMPARE(net, ab->diff().allocatedB - ab->diff().allocatedA);
        bool cache = false;
        for (const auto& row : ab->diff().bySite)
            cache = cache || (row.name.find("train.py:138") != std::string::npos && row.born == 3 * 128 * 2 * 256 * 2 && row.died == 0);
        QVERIFY(cache);
        w.flushPanels();
        shoot(w, QStringLiteral("ab_diff.png"));
    }
    // The "Leaks" tab on a real run that keeps each step's logits (graph_leak, four SGD steps): the
    // steps and the suspects `poolscope steps` finds, the kept logits' line first at 125 MiB per
    // step; picking it moves the cursor to the last step's end and lists exactly its allocations
    // alive there.
    void leaksTabNamesTheLineThatHoldsTheBytes()
    {
        MainWindow w;
        w.resize(1600, 1000);
        w.show();
        QSignalSpy changed(&w, &MainWindow::documentChanged);
        w.openFile(QStringLiteral(POOLSCOPE_TEST_DATA "/gpu_runs/graph_leak.pickle.gz"));
        QTRY_COMPARE_WITH_TIMEOUT(changed.count(), 1, 60000);
        const DeviceDocument& dev = w.document()->device(0);
        const DeviceSteps expected = deviceSteps(dev);
        QVERIFY(expected.leaks.judged && !expected.leaks.suspects.empty());

        raiseDock(w, "leaksDock");
        LeaksPanel* leaks = w.leaksPanel();
        QTRY_VERIFY(leaks->isVisible());
        QCOMPARE(leaks->steps().table.steps.size(), expected.table.steps.size());
        // The steps strip and the tab read one table, found once for the document and device.
        const StepTable* shared = &w.workspace()->steps();
        QCOMPARE(&w.workspace()->steps(), shared);
        QCOMPARE(shared->steps.size(), expected.table.steps.size());
        QTreeWidget* rows = leaks->suspects();
        QCOMPARE(rows->topLevelItemCount(), int(expected.leaks.suspects.size()));
        for (int k = 0; k < rows->topLevelItemCount(); ++k)
            QCOMPARE(rows->topLevelItem(k)->text(0), QString::fromStdString(expected.leaks.suspects[size_t(k)].site));
        QVERIFY(rows->topLevelItem(0)->text(0).contains(QLatin1String("modeling_llama.py:")));
        QCOMPARE(rows->topLevelItem(0)->text(1), QStringLiteral("+125.00 MiB"));
        QVERIFY(leaks->summary()->text().contains(QString::fromStdString(expected.table.how).toHtmlEscaped()));
        QVERIFY(leaks->summary()->text().contains(QLatin1String("memory held at step ends grows by")));
        shoot(w, QStringLiteral("leaks_tab.png"));

        leaks->selectSuspect(0);
        w.flushPanels();
        QCoreApplication::processEvents();
        EventIndex lastEnd = kNoEvent;
        for (const Step& s : expected.table.steps)
            if (s.complete)
                lastEnd = s.end;
        QCOMPARE(w.cursorEvent(), lastEnd);
        QVERIFY(w.tensorProxy()->hasAllocationFilter());
        const SiteNames names(dev.trace());
        int held = 0;
        for (const Allocation& a : dev.device().allocations)
            held += a.aliveAfter(lastEnd) && madeAtSuspectSite(expected.leaks.suspects[0], names, dev.classification(), a);
        QVERIFY(held >= 3); // the logits of the steps before, kept
        QCOMPARE(w.tensorProxy()->rowCount(), held);
        shoot(w, QStringLiteral("leaks_tab_selected.png"));
        leaks->selectSuspect(-1);
        QVERIFY(!w.tensorProxy()->hasAllocationFilter());
        QCOMPARE(w.tensorProxy()->rowCount(), w.tensorProxy()->sourceModel()->rowCount());
        QVERIFY(w.tensorProxy()->rowCount() > held);
    }
};

QTEST_MAIN(TestStepsWindow)
#include "test_steps_window.moc"
