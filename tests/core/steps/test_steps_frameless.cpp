// Steps of dumps without frames (issue 22: a frameless dump gets the answer its frames gave, or says
// what it cannot tell). Without frames or step annotations the steps come from the allocation
// pattern's repetitions, and a model's layers repeat too: a no_grad forward's layers let go of what
// they make as steps do (bol_fwd, wed_inference: 31 and 23 "steps" in one forward), a grad-mode
// forward's keep it as a leaking loop does (dd_ditext8: 13 "steps", five false leak suspects). The
// classifier reads the passes from the stream alone; repetitions that lie inside one of them, and
// hold no model's worth of repeats of their own, are its layers.
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/steps/steps_report.h"
#include "core/classify/ring_buffer.h"
#include "support/corpus.h"
#include "support/without_annotations.h"

#include <QtTest>

using namespace poolscope;

namespace {

// Classified by the shipped rules; timelines are left to be built on demand (steps need none).
std::shared_ptr<const Document> documentOf(const std::shared_ptr<const Trace>& trace)
{
    DocumentOptions d;
    d.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    d.eagerTimelines = false;
    return Document::fromTrace(trace, d);
}

// The dump with every frame dropped, history and annotations kept (`poolscope redact --frames none`).
std::shared_ptr<const Document> frameless(const std::shared_ptr<const Trace>& original)
{
    static const RuleSet rules = RuleSet::builtin();
    RedactOptions o;
    o.frames = FrameKeep::None;
    o.markers = &rules;
    return documentOf(redact(*original, o));
}

std::shared_ptr<const Trace> gpuRun(const QString& run)
{
    return load(std::string(POOLSCOPE_TEST_DATA "/gpu_runs/") + run.toStdString() + ".pickle.gz");
}

// A corpus file ("*.pickle") or a GPU run (tests/data/gpu_runs), annotations dropped on request.
std::shared_ptr<const Trace> dumpOf(const QString& name, bool dropAnnotations)
{
    auto t = name.endsWith(".pickle") ? testing::loadCorpus(name) : gpuRun(name);
    return t && dropAnnotations ? testing::withoutAnnotations(t) : t;
}

} // namespace

class TestStepsFrameless : public QObject {
    Q_OBJECT
private slots:
    // One forward each (the originals' frames say so): frameless, one step, and no leak claimed.
    void layersOfOnePassAreNoSteps_data()
    {
        QTest::addColumn<QString>("name");
        QTest::newRow("no_grad forward, 32 layers") << "bol_fwd_cl128_fp32.pickle";
        QTest::newRow("no_grad forward, 24 layers") << "wed_inference_128.pickle";
        QTest::newRow("forward and backward, one step") << "cranberrii_snapshot.pickle";
        QTest::newRow("grad-mode forward to an OOM") << "dd_ditext8_oom.pickle.json";
    }
    void layersOfOnePassAreNoSteps()
    {
        QFETCH(QString, name);
        const auto original = testing::loadCorpus(name);
        if (!original)
            QSKIP("corpus absent");
        const auto doc = frameless(original);
        const DeviceSteps s = deviceSteps(doc->device(0));
        QVERIFY2(s.table.completeSteps() <= 1, s.table.how.c_str());
        QCOMPARE(s.table.period, int64_t(0));
        QVERIFY(s.leaks.suspects.empty());
        // What the frames said: one step there too (dd: the set-up's step, then the OOM's forward).
        QVERIFY(findSteps(documentOf(original)->device(0)).completeSteps() <= 1);
    }

    // Calls that run the model's layers repeat within themselves: they stay steps (a generate()'s
    // tokens, an embedding service's requests, an evaluation loop that keeps its graphs).
    void callsStaySteps_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<int>("atLeast");
        QTest::newRow("hand_decoder_static") << "hand_decoder_static" << 38;
        QTest::newRow("bert_embed_service") << "bert_embed_service" << 3;
        QTest::newRow("eval_with_grad") << "eval_with_grad" << 2;
    }
    void callsStaySteps()
    {
        QFETCH(QString, run);
        QFETCH(int, atLeast);
        const StepTable t = findSteps(frameless(gpuRun(run))->device(0));
        QCOMPARE(t.source, StepSource::RepeatingPattern);
        QVERIFY2(t.completeSteps() >= size_t(atLeast), t.how.c_str());
    }

    // Where no frame or annotation names a phase, the passes the stream alone reads are the steps
    // when they are alike and either hold a backward (the engine's walk) or each repeat a model's
    // layers (a call): the same steps as the frames gave, ends within 2 % of the run's events. The
    // repeating pattern alone missed the first call (niu_fwd 1 of 3, gpt2 38 of 47) and read
    // mp_10streams' two Llama forwards, on ten streams, as one step.
    void passesTheStreamReadsAreSteps_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("noAnnotations");
        QTest::newRow("niu_fwd_100: three forwards") << "niu_fwd_100.pickle" << false;
        QTest::newRow("mp_10streams: two forwards") << "mp_10streams.pickle" << false;
        QTest::newRow("gpt2_generate_fp16: 47 tokens") << "gpt2_generate_fp16" << false;
        QTest::newRow("llama AdamW, no annotations: three steps") << "llama_autocast_adamw_afterforward" << true;
        QTest::newRow("fsdp2 AdamW, no annotations: three steps") << "fsdp2_adamw" << true;
        // Optimizer steps the stream reads only once (SGD's momentum, then nothing to allocate; a
        // step it misreads): the gradients let go of before the next forward close each step.
        QTest::newRow("graph_leak, no annotations: four steps") << "graph_leak" << true;
        QTest::newRow("moe_train, no annotations: three steps") << "moe_train" << true;
        QTest::newRow("vit_fp16 SGD, no annotations: three steps") << "vit_fp16_scaler_sgd" << true;
        // An optimizer step the stream reads after a forward alone (a LoRA run's, between its
        // adapters' updates) closes no step in a run with backwards: its three, not eleven unlike ones.
        QTest::newRow("lora_llama_bf16_ckpt, no annotations: three steps") << "lora_llama_bf16_ckpt" << true;
        // Lightning's loop: zero_grad after the forward, inside the step's closure; a foreach Adam's
        // scratch (made as a list, let go of as a list) before the caller lets go of the batch. That
        // release read as the backward's last, the update inside it: two steps of three.
        QTest::newRow("lightning_fit, no annotations: three steps") << "lightning_fit" << true;
    }
    void passesTheStreamReadsAreSteps()
    {
        QFETCH(QString, name);
        QFETCH(bool, noAnnotations);
        const auto original = dumpOf(name, noAnnotations);
        if (!original)
            QSKIP("corpus absent");
        const StepTable framed = findSteps(documentOf(original)->device(0));
        const StepTable t = findSteps(frameless(original)->device(0));
        QCOMPARE(t.source, StepSource::Phases);
        QVERIFY2(t.how.find("allocation stream") != std::string::npos, t.how.c_str());
        QCOMPARE(t.completeSteps(), framed.completeSteps());
        QCOMPARE(t.steps.size(), framed.steps.size());
        const EventIndex slack = EventIndex(original->devices[0].eventCount() / 50);
        for (size_t k = 0; k + 1 < t.steps.size(); ++k)
            QVERIFY2(std::abs(t.steps[k].end - framed.steps[k].end) <= slack,
                     qPrintable(QString("step %1 ends at %2, the frames' at %3").arg(k).arg(t.steps[k].end).arg(framed.steps[k].end)));
    }

    // A frameless dump's call site is a size. graph_leak keeps each step's logits (131,072,000 B),
    // and its embedding's gradient has that size too, made in each backward and let go of at
    // zero_grad: as one site their leak read 41.67 MiB per step. Split by the phase they were born
    // in, the logits' site grows by the 125 MiB per step the frames show, born in the forward.
    void framelessLeakSiteSplitByBirthPhase()
    {
        const auto original = dumpOf("graph_leak", true);
        const DeviceSteps framed = deviceSteps(documentOf(original)->device(0));
        QCOMPARE(framed.leaks.suspects.size(), size_t(1));
        const DeviceSteps s = deviceSteps(frameless(original)->device(0));
        QCOMPARE(s.table.completeSteps(), size_t(4));
        QCOMPARE(s.leaks.suspects.size(), size_t(1));
        const LeakSuspect& leak = s.leaks.suspects[0];
        QCOMPARE(leak.bytesPerStep, framed.leaks.suspects[0].bytesPerStep);
        QCOMPARE(leak.birthPhase, Phase::Forward);
        QVERIFY2(leak.site == "(no frames) 131072000-byte allocations made in the forward", leak.site.c_str());
    }

    // Step ends from the stream's passes can fall before the caller let go of the previous call's
    // output: bert_embed_service's last 80 % without frames held 64, 96, 96, 128 MiB of its 32 MiB
    // outputs at step ends (the frames' ends hold none of them, and judge no leak), a "leak" of
    // 21.33 MiB per step by the 60 % rule. With such steps a leak must grow at every step end.
    void streamPassesJudgeLeaksAtEveryStepEnd()
    {
        const auto cut = testing::keepLastEntries(*gpuRun("bert_embed_service"), 0.8);
        QVERIFY(deviceSteps(documentOf(cut)->device(0)).leaks.suspects.empty());
        const DeviceSteps s = deviceSteps(frameless(cut)->device(0));
        QVERIFY2(s.table.passesFromStream, s.table.how.c_str());
        QVERIFY(s.table.completeSteps() >= 4);
        QVERIFY(s.leaks.judged);
        QVERIFY2(s.leaks.suspects.empty(), s.leaks.verdict.c_str());
        // graph_leak's kept logits grow at every step end: still named (framelessLeakSiteSplitByBirthPhase).
    }

    // The repeating pattern's first repetition: its boundary search needs a period and a slack before
    // a boundary, so bert_embed_service without frames read its first batch of five as set-up. The
    // tokens before the earliest boundary repeat the period after it: a repetition, from the start.
    void firstRepetitionIsAStep()
    {
        const auto original = gpuRun("bert_embed_service");
        const StepTable framed = findSteps(documentOf(original)->device(0));
        const StepTable t = findSteps(frameless(original)->device(0));
        QCOMPARE(t.source, StepSource::RepeatingPattern);
        QCOMPARE(t.steps.size(), framed.steps.size());
        QVERIFY(t.steps.front().start <= framed.steps.front().start);
        for (size_t k = 0; k + 1 < t.steps.size(); ++k)
            QCOMPARE(t.steps[k].end, framed.steps[k].end);
    }

    // An evaluation loop that forgot no_grad keeps every call's graph: memory only climbs, and the
    // lowest point of each boundary's search window was a temporary's dip at its early edge, a
    // quarter period early at every boundary (two complete calls, too few to judge). The period
    // places those boundaries: the frames' calls, and the kept graph judged as with frames.
    void climbingCallsKeepThePeriodsBoundaries()
    {
        const auto original = gpuRun("eval_with_grad");
        const DeviceSteps framed = deviceSteps(documentOf(original)->device(0));
        const DeviceSteps t = deviceSteps(frameless(original)->device(0));
        QCOMPARE(t.table.source, StepSource::RepeatingPattern);
        QCOMPARE(t.table.steps.size(), framed.table.steps.size());
        for (size_t k = 0; k + 1 < t.table.steps.size(); ++k)
            QVERIFY(std::abs(t.table.steps[k].end - framed.table.steps[k].end) <= 1);
        QVERIFY(t.leaks.judged);
        int64_t kept = 0, framedKept = 0;
        for (const LeakSuspect& s : t.leaks.suspects) {
            QCOMPARE(s.birthPhase, Phase::Forward);
            kept += s.bytesPerStep;
        }
        for (const LeakSuspect& s : framed.leaks.suspects)
            framedKept += s.bytesPerStep;
        QVERIFY2(std::abs(kept - framedKept) * 100 <= framedKept, qPrintable(QString("%1 vs %2 B per step").arg(kept).arg(framedKept)));
    }

    // Passes misread where the frames are gone: a reentrant checkpointed backward's recomputing
    // forwards. Steps cut there are unlike one another; the stream's passes are then not the steps,
    // and no more steps are claimed than the frames show.
    void unlikePassesAreNoSteps_data()
    {
        QTest::addColumn<QString>("run");
        QTest::newRow("adafactor_reentrant") << "adafactor_reentrant";
    }
    void unlikePassesAreNoSteps()
    {
        QFETCH(QString, run);
        const auto original = dumpOf(run, true);
        const StepTable framed = findSteps(documentOf(original)->device(0));
        const StepTable t = findSteps(frameless(original)->device(0));
        QVERIFY2(t.source != StepSource::Phases, t.how.c_str());
        QVERIFY2(t.completeSteps() <= framed.completeSteps(), t.how.c_str());
    }

    // A decoder whose cache grows by torch.cat: each call's layers are one repetition (18
    // allocations), 327 "steps" in 41 calls. The stream's passes are the calls.
    void passesCarryTheCallsTheirLayersRepeatIn()
    {
        const auto original = gpuRun("hand_decoder_cat");
        const size_t calls = findSteps(documentOf(original)->device(0)).steps.size();
        QCOMPARE(calls, size_t(41));
        const StepTable t = findSteps(frameless(original)->device(0));
        QCOMPARE(t.source, StepSource::Phases);
        QVERIFY2(t.steps.size() + 2 >= calls && t.steps.size() <= calls, std::to_string(t.steps.size()).c_str());
    }
};

QTEST_GUILESS_MAIN(TestStepsFrameless)
#include "test_steps_frameless.moc"
