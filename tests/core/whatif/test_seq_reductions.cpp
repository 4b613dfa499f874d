// The one test of "a reduction over s" (core/whatif/seq_reductions.h) that the sequence finder, the
// attention chain's seed and the precision plan's softmax share: sizes of a real softmax reduce,
// a norm's statistics, rotary-sized tables and near misses do not.
#include "core/whatif/seq_reductions.h"

#include <QtTest>

using namespace poolscope;

class TestSeqReductions : public QObject {
    Q_OBJECT
private slots:
    void softmaxStatisticsReduce();
    void whatIsNoReduction();
    void knownSeqAllowsOtherElementSizes();
};

// wed_training_128: T = 512 (b = 4, s = 128), 16 heads, fp32 scores of 4 MiB; the maximum and the
// sum hold one fp32 value per row (32,768 B), the maximum's int64 indices twice that.
void TestSeqReductions::softmaxStatisticsReduce()
{
    const int64_t T = 512, scores = 4 * 16 * 128 * 128 * 4, row = scores / 128;
    QCOMPARE(reducedLength(scores, row, T), int64_t(128));
    QVERIFY(reducesOverSeq(scores, row, T, 0));
    QVERIFY(reducesOverSeq(scores, row, T, 128));
    QVERIFY(reducesOverSeq(scores, 2 * row, T, 128)); // int64 indices beside fp32 values
    QVERIFY(reducesOverSeq(scores, row / 2, T, 128)); // 16-bit statistics of fp32 scores
}

void TestSeqReductions::whatIsNoReduction()
{
    const int64_t T = 512;
    // A norm's statistic: one fp32 value per token of a layer input (T x 1024 x 4): over h, not s.
    QCOMPARE(reducedLength(T * 1024 * 4, T * 4, T), int64_t(0));
    // A ratio that does not divide T (s divides b*s), or below 8 (an MLP's 4h over h).
    QCOMPARE(reducedLength(T * 1536 * 4, T * 64, T), int64_t(0));
    QCOMPARE(reducedLength(T * 4096 * 4, T * 1024 * 4, T), int64_t(0));
    // Not a whole number of bytes per token, larger than the tensor, or not dividing it.
    QCOMPARE(reducedLength(4 << 20, 100, T), int64_t(0));
    QCOMPARE(reducedLength(1 << 20, 2 << 20, T), int64_t(0));
    QCOMPARE(reducedLength(3 * T * 1000, T * 64, T), int64_t(0));
    // Unknown T reduces nothing.
    QCOMPARE(reducedLength(4 << 20, 32768, 0), int64_t(0));
    QVERIFY(!reducesOverSeq(4 << 20, 32768, 0, 128));
}

// With s known, only the row at the scores' element size, half it or twice it.
void TestSeqReductions::knownSeqAllowsOtherElementSizes()
{
    const int64_t T = 512, scores = 4 * 16 * 128 * 128 * 4, row = scores / 128;
    QVERIFY(!reducesOverSeq(scores, 4 * row, T, 128));
    QVERIFY(!reducesOverSeq(scores, row, T, 32)); // the row over another s (s = 64 would read it as 16-bit statistics)
    QVERIFY(!reducesOverSeq(scores, row, T, 1));
}

QTEST_APPLESS_MAIN(TestSeqReductions)
#include "test_seq_reductions.moc"
