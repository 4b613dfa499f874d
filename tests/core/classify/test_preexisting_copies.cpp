// Blocks from before recording that are a parameter, its gradient or its optimizer state with
// nothing in the capture to say which (structural_copies.cpp, preexistingCopiesIndistinct): the
// frameless nh_forward_* dumps hold ~30 GiB of weights four times over (parameter, .grad, Adam's
// two moments). The product must say it cannot tell them apart (below 50 %, no advice, the caveat
// naming why) rather than call them parameters at 60 %. Files whose blocks from before recording
// are parameters alone must keep their reading. Real dumps; skipped without ../shared/corpus.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/report/verdict.h"
#include "core/timeline/alive_index.h"
#include "support/corpus.h"

#include <QtTest>

using namespace poolscope;

namespace {

std::shared_ptr<const Trace> frameless(const char* name)
{
    const QString path = testing::corpusPath(name);
    if (!QFileInfo::exists(path))
        return nullptr;
    RedactOptions o;
    o.frames = FrameKeep::None;
    return redact(*load(path.toStdString()), o);
}

struct AtPeak {
    Classification c;
    Verdict v;
    int64_t indistinct = 0; // bytes alive at the peak decided with kRoleIndistinctCopies
};

AtPeak atPeak(const Trace& t)
{
    const DeviceTrace& dev = t.devices.at(0);
    AtPeak r{classify(t, dev, testing::shippedRules()), {}, 0};
    const auto alive = AliveIndex(dev.allocations).aliveAfter(dev.peakIndex);
    const MomentEvidence ev = momentEvidence(r.c, dev.allocations, alive);
    PoolBytes pools{};
    for (AllocId id : alive) {
        pools[size_t(r.c.pool[id.value])] += dev.allocations[id.value].size;
        if (r.c.rules[r.c.rule[id.value]].has(kRoleIndistinctCopies))
            r.indistinct += dev.allocations[id.value].size;
    }
    r.v = makeVerdict("At the peak", pools, ev);
    return r;
}

} // namespace

class TestPreexistingCopies : public QObject {
    Q_OBJECT
private slots:
    void saysItCannotTell_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("nh_forward_fp32") << "nh_forward_fp32.pickle";
        QTest::newRow("nh_forward_mixed") << "nh_forward_mixed.pickle";
    }
    void saysItCannotTell()
    {
        QFETCH(QString, file);
        const auto t = frameless(file.toUtf8().constData());
        if (!t)
            QSKIP("../shared/corpus not available");
        const AtPeak r = atPeak(*t);
        QVERIFY2(r.indistinct > (int64_t(28) << 30), std::to_string(r.indistinct).c_str()); // ~30 GiB from before recording
        QCOMPARE(r.v.dominant, Pool::Parameter);
        QVERIFY(r.v.confidence >= 0 && r.v.confidence < kGuessConfidence);
        QVERIFY2(r.v.caveat.find("cannot tell parameters from gradients or optimizer state made before recording") != std::string::npos,
                 r.v.sentence.c_str());
        QVERIFY2(r.v.advice.find("no advice is given") != std::string::npos, r.v.sentence.c_str());
        for (const char* knob : {"shard", "offload", "lower precision", "ZeRO"})
            QVERIFY2(r.v.advice.find(knob) == std::string::npos, r.v.sentence.c_str());
    }

    // Parameters alone from before recording (65 norm weights, an odd count; or an embedding held
    // once): no copies, the reading stays, and the verdict says nothing of copies.
    void parametersAloneKeepTheirReading_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("k_ctx128_forward_mixed") << "k_ctx128_forward_mixed.pickle";
        QTest::newRow("bol_fwd_cl128_fp32") << "bol_fwd_cl128_fp32.pickle";
        QTest::newRow("wed_inference_128") << "wed_inference_128.pickle";
    }
    void parametersAloneKeepTheirReading()
    {
        QFETCH(QString, file);
        const auto t = frameless(file.toUtf8().constData());
        if (!t)
            QSKIP("../shared/corpus not available");
        const AtPeak r = atPeak(*t);
        QCOMPARE(r.indistinct, int64_t(0));
        QVERIFY2(r.v.caveat.find("cannot tell parameters") == std::string::npos, r.v.sentence.c_str());
    }
};

QTEST_GUILESS_MAIN(TestPreexistingCopies)
#include "test_preexisting_copies.moc"
