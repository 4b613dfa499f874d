// Real runs on an H200 (tests/data/gpu_runs, written by tests/capture/truth_runs.py with the capture
// helper: transformers Llama, GPT-2 and BERT, its Trainer, peft LoRA, timm ViTs, torchvision ResNet,
// torch_geometric, DDP, FSDP2, Lightning, torch.compile, Adafactor with reentrant checkpointing, a
// hand-written mixture of experts, UNet and decoder with its own cache, OOMs in the forward and in
// Adam's step), each dump beside the truth its own run recorded: which live tensors were parameters,
// gradients, optimizer state, inputs, a KV cache, weight casts or saved for backward. Classified as
// written and after each redaction (user code renamed, Python frames only, no frames), the bytes the
// run named must land in its pool: within issue 22's targets (2 %, frameless 15 %) but for the
// known misses below, which may not get worse (frameless, the mixture of experts, Adafactor, FSDP2
// and Lightning were 37-51 % wrong before stop 44). Structures the runs showed get rows of their own
// (each failed before its fix).
#include "core/classify/gpu_truth.h"
#include "core/classify/shipped_rules.h"
#include "support/without_annotations.h"

#include <QtTest>

#include <filesystem>

using namespace poolscope;
using namespace poolscope::gpu_truth;
using poolscope::testing::shippedRules;

namespace {

const std::string kDir = POOLSCOPE_TEST_DATA "/gpu_runs/";

// What the dump cannot tell, or a structure not read yet: "dump copy" -> the most its wrong share
// may be (the figure when it was written down, rounded up).
const std::map<std::string, double> kKnownMisses = {
    // Inputs made before recording look like weights from before recording: no frame, no gradient.
    {"gcn_adam_cpp all", 0.193},
    {"gcn_adam_cpp renamed", 0.193},
    {"gcn_adam_cpp python", 0.193},
    {"gcn_adam_cpp none", 0.193},
    // The same, for a batch too large for inference (the OOM is in its first forward).
    {"vit_inference_oom all", 0.203},
    {"vit_inference_oom renamed", 0.203},
    {"vit_inference_oom python", 0.203},
    {"vit_inference_oom none", 0.203},
    // Inputs from before recording (as above), and a saved activation with a weight cast's count.
    {"vit_fp16_scaler_sgd all", 0.025},
    {"vit_fp16_scaler_sgd renamed", 0.025},
    {"vit_fp16_scaler_sgd python", 0.025},
    // fp16 autocast: convolution outputs with a weight cast's count (autocast-casts-by-count, 55 %).
    {"unet_fp16 all", 0.045},
    {"unet_fp16 renamed", 0.045},
    {"unet_fp16 python", 0.045},
};

struct Loaded {
    std::shared_ptr<const Trace> trace;
    std::vector<Named> truth;
};

Loaded loadRun(const std::string& name)
{
    Loaded l;
    l.trace = load(kDir + name + ".pickle.gz");
    l.truth = readTruth(kDir + name + ".truth.json.gz");
    return l;
}

struct Classified {
    std::shared_ptr<const Trace> trace;
    Classification c;
    const DeviceTrace& dev() const { return trace->devices.at(0); }
};

Classified classifyCopy(const Loaded& l, std::string_view copy)
{
    Classified r;
    r.trace = copyOf(l.trace, copy, shippedRules());
    r.c = classify(*r.trace, r.dev(), shippedRules());
    return r;
}

// The allocation alive at the end whose address is `addr`.
int aliveAt(const DeviceTrace& dev, uint64_t addr)
{
    for (size_t i = 0; i < dev.allocations.size(); ++i)
        if (dev.allocations[i].address == addr && dev.allocations[i].aliveAtEnd())
            return int(i);
    return -1;
}

} // namespace

class TestGpuRuns : public QObject {
    Q_OBJECT
private slots:
    void poolsAgainstTheRunsTruth_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<QString>("copy");
        std::vector<std::string> runs;
        for (const auto& e : std::filesystem::directory_iterator(kDir)) {
            const std::string f = e.path().filename().string();
            if (f.ends_with(".pickle.gz"))
                runs.push_back(f.substr(0, f.size() - std::string(".pickle.gz").size()));
        }
        std::sort(runs.begin(), runs.end());
        QVERIFY2(runs.size() >= 25, "tests/data/gpu_runs holds the runs");
        for (const std::string& r : runs)
            for (std::string_view copy : kCopies)
                QTest::newRow((r + " " + std::string(copy)).c_str()) << QString::fromStdString(r) << QString::fromUtf8(copy.data(), qsizetype(copy.size()));
    }
    void poolsAgainstTheRunsTruth()
    {
        QFETCH(QString, run);
        QFETCH(QString, copy);
        const Loaded l = loadRun(run.toStdString());
        QVERIFY(!l.truth.empty());
        const Classified k = classifyCopy(l, copy.toStdString());
        const Score s = score(k.dev(), k.c, l.truth);
        QVERIFY2(s.named > (int64_t(1) << 20), "the run named what is alive at its moment");
        const std::string key = run.toStdString() + " " + copy.toStdString();
        const auto known = kKnownMisses.find(key);
        const double ceiling = known != kKnownMisses.end() ? known->second : copy == "none" ? 0.15 : 0.02;
        std::string worst;
        for (const auto& [what, bytes] : s.by)
            worst += what + " " + std::to_string(bytes) + " B; ";
        QVERIFY2(s.wrongShare() <= ceiling,
                 qPrintable(QString("%1: %2 % of the named bytes in a wrong pool (at most %3 %): %4")
                                .arg(QString::fromStdString(key))
                                .arg(100.0 * s.wrongShare(), 0, 'f', 1)
                                .arg(100.0 * ceiling, 0, 'f', 1)
                                .arg(QString::fromStdString(worst))));
    }

    // peft LoRA, gradient checkpointing: the third step's RMSNorm output (fp32, 32 MiB, the size of
    // Hopper's default cuBLAS workspace) held because the dump was taken after that forward. The
    // main thread's handle had its workspace since the first step's forward, so this block is no
    // workspace: an activation in every copy (library-workspace-by-size took it, 75 %, before).
    void aWorkspaceSizeBornInALaterStepIsNoWorkspace()
    {
        const Loaded l = loadRun("lora_llama_bf16_ckpt");
        for (std::string_view copy : kCopies) {
            const Classified k = classifyCopy(l, copy);
            const int i = aliveAt(k.dev(), 0x7f2fc2000000ull);
            QVERIFY(i >= 0);
            QCOMPARE(k.dev().allocations[size_t(i)].size, int64_t(32) << 20);
            QCOMPARE(poolName(k.c.pool[size_t(i)]), std::string_view("activation"));
        }
    }

    // A hand-written decoder's own cache class: sixteen 7 MiB buffers (a key and a value per layer)
    // made one after the other before the first of many no-grad calls, held across them. They were
    // parameters ("module-constructor", the buffers' __init__; frameless: made before the first
    // forward), 30 % of the named bytes in every copy.
    void aPreallocatedCacheIsTheCache()
    {
        const Loaded l = loadRun("hand_decoder_static");
        for (std::string_view copy : kCopies) {
            const Classified k = classifyCopy(l, copy);
            int64_t cache = 0, asCache = 0;
            for (size_t i = 0; i < k.c.size(); ++i) {
                const Allocation& a = k.dev().allocations[i];
                const Named* n = a.aliveAtEnd() ? nameOf(l.truth, a) : nullptr;
                if (n && n->pool == Pool::KvCache) {
                    cache += a.size;
                    asCache += k.c.pool[i] == Pool::KvCache ? a.size : 0;
                }
            }
            QCOMPARE(cache, int64_t(16) * 7340032);
            QCOMPARE(asCache, cache);
        }
    }

    // A Llama built inside the recording: its output head (125 MiB) is made after the rotary
    // tables' scratch, which a frameless reading took for the forward's start. The head has a
    // gradient's size (the backward makes one and keeps it), so the forward starts after it: a
    // parameter, not an activation, without frames.
    void aWeightMadeAfterSetUpScratchIsAWeight()
    {
        const Loaded l = loadRun("llama_autocast_adamw_afterforward");
        const Classified k = classifyCopy(l, "none");
        const int i = aliveAt(k.dev(), 0x7f3092000000ull);
        QVERIFY(i >= 0);
        QCOMPARE(k.dev().allocations[size_t(i)].allocEvent, EventIndex(116));
        QCOMPARE(poolName(k.c.pool[size_t(i)]), std::string_view("parameter"));
    }

    // A hand-written mixture of experts without frames, dumped after its third forward: that forward's
    // rise is read as a pass. The reading looked for it only after the last swing's low, which the
    // scratch-only curve puts at the dump's end; and its routed activations have an expert weight's
    // bytes, which read as an optimizer making its state, though the steps before had made it.
    void frameslessForwardHeldAtTheDumpIsAPass()
    {
        const Loaded l = loadRun("moe_train");
        const Classified k = classifyCopy(l, "none");
        QVERIFY(!k.c.facts.passes.empty());
        QCOMPARE(k.c.facts.passes.back().phase, Phase::Forward);
        QCOMPARE(k.c.facts.passes.back().last, EventIndex(k.dev().eventCount()) - 1);
        const Score s = score(k.dev(), k.c, l.truth);
        QVERIFY2(s.wrongShare() < 0.01, qPrintable(QString::number(s.wrongShare())));
    }

    // transformers makes a cache whenever use_cache is on, in training too: its cache_utils.py frames
    // named the attention's saved keys and values a KV cache at 90 % (FSDP2 1.7 % of the named bytes
    // wrong and sure; the leak run 2.2 %, where the last step's output still held its cache object),
    // and every HF training run's timeline showed a KV-cache pool. Each training forward makes them
    // afresh, never longer, and the engine or the program lets go of them outside any forward: saved
    // for backward. A cache in use (generate()) stays a cache.
    void cacheFramesWhileTrainingAreSavedForBackward()
    {
        for (const char* run : {"fsdp2_adamw", "graph_leak", "llama_autocast_adamw_oom", "adam_step_oom"})
            for (const char* copy : {"all", "renamed", "python"}) {
                const Loaded l = loadRun(run);
                const Classified k = classifyCopy(l, copy);
                size_t saved = 0;
                for (size_t i = 0; i < k.c.size(); ++i) {
                    QVERIFY2(k.c.pool[i] != Pool::KvCache, qPrintable(QString("%1 %2 block %3").arg(run, copy).arg(i)));
                    saved += k.c.rules[k.c.rule[i]].name == "cache-frames-in-training-forwards" ? 1 : 0;
                }
                QVERIFY2(saved >= 4, qPrintable(QString("%1 %2: %3").arg(run, copy).arg(saved)));
                QCOMPARE(score(k.dev(), k.c, l.truth).sure, int64_t(0));
            }
        const Loaded gen = loadRun("gpt2_generate_fp16");
        const Classified k = classifyCopy(gen, "renamed");
        int64_t cache = 0;
        for (size_t i = 0; i < k.c.size(); ++i)
            cache += k.c.pool[i] == Pool::KvCache ? k.dev().allocations[i].size : 0;
        QVERIFY2(cache > (int64_t(1) << 30), qPrintable(QString::number(cache)));
    }

    // DistributedDataParallel without frames: its record_function names each forward, nothing names
    // the backward, so the backward is read from the stream (the engine letting go of what the
    // forward made). The buckets DDP rebuilds at the second forward's start (446 MiB, eight blocks
    // held across steps) were forward-kept at 75 % (16.7 % of the named bytes wrong and sure), then
    // a guess at 45 % (still wrong). Every parameter predates recording, so the dump has no order of
    // them to tile; each bucket is an exact sum of parameter sizes, no parameter in two, and they
    // hold the parameters' bytes: gradients. Without annotations too (stop 50: PyTorch before 2.5
    // writes none): the stream starts the second forward at its first scratch, after the rebuild,
    // and the buckets made between the step and it were read as the step in flight (16.7 %).
    void frameslessDdpReadsItsBackwardAndItsBuckets_data()
    {
        QTest::addColumn<bool>("annotations");
        QTest::newRow("as recorded") << true;
        QTest::newRow("without annotations") << false;
    }
    void frameslessDdpReadsItsBackwardAndItsBuckets()
    {
        QFETCH(bool, annotations);
        Loaded l = loadRun("ddp_fused_adamw");
        if (!annotations)
            l.trace = testing::withoutAnnotations(l.trace);
        const Classified k = classifyCopy(l, "none");
        QVERIFY(k.c.facts.backwardPasses >= 2);
        const Score s = score(k.dev(), k.c, l.truth);
        QVERIFY2(s.wrongShare() < 0.001, qPrintable(QString::number(s.wrongShare())));
        int64_t buckets = 0;
        for (size_t i = 0; i < k.c.size(); ++i)
            if (k.c.rules[k.c.rule[i]].name == "gradient-buckets-grouping-parameters") {
                QCOMPARE(k.c.pool[i], Pool::Gradient);
                buckets += k.dev().allocations[i].size;
            }
        QVERIFY2(buckets > (int64_t(440) << 20) && buckets < (int64_t(450) << 20), qPrintable(QString::number(buckets)));
    }

    // FSDP2 without frames: its annotations name hooks (FSDP::pre_forward (model.layers.0), then
    // FSDP::post_forward (...), the backward's likewise), and the layers run between them. Each
    // forward read as a scatter of hook-long passes, the layers' saved tensors as made outside any
    // pass: 449 MiB unknown at the peak. Successive windows of one phase with different names, no
    // other phase between, are one pass: the passes are the Python-only copy's.
    void frameslessFsdp2ReadsWholePassesBetweenItsHooks()
    {
        const Loaded l = loadRun("fsdp2_adamw");
        const Classified none = classifyCopy(l, "none"), python = classifyCopy(l, "python");
        QCOMPARE(none.c.facts.forwardPasses, python.c.facts.forwardPasses);
        QCOMPARE(none.c.facts.backwardPasses, python.c.facts.backwardPasses);
        QCOMPARE(none.c.facts.passes.size(), python.c.facts.passes.size());
        int64_t unknown = 0;
        for (size_t i = 0; i < none.c.size(); ++i)
            unknown += none.c.pool[i] == Pool::Unknown ? none.dev().allocations[i].size : 0;
        QVERIFY2(unknown < (int64_t(1) << 20), qPrintable(QString::number(unknown)));
    }

    // FSDP2 without frames or annotations (PyTorch before 2.5 writes none): nothing names a pass. Its
    // backward reduces the gradients into buffers of its own (no weight's size), so its first walk
    // read as no backward; the second step's walk decided the reading, the first step stayed unknown
    // and Adam's moments, made in it, read as weights made before the first forward (892 MiB, 54.7 %
    // of the named bytes). The buffers weigh as gradients do, and the moments' burst opens the step.
    void frameslessFsdp2WithoutAnnotationsFindsItsFirstStep()
    {
        Loaded l = loadRun("fsdp2_adamw");
        l.trace = testing::withoutAnnotations(l.trace);
        const Classified k = classifyCopy(l, "none");
        QVERIFY(k.c.facts.backwardPasses >= 2);
        const Score s = score(k.dev(), k.c, l.truth);
        QVERIFY2(s.wrongShare() < 0.08, qPrintable(QString::number(s.wrongShare())));
        int64_t state = 0;
        for (size_t i = 0; i < k.c.size(); ++i)
            if (k.c.pool[i] == Pool::OptimizerState && k.dev().allocations[i].aliveAfter(EventIndex(k.dev().events.count()) - 1))
                state += k.dev().allocations[i].size;
        QVERIFY2(state >= (int64_t(890) << 20), qPrintable(QString::number(state)));
    }

    // The leak run without frames: the forward read from its repeated layers ended at the last layer,
    // and the head's 125 MiB logits (kept to the end by the leak) and the loss before the backward were
    // in no pass, so the logits stayed unknown all run. Nothing but the forward's tail runs between a
    // forward and its backward: every event there is the forward's, as the frames say.
    void frameslessForwardRunsUntilItsBackward()
    {
        const Loaded l = loadRun("graph_leak");
        const Classified all = classifyCopy(l, "all"), none = classifyCopy(l, "none");
        const PhaseTimeline& named = all.c.phases;
        const PhaseTimeline& read = none.c.phases;
        size_t tails = 0;
        for (size_t e = 1; e < read.phase.size(); ++e) {
            if (read.phase[e] != Phase::Backward || read.phase[e - 1] == Phase::Backward)
                continue;
            size_t f = e;
            while (f > 0 && named.phase[f - 1] == Phase::Forward)
                --f;
            for (size_t k = f; k < e && named.phase[e - 1] == Phase::Forward; ++k, ++tails)
                QVERIFY2(read.phase[k] == Phase::Forward, qPrintable(QStringLiteral("event %1").arg(k)));
        }
        QVERIFY(tails > 100);
        int64_t unknown = 0;
        for (size_t i = 0; i < none.c.size(); ++i)
            unknown += none.c.pool[i] == Pool::Unknown ? none.dev().allocations[i].size : 0;
        QVERIFY2(unknown < (int64_t(1) << 20), qPrintable(QString::number(unknown)));
    }

    // The embedding's gradient (125 MiB, a parameter's size) is made at once at the backward's end, after
    // the last event the frameless stream reads as backward and before the optimizer step; it was
    // unknown in five frameless timelines (the autocast Llama's four dumps, the HF Trainer run), and an
    // activation where a forward read from the stream swallowed that stretch (the Llama OOM's forward
    // in flight, the Trainer's second step read from the engine's walks). torch.compile's run reads the
    // stretch before its step as a step of its own. (Adafactor's reentrant checkpointing still reads its
    // head's gradient, made mid-backward, as a forward's product.)
    void frameslessGradientAfterTheBackwardIsAGradient()
    {
        for (const char* run : {"llama_autocast_adamw_midbackward", "llama_autocast_adamw_oom", "hf_trainer_eval", "compiled_llama"}) {
            const Loaded l = loadRun(run);
            const Classified all = classifyCopy(l, "all"), none = classifyCopy(l, "none");
            size_t large = 0;
            for (size_t i = 0; i < all.c.size(); ++i) {
                if (all.c.pool[i] != Pool::Gradient || all.dev().allocations[i].size < (int64_t(100) << 20))
                    continue;
                ++large;
                QVERIFY2(none.c.pool[i] == Pool::Gradient, qPrintable(QStringLiteral("%1: allocation %2 is %3 (%4)")
                                                                       .arg(run)
                                                                       .arg(i)
                                                                       .arg(QString::fromStdString(std::string(poolName(none.c.pool[i]))))
                                                                       .arg(QString::fromStdString(none.c.rules[none.c.rule[i]].name))));
            }
            QVERIFY(large >= 2);
        }
    }

    // A frameless inference job that ran out in its first forward: nothing names a pass, and the
    // forward's 2.73 GiB held at the OOM was unknown (66 % of allocated; "the wall is unclassified
    // memory"). Its stretch lets go of its scratch as it goes: a forward's products, guessed below 50 %.
    void frameslessInferenceOomHeldIsAGuessedForward()
    {
        const Loaded l = loadRun("vit_inference_oom");
        const Classified k = classifyCopy(l, "none");
        QVERIFY(k.c.facts.passes.empty());
        int64_t unknown = 0, guessed = 0;
        for (size_t i = 0; i < k.c.size(); ++i) {
            const Allocation& a = k.dev().allocations[i];
            if (!a.aliveAtEnd() || a.preexisting())
                continue;
            unknown += k.c.pool[i] == Pool::Unknown ? a.size : 0;
            if (k.c.pool[i] == Pool::Activation) {
                QVERIFY(k.c.confidence[i] < 50);
                guessed += a.size;
            }
        }
        QVERIFY2(unknown < (int64_t(1) << 20), qPrintable(QString::number(unknown)));
        QVERIFY2(guessed > (int64_t(2) << 30), qPrintable(QString::number(guessed)));
    }

    // DDP's first buckets predate recording: one block of every parameter's bytes, let go of right
    // after the rebuilt ones were made (their sum exactly). It was unknown (446 MiB, no frame, no
    // rule) through the first step in every copy; the gradients were views of it.
    void ddpBucketsTheRebuildReplacedAreGradients()
    {
        const Loaded l = loadRun("ddp_fused_adamw");
        for (std::string_view copy : kCopies) {
            const Classified k = classifyCopy(l, copy);
            size_t replaced = 0;
            for (size_t i = 0; i < k.c.size(); ++i) {
                const Allocation& a = k.dev().allocations[i];
                if (a.preexisting() && !a.aliveAtEnd() && a.size == int64_t(467701760)) {
                    QCOMPARE(k.c.pool[i], Pool::Gradient);
                    ++replaced;
                }
                QVERIFY2(k.c.pool[i] != Pool::Unknown || a.size < (int64_t(1) << 20), qPrintable(QString("%1 block %2").arg(copy.data()).arg(i)));
            }
            QCOMPARE(replaced, size_t(1));
        }
    }
};

QTEST_GUILESS_MAIN(TestGpuRuns)
#include "test_gpu_runs.moc"
