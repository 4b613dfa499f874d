// File ▸ Compare with…: the current document against another run, computed off the GUI thread,
// shown in its own window with the axis that changed, and exported as the same image
// `poolscope render A --compare B` writes.
#include "core/run_poolscope.h"
#include "core/util/units.h"
#include "event_time.h"
#include "widgets/compare_plot.h"
#include "widgets/compare_view.h"
#include "widgets/compare_window.h"
#include "widgets/main_window.h"
#include "widgets/trace_loader.h"

#include <QAction>
#include <QComboBox>
#include <QSignalSpy>
#include <QTest>
#include <QWheelEvent>

using namespace poolscope;

namespace {

// The table shows each pool's bytes of A and B at the cursor's pair of events.
void checkTableAtCursor(const CompareWindow& cw)
{
    const AlignedEvents e = cw.eventsAt(cw.view()->plot()->cursorX());
    const Document* docA = cw.documentA();
    const Document* docB = cw.documentB();
    const PoolBytes a = docA->device(cw.deviceA()).poolsAt(e.a), b = docB->device(cw.deviceB()).poolsAt(e.b);
    const CompareContent& c = cw.view()->content();
    QVERIFY2(c.title.contains(QStringLiteral("at the cursor (A event %1, B event %2)").arg(e.a).arg(e.b)), qPrintable(c.title));
    int rows = 0;
    for (size_t p = 0; p < kPoolCount; ++p) {
        if (a[p] == 0 && b[p] == 0)
            continue;
        const QStringList& row = c.rows.value(rows++);
        QCOMPARE(row.value(0), PoolPalette::label(Pool(p)));
        QCOMPARE(row.value(1), QString::fromStdString(formatBytes(a[p])));
        QCOMPARE(row.value(2), QString::fromStdString(formatBytes(b[p])));
    }
    QCOMPARE(int(c.rows.size()), rows);
}

void wheel(QWidget* w, QPoint at, int delta)
{
    QWheelEvent event(at, w->mapToGlobal(at), QPoint(), QPoint(0, delta), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(w, &event);
}

} // namespace

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

    void scrubsZoomsChoosesAMomentAndEscCloses()
    {
        MainWindow w;
        QSignalSpy opened(&w, &MainWindow::documentChanged);
        w.openFile(m_a);
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 60000);
        w.compareWith(m_b);
        QTRY_VERIFY_WITH_TIMEOUT(w.compareWindow() && w.compareWindow()->result(), 60000);
        CompareWindow* cw = w.compareWindow();
        QTRY_VERIFY(cw->isVisible());
        QVERIFY(QTest::qWaitForWindowExposed(cw));
        ComparePlot* plot = cw->view()->plot();
        plot->replot();
        // The moments both runs have, the comparison's selected, and the cursor.
        QComboBox* moments = cw->momentBox();
        QCOMPARE(moments->currentData().toInt(), int(cw->result()->comparison.at));
        QVERIFY(moments->findData(int(CompareMoment::ForwardEnd)) >= 0);
        QVERIFY(moments->findData(-1) >= 0);
        QVERIFY(!cw->atCursor());

        // A click scrubs: the table follows the cursor, the moment box says so.
        const QRect r = plot->axisRect()->rect();
        const QPoint at(r.left() + r.width() * 3 / 10, r.center().y());
        QTest::mouseClick(plot, Qt::LeftButton, {}, at);
        QVERIFY(cw->atCursor());
        QCOMPARE(moments->currentData().toInt(), -1);
        QCOMPARE(plot->cursorX(), std::floor(plot->xAxis->pixelToCoord(at.x())));
        checkTableAtCursor(*cw);
        // Dragging moves it on.
        const QPoint to(r.left() + r.width() * 6 / 10, r.center().y());
        QTest::mousePress(plot, Qt::LeftButton, {}, at);
        QMouseEvent drag(QEvent::MouseMove, to, plot->mapToGlobal(to), Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(plot, &drag);
        QTest::mouseRelease(plot, Qt::LeftButton, {}, to);
        QCOMPARE(plot->cursorX(), std::floor(plot->xAxis->pixelToCoord(to.x())));
        checkTableAtCursor(*cw);

        // The pointer alone: a read-out of both runs' pools there.
        QTest::mouseMove(plot, at);
        QTRY_VERIFY(plot->hoverVisible());
        QCOMPARE(plot->hoverText(), cw->readoutAt(plot->xAxis->pixelToCoord(at.x())));
        const AlignedEvents e = cw->eventsAt(plot->xAxis->pixelToCoord(at.x()));
        // Each run's own event and its time since that run's first event (the real pair's: the
        // compare case of test_window_text_fit).
        QVERIFY2(plot->hoverText().startsWith(QStringLiteral("A: event %1 · %2 since the first event\nB: event %3 · %4 since the first event\n")
                                                  .arg(e.a).arg(poolscope::testing::sinceFirstEvent(cw->documentA()->device(cw->deviceA()).device(), e.a))
                                                  .arg(e.b).arg(poolscope::testing::sinceFirstEvent(cw->documentB()->device(cw->deviceB()).device(), e.b))),
                 qPrintable(plot->hoverText()));
        const PoolBytes pa = cw->documentA()->device(cw->deviceA()).poolsAt(e.a);
        QVERIFY(plot->hoverText().contains(QStringLiteral("%1: A %2").arg(PoolPalette::label(Pool::Activation), QString::fromStdString(formatBytes(pa[size_t(Pool::Activation)])))));

        // The wheel zooms around the pointer, a right drag pans, a double-click shows everything.
        const QCPRange whole = plot->xAxis->range();
        wheel(plot, at, 120);
        wheel(plot, at, 120);
        const QCPRange zoomed = plot->xAxis->range();
        QVERIFY(zoomed.size() < whole.size() * 0.9);
        QVERIFY(zoomed.contains(plot->xAxis->pixelToCoord(at.x())));
        QTest::mousePress(plot, Qt::RightButton, {}, r.center());
        QMouseEvent pan(QEvent::MouseMove, r.center() + QPoint(80, 0), plot->mapToGlobal(r.center() + QPoint(80, 0)), Qt::NoButton, Qt::RightButton,
                        Qt::NoModifier);
        QApplication::sendEvent(plot, &pan);
        QTest::mouseRelease(plot, Qt::RightButton, {}, r.center() + QPoint(80, 0));
        QVERIFY(plot->xAxis->range().lower < zoomed.lower);
        QTest::mouseDClick(plot, Qt::LeftButton, {}, r.center());
        QCOMPARE(plot->xAxis->range().lower, whole.lower);
        QCOMPARE(plot->xAxis->range().upper, whole.upper);
        // Zooming never leaves the runs.
        plot->xAxis->setRange(whole.lower - 1000, whole.upper + 1000);
        QCOMPARE(plot->xAxis->range().lower, whole.lower);

        // Another named moment: compared again there, the cursor on B's event of it.
        cw->chooseMoment(CompareMoment::ForwardEnd);
        QTRY_VERIFY_WITH_TIMEOUT(cw->result()->comparison.at == CompareMoment::ForwardEnd && !cw->isRunning(), 60000);
        QVERIFY(!cw->atCursor());
        QCOMPARE(moments->currentData().toInt(), int(CompareMoment::ForwardEnd));
        QCOMPARE(plot->cursorX(), double(cw->result()->comparison.moment(CompareMoment::ForwardEnd).b));
        QVERIFY(cw->view()->content().title.endsWith(QStringLiteral("at the end of forward")));
        // Back to the cursor from the box: the table at the cursor's events.
        cw->chooseMoment(std::nullopt);
        QVERIFY(cw->atCursor());
        checkTableAtCursor(*cw);

        // Esc closes the window.
        cw->activateWindow();
        QTest::keyClick(cw, Qt::Key_Escape);
        QTRY_VERIFY(!cw->isVisible());
    }

    void corpusPairScrubbedToAnotherMoment()
    {
        const QString dir = QStringLiteral(POOLSCOPE_CORPUS_DIR);
        const QString a = dir + QStringLiteral("/wed_training_128.pickle"), b = dir + QStringLiteral("/wed_training_256.pickle");
        if (!QFileInfo::exists(a) || !QFileInfo::exists(b))
            QSKIP("../shared/corpus is absent");
        MainWindow w;
        QSignalSpy opened(&w, &MainWindow::documentChanged);
        w.openFile(a);
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 120000);
        w.compareWith(b);
        QTRY_VERIFY_WITH_TIMEOUT(w.compareWindow() && w.compareWindow()->result(), 120000);
        CompareWindow* cw = w.compareWindow();
        QTRY_VERIFY(cw->isVisible());
        QVERIFY(QTest::qWaitForWindowExposed(cw));
        // Scrubbed into the forward pass, where the sequence's activations are still piling up.
        const CompareMoment fw = CompareMoment::ForwardEnd;
        QVERIFY(cw->result()->comparison.moment(fw).paired());
        const double x = double(cw->result()->comparison.moment(fw).b) * 0.6;
        cw->view()->plot()->setCursorX(std::floor(x));
        QVERIFY(cw->atCursor());
        checkTableAtCursor(*cw);
        const AlignedEvents e = cw->eventsAt(std::floor(x));
        const PoolBytes pa = cw->documentA()->device(cw->deviceA()).poolsAt(e.a), pb = cw->documentB()->device(cw->deviceB()).poolsAt(e.b);
        QVERIFY(pb[size_t(Pool::Activation)] > pa[size_t(Pool::Activation)]); // twice the context
        // The export is what the user scrubbed to: the cursor's events in the title, the table's bytes
        // at them (an SVG keeps its text as text), not the named moment's.
        const QString at = QStringLiteral("A event %1, B event %2").arg(e.a).arg(e.b);
        QVERIFY(cw->exportContent().title.contains(at));
        QTemporaryDir out;
        const QString svg = out.filePath(QStringLiteral("scrubbed.svg"));
        QString error;
        QVERIFY2(cw->exportImage(svg, QSize(1600, 900), &error), qPrintable(error));
        QFile file(svg);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(file.readAll());
        QVERIFY2(text.contains(at), qPrintable(at));
        QVERIFY(text.contains(QString::fromStdString(formatBytes(pb[size_t(Pool::Activation)]))));
        // Back at the named moment, the export is `render A --compare B`'s image again.
        cw->chooseMoment(fw);
        QTRY_VERIFY_WITH_TIMEOUT(!cw->isRunning() && cw->result()->comparison.at == fw, 120000);
        QVERIFY(!cw->exportContent().title.contains(QStringLiteral("at the cursor")));
        if (const QByteArray shots = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !shots.isEmpty()) {
            cw->view()->plot()->setCursorX(std::floor(x));
            for (QSize size : {QSize(1000, 600), QSize(1600, 900)})
                QVERIFY2(cw->exportImage(QString::fromLocal8Bit(shots) + QStringLiteral("/compare-export-scrubbed-%1x%2.png").arg(size.width()).arg(size.height()), size, &error),
                         qPrintable(error));
        }
        if (const QByteArray shots = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !shots.isEmpty()) {
            for (QSize size : {QSize(1600, 1000), QSize(1280, 720), QSize(1000, 600)}) {
                cw->resize(size);
                QTest::qWait(150);
                const QRect r = cw->view()->plot()->axisRect()->rect();
                cw->view()->plot()->showHover(QPointF(cw->view()->plot()->xAxis->coordToPixel(std::floor(x)) + 1, r.top() + r.height() * 0.3));
                cw->grab().save(QString::fromLocal8Bit(shots) + QStringLiteral("/compare-wed-scrubbed-%1x%2.png").arg(size.width()).arg(size.height()));
            }
        }
    }
};

QTEST_MAIN(TestCompareWindow)
#include "test_compare_window.moc"
