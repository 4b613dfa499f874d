// The real pairs of ../shared/corpus whose difference is known from their authors (corpus README):
// the axes named, and what the verdict says of the pools. Skipped where the corpus is absent.
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/compare/comparison.h"
#include "core/load.h"

#include <QtTest>

using namespace poolscope;

namespace {

const QString kCorpus = QStringLiteral(POOLSCOPE_CORPUS_DIR);

struct Run {
    std::shared_ptr<const Trace> trace;
    Classification classification;
    PoolSeries series;
    RunInput input() const { return {*trace, trace->devices[0], classification, series}; }
};

Run open(const QString& name)
{
    Run r;
    r.trace = load((kCorpus + "/" + name + ".pickle").toStdString());
    r.classification = classify(*r.trace, r.trace->devices[0], RuleSet::builtin());
    r.series = computePoolSeries(r.trace->devices[0], r.classification);
    return r;
}

bool have(const QString& a, const QString& b)
{
    return QFileInfo::exists(kCorpus + "/" + a + ".pickle") && QFileInfo::exists(kCorpus + "/" + b + ".pickle");
}

QString names(const Comparison& c)
{
    QStringList n;
    for (const auto& a : c.axes)
        n << QString::fromStdString(a.name);
    return n.join(',') + " | " + QString::fromStdString(c.verdict);
}

} // namespace

class TestCompareCorpus : public QObject {
    Q_OBJECT
private slots:
    void sequencePairs_data();
    void sequencePairs();
    void fullStepPeakIsOptimizerState();
    void precisionPair();
};

void TestCompareCorpus::sequencePairs_data()
{
    QTest::addColumn<QString>("a");
    QTest::addColumn<QString>("b");
    QTest::addColumn<bool>("activationsChange"); // at the peak or as their own peak, by 10 % and 64 MiB
    QTest::newRow("k forward mixed") << "k_ctx128_forward_mixed" << "k_ctx256_forward_mixed" << true;
    QTest::newRow("k full step") << "k_ctx128_fullstep" << "k_ctx256_fullstep" << true;
    QTest::newRow("wed training") << "wed_training_128" << "wed_training_256" << true;
    QTest::newRow("wed inference") << "wed_inference_128" << "wed_inference_256" << false;
}

void TestCompareCorpus::sequencePairs()
{
    QFETCH(QString, a);
    QFETCH(QString, b);
    QFETCH(bool, activationsChange);
    if (!have(a, b))
        QSKIP("the pair is absent from ../shared/corpus");
    const Run ra = open(a), rb = open(b);
    const Comparison c = compareRuns(ra.input(), rb.input());
    QVERIFY2(c.oneAxis && c.axes.front().name == "sequence", qPrintable(names(c)));
    QVERIFY(std::abs(*c.axes.front().ratio - 2.0) < 0.01);
    // The score tensors scaled by 4 where the rest scaled by 2: that is what said sequence, not batch.
    QVERIFY2(QString::fromStdString(c.axes.front().evidence).contains("x4"), c.axes.front().evidence.c_str());
    QVERIFY2(QString::fromStdString(c.verdict).startsWith("One axis changed: sequence x2."), c.verdict.c_str());
    // Where the activations are a real part of the peak, they are what moved.
    const bool activationMoved = std::find(c.changed.begin(), c.changed.end(), Pool::Activation) != c.changed.end() ||
                                 c.poolPeaks[size_t(Pool::Activation)].changed();
    QCOMPARE(activationMoved, activationsChange);
    // Swapped, the same axis halves.
    const Comparison back = compareRuns(rb.input(), ra.input());
    QVERIFY2(back.oneAxis && back.axes.front().name == "sequence", qPrintable(names(back)));
    QVERIFY(std::abs(*back.axes.front().ratio - 0.5) < 0.01);
}

void TestCompareCorpus::fullStepPeakIsOptimizerState()
{
    if (!have("k_ctx128_fullstep", "k_ctx256_fullstep"))
        QSKIP("the pair is absent from ../shared/corpus");
    const Comparison c = compareRuns(open("k_ctx128_fullstep").input(), open("k_ctx256_fullstep").input());
    QCOMPARE(c.peakPoolA, Pool::OptimizerState);
    QCOMPARE(c.peakPoolB, Pool::OptimizerState);
    QVERIFY(!c.pools[size_t(Pool::OptimizerState)].changed());
    QVERIFY(std::abs(*c.pools[size_t(Pool::OptimizerState)].ratio() - 1.0) < 0.01);
    QVERIFY2(QString::fromStdString(c.verdict).contains("Optimizer state sets the peak in both runs"), c.verdict.c_str());
    QVERIFY2(QString::fromStdString(c.verdict).contains("the sequence length is not what limits this run"), c.verdict.c_str());
    QCOMPARE(c.moment(CompareMoment::Peak).phaseA, Phase::OptimizerStep);
    QCOMPARE(c.moment(CompareMoment::Peak).phaseB, Phase::OptimizerStep);
    for (CompareMoment m : {CompareMoment::ForwardEnd, CompareMoment::BackwardEnd, CompareMoment::StepEnd})
        QVERIFY(c.moment(m).paired());
    // At the end of forward the activations are what differs.
    const Comparison fwd = compareRuns(open("k_ctx128_fullstep").input(), open("k_ctx256_fullstep").input(), CompareOptions{CompareMoment::ForwardEnd});
    QCOMPARE(fwd.changed.front(), Pool::Activation);
}

void TestCompareCorpus::precisionPair()
{
    if (!have("nh_forward_fp32", "nh_forward_mixed"))
        QSKIP("the pair is absent from ../shared/corpus");
    const Comparison c = compareRuns(open("nh_forward_fp32").input(), open("nh_forward_mixed").input());
    QVERIFY2(c.oneAxis && c.axes.front().name == "precision", qPrintable(names(c)));
    QCOMPARE(c.axes.front().a, std::string("fp32"));
    QCOMPARE(c.axes.front().b, std::string("autocast (16-bit)"));
    QVERIFY2(QString::fromStdString(c.axes.front().evidence).contains("autocast frames"), c.axes.front().evidence.c_str());
    // ~0.2 GB differs in what was allocated before recording (corpus README): said, not hidden.
    QCOMPARE(c.caveats.size(), size_t(1));
    QVERIFY2(QString::fromStdString(c.caveats.front()).contains("less was allocated in B before recording began"), c.caveats.front().c_str());
    QVERIFY(QString::fromStdString(c.verdict).contains("Not a clean pair, though"));
}

QTEST_APPLESS_MAIN(TestCompareCorpus)
#include "test_compare_corpus.moc"
