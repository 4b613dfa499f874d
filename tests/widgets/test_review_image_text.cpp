// The review image never cuts text: every corpus file's image (every device, its default moment),
// at the sizes `render` offers, painted into a TextProbe that records each piece of text. Each one
// must lie inside the canvas and inside the clip it was drawn under, none may be elided ("…"), and
// none may lie over another (a label on a label).
// The what-if image (prediction lines in the legend, caveats in the header) the same. Skips cleanly
// without ../shared/corpus.
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/report/report.h"
#include "core/timeline/moment.h"
#include "core/whatif/whatif.h"
#include "widgets/review_image.h"
#include "widgets/text_probe.h"
#include "widgets/timeline_plot.h"
#include "widgets/whatif_review.h"

#include <QDir>
#include <QtTest>

using namespace poolscope;

namespace {

const QString kCorpus = QStringLiteral(POOLSCOPE_CORPUS_DIR);

// The sizes a user meets: the window's export and `render`'s default, a small one, the smallest
// `render --size` accepts, and a large one (text scaled up).
const QList<QSize> kSizes{QSize(1600, 900), QSize(1000, 600), QSize(640, 360), QSize(3200, 1800)};

std::shared_ptr<const Document> open(const QString& file)
{
    DocumentOptions options;
    options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    return Document::open(file.toStdString(), options);
}

QString where(const QRectF& r)
{
    return QStringLiteral("(%1,%2 %3x%4)").arg(r.x(), 0, 'f', 0).arg(r.y(), 0, 'f', 0).arg(r.width(), 0, 'f', 0).arg(r.height(), 0, 'f', 0);
}

// No two pieces of text on top of each other (a label over another is as unreadable as a cut one).
// Lines of one paragraph touch, and a font's leading may let them share a pixel row: an overlap
// counts from a tenth of the smaller line's height and two pixels across.
QStringList overlaps(const std::vector<ProbedText>& texts)
{
    QStringList problems;
    for (size_t i = 0; i < texts.size(); ++i)
        for (size_t j = i + 1; j < texts.size(); ++j) {
            const QRectF both = texts[i].box.intersected(texts[j].box);
            const double minH = std::min(texts[i].box.height(), texts[j].box.height());
            if (both.width() > 2.0 && both.height() > std::max(1.5, 0.1 * minH))
                problems << QStringLiteral("overlap: '%1' %2 and '%3' %4").arg(texts[i].text, where(texts[i].box), texts[j].text, where(texts[j].box));
        }
    return problems;
}

// Every problem with the text `paint` draws on `size`, one line each; empty when all is readable.
QStringList textProblems(TimelinePlot& plot, const ReviewContent& content, QSize size, int* count)
{
    const QSize canvas = reviewImageSize(plot, content, size);
    TextProbe probe(canvas);
    {
        QCPPainter painter(&probe);
        paintReviewImage(painter, plot, content, size);
    }
    QStringList problems;
    for (const ProbedText& t : probe.texts()) {
        // The box is the font's whole line (ascent to descent, fractional); the layout it is checked
        // against rounds to whole pixels, scaled with the image. A cut of more than a tenth of the
        // line is a cut a reader sees (a wrapped line lost is all of it).
        const double tolerance = std::max(1.5, 0.1 * t.box.height());
        if (t.elided)
            problems << QStringLiteral("elided: '%1'").arg(t.text);
        if (t.outside(canvas, tolerance))
            problems << QStringLiteral("outside the %1x%2 canvas: '%3' %4").arg(canvas.width()).arg(canvas.height()).arg(t.text, where(t.box));
        else if (t.clipped(tolerance))
            problems << QStringLiteral("clipped: '%1' %2 by %3").arg(t.text, where(t.box), where(t.clip));
    }
    problems << overlaps(probe.texts());
    *count = int(probe.texts().size());
    return problems;
}

// The same content painted as text in the image: its verdict's last word and the table's last row
// are among what the probe saw (the probe sees the text the image shows, not something else).
bool shows(TimelinePlot& plot, const ReviewContent& content, QSize size, const QString& needle)
{
    TextProbe probe(reviewImageSize(plot, content, size));
    QCPPainter painter(&probe);
    paintReviewImage(painter, plot, content, size);
    painter.end();
    for (const ProbedText& t : probe.texts())
        if (t.text.contains(needle))
            return true;
    return false;
}

} // namespace

class TestReviewImageText : public QObject {
    Q_OBJECT

private slots:
    void everyCorpusImageShowsAllItsText()
    {
        const QStringList files = QDir(kCorpus).entryList({"*.pickle", "*.pkl", "*.json", "*.gz", "*.zst"}, QDir::Files, QDir::Name);
        if (files.isEmpty())
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        QStringList failures;
        int images = 0, texts = 0;
        for (const QString& name : files) {
            if (name == QLatin1String("expected.json"))
                continue;
            const auto doc = open(kCorpus + "/" + name);
            QVERIFY2(doc, qPrintable(name));
            for (size_t d = 0; d < doc->deviceCount(); ++d) {
                const DeviceDocument& dev = doc->device(d);
                const auto moment = resolveMoment(dev.device(), defaultMomentSpec(dev.device()));
                QVERIFY2(moment, qPrintable(name));
                const EventIndex event = std::max<EventIndex>(0, moment->event);
                const int64_t capacity = dev.oomCapacity();
                for (const QSize size : kSizes) {
                    TimelinePlot plot;
                    prepareReviewPlot(plot, dev, capacity, size, false, false);
                    plot.setCursorEvent(event);
                    const ReviewContent content = reviewContentFor(*doc, d, plot.cursorEvent(), capacity, name, false);
                    int count = 0;
                    for (const QString& p : textProblems(plot, content, size, &count))
                        failures << QStringLiteral("%1 %2 %3x%4: %5").arg(name, QString::fromStdString(dev.device().label())).arg(size.width()).arg(size.height()).arg(p);
                    QVERIFY2(count > 10, qPrintable(name)); // title, verdict, table, axes, legend
                    texts += count;
                    ++images;
                    // The verdict's end and the table's last row are shown, not lost off the canvas.
                    const QString lastWord = content.subtitle.split(' ', Qt::SkipEmptyParts).value(content.subtitle.split(' ', Qt::SkipEmptyParts).size() - 1);
                    QVERIFY2(shows(plot, content, size, lastWord), qPrintable(name + ": " + lastWord));
                    if (!content.rows.isEmpty())
                        QVERIFY2(shows(plot, content, size, content.rows.last().value(0).trimmed()), qPrintable(name));
                }
            }
        }
        qInfo("%d images, %d text items", images, texts);
        if (qEnvironmentVariableIsSet("ALL"))
            for (const QString& f : failures)
                qInfo("%s", qPrintable(f));
        QVERIFY2(failures.isEmpty(), qPrintable(QStringLiteral("%1 problems; first ones:\n").arg(failures.size()) + failures.mid(0, qEnvironmentVariableIsSet("ALL") ? 100000 : 25).join('\n')));
    }

    // With a prediction: two more legend entries, the predicted peak's label, caveats in the header.
    void whatIfImageShowsAllItsText()
    {
        const QString file = kCorpus + "/k_ctx128_fullstep.pickle";
        if (!QFile::exists(file))
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        const auto doc = open(file);
        const DeviceDocument& dev = doc->pickDevice(std::nullopt);
        Scenario scenario;
        scenario.seqScale = Ratio{2, 1};
        scenario.checkpoint = CheckpointKind::Full;
        scenario.capacity = int64_t(80) << 30;
        WhatIfOptions options;
        options.keepPoolSeries = true;
        const auto result = std::make_shared<WhatIfResult>(runWhatIf(doc->trace(), dev.device(), *dev.traceModel(), scenario, options));
        QStringList failures;
        for (const bool stack : {false, true})
            for (const QSize size : kSizes) {
                TimelinePlot plot;
                prepareReviewPlot(plot, dev, *scenario.capacity, size, false, false);
                plot.setPredictedStackVisible(stack);
                plot.setPrediction(result);
                plot.setCursorEvent(std::max<EventIndex>(0, result->peakAt));
                const ReviewContent content = whatIfReviewContent(*result, file, false);
                int count = 0;
                for (const QString& p : textProblems(plot, content, size, &count))
                    failures << QStringLiteral("%1x%2%3: %4").arg(size.width()).arg(size.height()).arg(stack ? " stack" : "", p);
                QVERIFY(shows(plot, content, size, QStringLiteral("predicted allocated"))); // the legend has the prediction
            }
        QVERIFY2(failures.isEmpty(), qPrintable(failures.mid(0, qEnvironmentVariableIsSet("ALL") ? 100000 : 25).join('\n')));
    }

    // The probe itself: it sees text where it is painted, and notices clipping and elision.
    void probeSeesCutsAndElision()
    {
        TextProbe probe(QSize(200, 100));
        QPainter painter(&probe);
        QFont f = painter.font();
        f.setPixelSize(14);
        painter.setFont(f);
        painter.drawText(QRect(10, 10, 180, 20), Qt::AlignLeft, QStringLiteral("fits"));
        painter.drawText(QRect(10, 40, 180, 10), Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, QStringLiteral("first line second line third line"));
        painter.drawText(QPointF(150, 90), QStringLiteral("runs off the edge"));
        painter.drawText(QRect(10, 60, 100, 20), Qt::AlignLeft, painter.fontMetrics().elidedText(QStringLiteral("a long text elided"), Qt::ElideRight, 60));
        painter.end();
        const auto& t = probe.texts();
        QVERIFY(t.size() >= 4);
        QCOMPARE(t[0].text, QStringLiteral("fits"));
        QVERIFY(!t[0].clipped() && !t[0].outside(probe.size()) && !t[0].elided);
        QVERIFY(t[0].box.left() >= 9 && t[0].box.top() >= 9 && t[0].box.bottom() <= 31);
        bool clipped = false, outside = false, elided = false;
        for (const ProbedText& x : t) {
            clipped |= x.clipped();
            outside |= x.outside(probe.size());
            elided |= x.elided;
        }
        QVERIFY(clipped && outside && elided);
        // Overlaps: a wrapped paragraph's lines touch without overlapping; a label drawn over its
        // first line does overlap it, and only it.
        TextProbe over(QSize(200, 100));
        QPainter p2(&over);
        p2.setFont(f);
        p2.drawText(QRect(10, 10, 180, 60), Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, QStringLiteral("first line second line third line fourth"));
        p2.drawText(QPointF(40, 22), QStringLiteral("on top"));
        p2.end();
        const QStringList found = overlaps(over.texts());
        QCOMPARE(found.size(), 1);
        QVERIFY(found[0].contains(QStringLiteral("on top")));
    }
};

QTEST_MAIN(TestReviewImageText)
#include "test_review_image_text.moc"
