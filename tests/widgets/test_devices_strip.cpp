// The devices strip over the chart: one cell per device of a multi-device dump with its peak by
// pool, the device that ran out of memory marked, a click shows that device. A DataParallel dump
// of three GPUs written as one snapshot and opened through the real loader.
#include "data_parallel_oom.h"
#include "synth_document.h"
#include "widgets/devices_strip.h"
#include "widgets/main_window.h"
#include "window_text.h"
#include "widgets/timeline_plot.h"
#include "widgets/workspace.h"

#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

using namespace poolscope;

class TestDevicesStrip : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_path;

private slots:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName(QStringLiteral("PoolScopeTests"));
        QCoreApplication::setApplicationName(QStringLiteral("devices-strip"));
        QSettings().clear();
        QVERIFY(m_dir.isValid());
        m_path = m_dir.filePath(QStringLiteral("dp3.json"));
        poolscope::testing::writeDataParallelOom(m_path.toStdString(), poolscope::testing::smallWindowModel(), {1, 6, 3});
    }

    void oneCellPerDeviceAndAClickSwitches()
    {
        MainWindow w;
        w.resize(1600, 1000);
        QSignalSpy opened(&w, &MainWindow::documentChanged);
        w.openFile(m_path);
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 60000);
        const Document* doc = w.document();
        QVERIFY(doc);
        QCOMPARE(doc->deviceCount(), size_t(3));
        // The OOM device opens first, and the strip marks it alone.
        QCOMPARE(w.currentDevice(), size_t(1));
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        DevicesStrip* strip = w.devicesStrip();
        QVERIFY(strip->isVisible());
        QCOMPARE(strip->entries().size(), size_t(3));
        // Every device at the moment cuda:1 failed: cuda:1 at its OOM, the others at their last event
        // up to its time (the three replicas ran side by side on one clock).
        const DeviceTrace& failed = doc->device(1).device();
        // The whole run in view, its last event (the OOM) too: the OOM and cursor labels were cut at
        // the right edge when the switch to wall time read the view through pixels not yet laid out.
        QVERIFY(w.plot()->xAxis->range().upper >= w.plot()->eventKey(failed.ooms.back().index));
        QVERIFY(w.plot()->xAxis->range().lower <= w.plot()->eventKey(0));
        const int64_t oomTime = failed.events.timeUs[size_t(failed.ooms.back().index)];
        for (size_t i = 0; i < 3; ++i) {
            const DevicesStrip::Entry& e = strip->entries()[i];
            const DeviceDocument& dev = doc->device(i);
            QCOMPARE(e.oom, i == 1);
            QVERIFY(e.atOom);
            if (i == 1) {
                QCOMPARE(e.event, failed.ooms.back().index);
                QCOMPARE(e.how, DeviceAtMoment::How::Self);
            } else {
                const auto& t = dev.device().events.timeUs;
                QCOMPARE(e.how, DeviceAtMoment::How::ByTime);
                QVERIFY(e.event >= 0 && t[size_t(e.event)] <= oomTime);
                QVERIFY(size_t(e.event) + 1 == t.size() || t[size_t(e.event) + 1] > oomTime);
                QVERIFY(strip->cellText(i).contains(QStringLiteral("at the OOM")));
            }
            // The bar is the device's pools at its peak, as the report reads them.
            const PoolBytes pools = dev.poolsAt(e.event);
            for (size_t p = 0; p < kPoolCount; ++p)
                QCOMPARE(e.pools[p], pools[p]);
            QCOMPARE(e.total, dev.device().reservedAt(e.event));
            QVERIFY(strip->cellText(i).contains(e.name));
        }
        QVERIFY(strip->cellText(1).contains(QStringLiteral("OOM")));
        // Unequal devices stand unequal at the moment that failed (micro-batches 1 and 3).
        QVERIFY(strip->entries()[2].total > strip->entries()[0].total);
        // A click on a cell shows that device: chart, what-if, combo.
        for (size_t i : {size_t(2), size_t(0), size_t(1)}) {
            QTest::mouseClick(strip, Qt::LeftButton, {}, strip->cellRect(i).center());
            QCOMPARE(w.currentDevice(), i);
            QCOMPARE(w.plot()->timeline(), &doc->device(i).timeline());
        }
        // Every cell is wide enough for its text at this size.
        for (size_t i = 0; i < 3; ++i)
            QVERIFY(strip->fontMetrics().horizontalAdvance(strip->cellText(i)) < strip->cellRect(i).width() - 12);
        // The window made smaller, as a user drags it: the docks narrow with it, and the breakdown's
        // verdict (here with an allocator setting's advice, whose PYTORCH_CUDA_ALLOC_CONF value was
        // one word too wide for the column at 1280×720) still shows all of its text.
        for (QSize size : {QSize(1280, 720), QSize(1000, 600)}) {
            w.resize(size);
            QTest::qWait(150);
            w.flushPanels();
            QTest::qWait(100);
            const QStringList problems = poolscope::testing::windowTextProblems(w);
            QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("%1x%2: ").arg(size.width()).arg(size.height()) + problems.mid(0, 10).join('\n')));
        }
        if (const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !dir.isEmpty()) {
            for (QSize size : {QSize(1600, 1000), QSize(1280, 720), QSize(1000, 600)}) {
                w.resize(size);
                QTest::qWait(150);
                w.flushPanels();
                w.grab().save(QString::fromLocal8Bit(dir) + QStringLiteral("/devices-strip-%1x%2.png").arg(size.width()).arg(size.height()));
            }
        }
    }

    // For looking at it (POOLSCOPE_SCREENSHOT_DIR): the case, a DataParallel OOM whose devices
    // stood at about 7.9, 78.3 and 20.1 GiB, with an 80 GiB capacity on the one that ran out.
    void largeDataParallelScreenshot()
    {
        const QByteArray shots = qgetenv("POOLSCOPE_SCREENSHOT_DIR");
        if (shots.isEmpty())
            QSKIP("POOLSCOPE_SCREENSHOT_DIR not set");
        SynthModel m = poolscope::testing::smallWindowModel();
        m.layers = 4;
        m.hidden = 2048;
        m.heads = 16;
        m.seq = 1024;
        m.vocab = 32000;
        m.dtype = SynthDtype::Fp32;
        const QString path = m_dir.filePath(QStringLiteral("dp3-large.json"));
        poolscope::testing::writeDataParallelOom(path.toStdString(), m, {4, 52, 12}, int64_t(80) << 30);
        MainWindow w;
        w.resize(1600, 1000);
        QSignalSpy opened(&w, &MainWindow::documentChanged);
        w.openFile(path);
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 120000);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        for (const DevicesStrip::Entry& e : w.devicesStrip()->entries())
            qInfo("%s", qPrintable(w.devicesStrip()->cellText(e.index)));
        for (QSize size : {QSize(1600, 1000), QSize(1280, 720), QSize(1000, 600)}) {
            w.resize(size);
            QTest::qWait(200);
            w.flushPanels();
            w.grab().save(QString::fromLocal8Bit(shots) + QStringLiteral("/dp3-oom-%1x%2.png").arg(size.width()).arg(size.height()));
        }
    }

    // No device ran out of memory: each stands at its own peak, and says so.
    void withoutAnOomEachAtItsPeak()
    {
        std::array<Trace, 2> traces;
        for (size_t i = 0; i < 2; ++i) {
            SynthModel m = poolscope::testing::smallWindowModel();
            m.microBatch = int64_t(1 + 3 * i);
            m.steps = 1;
            traces[i] = synthesize(m).trace;
        }
        const QString path = m_dir.filePath(QStringLiteral("dp2.json"));
        poolscope::testing::writeMultiDeviceSnapshotJson({&traces[0], &traces[1]}, path.toStdString());
        MainWindow w;
        QSignalSpy opened(&w, &MainWindow::documentChanged);
        w.openFile(path);
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 60000);
        const DevicesStrip* strip = w.devicesStrip();
        QCOMPARE(strip->entries().size(), size_t(2));
        for (size_t i = 0; i < 2; ++i) {
            const DevicesStrip::Entry& e = strip->entries()[i];
            QVERIFY(!e.atOom && !e.oom);
            QCOMPARE(e.event, w.document()->device(i).device().peakIndex);
            QVERIFY(strip->cellText(i).contains(QStringLiteral("peak")));
        }
    }

    void hiddenForOneDevice()
    {
        MainWindow w;
        w.setDocument(poolscope::testing::synthDocument(), QStringLiteral("one.pickle"));
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(!w.devicesStrip()->isVisible());
        QVERIFY(w.devicesStrip()->entries().empty());
    }
};

QTEST_MAIN(TestDevicesStrip)
#include "test_devices_strip.moc"
