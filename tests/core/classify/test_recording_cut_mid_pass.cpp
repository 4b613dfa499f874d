// Recordings that begin or end inside a pass (stops 50-51). A ring buffer (max_entries) or
// recording started at a later step cuts the history anywhere: mid-backward, mid-call of an
// evaluation loop; a dump from a hook or at an OOM ends it anywhere. The copies come from real runs
// on an H200 (tests/data/gpu_runs, Python frames only) with their early entries dropped
// (ring_buffer.h), as written or with their frames redacted; each run's truth scores them.
#include "core/classify/gpu_truth.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/shipped_rules.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::gpu_truth;
using poolscope::testing::shippedRules;

namespace {

const std::string kDir = POOLSCOPE_TEST_DATA "/gpu_runs/";

int64_t misfiledBytes(const DeviceTrace& dev, const Score& s, Pool truth, Pool got, bool bornInWindowOnly = false)
{
    int64_t bytes = 0;
    for (const Misfiled& m : s.misfiled)
        if (m.truth == truth && m.got == got && !(bornInWindowOnly && dev.allocations[m.allocation].preexisting()))
            bytes += dev.allocations[m.allocation].size;
    return bytes;
}

// A run's copy with only the last `kept` share of its entries (as written, or with its frames
// redacted: `copy` as in gpu_truth.h), classified and scored by its truth.
struct Cut {
    std::shared_ptr<const Trace> trace;
    Classification c;
    Score s;
    const DeviceTrace& dev() const { return trace->devices.at(0); }
};

Cut lastEntries(const std::string& run, double kept, std::string_view copy = "all")
{
    Cut cut;
    cut.trace = copyOf(testing::keepLastEntries(*load(kDir + run + ".pickle.gz"), kept), copy, shippedRules());
    cut.c = classify(*cut.trace, cut.dev(), shippedRules());
    cut.s = score(cut.dev(), cut.c, readTruth(kDir + run + ".truth.json.gz"));
    return cut;
}

// Data rows of a test run once per copy of the frames (gpu_truth.h's names), in a "copy" column.
void copyRows(std::initializer_list<const char*> copies)
{
    QTest::addColumn<QString>("copy");
    for (const char* copy : copies)
        QTest::newRow(copy) << QString(copy);
}

size_t forwardRuns(const Classification& c)
{
    size_t n = 0;
    for (const auto& r : c.phases.runs)
        n += r.phase == Phase::Forward ? 1 : 0;
    return n;
}

} // namespace

class TestRecordingCutMidPass : public QObject {
    Q_OBJECT
private slots:
    // adam_step_oom's last half begins mid-backward: the engine's events (no frame, where the
    // program's record Python frames) come first, then the backward call returns (its frames name
    // it) and the optimizer step runs out of memory. The leading events were Unknown, so the
    // embedding's gradient the engine made there (125 MiB) was `unknown` (25.1 % of the named bytes
    // wrong); they are the backward's.
    void engineEventsBeforeTheBackwardReturns()
    {
        const Cut cut = lastEntries("adam_step_oom", 0.5);
        const DeviceTrace& dev = cut.dev();
        const Classification& c = cut.c;
        EventIndex firstFramed = kNoEvent;
        for (EventIndex e = 0; e < EventIndex(dev.eventCount()) && firstFramed == kNoEvent; ++e)
            if (c.phases.source[size_t(e)] == PhaseSource::Frames)
                firstFramed = e;
        QVERIFY(firstFramed > 100);
        QCOMPARE(c.phases.phase[size_t(firstFramed)], Phase::Backward);
        for (EventIndex e = 0; e < firstFramed; ++e)
            QVERIFY2(c.phases.phase[size_t(e)] == Phase::Backward, std::to_string(e).c_str());
        QCOMPARE(misfiledBytes(dev, cut.s, Pool::Gradient, Pool::Unknown), int64_t(0));
        QVERIFY2(cut.s.wrongShare() <= 0.13, std::to_string(cut.s.wrongShare()).c_str());
    }

    // hf_trainer_eval's last 20 % begins in the training step's backward. Once the engine's events
    // there are the backward's, the embedding's gradient counts as one per step, and the size ledger
    // (state hidden among stackless blocks from before recording) took one of the two stackless
    // 126 MiB parameters for Adam state, though the state predates the window with its own frames.
    void noStateHidesWhereTheStateKeptItsFrames()
    {
        const Cut cut = lastEntries("hf_trainer_eval", 0.2);
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::Parameter, Pool::OptimizerState), int64_t(0));
        QVERIFY2(cut.s.wrongShare() <= 0.01, std::to_string(cut.s.wrongShare()).c_str());
    }

    // eval_with_grad keeps each call's logits with grad on; a cut recording opens inside a call (the
    // last 80 % and 60 %: inside a layer). The calls after it were one forward, so the library
    // cache's keys and values (made afresh by each call, held by the graph) read as a KV cache:
    // 256 MiB, 7.9 %. The model's top-level forward going back to its first line shows each call.
    // (Those the cut call made before the recording have no birth to read: they stay as they were.)
    void callsOfAnEvaluationLoopCutMidCall_data()
    {
        QTest::addColumn<double>("kept");
        QTest::addColumn<int>("forwards");
        QTest::addColumn<double>("most");
        QTest::newRow("last 80 %") << 0.8 << 4 << 0.016;
        QTest::newRow("last 60 %") << 0.6 << 3 << 0.031;
    }
    void callsOfAnEvaluationLoopCutMidCall()
    {
        QFETCH(double, kept);
        QFETCH(int, forwards);
        QFETCH(double, most);
        const Cut cut = lastEntries("eval_with_grad", kept);
        QCOMPARE(forwardRuns(cut.c), size_t(forwards));
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::Activation, Pool::KvCache, true), int64_t(0));
        QVERIFY2(cut.s.wrongShare() <= most, std::to_string(cut.s.wrongShare()).c_str());
    }

    // The last half of the same loop opens where its third call begins and holds two whole calls.
    // Calls were confirmed only from three on (the first may make one-off state), so the two read as
    // one forward; the first of them makes exactly what the second does, so it made nothing one-off.
    void twoWholeCallsOfAnEvaluationLoop()
    {
        const Cut cut = lastEntries("eval_with_grad", 0.5);
        QCOMPARE(forwardRuns(cut.c), size_t(2));
    }

    // The same loop dumped inside its first call (the first 20 % of its entries): the layers move
    // back to their first line too, and every layer keeps what it made (grad on). That is one call
    // that opens before its loop, not calls: it stays one forward.
    void aFirstCallIsNotSplitIntoLayers()
    {
        const auto original = load(kDir + "eval_with_grad.pickle.gz");
        const auto t = testing::keepFirstEntries(*original, 0.2);
        const DeviceTrace& dev = t->devices.at(0);
        const Classification c = classify(*t, dev, shippedRules());
        QCOMPARE(forwardRuns(c), size_t(1));
    }

    // vit_fp16_scaler_sgd is dumped from a backward hook of its sixth block of twelve; its last half,
    // without frames. The engine has let go of the later blocks' saved tensors only, so the first it
    // let go of was made by block 6, and the forward read began there: blocks 0 to 5's saved tensors
    // (2.5 GiB, the same sizes block by block) were made in no phase and `unknown` (85.1 % of the
    // named bytes wrong). The forward begins where the first of those sizes still held was made.
    // Since stop 57 the size ledger also splits the stackless weights from their momentum buffers
    // (two per gradient): the pool totals come right (13.2 % off before, 4.6 % after) while which
    // same-size block is the buffer rests on an address guess (this window shows no segment made),
    // so single blocks land wrong more often (13.2 % of the named bytes before, 19.5 % after).
    void aBackwardTheDumpCutsHoldsTheEarlierLayers()
    {
        const Cut cut = lastEntries("vit_fp16_scaler_sgd", 0.5, "none");
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::Activation, Pool::Unknown), int64_t(0));
        QVERIFY2(cut.s.wrongShare() <= 0.21, std::to_string(cut.s.wrongShare()).c_str());
        QVERIFY2(double(cut.s.totalsOff()) <= 0.06 * double(cut.s.named), std::to_string(cut.s.totalsOff()).c_str());
    }

    // A ring buffer's stackless blocks from before recording hold, beside the weights and of the
    // same sizes, Adam's moments (without frames) or the gradients of a backward the window opens
    // in (Python frames only: the engine's thread records none). Which block of a size is the
    // weight nothing in the dump says, so those are no parameters at 70 % or more (the last half of
    // hf_trainer_eval without frames: 704 MiB of state were parameters at 92 %, 66.4 % of the named
    // bytes; adam_step_oom's: 213 MiB of gradients, 11.8 %). At most 1 % stays sure (small vectors
    // and a size whose gradients all show). This is about what the dump can tell: since stop 57 the
    // size ledger's counts put most of these bytes in their pools (the Llama's and adam_step_oom's
    // windows), but which same-size block is the weight stays a guess, below 70 %.
    void aWeightAmongItsStateIsAGuess_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<QString>("copy");
        QTest::addColumn<int>("truth");
        QTest::newRow("hf_trainer_eval, no frames") << "hf_trainer_eval" << "none" << int(Pool::OptimizerState);
        QTest::newRow("llama_autocast_adamw_afterforward, no frames") << "llama_autocast_adamw_afterforward" << "none" << int(Pool::OptimizerState);
        QTest::newRow("moe_train, no frames") << "moe_train" << "none" << int(Pool::OptimizerState);
        QTest::newRow("adam_step_oom, as written") << "adam_step_oom" << "all" << int(Pool::Gradient);
    }
    void aWeightAmongItsStateIsAGuess()
    {
        QFETCH(QString, run);
        QFETCH(QString, copy);
        QFETCH(int, truth);
        const Cut cut = lastEntries(run.toStdString(), 0.5, copy.toStdString());
        // The window holds such blocks: more than 100 MiB of the truth's pool from before recording.
        const auto named = readTruth(kDir + run.toStdString() + ".truth.json.gz");
        int64_t fromBefore = 0;
        for (const Allocation& a : cut.dev().allocations)
            if (const Named* n = nameOf(named, a); n && n->pool == Pool(truth) && a.preexisting() && a.aliveAfter(EventIndex(cut.dev().eventCount()) - 1))
                fromBefore += a.size;
        QVERIFY(fromBefore > int64_t(100) << 20);
        QVERIFY2(cut.s.sure * 100 <= cut.s.named, std::to_string(cut.s.sure).c_str());
    }

    // resnet50_adam_oom's last half without frames opens inside the forward that runs out of
    // memory: its earlier layers' feature maps (6.7 GiB) are stackless blocks from before recording,
    // alive throughout, as weights are, and read as weights at 60 %, so the verdict told a
    // ResNet-50 (98 MiB of weights) to shard or quantise its parameters. The forward lets go of
    // blocks from before recording (so the recording opened inside it), and those of a size the
    // layers it records make and keep are its activations; the rest (an earlier stage's sizes)
    // stay weights below 50 %, and the verdict names no wall and gives no advice (report).
    void aForwardTheRecordingOpensInside()
    {
        const Cut cut = lastEntries("resnet50_adam_oom", 0.5, "none");
        QVERIFY2(cut.s.wrongShare() <= 0.40, std::to_string(cut.s.wrongShare()).c_str());
        QVERIFY(misfiledBytes(cut.dev(), cut.s, Pool::Activation, Pool::Parameter) < int64_t(3600) << 20);
        const EventIndex at = EventIndex(cut.dev().eventCount()) - 1;
        int64_t parameterBytes = 0;
        for (size_t i = 0; i < cut.c.size(); ++i)
            if (cut.dev().allocations[i].preexisting() && cut.dev().allocations[i].aliveAfter(at) && cut.c.pool[i] == Pool::Parameter) {
                QVERIFY2(cut.c.confidence[i] < 50, std::to_string(i).c_str());
                parameterBytes += cut.dev().allocations[i].size;
            }
        QVERIFY(parameterBytes > 0);
    }

    // The whole resnet50_adam_oom run without frames: the recording opens with the forward's first
    // operator, whose output (conv1's, 392 MiB) comes before the first scratch the swings start the
    // forward at (cuDNN's workspace). It read as made before the first forward and kept: a weight
    // (5.0 % of the named bytes). A block kept just before the forward's first scratch, of a size
    // the forward itself makes and keeps, is the forward's.
    void aForwardsFirstOutputComesBeforeItsScratch()
    {
        const Cut cut = lastEntries("resnet50_adam_oom", 1.0, "none");
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::Activation, Pool::Parameter), int64_t(0));
        QVERIFY2(cut.s.wrongShare() <= 0.01, std::to_string(cut.s.wrongShare()).c_str());
    }

    // hand_decoder_static's cache class preallocates a key and a value buffer per layer in its
    // constructor. In the whole run they are made one after the other before the first call and
    // read as a preallocated cache; its last 50 % drops their births, and the constructor's frame
    // made them weights (112 MiB, 30.5 %). Their blocks keep the stacks that made them: sixteen of
    // one size from one loop (its two lines differ in the line of that frame only), and every
    // block of that size, read the same.
    void aPreallocatedCacheFromBeforeTheWindow()
    {
        const Cut cut = lastEntries("hand_decoder_static", 0.5);
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::KvCache, Pool::Parameter), int64_t(0));
        QVERIFY2(cut.s.wrongShare() <= 0.01, std::to_string(cut.s.wrongShare()).c_str());
    }

    // lightning_fit's last fifth opens mid-backward. The capture kept Python frames only, so the
    // gradients the engine made before the window (lm_head's, 125 MiB, and a 12 MiB one) are
    // stackless blocks from before recording, while the weights, loaded under recording, keep the
    // frames of Lightning's `.to()`; a gradient of their size exists, so they read as weights at 92 %
    // (9.8 % of the named bytes, all of it sure). Adam's state of each size is exactly two per framed
    // weight, as at every other size: the stackless block is no trained weight but a gradient. The
    // renamed copy gets the same answer; adam_step_oom's cut, whose weights carry no frame either,
    // stays a guess (aWeightAmongItsStateIsAGuess).
    void aGradientBeyondTheWeightsTheStateCounts_data() { copyRows({"all", "renamed", "python"}); }
    void aGradientBeyondTheWeightsTheStateCounts()
    {
        QFETCH(QString, copy);
        const Cut cut = lastEntries("lightning_fit", 0.2, copy.toStdString());
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::Gradient, Pool::Parameter), int64_t(0));
        QVERIFY2(cut.s.wrongShare() <= 0.01, std::to_string(cut.s.wrongShare()).c_str());
        int64_t claimed = 0;
        for (size_t i = 0; i < cut.c.size(); ++i)
            if (cut.c.rules[cut.c.rule[i]].name == "gradient-beyond-the-weights-the-state-counts") {
                QCOMPARE(cut.c.pool[i], Pool::Gradient);
                QVERIFY(cut.dev().allocations[i].preexisting());
                claimed += cut.dev().allocations[i].size;
            }
        QVERIFY(claimed >= int64_t(137) << 20);
    }

    // The same cut without frames. Lightning's closure runs zero_grad, the forward and the backward
    // inside Optimizer.step's annotation, so the window's whole stretch was "optimizer step": the
    // gradients its backward made read as the step's state at 83-95 % (15.1 % of the named bytes
    // wrong and sure). The step's window holds a zero_grad window that ended before the recording's
    // events: a closure, so it names none of them; and the backward's layers, which repeat as a
    // forward's do, are no forward where they let go of more than they make. The dump cannot say
    // much more, and says so: nothing wrong at 70 % or more, and no forward in a window that holds none.
    void aClosureTheWindowOpensInside()
    {
        const Cut cut = lastEntries("lightning_fit", 0.2, "none");
        QCOMPARE(forwardRuns(cut.c), size_t(0));
        QVERIFY2(cut.s.sure * 100 <= cut.s.named, std::to_string(cut.s.sure).c_str());
    }

    // lora_llama_bf16_ckpt's last fifth opens in a backward, then runs the next step's forward, which
    // the dump cuts: a 32 MiB activation it made (a default cuBLAS workspace's size on Hopper, never
    // let go of) read as the main thread's cuBLAS workspace at 75 % (2.2 % of the named bytes). A
    // recording that opens in a backward opens after a forward, whose handle made its workspace
    // then (the block from before recording): no forward the recording shows makes one.
    void aWorkspaceFromBeforeTheWindow_data() { copyRows({"all", "renamed", "none"}); }
    void aWorkspaceFromBeforeTheWindow()
    {
        QFETCH(QString, copy);
        const Cut cut = lastEntries("lora_llama_bf16_ckpt", 0.2, copy.toStdString());
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::Activation, Pool::Workspace), int64_t(0));
        for (size_t i = 0; i < cut.c.size(); ++i)
            if (!cut.dev().allocations[i].preexisting())
                QVERIFY(cut.c.rules[cut.c.rule[i]].name != "library-workspace-by-size");
    }

    // The autocast Llama dumped mid-backward, its last fifth with Python frames: the weight casts an
    // earlier forward made (57 MiB) are blocks from before recording whose frames name a forward, alive
    // to the end, so they read as saved activations at 75 % (2.3 % of the named bytes, sure). Read
    // since stop 62 as the backward the dump ends in (its last 376 events were a step before), the
    // window's forward is open to the end of that backward and its casts count with the ones it
    // made, one per weight: cast cache, by count, below 70 % (before that, a whole backward let go
    // of what its forward saved and they outlived it: forward-product-outlived-forward, below 70 %).
    void keptPastAWholeBackward()
    {
        const Cut cut = lastEntries("llama_autocast_adamw_midbackward", 0.2);
        QVERIFY2(cut.s.sure * 100 <= cut.s.named, std::to_string(cut.s.sure).c_str());
        int64_t casts = 0;
        for (size_t i = 0; i < cut.c.size(); ++i) {
            const Allocation& a = cut.dev().allocations[i];
            if (!a.preexisting() || !a.aliveAfter(EventIndex(cut.dev().events.count()) - 1) || cut.c.pool[i] != Pool::CastCache)
                continue;
            QVERIFY(cut.c.confidence[i] < 70);
            casts += a.size;
        }
        QVERIFY(casts >= int64_t(50) << 20);
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::CastCache, Pool::Activation), int64_t(0));
    }

    // vit_fp16_scaler_sgd's last fifth (Python frames) opens inside the forward the backward hook's
    // dump follows: the weight casts that forward made before the window are blocks from before
    // recording, alive to the end, and read as saved activations at 75 % (72.9 MiB, 2.1 % of the named
    // bytes, sure). A recording that opens inside a forward (it lets go of blocks from before it)
    // holds that forward's casts among them: they are counted with the casts it records, one per
    // weight of twice their requested bytes (by count, 55 %; which same-size block is the cast and
    // which the activation stays a guess).
    void castsOfTheForwardTheWindowOpensInside()
    {
        const Cut cut = lastEntries("vit_fp16_scaler_sgd", 0.2);
        QVERIFY(misfiledBytes(cut.dev(), cut.s, Pool::CastCache, Pool::Activation) < int64_t(30) << 20);
        QVERIFY2(cut.s.wrongShare() <= 0.03, std::to_string(cut.s.wrongShare()).c_str());
        QVERIFY2(cut.s.sure * 100 <= cut.s.named, std::to_string(cut.s.sure).c_str());
    }
    // The same cut without frames: the forward's earlier layers' feature maps are blocks from before
    // recording, known by their segments' blocks, which the allocator rounds up (2 MiB steps for
    // large ones), while what the recorded layers make is known by the bytes asked for. Compared
    // as they were, no size matched, and 1,344 MiB of feature maps read as weights (51.5 % of the
    // named bytes): by their requested bytes, the sizes the recorded layers make and keep show them.
    // The size ledger's split (stop 57) brings the pool totals from 26.3 to 16.6 % off; feature maps
    // of a weight's size that stood among the weights now stand among the momentum buffers, and the
    // address guess between same-size blocks puts more single blocks wrong (28.4 → 34.7 %).
    void anOpenForwardsLayersByTheirRequestedBytes()
    {
        const Cut cut = lastEntries("vit_fp16_scaler_sgd", 0.2, "none");
        QVERIFY(misfiledBytes(cut.dev(), cut.s, Pool::Activation, Pool::Parameter) < int64_t(600) << 20);
        QVERIFY2(cut.s.wrongShare() <= 0.36, std::to_string(cut.s.wrongShare()).c_str());
        QVERIFY2(double(cut.s.totalsOff()) <= 0.18 * double(cut.s.named), std::to_string(cut.s.totalsOff()).c_str());
    }
    // eval_with_grad's last half without frames: an evaluation loop under grad mode that keeps every
    // call's outputs and so their graphs. The two calls the window opened after are stackless blocks
    // from before recording, alive throughout, as weights are, and 1,394 MiB of them read as weights
    // (43.2 % of the named bytes). Each recorded call keeps the same blocks (43 of 8 MiB, 16 of
    // 22 MiB, the 250 MiB logits...), and the blocks from before recording of those sizes are exactly
    // twice each call's count: two earlier calls, kept the same way. A weight of a kept size would
    // break the multiple: the frameless copies of the whole runs and of the corpus do not move.
    void earlierCallsKeptLikeTheRecordedOnes()
    {
        const Cut cut = lastEntries("eval_with_grad", 0.5, "none");
        QVERIFY(misfiledBytes(cut.dev(), cut.s, Pool::Activation, Pool::Parameter) < int64_t(50) << 20);
        QVERIFY2(cut.s.wrongShare() <= 0.02, std::to_string(cut.s.wrongShare()).c_str());
        size_t kept = 0;
        for (size_t i = 0; i < cut.c.size(); ++i)
            if (cut.c.rules[cut.c.rule[i]].name == "kept-like-the-calls-recorded") {
                QVERIFY(cut.dev().allocations[i].preexisting());
                QVERIFY(cut.c.confidence[i] < 70);
                ++kept;
            }
        QVERIFY(kept >= 100);
        // Where the forwards read are no whole calls (the last fifth: one call read as four forwards,
        // its layers' stretches, which keep different blocks), nothing is read as an earlier call's.
        const Cut split = lastEntries("eval_with_grad", 0.2, "none");
        for (size_t i = 0; i < split.c.size(); ++i)
            QVERIFY(split.c.rules[split.c.rule[i]].name != "kept-like-the-calls-recorded");
    }
    // The same run as written: a window of two calls (the last half), or of three whose first is cut
    // (the last 80 %). The keys and values Hugging Face's cache code made are held by each call's
    // graph (the run keeps its logits with grad on, and every call makes them again), which the
    // whole run shows over three calls or more; two calls showed nothing, and 256 MiB read as a cache
    // at 90 % (7.9 % of the named bytes, sure). Two calls that each keep that share of what they
    // made, and keep the same blocks size for size, are read the same way; and the keys and values
    // of the calls before the window, blocks from before recording that kept the cache code's
    // stacks, with them.
    void twoCallsKeepTheirGraphsAlike_data()
    {
        QTest::addColumn<double>("kept");
        QTest::newRow("last half") << 0.5;
        QTest::newRow("last 80 %") << 0.8;
    }
    void twoCallsKeepTheirGraphsAlike()
    {
        QFETCH(double, kept);
        const Cut cut = lastEntries("eval_with_grad", kept);
        QCOMPARE(misfiledBytes(cut.dev(), cut.s, Pool::Activation, Pool::KvCache), int64_t(0));
        QVERIFY2(cut.s.sure * 100 <= cut.s.named, std::to_string(cut.s.sure).c_str());
        if (kept == 0.5)
            QVERIFY(cut.c.facts.graphsKeptAcrossCalls);
    }
    // Hugging Face's cache code stores each layer's keys and values in training too (use_cache left
    // on), and the attention saves them for backward. graph_leak's last fifth opens inside a forward
    // a backward follows, and holds the site's blocks of earlier steps (kept by the leaked graphs)
    // as blocks from before recording with the stacks that made them: an earlier forward that made
    // the site's blocks at the same length, read with the forward recorded (16 MiB were a cache at
    // 90 %). A site is the cache code's storing line with the keys' and the values' lines as one:
    // half of those blocks are at the values' line, whose recorded twin came before the window.
    // fsdp2_adamw's last fifth ends inside the forward that follows a step: whether the
    // next call carries its keys and values on is past the dump's end, so they stay a cache below
    // 70 % (32 MiB, 1.7 % of the named bytes, were sure).
    void cacheFramesInATrainingWindow()
    {
        const Cut leak = lastEntries("graph_leak", 0.2);
        QCOMPARE(misfiledBytes(leak.dev(), leak.s, Pool::Activation, Pool::KvCache), int64_t(0));
        const Cut fsdp = lastEntries("fsdp2_adamw", 0.2);
        QVERIFY2(fsdp.s.sure * 100 <= fsdp.s.named, std::to_string(fsdp.s.sure).c_str());
        for (size_t i = 0; i < fsdp.c.size(); ++i)
            if (fsdp.c.pool[i] == Pool::KvCache)
                QVERIFY(fsdp.c.confidence[i] < 70);
    }
    // Its last fifth opens inside one call: no second call shows whether calls keep their graphs.
    // The keys and values of the calls before it stay, while the call recorded makes the site's
    // blocks again at the same length: nothing at the site is carried into a next call, so a graph
    // or the program holds them, and which the window cannot say (256 MiB were a cache at 90 %, 7.9 %
    // of the named bytes, sure): a cache still, below 70 %.
    void oneCallBesideTheEarlierCallsKeys()
    {
        const Cut cut = lastEntries("eval_with_grad", 0.2);
        QVERIFY2(cut.s.sure * 100 <= cut.s.named, std::to_string(cut.s.sure).c_str());
        int64_t cache = 0;
        for (size_t i = 0; i < cut.c.size(); ++i)
            if (cut.c.pool[i] == Pool::KvCache) {
                QVERIFY(cut.c.confidence[i] < 70);
                cache += cut.dev().allocations[i].size;
            }
        QVERIFY(cache >= int64_t(200) << 20);
    }
    // The extreme cut: no history at all, only the final segments (a snapshot taken without
    // _record_memory_history's trace). Every block is alive at the snapshot, so "made in a forward and
    // kept to the end" is no evidence that something keeps it: hand_decoder_cat's own cache class
    // (106.5 MiB, 29.4 % of the named bytes) and the autocast Llamas' casts read as activations kept
    // by the graph at 75 %. Such readings stay below 70 % where the dump has no history.
    void noHistoryKeepsNothingSure_data()
    {
        QTest::addColumn<QString>("run");
        QTest::newRow("hand_decoder_cat") << "hand_decoder_cat";
        QTest::newRow("llama_autocast_adamw_oom") << "llama_autocast_adamw_oom";
        QTest::newRow("moe_train") << "moe_train";
    }
    void noHistoryKeepsNothingSure()
    {
        QFETCH(QString, run);
        const Cut cut = lastEntries(run.toStdString(), 0.0);
        QVERIFY(!cut.c.history);
        QVERIFY2(cut.s.sure * 100 <= cut.s.named, std::to_string(cut.s.sure).c_str());
        for (size_t i = 0; i < cut.c.size(); ++i)
            if (cut.c.rules[cut.c.rule[i]].name == "forward-kept")
                QVERIFY(cut.c.confidence[i] < 70);
    }
};

QTEST_GUILESS_MAIN(TestRecordingCutMidPass)
#include "test_recording_cut_mid_pass.moc"
