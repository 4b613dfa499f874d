// Issue 25 in the window: the what-if panel's allocator knobs (PYTORCH_CUDA_ALLOC_CONF in PyTorch's
// names) reach the replay, whose reserved line the chart draws; the breakdown's fragmentation view
// shows the free bytes against the failing request and the memory outside PyTorch.
#include "synth_document.h"
#include "widgets/fragmentation_view.h"
#include "widgets/whatif_panel.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QSignalSpy>
#include <QSpinBox>
#include <QtTest>

using namespace poolscope;

class TestAllocatorWidgets : public QObject {
    Q_OBJECT
private slots:
    void allocatorKnobsRoundTrip();
    void allocatorKnobsReachTheReplay();
    void fragmentationView();
};

void TestAllocatorWidgets::allocatorKnobsRoundTrip()
{
    WhatIfPanel panel;
    QCOMPARE(QString::fromStdString(panel.scenario().allocConf), QString()); // as recorded by default
    Scenario s;
    s.allocConf = "expandable_segments:True,max_split_size_mb:512,garbage_collection_threshold:0.8,roundup_power2_divisions:4";
    panel.setScenario(s);
    QCOMPARE(QString::fromStdString(panel.scenario().allocConf), QString::fromStdString(s.allocConf));
    QVERIFY(panel.scenario().isIdentity()); // the allocator moves no tensor
    // Turning off what a run had is a setting too.
    s.allocConf = "expandable_segments:False";
    panel.setScenario(s);
    QCOMPARE(QString::fromStdString(panel.scenario().allocConf), QString("expandable_segments:False"));
    // A split limit PyTorch would refuse (<= 20 MiB) is raised to the smallest it accepts.
    panel.findChild<QComboBox*>("expandableSegments")->setCurrentIndex(0);
    panel.findChild<QSpinBox*>("maxSplitSizeMb")->setValue(8);
    QCOMPARE(QString::fromStdString(panel.scenario().allocConf), QString("max_split_size_mb:21"));
}

void TestAllocatorWidgets::allocatorKnobsReachTheReplay()
{
    const auto doc = poolscope::testing::synthDocument();
    WhatIfPanel panel;
    panel.setTrace(doc, 0);
    Scenario s;
    s.allocConf = "expandable_segments:True";
    panel.setScenario(s);
    QSignalSpy done(&panel, &WhatIfPanel::finished);
    panel.run();
    QVERIFY(done.wait(30000));
    const auto r = panel.result();
    QVERIFY(r);
    QVERIFY(r->allocatorChanged);
    QCOMPARE(QString::fromStdString(r->allocatorReplayed), QString("expandable_segments:True"));
    const WhatIfResult direct = runWhatIf(doc->trace(), doc->device(0).device(), *doc->device(0).traceModel(), s);
    QCOMPARE(r->peakReserved, direct.peakReserved);
    QCOMPARE(r->reserved.size(), doc->device(0).device().eventCount()); // the dashed line the chart draws
    const WhatIfResult same = runWhatIf(doc->trace(), doc->device(0).device(), *doc->device(0).traceModel(), Scenario{});
    QCOMPARE(r->peakAllocated, same.peakAllocated);
}

void TestAllocatorWidgets::fragmentationView()
{
    constexpr int64_t MiB = int64_t(1) << 20;
    FragmentationBreakdown f;
    f.known = true;
    f.reserved = 900 * MiB;
    f.allocated = 440 * MiB;
    f.freeBytes = 460 * MiB;
    f.freeBlocks = 5;
    f.largestFree = 100 * MiB;
    f.request = 150 * MiB;
    f.largestInPool = 90 * MiB;
    f.tooSmallBytes = 360 * MiB;
    f.tooSmallBlocks = 4;
    f.releasable = 100 * MiB;
    f.releasableSegments = 1;
    OutsideMemory o;
    o.total = DeviceTotal{int64_t(80) << 30, "preset a100-80gb (A100 80GB)", 0};
    o.outside = 600 * MiB;
    o.likely = "about the size of a CUDA context";
    FragmentationView view;
    view.setFacts(f, o);
    view.resize(420, view.sizeHint().height());
    const QString text = view.text();
    QVERIFY2(text.contains("no free block could hold it"), qPrintable(text));
    QVERIFY(text.contains("360.00 MiB in 4 blocks"));
    QVERIFY(text.contains("empty_cache would free"));
    QVERIFY(text.contains("outside PyTorch"));
    QVERIFY(text.contains("CUDA context"));
    const QImage image = view.grab().toImage();
    QVERIFY(!image.isNull());
    if (const QByteArray dir = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !dir.isEmpty())
        image.save(QString::fromUtf8(dir) + "/fragmentation_view.png");
    // The bar's allocated part is grey at the far left; the too-small part follows in red.
    QCOMPARE(image.pixelColor(4, 7), QColor(0x90, 0x90, 0x90));
    const int redX = int(double(image.width()) * (440.0 + 180.0) / 900.0);
    QCOMPARE(image.pixelColor(redX, 7), QColor(0xd8, 0x5a, 0x3a));
    view.setFacts({}, std::nullopt);
    QVERIFY(view.isHidden());
}

QTEST_MAIN(TestAllocatorWidgets)
#include "test_allocator_widgets.moc"
