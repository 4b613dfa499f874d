// Compare names exactly the axes that changed, on every pair of real runs in ../shared/corpus whose
// difference the corpus README states (the truth: what the authors changed between the files).
// Each pair both ways round. `one_axis` is what the verdict's first words say. Skipped where the
// corpus is absent.
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/compare/comparison.h"
#include "core/load.h"

#include <QtTest>

#include <map>
#include <set>

using namespace poolscope;

namespace {

const QString kCorpus = QStringLiteral(POOLSCOPE_CORPUS_DIR);

struct Run {
    std::shared_ptr<const Trace> trace;
    Classification classification;
    PoolSeries series;
    TraceModel model;
    RunInput input() const { return {*trace, trace->devices[0], classification, series, &model}; }
};

// Each file is loaded once for all the pairs it is in.
const Run& open(const QString& name)
{
    static std::map<QString, std::unique_ptr<Run>> cache;
    auto& slot = cache[name];
    if (!slot) {
        slot = std::make_unique<Run>();
        slot->trace = load((kCorpus + "/" + name + ".pickle").toStdString());
        const DeviceTrace& dev = slot->trace->devices[0];
        slot->classification = classify(*slot->trace, dev, RuleSet::builtin());
        slot->series = computePoolSeries(dev, slot->classification);
        slot->model = buildTraceModel(*slot->trace, dev, slot->classification);
    }
    return *slot;
}

bool have(const QString& name) { return QFileInfo::exists(kCorpus + "/" + name + ".pickle"); }

} // namespace

class TestCompareCorpusAxes : public QObject {
    Q_OBJECT
private slots:
    void namesExactlyTheAxesThatChanged_data();
    void namesExactlyTheAxesThatChanged();
};

void TestCompareCorpusAxes::namesExactlyTheAxesThatChanged_data()
{
    QTest::addColumn<QString>("a");
    QTest::addColumn<QString>("b");
    QTest::addColumn<QString>("axes"); // the README's truth, sorted, comma-separated
    auto pair = [](const char* a, const char* b, const char* axes) {
        QTest::newRow(qPrintable(QString("%1 / %2").arg(a, b))) << QString(a) << QString(b) << QString(axes);
        QTest::newRow(qPrintable(QString("%1 / %2").arg(b, a))) << QString(b) << QString(a) << QString(axes);
    };
    // Clean one-axis pairs.
    pair("k_ctx128_fullstep", "k_ctx256_fullstep", "sequence");
    pair("k_ctx128_forward_mixed", "k_ctx256_forward_mixed", "sequence");
    pair("wed_training_128", "wed_training_256", "sequence");
    pair("wed_inference_128", "wed_inference_256", "sequence");
    pair("nh_forward_fp32", "nh_forward_mixed", "precision");
    pair("niu_fwd_100", "niu_fwd_150", "sequence");
    pair("niu_fwd_100", "niu_fwd_200", "sequence");
    pair("niu_fwd_150", "niu_fwd_200", "sequence");
    pair("niu_fb_100", "niu_fb_150", "sequence");
    pair("niu_fb_100", "niu_fb_200", "sequence");
    pair("niu_fb_150", "niu_fb_200", "sequence");
    pair("niu_fwd_200", "niu_fwd_200_bf16", "precision");
    pair("niu_fb_200", "niu_fb_200_bf16", "precision");
    pair("bol_fwd_cl128_fp32", "bol_fwd_cl2048_fp32", "sequence");
    pair("bol_fwd_cl512_fp32", "bol_fwd_cl512_bf16", "precision");
    // Two axes at once, as the README describes the files.
    pair("niu_fwd_100", "niu_fwd_200_bf16", "precision,sequence");
    pair("niu_fb_100", "niu_fb_200_bf16", "precision,sequence");
    pair("bol_fwd_cl128_fp32", "bol_fwd_cl512_fp32", "grad_mode,sequence");
    pair("bol_fwd_cl2048_fp32", "bol_fwd_cl512_fp32", "grad_mode,sequence");
    // Forward only against the full step of the same model and context: the window, and nothing else.
    pair("niu_fwd_200", "niu_fb_200", "recorded_window");
    pair("niu_fwd_100", "niu_fb_100", "recorded_window");
    // A training step against a no_grad forward of the same model and context.
    pair("wed_training_128", "wed_inference_128", "grad_mode,recorded_window");
}

void TestCompareCorpusAxes::namesExactlyTheAxesThatChanged()
{
    QFETCH(QString, a);
    QFETCH(QString, b);
    QFETCH(QString, axes);
    if (!have(a) || !have(b))
        QSKIP("the pair is absent from ../shared/corpus");
    const Comparison c = compareRuns(open(a).input(), open(b).input());
    QStringList named;
    for (const CompareAxis& x : c.axes)
        named << QString::fromStdString(x.name);
    named.sort();
    const QString verdict = QString::fromStdString(c.verdict);
    qInfo("%s / %s: %s | %s", qPrintable(a), qPrintable(b), qPrintable(named.join(',')), qPrintable(verdict.left(240)));
    QVERIFY2(named.join(',') == axes, qPrintable(named.join(',') + " | " + verdict));
    QCOMPARE(c.oneAxis, verdict.startsWith("One axis changed"));
    QCOMPARE(c.oneAxis, !axes.contains(','));
}

QTEST_APPLESS_MAIN(TestCompareCorpusAxes)
#include "test_compare_corpus_axes.moc"
