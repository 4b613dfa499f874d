// Ring-buffer windows of real dumps against the whole dump (stop 54). A capture with max_entries, or
// one started at a later step, keeps only the last entries of a longer run; the corpus has no truth,
// but the whole dump is the reference its window must agree with: the blocks alive at the end are
// the same blocks in both. `poolscope_window_check` tabulates every corpus file (docs/accuracy.md);
// these tests hold the readings it moved. Skipped without ../shared/corpus.
#include "core/classify/classifier.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/shipped_rules.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "support/corpus.h"

#include <QtTest>

#include <cstdlib>
#include <map>

using namespace poolscope;

namespace {

std::shared_ptr<const Trace> withFrames(const Trace& t, FrameKeep keep)
{
    RedactOptions o;
    o.frames = keep;
    return redact(t, o);
}

bool aliveAtEnd(const DeviceTrace& dev, const Allocation& a)
{
    return a.aliveAfter(EventIndex(dev.events.count()) - 1);
}

// The whole dump and its window (the last `kept` share of its entries), both with `keep`'s frames,
// classified; and the whole dump's pool of each block alive at its end, by address.
struct Pair {
    std::shared_ptr<const Trace> whole, window;
    Classification all, cut;
    std::map<uint64_t, Pool> poolAtEnd;
    const DeviceTrace& dev() const { return window->devices.at(0); }
};

Pair windowOf(const Trace& t, double kept, FrameKeep keep)
{
    Pair p;
    p.whole = withFrames(t, keep);
    p.window = withFrames(*testing::keepLastEntries(t, kept), keep);
    p.all = classify(*p.whole, p.whole->devices.at(0), testing::shippedRules());
    p.cut = classify(*p.window, p.dev(), testing::shippedRules());
    const DeviceTrace& w = p.whole->devices.at(0);
    for (size_t i = 0; i < p.all.size(); ++i)
        if (aliveAtEnd(w, w.allocations[i]))
            p.poolAtEnd[w.allocations[i].address] = p.all.pool[i];
    return p;
}

// Bytes alive at the window's end that the whole dump files as `was`, and of them those the window
// files as `now`; `madeInWindow` counts only blocks the window saw made.
std::pair<int64_t, int64_t> bytesOf(const Pair& p, Pool was, Pool now, bool madeInWindow = false)
{
    int64_t total = 0, moved = 0;
    for (size_t i = 0; i < p.cut.size(); ++i) {
        const Allocation& a = p.dev().allocations[i];
        const auto it = p.poolAtEnd.find(a.address);
        if (!aliveAtEnd(p.dev(), a) || it == p.poolAtEnd.end() || it->second != was || (madeInWindow && a.preexisting()))
            continue;
        total += a.size;
        moved += p.cut.pool[i] == now ? a.size : 0;
    }
    return {total, moved};
}

// Bytes alive at the window's end that the whole dump files as `pool`, and that the window files so.
std::pair<int64_t, int64_t> poolTotals(const Pair& p, Pool pool)
{
    int64_t whole = 0, window = 0;
    for (size_t i = 0; i < p.cut.size(); ++i) {
        const Allocation& a = p.dev().allocations[i];
        const auto it = p.poolAtEnd.find(a.address);
        if (!aliveAtEnd(p.dev(), a) || it == p.poolAtEnd.end())
            continue;
        whole += it->second == pool ? a.size : 0;
        window += p.cut.pool[i] == pool ? a.size : 0;
    }
    return {whole, window};
}

} // namespace

class TestCorpusWindows : public QObject {
    Q_OBJECT
private slots:
    // zl_decomfl's last half: the window opens between two forwards, where the zeroth-order
    // estimator rewrites its per-parameter state out of place. The state's last versions are blocks
    // from before recording the opening stretch lets go of, its next versions blocks made before the
    // window's first forward and kept: 306 MiB of them read as weights made before the first forward
    // and 315 MiB as unknown (50 % of the bytes the whole dump files elsewhere). The stretch before
    // the first pass is now read as the whole dump reads any stretch between passes: a new version
    // made before the old one is let go of, and read by the next forward (a gradient made again after
    // zero_grad is not). What the window never touched (the state of weights its stretch did not
    // rewrite) stays a guess.
    void zerothOrderStateInAWindow_data()
    {
        QTest::addColumn<int>("keep");
        QTest::newRow("all") << int(FrameKeep::All);
        QTest::newRow("python") << int(FrameKeep::Python);
    }
    void zerothOrderStateInAWindow()
    {
        QFETCH(int, keep);
        const auto t = testing::loadCorpus("zl_decomfl.pickle");
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, 0.5, FrameKeep(keep));
        const auto [state, kept] = bytesOf(p, Pool::OptimizerState, Pool::OptimizerState, true);
        QVERIFY(state > int64_t(250) << 20);
        QVERIFY2(kept * 100 >= state * 99, qPrintable(QString("%1 of %2 bytes of state stay state").arg(kept).arg(state)));
    }

    // wed_training's windows with Python frames only open in the backward or at the step: the
    // gradients the backward made before the window were made on the autograd engine's thread (no
    // frame) beside weights made before recording (no frame either), so 236 to 1,536 MiB of gradients
    // read as weights (3.7 to 24.3 % of the bytes alive at the end). At the window's optimizer step every
    // trained weight has its gradient: per size the stackless blocks are W weights and W - G
    // gradients (G made in the window), and Adam's two buffers per weight, counted at the window's end
    // (the step rewrites them out of place, so old and new overlap for a moment), confirm W.
    // Frameless too since stop 61 (the count needs no frame; before, 1,460 MiB of wed_training_256's
    // last half and 4.1 GiB of k_ctx128_fullstep's read as weights).
    void gradientsFromBeforeThePythonWindow_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<double>("kept");
        QTest::addColumn<int>("keep");
        QTest::addColumn<int>("percent"); // at least this share of the gradients' bytes stays
        QTest::newRow("wed_training_128 last 20 %") << "wed_training_128.pickle" << 0.2 << int(FrameKeep::Python) << 98;
        QTest::newRow("wed_training_128 last 50 %") << "wed_training_128.pickle" << 0.5 << int(FrameKeep::Python) << 98;
        QTest::newRow("wed_training_256 last 50 %") << "wed_training_256.pickle" << 0.5 << int(FrameKeep::Python) << 98;
        // 97.5 %: 42 MiB of gradients of no weight's size read as scratch, frames or not.
        QTest::newRow("wed_training_256 last 50 %, frameless") << "wed_training_256.pickle" << 0.5 << int(FrameKeep::None) << 97;
        QTest::newRow("k_ctx128_fullstep last 50 %, frameless") << "k_ctx128_fullstep.pickle" << 0.5 << int(FrameKeep::None) << 98;
        // Its backward's first 131 events read as no pass without frames: G counts what the window
        // made before its step and still holds at it (1,104 MiB of gradients read as weights before).
        QTest::newRow("wed_training_128 last 50 %, frameless") << "wed_training_128.pickle" << 0.5 << int(FrameKeep::None) << 95;
    }
    void gradientsFromBeforeThePythonWindow()
    {
        QFETCH(QString, file);
        QFETCH(double, kept);
        QFETCH(int, keep);
        QFETCH(int, percent);
        const auto t = testing::loadCorpus(file);
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, kept, FrameKeep(keep));
        const auto [gradients, still] = bytesOf(p, Pool::Gradient, Pool::Gradient);
        QVERIFY(gradients > int64_t(1) << 30);
        QVERIFY2(still * 100 >= gradients * percent, qPrintable(QString("%1 of %2 bytes of gradients stay gradients").arg(still).arg(gradients)));
    }

    // Which same-size block is the gradient from before the window: k_ctx256_fullstep's windows hold
    // 96 weights of 100 MiB and 36 (last half) or 86 (last fifth) such gradients. The latest made
    // lie next to the window's first new segment, against the driver's direction (here: right above
    // it, the window's segments going down), while the weights, made at the process's start, lie
    // 60 GiB of address space lower; the lowest addresses (the latest by the direction alone) were
    // the weights: 18.6 and 40.0 % of the bytes swapped, then 2.6 and 5.8 %. The 25 MiB weights
    // interleave with their gradients' addresses; each fills a 26 MiB segment cut to it, alone, 128
    // such blocks for 128 weights, while the gradients share 32 and 40 MiB segments: 0.0 % since
    // stop 63.
    void gradientsFromBeforeTheWindowBesideItsFirstSegment_data()
    {
        QTest::addColumn<double>("kept");
        QTest::addColumn<int>("keep");
        for (const auto& [name, keep] : {std::pair<const char*, FrameKeep>{"python", FrameKeep::Python}, {"frameless", FrameKeep::None}}) {
            QTest::newRow((std::string("last 50 %, ") + name).c_str()) << 0.5 << int(keep);
            QTest::newRow((std::string("last 20 %, ") + name).c_str()) << 0.2 << int(keep);
        }
    }
    void gradientsFromBeforeTheWindowBesideItsFirstSegment()
    {
        QFETCH(double, kept);
        QFETCH(int, keep);
        const auto t = testing::loadCorpus("k_ctx256_fullstep.pickle");
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, kept, FrameKeep(keep));
        const auto [gradients, still] = bytesOf(p, Pool::Gradient, Pool::Gradient);
        const auto [weights, stay] = bytesOf(p, Pool::Parameter, Pool::Parameter);
        QVERIFY(gradients > int64_t(8) << 30 && weights > int64_t(8) << 30);
        QVERIFY2(still * 100 >= gradients * 99, qPrintable(QString("%1 of %2 bytes of gradients stay gradients").arg(still).arg(gradients)));
        QVERIFY2(stay * 100 >= weights * 99, qPrintable(QString("%1 of %2 bytes of weights stay weights").arg(stay).arg(weights)));
    }

    // Windows that open inside a backward, without frames (structural_window_backward.h): the
    // forward ran before the window, so what it saved are blocks from before recording that the
    // engine lets go of while it makes each weight's gradient. No rise, so no swing; the layers'
    // repetition read as forwards (wed_training_128's last 80 %: 1,251 MiB of the gradients the
    // window made were unknown, and Lightning's last 20 %: 212 MiB).
    void aWindowOpeningInABackward_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<double>("kept");
        QTest::newRow("wed_training_128 last 80 %") << "wed_training_128.pickle" << 0.8;
        QTest::newRow("lightning_fit last 20 %") << "gpu_runs/lightning_fit.pickle.gz" << 0.2; // a truth run, in the repository
    }
    void aWindowOpeningInABackward()
    {
        QFETCH(QString, file);
        QFETCH(double, kept);
        const auto t = file.startsWith("gpu_runs/") ? load(POOLSCOPE_TEST_DATA "/" + file.toStdString()) : testing::loadCorpus(file);
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, kept, FrameKeep::None);
        const auto [gradients, still] = bytesOf(p, Pool::Gradient, Pool::Gradient, true);
        QVERIFY(gradients > int64_t(200) << 20);
        QVERIFY2(still * 100 >= gradients * 98, qPrintable(QString("%1 of %2 bytes of gradients stay gradients").arg(still).arg(gradients)));
    }

    // wed_inference_256 without frames, every window: a no_grad forward the window opens inside keeps
    // one block past its end, its output, of 4 MiB, the size of every 1024 x 1024 fp32 weight. That
    // one block made the 96 weights of that size "earlier layers' activations" (464 MiB, 28.6 % of
    // the bytes alive at the end). A layer's shape is kept once per layer: a size the recorded part
    // keeps once shows no layer that made it.
    void aForwardsOutputIsNoLayerPattern_data()
    {
        QTest::addColumn<double>("kept");
        QTest::newRow("last 80 %") << 0.8;
        QTest::newRow("last 20 %") << 0.2;
    }
    void aForwardsOutputIsNoLayerPattern()
    {
        QFETCH(double, kept);
        const auto t = testing::loadCorpus("wed_inference_256.pickle");
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, kept, FrameKeep::None);
        const auto [weights, asActivations] = bytesOf(p, Pool::Parameter, Pool::Activation);
        QVERIFY(weights > int64_t(1) << 30);
        QCOMPARE(asActivations, int64_t(0));
    }

    // k_ctx128_fullstep's last half without frames opens in the backward, which the frameless reading
    // takes for a forward: its gradients, kept to the step, have the weights' sizes, and 13.1 GiB of
    // weights read as that forward's earlier layers. An optimizer step reads gradients a backward
    // made; a "forward" the step follows with no backward between is no forward.
    void aPassTheStepFollowsIsNoForward()
    {
        const auto t = testing::loadCorpus("k_ctx128_fullstep.pickle");
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, 0.5, FrameKeep::None);
        const auto [weights, asActivations] = bytesOf(p, Pool::Parameter, Pool::Activation);
        QVERIFY(weights > int64_t(12) << 30);
        QCOMPARE(asActivations, int64_t(0));
    }

    // The same window's opening stretch: the frameless reading took the backward for a forward, so
    // its gradients, kept to the step, were "forward-kept" activations (7.6 GiB). The annotated
    // AdamW step follows it with nothing between, and a step reads what a backward made: the stretch
    // is that backward (phase_backward_end.h, openingBackwardBeforeANamedStep).
    void anOpeningStretchANamedStepFollows()
    {
        const auto t = testing::loadCorpus("k_ctx128_fullstep.pickle");
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, 0.5, FrameKeep::None);
        QCOMPARE(int(p.cut.phases.phase.front()), int(Phase::Backward));
        const auto [gradients, asActivations] = bytesOf(p, Pool::Gradient, Pool::Activation);
        QVERIFY(gradients > int64_t(8) << 30);
        QCOMPARE(asActivations, int64_t(0));
    }

    // niu_fb_200's author's Adam rebuilds every parameter out of place in step (p.data = ...), after
    // its two moments: a window loses the module constructor the whole dump traces each parameter's
    // chain back to, and the blocks from before recording the step lets go of all read as the
    // previous step's state (a guess at 78 %): 86.6 MiB of weights read as optimizer state, sure. No
    // block of those sizes but the gradients lives through the step, so the parameters were rebuilt
    // too, and the update, computed from the new moments, is the last block of each parameter's
    // turn. wed_training_256's AdamW rewrites its moments out of place and its weights in place:
    // its weights live through the step, and nothing moves.
    void parametersRebuiltAfterTheirState_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("rebuilt");
        QTest::newRow("niu_fb_200") << "niu_fb_200.pickle" << true;
        // A block of the embedding's size that the next forward lets go of (the last iteration's
        // output) lives through the step: it read as a weight the step left alone, and the
        // embedding and its head stayed state (39.1 MiB, stop 55).
        QTest::newRow("niu_fb_100") << "niu_fb_100.pickle" << true;
        QTest::newRow("wed_training_256") << "wed_training_256.pickle" << false;
    }
    void parametersRebuiltAfterTheirState()
    {
        QFETCH(QString, file);
        QFETCH(bool, rebuilt);
        const auto t = testing::loadCorpus(file.toUtf8().constData());
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, 0.5, FrameKeep::All);
        const auto [weights, stayWeights] = bytesOf(p, Pool::Parameter, Pool::Parameter);
        const auto [state, stayState] = bytesOf(p, Pool::OptimizerState, Pool::OptimizerState);
        QVERIFY(weights > 0 && state > 0);
        QCOMPARE(stayWeights, weights);
        QCOMPARE(stayState, state);
        int64_t byTurn = 0;
        for (size_t i = 0; i < p.cut.size(); ++i)
            if (p.cut.rules[p.cut.rule[i]].name == "step-rebuilds-parameter-last-in-its-turn")
                byTurn += p.dev().allocations[i].size;
        QCOMPARE(byTurn > 0, rebuilt);
    }

    // The last fifth opens in the last backward: the gradients it made before the window live
    // through the step as blocks from before recording (a Python-only capture records no frame on
    // the engine's thread), so a block of each rebuilt size lived through the step and the
    // parameters seemed not rebuilt: 86.6 MiB of weights read as state and 35 to 51 MiB of
    // gradients as weights (31 to 35 % of the bytes). With the window's own gradients they make
    // exactly one per turn the step rebuilt: gradients, and the parameters were rebuilt (stop 61).
    // The size ledger runs twice, and the structural passes between find gradients the rules did not:
    // in llama_autocast_adamw_midbackward's last half, frameless, the embedding's gradient (made in
    // the window's first backward) reads as one only by structure, the head's (made before the
    // window) already did. The first count gave the 125 MiB size one gradient, two moments and three
    // weights for what are two weights and four moments; the second run splits that size afresh
    // (the state's bytes were 12.0 % short of the whole dump's, now within 2.1 %).
    void secondLedgerRunCountsAgain()
    {
        const auto t = load(POOLSCOPE_TEST_DATA "/gpu_runs/llama_autocast_adamw_midbackward.pickle.gz");
        const Pair p = windowOf(*t, 0.5, FrameKeep::None);
        const auto [reference, window] = poolTotals(p, Pool::OptimizerState);
        int64_t big = 0;
        for (size_t i = 0; i < p.cut.size(); ++i)
            big += aliveAtEnd(p.dev(), p.dev().allocations[i]) && p.dev().allocations[i].size == 131072000 &&
                   p.cut.pool[i] == Pool::OptimizerState;
        QVERIFY(reference > int64_t(1) << 30);
        QCOMPARE(big, int64_t(4)); // the head's and the embedding's two moments each
        QVERIFY2(std::llabs(window - reference) * 100 <= reference * 3,
                 qPrintable(QString("window %1 B of state, whole dump %2 B").arg(window).arg(reference)));
    }

    // A window that opens partway through a forward under autocast, frameless: the earlier layers'
    // casts are blocks from before recording, read as weights, and the forward's own casts then
    // covered too few weights for the count (k_ctx128_forward_mixed's last half: 3.2 GiB of casts
    // read as weights and 3.2 GiB as activations, 35.2 % of the bytes; its last fifth 28.2 %). The
    // two together come to exactly one per weight of each cast shape (structural_casts_by_count.cpp).
    void castsFromBeforeTheWindow_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<double>("kept");
        QTest::addColumn<qint64>("lookAlikes"); // activations of a cast's size the count may take
        for (const char* f : {"k_ctx128_forward_mixed.pickle", "k_ctx256_forward_mixed.pickle"})
            for (double kept : {0.5, 0.2})
                QTest::newRow(qPrintable(QString("%1 last %2 %").arg(f).arg(int(kept * 100)))) << QString(f) << kept << (qint64(1) << 20);
        // Each weight four times over from before recording (weight, gradient, two moments: one weight
        // per four blocks), and casts the allocator did not split, larger than they asked for (read as
        // casts of no weight, so as surplus activations): 7.0 % of the bytes, now one 19.5 MiB output.
        for (double kept : {0.5, 0.2})
            QTest::newRow(qPrintable(QString("nh_forward_mixed last %1 %").arg(int(kept * 100)))) << QString("nh_forward_mixed.pickle") << kept
                                                                                                << (qint64(20) << 20);
    }
    void castsFromBeforeTheWindow()
    {
        QFETCH(QString, file);
        QFETCH(double, kept);
        QFETCH(qint64, lookAlikes);
        const auto t = testing::loadCorpus(file.toUtf8().constData());
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, kept, FrameKeep::None);
        const auto [casts, stay] = bytesOf(p, Pool::CastCache, Pool::CastCache);
        const auto [activations, becameCasts] = bytesOf(p, Pool::Activation, Pool::CastCache);
        const auto [weights, weightsStay] = bytesOf(p, Pool::Parameter, Pool::Parameter);
        QVERIFY(casts > int64_t(2) << 30 && activations > int64_t(1) << 30);
        QVERIFY2(stay * 100 >= casts * 98, qPrintable(QString("%1 of %2 bytes of casts stay casts").arg(stay).arg(casts)));
        // (a few KiB: a norm's output of a norm weight's cast size, as in the whole dump frameless)
        QVERIFY2(becameCasts < lookAlikes, qPrintable(QString("%1 bytes of activations read as casts").arg(becameCasts)));
        QCOMPARE(weightsStay, weights);
    }

    // A window that opens in a backward lets go of blocks from before recording, which the curves the
    // swings are read on do not count: no swing at all, so the rise the dump ends in was looked for
    // from the window's first event, and the forward the OOM ends in read as no pass (its weight
    // casts as the step's: llama_autocast_adamw_oom's last 80 %, frameless, 241 MiB). It starts
    // after the last optimizer step or zero_grad read so far.
    void theForwardAfterAWindowsBackward()
    {
        const auto t = load(POOLSCOPE_TEST_DATA "/gpu_runs/llama_autocast_adamw_oom.pickle.gz");
        const Pair p = windowOf(*t, 0.8, FrameKeep::None);
        const auto [casts, stay] = bytesOf(p, Pool::CastCache, Pool::CastCache);
        QVERIFY(casts > int64_t(200) << 20);
        QVERIFY2(stay * 100 >= casts * 99, qPrintable(QString("%1 of %2 bytes of casts stay casts").arg(stay).arg(casts)));
        QCOMPARE(int(p.cut.phases.phase.back()), int(Phase::Forward));
    }

    // Gradients from before recording that zero_grad lets go of are counted at their own size: a block
    // still held at the end may sit at the address one of them left, and its requested bytes belong to
    // it alone (the same last fifth: the 11 MiB gradients counted at the size of the activations made
    // where they were, so the ledger saw no gradient of the MLP weights' size and left their moments
    // weights: the state's bytes were 37 % short of the whole dump's).
    void stateCountedByTheGradientsZeroGradLetGo()
    {
        const auto t = load(POOLSCOPE_TEST_DATA "/gpu_runs/llama_autocast_adamw_oom.pickle.gz");
        const Pair p = windowOf(*t, 0.2, FrameKeep::None);
        const auto [reference, window] = poolTotals(p, Pool::OptimizerState);
        QVERIFY(reference > int64_t(1) << 30);
        QVERIFY2(std::llabs(window - reference) * 100 <= reference * 5,
                 qPrintable(QString("window %1 B of state, whole dump %2 B").arg(window).arg(reference)));
    }

    // A dump taken inside a backward, cut to its last fifth: the window opens in the forward before
    // it, whose saved tensors predate recording, so nothing showed the engine still letting go of what
    // the forward saved after the walk the stream read, and the backward's last 376 events (the
    // remaining layers' gradients among them) read as an optimizer step: 57 MiB of gradients as its
    // state with the file's own Python frames (4.7 % of the bytes against the whole dump), 274 MiB
    // frameless. A step lets go of its scratch and of the state it rewrites, and keeps no gradient.
    void aBackwardTheDumpEndsIn_data()
    {
        QTest::addColumn<int>("keep");
        QTest::newRow("the file's frames (Python only)") << int(FrameKeep::All);
        QTest::newRow("frameless") << int(FrameKeep::None);
    }
    void aBackwardTheDumpEndsIn()
    {
        QFETCH(int, keep);
        const auto t = load(POOLSCOPE_TEST_DATA "/gpu_runs/llama_autocast_adamw_midbackward.pickle.gz");
        const Pair p = windowOf(*t, 0.2, FrameKeep(keep));
        QCOMPARE(int(p.cut.phases.phase.back()), int(Phase::Backward));
        for (const PhaseTimeline::Run& r : p.cut.phases.runs)
            QVERIFY2(r.phase != Phase::OptimizerStep, qPrintable(QString("a step at %1-%2").arg(r.first).arg(r.last)));
        const auto [gradients, stay] = bytesOf(p, Pool::Gradient, Pool::Gradient, true);
        QVERIFY(gradients > int64_t(100) << 20);
        QCOMPARE(stay, gradients);
    }

    // The same run's last fifth holds only the end of a step and the forward the OOM ends in; its
    // layers' scratch, against a threshold that forward alone sets, read as six forwards, and what
    // the layers made between them as no pass (688 MiB unknown). After the last zero_grad a training
    // run's next pass is one forward, and each piece keeps its outputs to the dump's end.
    void oneForwardAfterTheLastZeroGrad()
    {
        const auto t = load(POOLSCOPE_TEST_DATA "/gpu_runs/llama_autocast_adamw_oom.pickle.gz");
        const Pair p = windowOf(*t, 0.2, FrameKeep::None);
        int forwards = 0;
        bool afterZeroGrad = false;
        for (const PhaseTimeline::Run& r : p.cut.phases.runs) {
            afterZeroGrad = afterZeroGrad || r.phase == Phase::ZeroGrad;
            forwards += afterZeroGrad && r.phase == Phase::Forward;
        }
        QVERIFY(afterZeroGrad);
        QCOMPARE(forwards, 1);
        const auto [activations, unknown] = bytesOf(p, Pool::Activation, Pool::Unknown, true);
        QVERIFY(activations > int64_t(500) << 20);
        QVERIFY2(unknown * 2 < activations, qPrintable(QString("%1 of %2 bytes of activations unknown").arg(unknown).arg(activations)));
    }

    void gradientsBesideRebuiltParameters_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("niu_fb_100") << "niu_fb_100.pickle";
        QTest::newRow("niu_fb_150") << "niu_fb_150.pickle";
        QTest::newRow("niu_fb_200") << "niu_fb_200.pickle";
    }
    void gradientsBesideRebuiltParameters()
    {
        QFETCH(QString, file);
        const auto t = testing::loadCorpus(file.toUtf8().constData());
        if (!t)
            QSKIP("../shared/corpus not available");
        const Pair p = windowOf(*t, 0.2, FrameKeep::Python);
        const auto [weights, stayWeights] = bytesOf(p, Pool::Parameter, Pool::Parameter);
        const auto [gradients, stayGradients] = bytesOf(p, Pool::Gradient, Pool::Gradient);
        QVERIFY(weights > int64_t(80) << 20 && gradients > int64_t(30) << 20);
        QVERIFY2(stayWeights * 100 >= weights * 99, qPrintable(QString("%1 of %2 bytes of weights stay").arg(stayWeights).arg(weights)));
        QVERIFY2(stayGradients * 100 >= gradients * 99, qPrintable(QString("%1 of %2 bytes of gradients stay").arg(stayGradients).arg(gradients)));
    }
};

QTEST_GUILESS_MAIN(TestCorpusWindows)
#include "test_corpus_windows.moc"
