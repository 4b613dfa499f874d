// The allocator dock draws segments to scale (a 2 MiB segment is not as long as a 2 GiB one), or
// each at full width on request, and its labels are never cut.
#include "synth_document.h"
#include "core/util/units.h"
#include "widgets/allocator_view.h"

#include <QComboBox>
#include <QScrollArea>
#include <QScrollBar>
#include <QTest>

using namespace poolscope;

namespace {

// At event e the header's figures are the breakdown's: the same reserved, and allocated split into
// what tensors hold (placed in blocks, rounded up) and what the trace freed without a record of where
// it lay, so that tensors + rounding + free is reserved and tensors + untracked is allocated.
void checkHeaderAgrees(const DeviceDocument& dev, EventIndex e, AllocatorView& view)
{
    const DeviceTimeline& tl = dev.timeline();
    view.setMoment(dev.timelinePtr(), e);
    const SegmentLayout& l = view.layoutData();
    const Breakdown b = tl.breakdownAt(e, -1);
    QVERIFY2(l.reserved == b.reserved, qPrintable(QStringLiteral("event %1: segments %2, breakdown %3").arg(e).arg(l.reserved).arg(b.reserved)));
    const QString header = view.summaryText();
    auto fmt = [](int64_t x) { return QString::fromStdString(formatBytes(x)); };
    QVERIFY2(header.contains(fmt(b.reserved) + QStringLiteral(" reserved: ")), qPrintable(header));
    QVERIFY2(header.contains(fmt(b.allocated)), qPrintable(header));
    const int64_t tensors = view.tensorBytes();
    const int64_t rounding = l.allocated + l.unplacedBytes - tensors;
    const int64_t untracked = b.allocated - tensors;
    QVERIFY2(rounding >= 0, qPrintable(QStringLiteral("event %1: rounding %2").arg(e).arg(rounding)));
    QVERIFY2(untracked >= 0, qPrintable(QStringLiteral("event %1: untracked %2").arg(e).arg(untracked)));
    if (l.unplacedCount == 0)
        QCOMPARE(tensors + rounding + l.freeBytes, b.reserved);
    QCOMPARE(tensors + untracked, b.allocated);
    QCOMPARE(header.contains(QStringLiteral("without a record")), untracked != 0);
}

} // namespace

class TestAllocatorScale : public QObject {
    Q_OBJECT
private slots:
    void headerAgreesWithTheBreakdownAtEveryEvent()
    {
        const auto doc = poolscope::testing::synthDocument();
        const DeviceDocument& dev = doc->device(0);
        AllocatorView view;
        const auto n = EventIndex(dev.device().eventCount());
        for (EventIndex e = kNoEvent; e < n; e += std::max<EventIndex>(1, n / 300))
            checkHeaderAgrees(dev, e, view);
        checkHeaderAgrees(dev, n - 1, view);
        const QString dir = QStringLiteral(POOLSCOPE_CORPUS_DIR);
        DocumentOptions options;
        options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
        for (const char* name : {"dd_ditext8_oom.pickle.json", "wed_training_128.pickle", "k_ctx256_fullstep.pickle", "zl_decomfl.pickle"}) {
            const QString path = dir + QLatin1Char('/') + QLatin1String(name);
            if (!QFileInfo::exists(path))
                continue;
            const auto real = Document::open(path.toStdString(), options);
            const DeviceDocument& d = real->device(real->defaultDevice());
            const auto events = EventIndex(d.device().eventCount());
            for (EventIndex e = kNoEvent; e < events; e += std::max<EventIndex>(1, events / 200))
                checkHeaderAgrees(d, e, view);
            checkHeaderAgrees(d, events - 1, view);
        }
    }

    void barsToScaleAndLabelsWhole()
    {
        // Wide enough that large allocations get segments of their own beside the 2 MiB small ones.
        SynthModel m = poolscope::testing::smallWindowModel();
        m.hidden = 1024;
        m.seq = 512;
        const auto doc = poolscope::testing::synthDocument(m);
        const DeviceDocument& dev = doc->device(0);
        AllocatorView view;
        view.resize(900, 500);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.setMoment(dev.timelinePtr(), dev.device().peakIndex);
        SegmentRowsWidget* rows = view.rows();
        const auto& segs = view.layoutData().segments;
        QVERIFY(segs.size() >= 2);
        int64_t largest = 0, smallest = INT64_MAX;
        for (const LayoutSegment& s : segs) {
            largest = std::max(largest, s.size);
            smallest = std::min(smallest, s.size);
        }
        QVERIFY(largest > 4 * smallest); // sizes that must look different
        QVERIFY(rows->toScale());
        const double full = rows->width() - rows->labelWidth() - 6;
        QFont small = rows->font();
        small.setPointSizeF(small.pointSizeF() * 0.85);
        const QFontMetrics fm(small);
        for (const LayoutSegment& s : segs) {
            const QRectF bar = rows->barRect(s, 0);
            const double expected = std::max(3.0, full * double(s.size) / double(largest));
            QVERIFY2(std::abs(bar.width() - expected) < 1e-6, qPrintable(QStringLiteral("%1 vs %2").arg(bar.width()).arg(expected)));
            QVERIFY(bar.left() >= rows->labelWidth());
            // The label column holds every label whole.
            QVERIFY(fm.horizontalAdvance(rows->rowLabel(s)) <= rows->labelWidth() - 8);
        }
        QTest::qWait(50); // the header's layout settles
        // Every row is within the scroll bar's reach (the rows widget was once squeezed to the
        // dock's height, its last rows painted below it where no scrolling could bring them).
        auto* area = qobject_cast<QScrollArea*>(rows->parentWidget()->parentWidget());
        QVERIFY(area);
        QVERIFY2(area->verticalScrollBar()->maximum() + area->viewport()->height() >= int(segs.size()) * SegmentRowsWidget::kRowHeight,
                 qPrintable(QStringLiteral("%1 rows, reach %2").arg(segs.size()).arg(area->verticalScrollBar()->maximum() + area->viewport()->height())));
        if (const QByteArray shots = qgetenv("POOLSCOPE_SCREENSHOT_DIR"); !shots.isEmpty())
            view.grab().save(QString::fromLocal8Bit(shots) + QStringLiteral("/allocator-to-scale.png"));
        // Full width on request: every bar as long as the row.
        auto* scale = view.findChild<QComboBox*>(QStringLiteral("segmentScale"));
        QVERIFY(scale);
        scale->setCurrentIndex(1);
        QVERIFY(!rows->toScale());
        // (The rows are as tall as their count now, so a scroll bar may have narrowed them since.)
        const double fullNow = rows->width() - rows->labelWidth() - 6;
        for (const LayoutSegment& s : segs)
            QCOMPARE(rows->barRect(s, 0).width(), fullNow);
    }
};

QTEST_MAIN(TestAllocatorScale)
#include "test_allocator_scale.moc"
