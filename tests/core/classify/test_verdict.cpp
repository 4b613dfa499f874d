// The verdict sentence: the breakdown at a moment and what to do about the wall.
#include "core/report/verdict.h"

#include <QtTest>

#include <cmath>

using namespace poolscope;

namespace {
int64_t gib(double v) { return int64_t(std::llround(v * double(int64_t(1) << 30))); }
} // namespace

class TestVerdict : public QObject {
    Q_OBJECT
private slots:
    void optimizerStateWall()
    {
        PoolBytes b{};
        b[size_t(Pool::OptimizerState)] = gib(25.38);
        b[size_t(Pool::Gradient)] = gib(12.72);
        b[size_t(Pool::Parameter)] = gib(12.95);
        b[size_t(Pool::Temporary)] = gib(0.20);
        b[size_t(Pool::Activation)] = gib(0.05);
        b[size_t(Pool::Other)] = 4096; // too small to list
        b[size_t(Pool::CachedFree)] = gib(0.50); // under a tenth of allocated: not named
        const Verdict v = makeVerdict("At the OOM", b);
        QCOMPARE(v.dominant, Pool::OptimizerState);
        QCOMPARE(QString::fromStdString(v.sentence),
                 QString("At the OOM: optimizer_state 25.38 GiB (49%), parameter 12.95 GiB, gradient 12.72 GiB, temporary 0.20 GiB, "
                         "activation 0.05 GiB. The wall is optimizer state: shard it (ZeRO/FSDP), offload it, or pick a lower-state "
                         "optimizer; cutting the micro-batch frees at most 0.05 GiB."));
    }

    void advicePerPool_data()
    {
        QTest::addColumn<int>("pool");
        QTest::addColumn<QString>("phrase");
        QTest::newRow("activation") << int(Pool::Activation) << "The wall is activations: checkpoint them";
        QTest::newRow("gradient") << int(Pool::Gradient) << "ZeRO-2";
        QTest::newRow("parameter") << int(Pool::Parameter) << "ZeRO-3/FSDP";
        QTest::newRow("temporary") << int(Pool::Temporary) << "The wall is temporary buffers";
        QTest::newRow("input") << int(Pool::Input) << "cut the batch";
        QTest::newRow("unknown") << int(Pool::Unknown) << "poolscope explain";
    }
    void advicePerPool()
    {
        QFETCH(int, pool);
        QFETCH(QString, phrase);
        PoolBytes b{};
        b[size_t(pool)] = gib(10);
        b[size_t(Pool::Activation)] += gib(1);
        b[size_t(Pool::Parameter)] += gib(2);
        const Verdict v = makeVerdict("At the peak", b);
        QCOMPARE(int(v.dominant), pool);
        QVERIFY2(v.advice.find(phrase.toStdString()) != std::string::npos, v.advice.c_str());
        QVERIFY(v.sentence.rfind("At the peak: " + std::string(poolName(Pool(pool))), 0) == 0);
        // Only where cutting the micro-batch is not the advice itself does the sentence bound it.
        QCOMPARE(v.advice.find("cutting the micro-batch frees at most") != std::string::npos, Pool(pool) != Pool::Activation && Pool(pool) != Pool::Input);
    }

    void noActivationsMeansTheBatchFreesNothing()
    {
        PoolBytes b{};
        b[size_t(Pool::Parameter)] = gib(11);
        const Verdict v = makeVerdict("At the snapshot", b);
        QVERIFY2(v.advice.find("cutting the micro-batch frees nothing here") != std::string::npos, v.advice.c_str());
        QVERIFY2(v.advice.find("0.00 GiB") == std::string::npos, v.advice.c_str());
    }

    void fragmentationWall()
    {
        PoolBytes b{};
        b[size_t(Pool::Activation)] = gib(6);
        b[size_t(Pool::Parameter)] = gib(5);
        b[size_t(Pool::CachedFree)] = gib(9);
        const Verdict v = makeVerdict("At the OOM", b);
        QCOMPARE(v.dominant, Pool::CachedFree);
        QCOMPARE(QString::fromStdString(v.breakdown),
                 QString("At the OOM: activation 6.00 GiB (55%), parameter 5.00 GiB; cached_free 9.00 GiB reserved but not allocated."));
        QVERIFY(v.advice.find("expandable_segments:True") != std::string::npos);
    }

    void nothingAllocated()
    {
        const Verdict v = makeVerdict("At event #0", PoolBytes{});
        QCOMPARE(QString::fromStdString(v.sentence), QString("At event #0: nothing is allocated."));
    }
};

QTEST_GUILESS_MAIN(TestVerdict)
#include "test_verdict.moc"
