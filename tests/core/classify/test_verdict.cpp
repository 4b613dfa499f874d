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
        // Without evidence of where the temporaries were born, all of them bound what the batch frees.
        QCOMPARE(QString::fromStdString(v.sentence),
                 QString("At the OOM: optimizer state 25.38 GiB (49% of allocated), parameter 12.95 GiB, gradient 12.72 GiB, temporary 0.20 GiB, "
                         "activation 0.05 GiB. The wall is optimizer state: shard it (ZeRO/FSDP), offload it, or pick a lower-state "
                         "optimizer; cutting the micro-batch frees at most 0.25 GiB."));
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
                 QString("At the OOM: activation 6.00 GiB (55% of allocated), parameter 5.00 GiB; cached free (reserved - allocated) 9.00 GiB."));
        QVERIFY(v.advice.find("expandable_segments:True") != std::string::npos);
        QVERIFY(v.advice.find("set PYTORCH_CUDA_ALLOC_CONF") == std::string::npos);
        QVERIFY(v.advice.find("replay") != std::string::npos);
    }

    // Below kSureConfidence the wall is "probably" the pool, with the figure; at or above it, plain.
    void unsureWallIsHedged()
    {
        PoolBytes b{};
        b[size_t(Pool::Parameter)] = gib(2.02);
        b[size_t(Pool::Activation)] = gib(1.10);
        PoolConfidence conf;
        conf.fill(-1);
        conf[size_t(Pool::Parameter)] = 65;
        conf[size_t(Pool::Activation)] = 75;
        const Verdict v = makeVerdict("At the peak", b, &conf);
        QCOMPARE(v.confidence, 65);
        QVERIFY2(v.advice.rfind("The wall is probably parameters (classified with 65% confidence; poolscope explain shows the evidence): shard them", 0) == 0,
                 v.advice.c_str());
        conf[size_t(Pool::Parameter)] = kSureConfidence;
        const Verdict sure = makeVerdict("At the peak", b, &conf);
        QVERIFY2(sure.advice.rfind("The wall is parameters: shard them", 0) == 0, sure.advice.c_str());
        QCOMPARE(makeVerdict("At the peak", b).confidence, -1); // none given: no hedge
    }

    // Reserved-but-free memory is measured, not classified: never hedged, whatever the pools' confidence.
    void fragmentationIsNeverHedged()
    {
        PoolBytes b{};
        b[size_t(Pool::Activation)] = gib(1);
        b[size_t(Pool::CachedFree)] = gib(9);
        PoolConfidence conf;
        conf.fill(10);
        const Verdict v = makeVerdict("At the OOM", b, &conf);
        QCOMPARE(v.dominant, Pool::CachedFree);
        QCOMPARE(v.confidence, -1);
        QVERIFY(v.advice.rfind("The wall is cached free memory (reserved - allocated)", 0) == 0);
    }

    // Byte-weighted: a 3 GiB block at 90% outweighs a 1 GiB block at 50%; ids not alive do not count.
    void aliveConfidenceIsByteWeighted()
    {
        std::vector<Allocation> allocs(4);
        allocs[0].size = gib(3);
        allocs[1].size = gib(1);
        allocs[2].size = gib(5);
        allocs[3].size = gib(2);
        Classification c;
        c.pool = {Pool::Parameter, Pool::Parameter, Pool::Activation, Pool::Parameter};
        c.confidence = {90, 50, 80, 10};
        const std::vector<AllocId> alive = {AllocId(0), AllocId(1), AllocId(2)};
        const PoolConfidence conf = aliveConfidence(c, allocs, alive);
        QCOMPARE(conf[size_t(Pool::Parameter)], 80); // (3*90 + 1*50) / 4
        QCOMPARE(conf[size_t(Pool::Activation)], 80);
        QCOMPARE(conf[size_t(Pool::Gradient)], -1);
        QCOMPARE(conf[size_t(Pool::CachedFree)], -1);
    }

    // A profiler trace shows memory from before it only as its opening total: those bytes count in
    // their pool's confidence at every moment, at the classifier's figure for them (below 50 %). A
    // 10 GiB total read as weights beside 1 GiB of weights at 90 % is a guess, not 90 % (before,
    // only the blocks counted, and the verdict advised sharding the 11 GiB).
    void untrackedBytesCountInTheirPool()
    {
        std::vector<Allocation> allocs(1);
        allocs[0].size = gib(1);
        Classification c;
        c.pool = {Pool::Parameter};
        c.confidence = {90};
        c.untrackedBytes = gib(10);
        c.untrackedPool = Pool::Parameter;
        c.untrackedConfidence = 40;
        const std::vector<AllocId> alive = {AllocId(0)};
        const PoolConfidence conf = aliveConfidence(c, allocs, alive);
        QCOMPARE(conf[size_t(Pool::Parameter)], 45); // (10*40 + 1*90) / 11
        PoolBytes b{};
        b[size_t(Pool::Parameter)] = gib(11);
        MomentEvidence ev;
        ev.confidence = conf;
        ev.bytesByEvidence[size_t(Pool::Parameter)][kEvidenceLifetime] = gib(1);
        const Verdict v = makeVerdict("At the peak", b, ev);
        QVERIFY2(v.advice.find("cannot name") != std::string::npos && v.advice.find("shard") == std::string::npos, v.advice.c_str());
    }

    void nothingAllocated()
    {
        const Verdict v = makeVerdict("At event #0", PoolBytes{});
        QCOMPARE(QString::fromStdString(v.sentence), QString("At event #0: nothing is allocated."));
    }

    // A wall only where there is one (issue 22): at an OOM, or near a known capacity; elsewhere the
    // verdict describes the largest pool.
    void wallOnlyAtOomOrNearCapacity()
    {
        PoolBytes b{};
        b[size_t(Pool::Activation)] = gib(6);
        b[size_t(Pool::Parameter)] = gib(2);
        MomentEvidence ev;
        ev.confidence.fill(90);
        ev.bytesByEvidence[size_t(Pool::Activation)][kEvidenceLifetime] = gib(6);
        ev.training = Known::Yes;
        const Verdict peak = makeVerdict("At the peak", b, ev);
        QVERIFY2(peak.advice.rfind("The largest pool is activations: checkpoint them", 0) == 0, peak.advice.c_str());
        ev.capacity = gib(10);
        ev.reserved = gib(8.5); // 85 % of capacity: not near enough
        QVERIFY(makeVerdict("At the peak", b, ev).advice.rfind("The largest pool is", 0) == 0);
        ev.reserved = gib(9.5);
        QVERIFY(makeVerdict("At the peak", b, ev).advice.rfind("The wall is activations", 0) == 0);
        ev.capacity = -1;
        ev.atOom = true;
        QVERIFY(makeVerdict("At the OOM", b, ev).advice.rfind("The wall is activations", 0) == 0);
    }

    // Below 50 % confidence no wall is named and no knob given; cached-free memory away from a wall
    // is memory kept for reuse, not "memory it cannot reuse".
    void guessesGiveNoAdvice()
    {
        PoolBytes b{};
        b[size_t(Pool::Parameter)] = gib(1.5);
        MomentEvidence ev;
        ev.history = false;
        ev.atOom = true;
        ev.confidence[size_t(Pool::Parameter)] = 40;
        ev.bytesByEvidence[size_t(Pool::Parameter)][kEvidenceLifetime] = gib(1.5);
        const Verdict v = makeVerdict("In the snapshot", b, ev);
        QVERIFY2(v.advice.rfind("The dump cannot name the wall: it is perhaps parameters, at 40% confidence", 0) == 0, v.advice.c_str());
        QVERIFY2(v.advice.find("ZeRO") == std::string::npos && v.advice.find("micro-batch") == std::string::npos, v.advice.c_str());

        PoolBytes f{};
        f[size_t(Pool::Activation)] = gib(0.01);
        f[size_t(Pool::CachedFree)] = gib(0.02);
        MomentEvidence away;
        away.confidence.fill(90);
        const Verdict cached = makeVerdict("At the peak", f, away);
        QCOMPARE(cached.dominant, Pool::CachedFree);
        QVERIFY2(cached.advice.find("cannot reuse") == std::string::npos && cached.advice.find("expandable_segments") == std::string::npos,
                 cached.advice.c_str());
        away.atOom = true;
        QVERIFY(makeVerdict("At the OOM", f, away).advice.find("expandable_segments") != std::string::npos);
    }

    // A mean confidence over 50 % with most of the pool's bytes guesses (a few sure weights beside
    // gigabytes the dump cannot tell from an earlier call's graph: eval_with_grad's frameless window)
    // names no wall either; with the guesses under half the bytes the verdict hedges as before.
    void mostlyGuessedGivesNoAdvice()
    {
        PoolBytes b{};
        b[size_t(Pool::Parameter)] = gib(3.0);
        MomentEvidence ev;
        ev.atOom = true;
        ev.confidence[size_t(Pool::Parameter)] = 52;
        ev.bytesByEvidence[size_t(Pool::Parameter)][kEvidenceLifetime] = gib(3.0);
        ev.guessedBytes[size_t(Pool::Parameter)] = gib(2.0);
        const Verdict v = makeVerdict("At the OOM", b, ev);
        QVERIFY2(v.advice.rfind("The dump cannot name the wall: it is perhaps parameters, but 2.00 GiB of its 3.00 GiB are a guess", 0) == 0,
                 v.advice.c_str());
        QVERIFY2(v.advice.find("precision") == std::string::npos && v.advice.find("shard") == std::string::npos, v.advice.c_str());
        ev.guessedBytes[size_t(Pool::Parameter)] = gib(1.0);
        const Verdict hedged = makeVerdict("At the OOM", b, ev);
        QVERIFY2(hedged.advice.rfind("The wall is probably parameters (classified with 52% confidence", 0) == 0, hedged.advice.c_str());
    }

    // Copies from before recording that nothing tells apart (kRoleIndistinctCopies): said first,
    // and the guess below 50 % gives no knob. Without such bytes, nothing of it is said.
    void indistinctCopiesAreSaid()
    {
        PoolBytes b{};
        b[size_t(Pool::Parameter)] = gib(30.38);
        b[size_t(Pool::Activation)] = gib(11.61);
        MomentEvidence ev;
        ev.confidence[size_t(Pool::Parameter)] = 40;
        ev.confidence[size_t(Pool::Activation)] = 65;
        ev.bytesByEvidence[size_t(Pool::Parameter)][kEvidenceLifetime | kEvidenceSize] = gib(30.38);
        ev.bytesByEvidence[size_t(Pool::Activation)][kEvidenceLifetime] = gib(11.61);
        ev.indistinctBytes = gib(30.37);
        const Verdict v = makeVerdict("At the peak", b, ev);
        QVERIFY2(v.caveat.rfind("This capture cannot tell parameters from gradients or optimizer state made before recording: 30.37 GiB", 0) == 0,
                 v.sentence.c_str());
        QVERIFY2(v.sentence.rfind(v.caveat, 0) == 0, v.sentence.c_str());
        QVERIFY2(v.advice.find("no advice is given") != std::string::npos, v.advice.c_str());
        QVERIFY2(v.advice.find("lower precision") == std::string::npos && v.advice.find("offload") == std::string::npos, v.advice.c_str());
        // Without k (an older Classification) the sentence says "several times over" and no split.
        QVERIFY2(v.caveat.find("several times over") != std::string::npos && v.caveat.find("by count") == std::string::npos,
                 v.caveat.c_str());
        // With k = 4 the count gives the split, and the sentence still says no layout names the blocks.
        ev.indistinctCopies = 4;
        const Verdict four = makeVerdict("At the peak", b, ev);
        QVERIFY2(four.caveat.find("every weight size 4 times (or a multiple of 4): by count a quarter, 7.59 GiB, are the parameters") !=
                     std::string::npos,
                 four.caveat.c_str());
        QVERIFY2(four.caveat.find("(15.18 GiB of optimizer state)") != std::string::npos, four.caveat.c_str());
        QVERIFY2(four.caveat.find("no stack, recorded step or segment layout says") != std::string::npos, four.caveat.c_str());
        QVERIFY2(four.advice.find("no advice is given") != std::string::npos, four.advice.c_str());
        ev.indistinctCopies = 3;
        QVERIFY2(makeVerdict("At the peak", b, ev).caveat.find("by count a third, 10.12 GiB") != std::string::npos,
                 makeVerdict("At the peak", b, ev).caveat.c_str());
        ev.indistinctBytes = 0;
        QVERIFY(makeVerdict("At the peak", b, ev).caveat.empty());
    }

    // Activations of calls that outlive the next call in a run without backward (grad on, outputs
    // held: RunFacts::graphsKeptAcrossCalls): no_grad / inference_mode first, checkpointing only if
    // the run trains. A training run (optimizer state seen) keeps the training advice alone.
    void graphsKeptWithoutBackwardNameNoGrad()
    {
        PoolBytes b{};
        b[size_t(Pool::Activation)] = gib(3.70);
        b[size_t(Pool::Parameter)] = gib(0.45);
        MomentEvidence ev;
        ev.confidence[size_t(Pool::Activation)] = 74;
        ev.bytesByEvidence[size_t(Pool::Activation)][kEvidenceLifetime] = gib(3.70);
        ev.backward = Known::No;
        ev.training = Known::No;
        ev.graphsKeptAcrossCalls = true;
        const Verdict v = makeVerdict("At the peak", b, ev);
        QVERIFY2(v.advice.find("run evaluation and inference under torch.no_grad() or torch.inference_mode()") != std::string::npos,
                 v.advice.c_str());
        QVERIFY2(v.advice.find("only if this run trains: checkpoint them") != std::string::npos, v.advice.c_str());
        ev.training = Known::Yes;
        QVERIFY(makeVerdict("At the peak", b, ev).advice.find("no_grad") == std::string::npos);
        // Several forwards that no backward followed, no graph seen (stop 48): no checkpointing;
        // no_grad only where grad mode was on.
        ev.training = Known::No;
        ev.graphsKeptAcrossCalls = false;
        ev.forwardPasses = 7;
        ev.gradMode = Known::No;
        const std::string noBackward = makeVerdict("At the peak", b, ev).advice;
        QVERIFY2(noBackward.find("no backward followed any of the 7 forwards, so checkpointing gives nothing back") != std::string::npos,
                 noBackward.c_str());
        QVERIFY2(noBackward.find("checkpoint them") == std::string::npos, noBackward.c_str());
        QVERIFY2(noBackward.find("where grad mode was on") != std::string::npos, noBackward.c_str());
        QVERIFY2(noBackward.find("cut the batch, the resolution or the sequence length") != std::string::npos, noBackward.c_str());
        // One forward (an OOM in a training step's first), a graph torn down (grad on: a forward-only
        // profile of a training model), or no pass at all: the training advice.
        for (auto change : {+[](MomentEvidence& e) { e.forwardPasses = 1; }, +[](MomentEvidence& e) { e.gradMode = Known::Yes; },
                            +[](MomentEvidence& e) { e.backward = Known::Unknown; }}) {
            MomentEvidence other = ev;
            change(other);
            QVERIFY(makeVerdict("At the peak", b, other).advice.find("checkpoint them") != std::string::npos);
        }
    }

    // At an OOM where what is alive plus the request exceeds what PyTorch could use (the allocator's
    // replay: nothing helps), the cache is no wall however large: the largest allocated pool is.
    void cacheIsNoWallWhenAliveAndRequestOverflow()
    {
        PoolBytes b{};
        b[size_t(Pool::Activation)] = gib(2.0);
        b[size_t(Pool::Parameter)] = gib(0.5);
        b[size_t(Pool::CachedFree)] = gib(5.0);
        MomentEvidence ev;
        ev.atOom = true;
        ev.confidence[size_t(Pool::Activation)] = 75;
        ev.bytesByEvidence[size_t(Pool::Activation)][kEvidenceLifetime] = gib(2.0);
        QCOMPARE(makeVerdict("At the OOM", b, ev).dominant, Pool::CachedFree);
        ev.overCapacityAlive = true;
        const Verdict v = makeVerdict("At the OOM", b, ev);
        QCOMPARE(v.dominant, Pool::Activation);
        QVERIFY2(v.advice.find("The wall is activations") != std::string::npos, v.advice.c_str());
        QVERIFY2(v.breakdown.find("cached free (reserved - allocated) 5.00 GiB") != std::string::npos, v.breakdown.c_str());
        // Nothing allocated at all: the cache is all there is to name.
        PoolBytes onlyCache{};
        onlyCache[size_t(Pool::CachedFree)] = gib(1.0);
        QCOMPARE(makeVerdict("At the OOM", onlyCache, ev).dominant, Pool::CachedFree);
    }

    // Outputs gathered on the device across calls (kRoleCollectedOutputs): where they are most of
    // "other", its advice is to move them to the host; where another pool (cached free at an OOM) is
    // the wall and they are a tenth of what is allocated, the same knob follows as a sentence of its
    // own; a smaller share, or none, says nothing of it.
    void collectedOutputsNameTheirKnob()
    {
        PoolBytes b{};
        b[size_t(Pool::Other)] = gib(0.31);
        b[size_t(Pool::Parameter)] = gib(0.10);
        b[size_t(Pool::Activation)] = gib(0.06);
        MomentEvidence ev;
        ev.atOom = true;
        ev.training = Known::Yes;
        ev.confidence[size_t(Pool::Other)] = 60;
        ev.confidence[size_t(Pool::Parameter)] = 92;
        ev.confidence[size_t(Pool::Activation)] = 75;
        ev.bytesByEvidence[size_t(Pool::Other)][kEvidenceLifetime | kEvidenceSize] = gib(0.31);
        ev.bytesByEvidence[size_t(Pool::Parameter)][kEvidenceFrames] = gib(0.10);
        ev.bytesByEvidence[size_t(Pool::Activation)][kEvidenceLifetime] = gib(0.06);
        const std::string knob = "move each call's outputs to the host as they come (Hugging Face Trainer: eval_accumulation_steps";
        // Other is the wall, and the collection is all of it.
        ev.collectedBytes = gib(0.31);
        const Verdict other = makeVerdict("At the OOM", b, ev);
        QCOMPARE(other.dominant, Pool::Other);
        QVERIFY2(other.advice.find("0.31 GiB are outputs the program gathers on the device across calls") != std::string::npos,
                 other.sentence.c_str());
        QVERIFY2(other.advice.find(knob) != std::string::npos, other.sentence.c_str());
        QVERIFY2(other.advice.find("add a rule that names them") == std::string::npos, other.sentence.c_str());
        // Less than half of other: the generic advice, and no sentence of its own either.
        ev.collectedBytes = gib(0.10);
        const Verdict part = makeVerdict("At the OOM", b, ev);
        QVERIFY2(part.advice.find("add a rule that names them") != std::string::npos, part.sentence.c_str());
        QVERIFY2(part.advice.find(knob) == std::string::npos, part.sentence.c_str());
        // Cached free is the wall: the collection's knob follows the allocator's answer.
        b[size_t(Pool::CachedFree)] = gib(0.68);
        ev.collectedBytes = gib(0.31);
        const Verdict cached = makeVerdict("At the OOM", b, ev);
        QCOMPARE(cached.dominant, Pool::CachedFree);
        const size_t wallAt = cached.advice.find("The wall is cached free memory");
        const size_t knobAt = cached.advice.find(knob);
        QVERIFY2(wallAt != std::string::npos && knobAt != std::string::npos && knobAt > wallAt, cached.sentence.c_str());
        QVERIFY2(cached.sentence.back() == '.', cached.sentence.c_str());
        // Under a tenth of what is allocated: not said.
        ev.collectedBytes = gib(0.04);
        QVERIFY2(makeVerdict("At the OOM", b, ev).advice.find(knob) == std::string::npos, makeVerdict("At the OOM", b, ev).sentence.c_str());
        ev.collectedBytes = 0;
        QVERIFY2(makeVerdict("At the OOM", b, ev).advice.find(knob) == std::string::npos, makeVerdict("At the OOM", b, ev).sentence.c_str());
    }

    // No sharding advice where the run shows no gradients and no optimizer; stale gradients where no
    // backward made them.
    void adviceFollowsTheRun()
    {
        PoolBytes b{};
        b[size_t(Pool::Parameter)] = gib(12);
        MomentEvidence ev;
        ev.atOom = true;
        ev.confidence.fill(90);
        ev.bytesByEvidence[size_t(Pool::Parameter)][kEvidenceFrames] = gib(12);
        ev.training = Known::No;
        const Verdict inference = makeVerdict("At the OOM", b, ev);
        QVERIFY2(inference.advice.find("ZeRO") == std::string::npos && inference.advice.find("FSDP") == std::string::npos &&
                     inference.advice.find("shard") == std::string::npos,
                 inference.advice.c_str());
        ev.training = Known::Yes;
        QVERIFY(makeVerdict("At the OOM", b, ev).advice.find("ZeRO-3/FSDP") != std::string::npos);
        PoolBytes g{};
        g[size_t(Pool::Gradient)] = gib(14.8);
        g[size_t(Pool::Parameter)] = gib(14.8) - 1;
        ev.bytesByEvidence[size_t(Pool::Gradient)][kEvidenceFrames] = gib(14.8);
        ev.backward = Known::No;
        const Verdict stale = makeVerdict("At the OOM", g, ev);
        QVERIFY2(stale.advice.find("zero_grad(set_to_none=True)") != std::string::npos && stale.advice.find("ZeRO") == std::string::npos,
                 stale.advice.c_str());
    }

    // blockzero's shape: parameters and their stale gradients tie, the parameters are named first,
    // and the knob is still to drop the gradients (before any advice on the weights), no sharding.
    void staleGradientsBesideParameters()
    {
        PoolBytes b{};
        b[size_t(Pool::Parameter)] = gib(14.82);
        b[size_t(Pool::Gradient)] = gib(14.82);
        MomentEvidence ev;
        ev.atOom = true;
        ev.history = false;
        ev.confidence.fill(85);
        ev.bytesByEvidence[size_t(Pool::Parameter)][kEvidenceFrames] = gib(14.82);
        ev.bytesByEvidence[size_t(Pool::Gradient)][kEvidenceFrames | kEvidenceSize] = gib(14.82);
        ev.gradientBytes = gib(14.82);
        const Verdict v = makeVerdict("At the OOM", b, ev);
        QCOMPARE(v.dominant, Pool::Parameter);
        QVERIFY2(v.advice.find("first, 14.82 GiB beside them are gradients the parameters still hold") != std::string::npos, v.advice.c_str());
        QVERIFY2(v.advice.find("the dump shows no backward that made them") != std::string::npos, v.advice.c_str()); // no history: Unknown
        QVERIFY2(v.advice.find("optimizer.zero_grad(set_to_none=True)") < v.advice.find("lower precision"), v.advice.c_str());
        for (const char* word : {"ZeRO", "FSDP", "shard"})
            QVERIFY2(v.advice.find(word) == std::string::npos, v.advice.c_str());
        // With a backward in the run, gradients are the training's own: no such advice.
        ev.backward = Known::Yes;
        ev.history = true;
        ev.training = Known::Yes;
        QVERIFY(makeVerdict("At the OOM", b, ev).advice.find("still hold") == std::string::npos);
    }
};

QTEST_GUILESS_MAIN(TestVerdict)
#include "test_verdict.moc"
