// The classifier on the project's synthetic generator (core/synth): GPT-style training runs through
// the allocator simulation, with optimizers, precisions, checkpointing and ZeRO stages, each
// allocation carrying the pool the generator meant. >= 98% of live bytes right at every moment.
#include "core/classify/shipped_rules.h"
#include "accuracy.h"
#include "frame_ablation.h"

#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/synth/synth.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

const RuleSet& defaultRules() { return poolscope::testing::shippedRules(); }

SynthModel small()
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 256;
    m.heads = 4;
    m.seq = 128;
    m.microBatch = 2;
    m.vocab = 4096;
    return m;
}

// The generated run and its Python-only copy, each classified, after checking that the run ran out
// of memory once, inside its backward.
template <typename Check>
void atABackwardOomInBothCopies(const SynthResult& r, Check check)
{
    const auto python = ablateFrames(r.trace, KeepFrames::Python);
    for (const Trace* trace : {static_cast<const Trace*>(&r.trace), static_cast<const Trace*>(python.get())}) {
        const DeviceTrace& dev = trace->devices[0];
        QCOMPARE(dev.ooms.size(), size_t(1));
        const Classification c = classify(*trace, dev, defaultRules());
        QCOMPARE(int(c.phases.phase[size_t(dev.ooms[0].index)]), int(Phase::Backward));
        check(dev, c);
    }
}

} // namespace

class TestClassifySynth : public QObject {
    Q_OBJECT
private slots:
    // The classifier tries only the rules whose phase and lifetime conditions hold (a bitset per
    // combination of them, any number of rules). Adding rules that can never match (more than 2^60
    // bytes), past the 64 of one word, must change no decision: the bitsets span words correctly.
    void candidateMaskMatchesFullScan()
    {
        SynthModel m = small();
        m.steps = 3;
        m.optimizer = SynthOptimizer::Adam;
        const SynthResult r = synthesize(m);
        const DeviceTrace& d = r.trace.devices[0];
        RuleSet many = defaultRules();
        std::string extra = "{\"rules\": [";
        for (int k = 0; k < 80; ++k)
            extra += std::string(k ? "," : "") + "{\"name\": \"never-" + std::to_string(k) +
                     "\", \"pool\": \"activation\", \"confidence\": 99, \"reason\": \"never\", \"before\": \"" +
                     (k % 2 ? "cublas-workspace" : "forward-scratch") + "\", \"size\": {\"min\": 1152921504606846976}}";
        extra += "]}";
        many.merge(RuleSet::parse(extra, "never.json"));
        QVERIFY(defaultRules().rules().size() > 64); // the default set already spans two words
        QVERIFY(many.rules().size() > 128);
        const Classification masked = classify(r.trace, d, defaultRules());
        const Classification scanned = classify(r.trace, d, many);
        QCOMPARE(masked.pool, scanned.pool);
        QCOMPARE(masked.confidence, scanned.confidence);
        for (size_t i = 0; i < masked.size(); ++i)
            if (masked.rules[masked.rule[i]].name != scanned.rules[scanned.rule[i]].name)
                QFAIL(qPrintable(QStringLiteral("allocation %1: %2 vs %3").arg(i).arg(QString::fromStdString(masked.rules[masked.rule[i]].name),
                                                                                  QString::fromStdString(scanned.rules[scanned.rule[i]].name))));
    }

    void accuracy_data()
    {
        QTest::addColumn<int>("variant");
        const char* names[] = {"AdamW mixed",  "AdamW fp32", "SGD",     "SGD momentum", "Lion",        "Adafactor",
                               "checkpointing", "four steps", "ZeRO-1",  "ZeRO-2",       "ZeRO-3",      "ZeRO-3 + checkpointing",
                               "bf16, deeper",  "until OOM",  "~50k entries"};
        for (int i = 0; i < int(std::size(names)); ++i)
            QTest::newRow(names[i]) << i;
    }
    void accuracy()
    {
        QFETCH(int, variant);
        SynthModel m = small();
        switch (variant) {
        case 1: m.dtype = SynthDtype::Fp32; break;
        case 2: m.optimizer = SynthOptimizer::Sgd; break;
        case 3: m.optimizer = SynthOptimizer::SgdMomentum; break;
        case 4: m.optimizer = SynthOptimizer::Lion; break;
        case 5: m.optimizer = SynthOptimizer::Adafactor; break;
        case 6: m.checkpointing = true; break;
        case 7: m.steps = 4; break;
        case 8: case 9: case 10:
            m.dataParallel = 4;
            m.zeroStage = variant - 7;
            break;
        case 11:
            m.dataParallel = 8;
            m.zeroStage = 3;
            m.checkpointing = true;
            break;
        case 12:
            m.dtype = SynthDtype::Bf16;
            m.layers = 12;
            m.hidden = 512;
            m.heads = 8;
            break;
        case 13: m.capacity = int64_t(200) << 20; break;
        case 14: m.targetEntries = 50000; break;
        }
        const SynthResult r = synthesize(m);
        const DeviceTrace& dev = r.trace.devices[0];
        QCOMPARE(r.truth.size(), dev.allocations.size());
        const Classification c = classify(r.trace, dev, defaultRules());
        const ByteAccuracy acc = byteAccuracy(dev, c.pool, r.truth);
        qInfo("%s: %zu events, %zu allocations: worst %.2f%% of live bytes right (event %lld), %.3f%% over all moments",
              QTest::currentDataTag(), dev.eventCount(), dev.allocations.size(), 100 * acc.worst,
              static_cast<long long>(acc.worstEvent), 100 * acc.overall);
        QVERIFY2(acc.worst >= 0.98, acc.worstDetail.c_str());
        // Pools stay exact on the simulated allocator's traces too.
        const PoolSeries s = computePoolSeries(dev, c);
        for (size_t i = 0; i < dev.eventCount(); ++i)
            if (allocatedBytes(s.at(EventIndex(i))) != dev.allocated[i])
                QFAIL("pools do not sum to allocated");
    }

    // Autocast at T = 4h: an input's cast has an MLP weight's cast bytes. Where a forward holds more
    // such casts than weights, the classifier must say it cannot tell them apart (a low confidence
    // and a reason with the counts), never 85 % cast_cache; without the collision nothing changes.
    void autocastCastSurplusIsSaid()
    {
        SynthModel m;
        m.layers = 6;
        m.hidden = 512;
        m.heads = 8;
        m.seq = 256;
        m.vocab = 8000;
        m.positions = 2048;
        m.dtype = SynthDtype::Autocast;
        m.attention = SynthAttention::Manual;
        for (int64_t b : {4, 8}) {
            m.microBatch = b; // T = 1024 (no collision), T = 2048 = 4h
            const SynthResult r = synthesize(m);
            const DeviceTrace& dev = r.trace.devices[0];
            const Classification c = classify(r.trace, dev, defaultRules());
            int64_t flagged = 0;
            for (size_t i = 0; i < c.size(); ++i) {
                if (!c.rules[c.rule[i]].has(kRoleCastSurplus))
                    continue;
                ++flagged;
                // A model has one set of weight casts: the surplus are inputs' casts (issue 22); the
                // rest of that size stay casts, all of them unsure.
                QVERIFY(c.pool[i] == Pool::Activation || c.pool[i] == Pool::CastCache);
                QVERIFY(c.confidence[i] <= 45);
                // T x h in 16 bits = half a 4h x h fp32 weight: the one size that collides.
                QCOMPARE(dev.allocations[i].size, int64_t(2048) * 512 * 2);
                QVERIFY(c.rules[c.rule[i]].reason.find("cannot say") != std::string::npos);
            }
            qInfo("micro-batch %lld: %lld casts flagged", qint64(b), qint64(flagged));
            QCOMPARE(flagged > 0, b == 8);
        }
    }

    // ZeRO-3 gathers each layer's weights again for its backward, on the autograd engine's thread,
    // from a Python hook: a Python-only capture keeps torch.distributed's all_gather_into_tensor frame
    // there as in the forward (the generator's stacks had none until stop 48), and those gathers are
    // parameters by that frame. Where a capture has no frame for them (the hook's stack lost, as the
    // generator wrote it before), the structure decides: the weights are kept as shards that each get
    // a gradient shard of their own size, so nothing says "shard" from the sizes kept, and the
    // backward's blocks of a named forward gather's size, alive across a layer's releases, are the
    // same gathers: parameters, not gradients handed on (5.9 % of the bytes at the run's worst moment).
    void backwardGathersFollowNamedForwardGathers_data()
    {
        QTest::addColumn<bool>("dropFrames");
        QTest::newRow("their Python frame kept") << false;
        QTest::newRow("their frames lost") << true;
    }
    void backwardGathersFollowNamedForwardGathers()
    {
        QFETCH(bool, dropFrames);
        SynthModel m = small();
        m.dataParallel = 2;
        m.zeroStage = 3;
        const SynthResult r = synthesize(m);
        const auto python = ablateFrames(r.trace, KeepFrames::Python);
        const Classification before = classify(*python, python->devices[0], defaultRules());
        auto copy = std::make_shared<Trace>(*python);
        DeviceTrace& dev = copy->devices[0];
        std::vector<size_t> gathers;
        for (size_t i = 0; i < before.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (r.truth[i] == Pool::Parameter && !a.preexisting() && i < before.birthPhase.size() && before.birthPhase[i] == Phase::Backward)
                gathers.push_back(i);
        }
        QCOMPARE(int(gathers.size()), m.layers * m.steps); // one flat block per layer and step
        for (size_t i : gathers) {
            Allocation& a = dev.allocations[i];
            QVERIFY2(a.stack.valid() && !python->frames.stack(a.stack).empty(), "the backward's gathers keep their Python frame");
            if (dropFrames) {
                a.stack = StackId{};
                dev.events.stack[size_t(a.allocEvent)] = StackId{};
            }
        }
        const Classification c = classify(*copy, dev, defaultRules());
        for (size_t i : gathers)
            QCOMPARE(int(c.pool[i]), int(Pool::Parameter));
    }

    // An OOM in the backward stops it: what that backward made and still holds is held by the OOM,
    // not kept past the backward. The logits' gradient (batch x sequence x vocabulary) is made first
    // and let go of by the output layer's backward; a lifetime rule called it a gradient at 85 %
    // (at 45 % where no parameter has its bytes). Held at an OOM in the backward with no parameter's
    // bytes it is the backward's scratch; with a parameter's bytes (batch x sequence = width, so the
    // logits' gradient has the output layer's weight size) the dump cannot say, and no copy is sure.
    void heldAtAnOomInBackwardIsNotKeptByIt_data()
    {
        QTest::addColumn<int>("hidden");
        QTest::addColumn<int>("seq");
        QTest::addColumn<int>("batch");
        QTest::addColumn<int>("vocab");
        QTest::addColumn<qint64>("capacity");
        QTest::addColumn<bool>("coincides"); // batch x seq == hidden
        QTest::newRow("logits' gradient of its own size") << 256 << 256 << 4 << 8000 << qint64(250000000) << false;
        QTest::newRow("logits' gradient of the head's size") << 128 << 64 << 2 << 1000 << qint64(6395904) << true;
    }

    void heldAtAnOomInBackwardIsNotKeptByIt()
    {
        QFETCH(int, hidden);
        QFETCH(int, seq);
        QFETCH(int, batch);
        QFETCH(int, vocab);
        QFETCH(qint64, capacity);
        QFETCH(bool, coincides);
        SynthModel m = small();
        m.hidden = hidden;
        m.heads = 4;
        m.seq = seq;
        m.microBatch = batch;
        m.vocab = vocab;
        m.dtype = coincides ? SynthDtype::Mixed : SynthDtype::Fp32;
        m.layers = coincides ? 2 : 4;
        m.capacity = capacity;
        const SynthResult r = synthesize(m);
        const int64_t logitsGradient = int64_t(batch) * seq * vocab * 4;
        atABackwardOomInBothCopies(r, [&](const DeviceTrace& dev, const Classification& c) {
            int held = 0;
            for (size_t i = 0; i < c.size(); ++i) {
                const Allocation& a = dev.allocations[i];
                if (a.preexisting() || a.size != logitsGradient || c.birthPhase[i] != Phase::Backward ||
                    a.freeRequestedEvent != kNoEvent || a.freeCompletedEvent != kNoEvent)
                    continue;
                ++held;
                QCOMPARE(int(r.truth[i]), int(Pool::Temporary));
                if (coincides) {
                    QVERIFY2(c.confidence[i] < 70, "a parameter's bytes: the dump cannot say gradient or scratch");
                } else {
                    QVERIFY(!(c.lifetime[i] & bit(Lifetime::SurvivesBackward)));
                    QCOMPARE(int(c.pool[i]), int(Pool::Temporary));
                }
            }
            QCOMPARE(held, 1);
        });
    }

    // Late in the backward the OOM holds the gradients made so far, of every weight shape: they stay
    // gradients, sure, and the parameters keep the evidence of gradients of their sizes.
    void gradientsHeldAtALateOomStaySure()
    {
        SynthModel m = small();
        m.seq = 64;
        m.vocab = 8000;
        m.dtype = SynthDtype::Fp32;
        m.capacity = 70000000;
        const SynthResult r = synthesize(m);
        atABackwardOomInBothCopies(r, [&](const DeviceTrace& dev, const Classification& c) {
            int gradients = 0;
            for (size_t i = 0; i < c.size(); ++i) {
                if (r.truth[i] != Pool::Gradient || dev.allocations[i].freeRequestedEvent != kNoEvent)
                    continue;
                ++gradients;
                QCOMPARE(int(c.pool[i]), int(Pool::Gradient));
                QVERIFY(c.confidence[i] >= 70);
            }
            QVERIFY(gradients >= 3);
        });
    }
};

QTEST_GUILESS_MAIN(TestClassifySynth)
#include "test_classify_synth.moc"
