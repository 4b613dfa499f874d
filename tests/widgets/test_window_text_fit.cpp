// The window's panels never cut text at 1280×720 and 1600×1000: every corpus file opened in the
// main window, each tab of each dock raised in turn, the largest tensor selected (the stack panel
// has its reason to show), and every piece of text the window shows checked as window_text.h
// says: not elided, not cut (unless its area scrolls to it), on the window, not on other text.
// The window's smallest size (its minimum) is checked on a few files. Skips cleanly without
// ../shared/corpus.
#include "event_time.h"
#include "open_and_wait.h"
#include "synth_document.h"
#include "widgets/compare_plot.h"
#include "widgets/compare_view.h"
#include "widgets/compare_window.h"
#include "widgets/main_window.h"
#include "widgets/tensor_model.h"
#include "widgets/timeline_plot.h"
#include "widgets/workspace.h"
#include "window_text.h"

#include <QDir>
#include <QSettings>
#include <QTabWidget>
#include <QtTest>

using namespace poolscope;

namespace {

const QString kCorpus = QStringLiteral(POOLSCOPE_CORPUS_DIR);

QStringList corpusFiles()
{
    QStringList files = QDir(kCorpus).entryList({"*.pickle", "*.pkl", "*.json", "*.gz", "*.zst"}, QDir::Files, QDir::Name);
    files.removeAll(QStringLiteral("expected.json"));
    return files;
}

void selectLargestTensor(MainWindow& w)
{
    TensorModel* tensors = w.tensorModel();
    if (tensors->rowCount() == 0)
        return;
    int largest = 0;
    for (int r = 1; r < tensors->rowCount(); ++r)
        if (tensors->data(tensors->index(r, 0), TensorModel::kSortRole).toLongLong() >
            tensors->data(tensors->index(largest, 0), TensorModel::kSortRole).toLongLong())
            largest = r;
    w.workspace()->select(tensors->allocationAt(largest));
}

// Every view a reader can bring up without opening another window: each tab of the tabbed docks
// and of the tab widgets inside the panels, one at a time. The problems of all of them.
QStringList everyTabsProblems(MainWindow& w, const QString& label)
{
    QStringList problems;
    auto check = [&](const QString& view) {
        QTest::qWait(30);
        QApplication::processEvents();
        // A layout takes a few passes to settle (a scroll bar shown for one pass, then the text
        // rewrapped): what is still wrong after a second is wrong.
        QStringList now = poolscope::testing::windowTextProblems(w);
        for (int retry = 0; retry < 4 && !now.isEmpty(); ++retry) {
            QTest::qWait(250);
            now = poolscope::testing::windowTextProblems(w);
        }
        for (const QString& p : now)
            problems << QStringLiteral("%1 [%2]: %3").arg(label, view, p);
        if (const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !dir.isEmpty() && qEnvironmentVariableIsSet("EVERY_VIEW"))
            w.grab().save(QString::fromLocal8Bit(dir) + QStringLiteral("/window-%1-%2x%3-%4.png").arg(label.section('.', 0, 0)).arg(w.width()).arg(w.height()).arg(QString(view).remove(QRegularExpression(QStringLiteral("[^A-Za-z]")))));
    };
    check(QStringLiteral("as opened"));
    QList<QDockWidget*> docks = w.findChildren<QDockWidget*>();
    for (QDockWidget* d : docks) {
        if (w.tabifiedDockWidgets(d).isEmpty() || d->isHidden())
            continue;
        d->raise();
        check(d->windowTitle());
    }
    for (QTabWidget* tabs : w.findChildren<QTabWidget*>()) {
        if (!tabs->isVisible())
            continue;
        const int was = tabs->currentIndex();
        for (int i = 0; i < tabs->count(); ++i)
            if (i != was) {
                tabs->setCurrentIndex(i);
                check(tabs->tabText(i));
            }
        tabs->setCurrentIndex(was);
    }
    return problems;
}

} // namespace

class TestWindowTextFit : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName(QStringLiteral("PoolScopeTests"));
        QCoreApplication::setApplicationName(QStringLiteral("window-text-fit"));
        QSettings().clear();
    }

    // 1280×720, the smallest common laptop screen, over every file; 1600×1000 over a sample of
    // each kind (an OOM, no history, many streams, two devices, Kineto, a training step).
    void everyCorpusFileShowsAllItsText_data()
    {
        QTest::addColumn<QSize>("size");
        QTest::addColumn<QStringList>("only");
        QTest::newRow("1280x720") << QSize(1280, 720) << QStringList();
        if (qEnvironmentVariableIsSet("SIZE")) { // for looking at other sizes by hand
            const QStringList wh = qEnvironmentVariable("SIZE").split(QLatin1Char('x'));
            QTest::newRow("SIZE") << QSize(wh.value(0).toInt(), wh.value(1).toInt()) << QStringList();
        }
        QTest::newRow("1600x1000") << QSize(1600, 1000)
                                   << QStringList{"dd_ditext8_oom", "yiyi_oom", "mp_10streams", "muduard_2dev", "hta_", "wed_training_256"};
    }

    void everyCorpusFileShowsAllItsText()
    {
        QFETCH(QSize, size);
        QFETCH(QStringList, only);
        QStringList files;
        for (const QString& f : corpusFiles())
            if (only.isEmpty() || std::any_of(only.begin(), only.end(), [&](const QString& o) { return f.startsWith(o); }))
                files << f;
        if (const QString only = qEnvironmentVariable("ONLY"); !only.isEmpty())
            files = files.filter(only);
        if (files.isEmpty())
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        QStringList problems;
        for (const QString& name : files) {
            MainWindow w;
            w.resize(size);
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            poolscope::testing::openAndWait(w, kCorpus + QLatin1Char('/') + name);
            w.flushPanels();
            selectLargestTensor(w);
            QCOMPARE(w.size(), size);
            QTest::qWait(200); // the panels' layouts settle after the selection
            problems << everyTabsProblems(w, name);
            if (const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !dir.isEmpty()) {
                w.grab().save(QString::fromLocal8Bit(dir) + QStringLiteral("/window-%1-%2x%3.png").arg(name.section('.', 0, 0)).arg(size.width()).arg(size.height()));
                // And with the pointer over the chart a third of the way in: the hover read-out
                // (an overlay on the chart by design, so outside the checks above).
                TimelinePlot* plot = w.plot();
                const QRect r = plot->axisRect()->rect();
                plot->showHover(QPointF(r.left() + r.width() / 3.0, r.top() + r.height() * 0.35));
                w.grab().save(QString::fromLocal8Bit(dir) + QStringLiteral("/window-%1-%2x%3-hover.png").arg(name.section('.', 0, 0)).arg(size.width()).arg(size.height()));
                plot->hideHover();
            }
        }
        if (qEnvironmentVariableIsSet("ALL"))
            for (const QString& p : problems)
                qInfo("%s", qPrintable(p));
        QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("%1 problems; first ones:\n").arg(problems.size()) + problems.mid(0, 25).join('\n')));
    }

    // The smallest window (its minimum size) over a sample of each kind of dump.
    void smallestWindowShowsAllItsText()
    {
        QStringList files;
        for (const QString& f : corpusFiles())
            for (const char* kind : {"dd_ditext8_oom", "yiyi_oom", "mp_10streams", "muduard_2dev", "hta_", "kineto_", "wed_training_256", "niu_fb_200_bf16"})
                if (f.startsWith(QLatin1String(kind)))
                    files << f;
        if (files.isEmpty())
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        QStringList problems;
        for (const QString& name : files) {
            MainWindow w;
            w.resize(100, 100); // as small as it lets itself be
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            QCOMPARE(w.size(), QSize(1000, 600));
            poolscope::testing::openAndWait(w, kCorpus + QLatin1Char('/') + name);
            w.flushPanels();
            selectLargestTensor(w);
            QTest::qWait(200);
            problems << everyTabsProblems(w, name);
        }
        QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("%1 problems; first ones:\n").arg(problems.size()) + problems.mid(0, 25).join('\n')));
    }

    // A window opened large and then made small keeps its chart: the docks give up width and
    // height in proportion with the window (QMainWindow alone hands the whole loss to the chart, so
    // 1600×1000 shrunk to 1000×600 left it 514×185 px of 1114×585 while the docks kept their
    // pixels; in proportion it is 654×284),
    // and every panel still shows all of its text. Growing back gives the chart its room again.
    void shrunkWindowKeepsItsChart()
    {
        QStringList files;
        for (const QString& f : corpusFiles())
            for (const char* kind : {"dd_ditext8_oom", "yiyi_oom", "wed_training_256"})
                if (f.startsWith(QLatin1String(kind)))
                    files << f;
        if (files.isEmpty())
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        QStringList problems;
        for (const QString& name : files) {
            MainWindow w;
            w.resize(1600, 1000);
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            poolscope::testing::openAndWait(w, kCorpus + QLatin1Char('/') + name);
            w.flushPanels();
            QTest::qWait(200);
            const QSize large = w.plot()->size();
            const double wideShare = double(large.width()) / w.width(), tallShare = double(large.height()) / w.height();
            // In steps, as a drag does, then at once.
            for (QSize step : {QSize(1400, 880), QSize(1200, 760), QSize(1000, 600)}) {
                w.resize(step);
                QTest::qWait(60);
            }
            QCOMPARE(w.size(), QSize(1000, 600));
            QTest::qWait(200);
            const QSize small = w.plot()->size();
            qInfo("%s: chart %d×%d at 1600×1000, %d×%d at 1000×600", qPrintable(name), large.width(), large.height(), small.width(), small.height());
            // The chart keeps its share (the right column's floor of 340 px aside) and a size to read.
            QVERIFY2(small.width() >= 600 && small.width() >= 0.9 * wideShare * w.width(),
                     qPrintable(QStringLiteral("%1: chart %2×%3 at 1000×600, was %4×%5 at 1600×1000").arg(name).arg(small.width()).arg(small.height()).arg(large.width()).arg(large.height())));
            QVERIFY2(small.height() >= 250 && small.height() >= 0.75 * tallShare * w.height(),
                     qPrintable(QStringLiteral("%1: chart %2×%3 at 1000×600, was %4×%5 at 1600×1000").arg(name).arg(small.width()).arg(small.height()).arg(large.width()).arg(large.height())));
            selectLargestTensor(w);
            QTest::qWait(200);
            problems << everyTabsProblems(w, name + QStringLiteral(" shrunk"));
            if (const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !dir.isEmpty())
                w.grab().save(QString::fromLocal8Bit(dir) + QStringLiteral("/window-%1-shrunk-1000x600.png").arg(name.section('.', 0, 0)));
            w.resize(1600, 1000);
            QTest::qWait(200);
            QVERIFY2(w.plot()->width() >= large.width() - 40 && w.plot()->height() >= large.height() - 40,
                     qPrintable(QStringLiteral("%1: chart %2×%3 grown back, was %4×%5").arg(name).arg(w.plot()->width()).arg(w.plot()->height()).arg(large.width()).arg(large.height())));
        }
        QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("%1 problems; first ones:\n").arg(problems.size()) + problems.mid(0, 25).join('\n')));
    }

    // The compare window on a real pair, scrubbed into the forward pass with the hover read-out up,
    // at the window's sizes (POOLSCOPE_SCREENSHOT_DIR: its screenshots).
    void compareWindowShowsAllItsText()
    {
        const QString a = kCorpus + QStringLiteral("/wed_training_128.pickle"), b = kCorpus + QStringLiteral("/wed_training_256.pickle");
        if (!QFileInfo::exists(a) || !QFileInfo::exists(b))
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        MainWindow w;
        poolscope::testing::openAndWait(w, a);
        w.compareWith(b);
        QTRY_VERIFY_WITH_TIMEOUT(w.compareWindow() && w.compareWindow()->result(), 120000);
        CompareWindow* cw = w.compareWindow();
        QVERIFY(QTest::qWaitForWindowExposed(cw));
        const double x = std::floor(double(cw->result()->comparison.moment(CompareMoment::ForwardEnd).b) * 0.6);
        QStringList problems;
        for (QSize size : {QSize(1280, 720), QSize(1600, 1000), QSize(1000, 600)}) {
            cw->resize(size);
            QTest::qWait(150);
            cw->view()->plot()->setCursorX(x);
            QVERIFY(cw->atCursor());
            const QRect r = cw->view()->plot()->axisRect()->rect();
            cw->view()->plot()->showHover(QPointF(cw->view()->plot()->xAxis->coordToPixel(x) + 1, r.top() + r.height() * 0.3));
            QTest::qWait(50);
            // The read-out gives each run's time since its own first event, in its time axis's
            // unit, from the dump's own time_us.
            const AlignedEvents e = cw->eventsAt(cw->view()->plot()->xAxis->pixelToCoord(cw->view()->plot()->xAxis->coordToPixel(x) + 1));
            const QString hover = cw->view()->plot()->hoverText();
            QVERIFY2(hover.startsWith(QStringLiteral("A: event %1 · %2 since the first event\nB: event %3 · %4 since the first event\n")
                                          .arg(e.a).arg(poolscope::testing::sinceFirstEvent(cw->documentA()->device(cw->deviceA()).device(), e.a))
                                          .arg(e.b).arg(poolscope::testing::sinceFirstEvent(cw->documentB()->device(cw->deviceB()).device(), e.b))),
                     qPrintable(hover));
            for (const QString& p : poolscope::testing::windowTextProblems(*cw))
                problems << QStringLiteral("compare %1x%2: %3").arg(size.width()).arg(size.height()).arg(p);
            if (const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !dir.isEmpty())
                cw->grab().save(QString::fromLocal8Bit(dir) + QStringLiteral("/compare-wed128-vs-256-scrubbed-%1x%2.png").arg(size.width()).arg(size.height()));
        }
        QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("%1 problems; first ones:\n").arg(problems.size()) + problems.mid(0, 25).join('\n')));
    }
};

QTEST_MAIN(TestWindowTextFit)
#include "test_window_text_fit.moc"
