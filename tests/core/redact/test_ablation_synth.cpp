// The redaction ablation on synthetic dumps, at every moment of the run (issue 22): every
// `poolscope synth --scenario` and the training model with its variants (precision, optimizer,
// attention and MLP kinds, checkpointing, accumulation, frozen layers, ZeRO, forward-only, an OOM,
// planted leaks), each written as a pickle and read back as a user's file would be, then ablated
// (renamed code, Python frames only, no frames with the history kept). Targets at the default
// moment, the peak and the run's worst moment (ablation_run.h): at most 2 % of the bytes move pool
// renamed, 2 % Python-only, 15 % frameless. tests/core/synth/test_synth_classes.cpp holds the issue-22
// class scenarios to their truth; this suite holds every synthetic dump to the redactions over the
// whole run. A target not met is a QEXPECT_FAIL with the figure measured, so a fix shows as XPASS.
#include "core/classify/shipped_rules.h"
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/redact/ablation.h"
#include "core/synth/synth.h"
#include "core/synth/synth_stacks.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>

using namespace poolscope;

namespace {

std::shared_ptr<const RuleSet> rules()
{
    static const auto r = std::make_shared<const RuleSet>(testing::shippedRules());
    return r;
}

std::shared_ptr<const Trace> roundTrip(const Trace& trace, const std::string& name)
{
    QTemporaryDir dir;
    const std::string path = dir.filePath(QString::fromStdString(name + ".pickle")).toStdString();
    {
        std::ofstream out(path, std::ios::binary);
        writeSnapshot(trace, out, 4);
    }
    return load(path);
}

// `poolscope synth`'s own defaults (a 12-layer GPT-2-small step at sequence 1024): the sizes real
// rules meet (cuBLAS's workspace, weight shapes against activation shapes), not a toy's.
SynthModel small() { return SynthModel{}; }

// The training model's variants, by name: each changes one thing of small().
const std::vector<std::pair<std::string, std::function<void(SynthModel&)>>>& modelVariants()
{
    static const std::vector<std::pair<std::string, std::function<void(SynthModel&)>>> v = {
        {"model mixed", [](SynthModel&) {}},
        {"model fp32", [](SynthModel& m) { m.dtype = SynthDtype::Fp32; }},
        {"model bf16", [](SynthModel& m) { m.dtype = SynthDtype::Bf16; }},
        {"model autocast", [](SynthModel& m) { m.dtype = SynthDtype::Autocast; }},
        {"model sgd", [](SynthModel& m) { m.optimizer = SynthOptimizer::Sgd; }},
        {"model sgd-momentum", [](SynthModel& m) { m.optimizer = SynthOptimizer::SgdMomentum; }},
        {"model lion", [](SynthModel& m) { m.optimizer = SynthOptimizer::Lion; }},
        {"model adafactor", [](SynthModel& m) { m.optimizer = SynthOptimizer::Adafactor; }},
        {"model checkpointing", [](SynthModel& m) { m.checkpointing = true; }},
        {"model attention inline", [](SynthModel& m) { m.attention = SynthAttention::Inline; }},
        {"model attention manual", [](SynthModel& m) { m.attention = SynthAttention::Manual; }},
        {"model attention recompute", [](SynthModel& m) { m.attention = SynthAttention::Recompute; }},
        {"model swiglu", [](SynthModel& m) { m.mlp = SynthMlp::SwiGlu; }},
        {"model accumulate 2", [](SynthModel& m) { m.accumulate = 2; }},
        {"model trainable 0.5", [](SynthModel& m) { m.trainable = 0.5; }},
        {"model norms only", [](SynthModel& m) { m.normsOnly = true; }},
        {"model zero 1", [](SynthModel& m) { m.dataParallel = 2; m.zeroStage = 1; }},
        {"model zero 2", [](SynthModel& m) { m.dataParallel = 2; m.zeroStage = 2; }},
        {"model zero 3", [](SynthModel& m) { m.dataParallel = 2; m.zeroStage = 3; }},
        {"model forward only", [](SynthModel& m) { m.forwardOnly = true; m.steps = 3; }},
        {"model oom", [](SynthModel& m) { m.capacity = synthSizes(m).parameterBytes * 6; }},
        {"model leaks", [](SynthModel& m) { m.leaks = *parseSynthLeaks("kept-graph,growing-cache,hook,warmup,bank=2"); m.steps = 3; }},
    };
    return v;
}

// Targets not met yet: "row variant moment" -> the figure measured.
const std::map<std::string, std::string>& knownMisses()
{
    // Measured on r22 (main 0430c90); megatron on m22 (its scenario rebuilt from Megatron-Core's
    // sources; renamed, its checkout tokenised as the user's code, now read from structure: 0.0 %).
    // dp-oom Python-only: what an OOM's traceback
    // held is told from saved activations by tb_dealloc, a C frame (renamed it was tokenised too,
    // 35.7 %, until code_names.cpp kept CPython's own symbols). The rest frameless, but three
    // Python-only runs at their worst moment (below).
    // The "model" rows Python-only (2.6 to 6.6 %) were the generator's, not the reader's, until
    // stop 41: the GPT model's explicit `w.to(bf16)` had linear.py as its innermost Python frame,
    // which only autocast's cast has (nn.Linear.forward never calls .to()), so the Python-only copy
    // read, rightly for such frames, autocast's casts. The cast is now on the user's own line, and
    // where the layers' weights are autocast's casts (autocast, or the variant layers' "mixed"),
    // lm_head's weight and input are cast by autocast too (the recomputing attention's run: 3.8 %).
    static const std::map<std::string, std::string> misses = {
        {"scenario vllm none default", "94.7 %"},
        {"scenario vllm none peak", "94.7 %"},
        {"scenario vllm none run", "95.3 %"},
        {"scenario dp-oom python default", "35.7 %"},
        {"scenario dp-oom python peak", "35.7 %"},
        {"scenario dp-oom python run", "35.7 %"},
        {"scenario dp-oom none default", "63.4 %"},
        {"scenario dp-oom none peak", "63.4 %"},
        {"scenario dp-oom none run", "98.6 %"},
        // script-attention frameless over the run: 62.9 % until stop 38, when the backward's last
        // stretch stopped at zero_grad's run of releases and at state it had no room for
        // (structural_backward_tail.h).
        {"scenario script-attention none run", "47.1 %"},
        // s22b's distributed / PEFT scenarios (merged at 281a0a1): renamed and Python-only meet the targets.
        {"scenario deepspeed-zero2 none run", "100.0 %"},
        {"scenario fsdp none run", "100.0 %"},
        // PEFT LoRA frameless at its worst moment: the checkpointed layers' recomputation, inside the
        // backward from the loss's seed on (structural_engine_walks.h, lossBackwardSeed), reads as the
        // backward's scratch. The scenario's recomputation does not repeat its forward's allocations
        // (real reentrant checkpointing runs the same function again), so structural_recompute.h's
        // reading does not find it; the model's --checkpointing does (41.9 -> 0.3 % at stop 36).
        {"scenario peft-lora none run", "25.8 %"},
        // Python-only ZeRO-2 and ZeRO-3 met the target at stop 43 (2.6 / 2.7 % at the run's worst moment
        // before): the tied embedding's gradient, beside its second contribution of the same size, is
        // told by its reduce-scatter shard made at once (gradient-reduce-scattered-to-its-shard).
        // The leaks model frameless met the target at stop 40 (57.7 / 57.7 / 89.7 % before): its
        // unannotated evaluation forward, whose graph is kept, is told by making the training forward's
        // blocks in order (structural_forward_again.h).
        // c22's torch.compile scenarios: renamed and Python-only meet the targets; frameless the training
        // one too since the loss's seed starts the backward (the logits let go of a few events after they
        // were made are the backward's). CUDA graphs frameless met the target at stop 44 (21.3 / 21.3 /
        // 22.5 % before): the static KV cache, made before the first call and kept like the weights, is
        // four or more blocks of one size no weight has, made in a row (cache-preallocated-before-calls).
        // p22's multi-pass stacks (synth_multipass.cpp): renamed and Python-only meet the targets;
        // frameless the engine's walks place the passes (structural_engine_walks.h) and the default
        // moment and the peak meet it; the run's worst moment does not: in 1F1B the receive buffers
        // (made before the first forward, kept) read as weights, in the GAN 8 MiB of the
        // discriminator's activations of half a weight's size read as autocast's casts.
        {"scenario pipeline-1f1b none run", "47.1 %"},
        {"scenario gan none run", "17.2 %"},
        // q22's quantised fine-tuning scenarios: renamed and Python-only meet the targets; frameless the
        // default moment and the peak too since the loss's seed starts the backward (before, the logits
        // let go of within a few events read as the forward's scratch: 20.7 to 28.1 %). The paged
        // optimizer's run too since stop 42 (19.1 %: 16 MiB of activations of half a weight's size read
        // as autocast's casts, which its backward rules out). Left: QLoRA's first events, the 4-bit
        // weights loaded before any pass.
        {"scenario qlora none run", "100.0 %"},
        // z22's fully sharded scenarios: renamed and Python-only meet the targets; frameless FSDP2 too
        // since the loss's seed starts the backward before the pre-backward unshard (stop 35: 17.6 ->
        // 0.0 %); ZeRO-3's forward begins after zero.Init's set-up since stop 36 (structural_setup.h:
        // 29.3 -> 15.9 %); its flat gradient buffer still reads as fp32 master weights of its size.
        {"scenario deepspeed-zero3 none default", "15.9 %"},
        {"scenario deepspeed-zero3 none peak", "15.9 %"},
        {"scenario deepspeed-zero3 none run", "100.0 %"},
        // The GPTQ calibration run (nothing trains): frameless, the layers' weights moved in between
        // the layer-by-layer forwards and the Hessians read as forward scratch (with frames they are
        // known misses against the truth too: tests/core/synth/test_synth_calibration.cpp).
        {"scenario gptq-calibration none default", "64.2 %"},
        {"scenario gptq-calibration none peak", "64.2 %"},
        {"scenario gptq-calibration none run", "100.0 %"},
        // Trainer.predict collecting logits on the device, frameless: the collection was unknown until
        // stop 41 (68.7 % default, 78.6 % peak and run), the no-grad evaluation calls being no passes;
        // it is now told by its links' spacing (outputs-collected-by-concatenation). Left at the run's
        // worst moment: an evaluation call's pending logits, read as its scratch. (33.4 % until the
        // engine's walks told the training steps' backwards, where every weight has an activation's
        // size: the batch has as many tokens as the model is wide.)
        {"scenario trainer-eval-accumulation none run", "21.2 %"},
        // A diffusers pipeline with model CPU offload (stop 48), frameless: the text encoder's weights,
        // moved in by its own first call, stay unknown (no pass the swings read holds them); the
        // VAE's, moved in inside its call, read as that forward's kept products
        // (tests/core/synth/test_synth_offload.cpp; 100 % until the decode's last block, held at the
        // OOM after the last pass read, was read by held-at-oom-without-a-pass).
        {"scenario diffusers-offload none default", "15.4 %"},
        {"scenario diffusers-offload none run", "100.0 %"},
    };
    return misses;
}

std::string percent(double f)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * f);
    return buf;
}

} // namespace

class TestAblationSynth : public QObject {
    Q_OBJECT
private slots:
    void wholeRun_data()
    {
        QTest::addColumn<int>("scenario"); // -1: the training model, variant by row name
        for (int s = 0; s <= int(kLastStackScenario); ++s) // every scenario
            QTest::newRow(("scenario " + std::string(stackScenarioName(StackScenario(s)))).c_str()) << s;
        for (const auto& [name, change] : modelVariants())
            QTest::newRow(name.c_str()) << -1;
    }

    void wholeRun()
    {
        QFETCH(int, scenario);
        const std::string row = QTest::currentDataTag();
        std::shared_ptr<const Trace> trace;
        if (scenario >= 0) {
            trace = roundTrip(synthesizeScenario(StackScenario(scenario)).trace, row);
        } else {
            SynthModel m = small();
            for (const auto& [name, change] : modelVariants())
                if (name == row)
                    change(m);
            trace = roundTrip(synthesize(m).trace, "model");
        }
        const AblationResult r = ablate(trace, rules());
        QVERIFY(!r.devices.empty());
        struct Check {
            std::string key, figure, detail;
            bool ok;
        };
        std::vector<Check> checks;
        for (const AblationDevice& d : r.devices) {
            for (const AblationCell& c : d.cells) {
                const double limit = c.variant == "none" ? 0.15 : 0.02;
                if (c.variant == "none" && !d.history)
                    continue; // sizes alone: reported by the corpus table, not held to the target
                const AblationRunWorst& w = c.wholeRun;
                std::string where = w.beforeFirstEvent ? "before the first event" : "after event " + std::to_string(w.index) + " (" + w.phase + ")";
                for (size_t k = 0; k < w.flows.size() && k < 3; ++k)
                    where += (k ? ", " : "; ") + w.flows[k].first + " " + std::to_string(w.flows[k].second) + " B";
                for (const auto& [moment, fraction] :
                     {std::pair{"default", c.atDefault.movedFraction()}, {"peak", c.atPeak.movedFraction()}, {"run", w.movedFraction()}})
                    checks.push_back({row + " " + c.variant + " " + moment, percent(fraction), moment == std::string("run") ? where : "",
                                      fraction <= limit});
            }
        }
        for (const Check& c : checks)
            if (!c.ok)
                qInfo("miss {\"%s\", \"%s\"}, // %s", c.key.c_str(), c.figure.c_str(), c.detail.c_str());
        for (const Check& c : checks) {
            if (auto it = knownMisses().find(c.key); it != knownMisses().end()) {
                if (!c.ok)
                    QCOMPARE(c.figure, it->second); // the figure documented; a fix shows as XPASS
                QEXPECT_FAIL("", (c.key + " moved " + c.figure).c_str(), Continue);
            }
            QVERIFY2(c.ok, (c.key + ": " + c.figure + " of the bytes move pool " + c.detail).c_str());
        }
    }
};

QTEST_GUILESS_MAIN(TestAblationSynth)
#include "test_ablation_synth.moc"
