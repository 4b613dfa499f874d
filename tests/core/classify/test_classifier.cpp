// The classifier against traces whose pools are known: synthetic training loops in many shapes
// (>= 98% of live bytes right at every moment), and small hand-made traces for each kind of evidence.
#include "core/classify/shipped_rules.h"
#include "accuracy.h"
#include "training_trace.h"

#include "core/classify/classifier.h"
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

const RuleSet& defaultRules() { return poolscope::testing::shippedRules(); }

// A hand-made trace: events with stacks built from (file, function) pairs, innermost first.
struct Mini {
    std::shared_ptr<Trace> trace = std::make_shared<Trace>();
    DeviceTrace* dev;
    int64_t time = 1000;
    bool withTime = true;
    Mini()
    {
        trace->devices.emplace_back();
        dev = &trace->devices.back();
    }
    StackId stack(std::initializer_list<std::pair<const char*, const char*>> frames)
    {
        std::vector<FrameId> ids;
        for (const auto& [file, fn] : frames)
            ids.push_back(trace->frames.internFrame(file, fn, file[0] == '/' ? 10 : 0));
        return trace->frames.internStack(ids);
    }
    void alloc(uint64_t addr, int64_t size, StackId st = {})
    {
        dev->events.push(Action::Alloc, addr, size, 0, withTime ? time : kNoTime, st);
        time += 10;
    }
    void free(uint64_t addr, int64_t size, StackId st = {})
    {
        dev->events.push(Action::FreeRequested, addr, size, 0, withTime ? time : kNoTime, st);
        dev->events.push(Action::FreeCompleted, addr, size, 0, withTime ? time + 1 : kNoTime, st);
        time += 10;
    }
    void annotate(const char* name, bool start)
    {
        trace->annotations.push_back(Annotation{name, start, 0, time});
        time += 2;
    }
    void finish() { finalizeDevice(*dev, trace->warnings); }
    size_t idOf(uint64_t addr) const
    {
        for (size_t i = 0; i < dev->allocations.size(); ++i)
            if (dev->allocations[i].address == addr)
                return i;
        return size_t(-1);
    }
};

const std::pair<const char*, const char*> kForward{"/home/u/model.py", "forward"};
const std::pair<const char*, const char*> kCallImpl{"/env/site-packages/torch/nn/modules/module.py", "_call_impl"};
const std::pair<const char*, const char*> kTrain{"/home/u/train.py", "train"};
const std::pair<const char*, const char*> kEngine{"??", "torch::autograd::Engine::evaluate_function(...)"};
const std::pair<const char*, const char*> kAdamStep{"/env/site-packages/torch/optim/adamw.py", "_single_tensor_adamw"};

} // namespace

class TestClassifier : public QObject {
    Q_OBJECT
private slots:
    void syntheticAccuracy_data()
    {
        QTest::addColumn<int>("variant");
        const char* names[] = {"stacks all, time, annotations", "stacks python", "no time_us", "python, no time",
                               "SGD momentum",              "checkpointing", "checkpointing, python", "gradient accumulation",
                               "params made in the trace",  "steady state", "steady state, python, no time", "forward only",
                               "three steps, deep"};
        for (int i = 0; i < int(std::size(names)); ++i)
            QTest::newRow(names[i]) << i;
    }
    void syntheticAccuracy()
    {
        QFETCH(int, variant);
        TrainingOptions o;
        switch (variant) {
        case 1:
            o.stacks = StackMode::PythonOnly;
            break;
        case 2:
            o.withTime = false;
            o.annotations = false;
            break;
        case 3:
            o.stacks = StackMode::PythonOnly;
            o.withTime = false;
            o.annotations = false;
            break;
        case 4:
            o.adam = false;
            break;
        case 5:
            o.checkpointing = true;
            break;
        case 6:
            o.checkpointing = true;
            o.stacks = StackMode::PythonOnly;
            break;
        case 7:
            o.microBatches = 3;
            break;
        case 8:
            o.paramsBeforeRecording = false;
            break;
        case 9:
            o.steadyState = true;
            break;
        case 10:
            o.steadyState = true;
            o.stacks = StackMode::PythonOnly;
            o.withTime = false;
            o.annotations = false;
            break;
        case 11:
            o.forwardOnly = true;
            break;
        case 12:
            o.steps = 3;
            o.layers = 24;
            break;
        }
        // With stacks='python' a cuBLAS workspace is a tensor its forward kept, like any other: there
        // is no evidence that tells them apart, so those variants leave it out.
        if (o.stacks == StackMode::PythonOnly)
            o.workspace = false;
        const TrainingTrace t = makeTrainingTrace(o);
        const DeviceTrace& dev = t.trace->devices[0];
        QCOMPARE(t.truth.size(), dev.allocations.size());
        QVERIFY(std::none_of(t.truth.begin(), t.truth.end(), [](Pool p) { return p == Pool::Unknown; }));
        const Classification c = classify(*t.trace, dev, defaultRules());
        QCOMPARE(c.size(), dev.allocations.size());
        const ByteAccuracy acc = byteAccuracy(dev, c.pool, t.truth);
        qInfo("%s: worst %.2f%% of live bytes right (event %lld), %.2f%% over all moments", QTest::currentDataTag(),
              100 * acc.worst, static_cast<long long>(acc.worstEvent), 100 * acc.overall);
        QVERIFY2(acc.worst >= 0.98, acc.worstDetail.c_str());
        for (size_t i = 0; i < c.size(); ++i) {
            QVERIFY(c.confidence[i] <= 100);
            QVERIFY(c.rule[i] < c.rules.size());
            QCOMPARE(c.rules[c.rule[i]].pool, c.pool[i]);
        }
    }

    void phasesFollowFramesAndAnnotations()
    {
        TrainingOptions o;
        o.steps = 2;
        const TrainingTrace t = makeTrainingTrace(o);
        const Classification c = classify(*t.trace, t.trace->devices[0], defaultRules());
        // zero_grad (step 2 only), forward, backward, optimizer step per step.
        // The first batch is moved to the device before any frame names a phase: unknown.
        QCOMPARE(c.phases.runs.front().phase, Phase::Unknown);
        std::vector<Phase> seq;
        for (const auto& r : c.phases.runs)
            if (r.phase != Phase::Unknown && (seq.empty() || seq.back() != r.phase))
                seq.push_back(r.phase);
        const std::vector<Phase> expected = {Phase::Forward,  Phase::Backward, Phase::OptimizerStep, Phase::ZeroGrad,
                                             Phase::Forward,  Phase::Backward, Phase::OptimizerStep};
        QCOMPARE(seq, expected);
        QCOMPARE(c.phases.windows.size(), size_t(3)); // two steps, one zero_grad
        QCOMPARE(c.phases.windows[0].phase, Phase::OptimizerStep);
        QVERIFY(c.phases.anyFrameEvidence);
    }

    // Annotation windows decide where frames are silent; frames win where they speak.
    void annotationWindowsDecideSilentEvents()
    {
        Mini m;
        const StackId silent = m.stack({kTrain});
        const StackId fwd = m.stack({kForward, kCallImpl, kTrain});
        m.alloc(0x1000, 1 << 20, fwd);
        m.annotate("Optimizer.step#Custom.step", true);
        m.alloc(0x2000, 4 << 20, silent); // a custom optimizer outside any known file: only the window knows
        m.alloc(0x3000, 1024, silent);
        m.free(0x3000, 1024, silent);
        m.alloc(0x4000, 1 << 20, fwd); // Lightning-style closure: forward inside the step
        m.annotate("Optimizer.step#Custom.step", false);
        m.alloc(0x5000, 512, silent); // after the window: inherits the last phase
        m.finish();
        const Classification c = classify(*m.trace, *m.dev, defaultRules());
        QCOMPARE(c.birthPhase[m.idOf(0x2000)], Phase::OptimizerStep);
        QCOMPARE(c.pool[m.idOf(0x2000)], Pool::OptimizerState);
        QCOMPARE(c.pool[m.idOf(0x3000)], Pool::Temporary);
        QCOMPARE(c.birthPhase[m.idOf(0x4000)], Phase::Forward);
        QCOMPARE(c.phases.source[size_t(m.dev->allocations[m.idOf(0x5000)].allocEvent)], PhaseSource::Inherited);
        const Explanation x = explain(*m.trace, *m.dev, c, AllocId(uint32_t(m.idOf(0x2000))));
        QCOMPARE(x.rule, std::string("optimizer-step-state"));
        const bool mentionsWindow = std::any_of(x.evidence.begin(), x.evidence.end(), [](const std::string& e) {
            return e.find("annotation window 'Optimizer.step#Custom.step'") != std::string::npos;
        });
        QVERIFY(mentionsWindow);
    }

    // The innermost frame names the phase, except that a forward below a backward marker is
    // checkpoint recomputation: backward.
    void innermostFrameDecidesPhase()
    {
        Mini m;
        m.withTime = false;
        const StackId lightning = m.stack({kForward, kCallImpl, {"/env/lightning/pytorch/core/module.py", "optimizer_step"}, kTrain});
        const StackId recompute = m.stack({kForward, kCallImpl, {"/env/site-packages/torch/utils/checkpoint.py", "unpack_hook"}, kEngine});
        const StackId optimizer = m.stack({kAdamStep, {"/env/site-packages/torch/optim/adamw.py", "step"}, kTrain});
        m.alloc(0x1000, 4096, lightning);
        m.alloc(0x2000, 4096, recompute);
        m.alloc(0x3000, 4096, optimizer);
        m.finish();
        const Classification c = classify(*m.trace, *m.dev, defaultRules());
        QCOMPARE(c.birthPhase[m.idOf(0x1000)], Phase::Forward);
        QCOMPARE(c.birthPhase[m.idOf(0x2000)], Phase::Backward);
        QCOMPARE(c.birthPhase[m.idOf(0x3000)], Phase::OptimizerStep);
        QCOMPARE(c.pool[m.idOf(0x2000)], Pool::Activation); // recomputed by torch.utils.checkpoint
    }

    // A pre-existing allocation first seen at its free carries the free's stack: that is not where
    // it was born. Freed by zero_grad, it was the previous step's gradient.
    void freeStackIsNotBirthEvidence()
    {
        Mini m;
        const StackId zeroGrad = m.stack({{"/env/site-packages/torch/optim/optimizer.py", "zero_grad"}, kTrain});
        m.annotate("Optimizer.zero_grad#AdamW.zero_grad", true);
        m.free(0x9000, 8 << 20, zeroGrad);
        m.annotate("Optimizer.zero_grad#AdamW.zero_grad", false);
        m.alloc(0xA000, 1 << 20, m.stack({kForward, kCallImpl, kTrain}));
        m.finish();
        const Classification c = classify(*m.trace, *m.dev, defaultRules());
        const size_t g = m.idOf(0x9000);
        QVERIFY(m.dev->allocations[g].preexisting());
        QCOMPARE(c.birthPhase[g], Phase::Unknown);
        QCOMPARE(c.freePhase[g], Phase::ZeroGrad);
        QCOMPARE(c.pool[g], Pool::Gradient);
        QCOMPARE(c.rules[c.rule[g]].name, std::string("preexisting-freed-by-zero-grad"));
    }

    // Profiler traces: stacks of enclosing operators ("<op>" frames).
    void profilerOperatorStacks()
    {
        Mini m;
        const StackId fwd = m.stack({{"<op>", "aten::empty"}, {"<op>", "aten::addmm"}, {"<op>", "ProfilerStep#3"}});
        const StackId bwd = m.stack({{"<op>", "aten::empty"}, {"<op>", "aten::mm"}, {"<op>", "MmBackward0"},
                                     {"<op>", "autograd::engine::evaluate_function: MmBackward0"}});
        const StackId acc = m.stack({{"<op>", "torch::autograd::AccumulateGrad"},
                                     {"<op>", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"}});
        const StackId data = m.stack({{"<op>", "aten::to"}, {"<op>", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"},
                                      {"<op>", "ProfilerStep#3"}});
        m.alloc(0x100, 4096, data);
        m.alloc(0x1000, 1 << 20, fwd);
        m.alloc(0x2000, 1 << 20, bwd);
        m.alloc(0x3000, 1 << 20, acc);
        m.free(0x2000, 1 << 20, bwd);
        m.free(0x1000, 1 << 20, bwd);
        m.alloc(0x4000, 1 << 20, fwd);
        m.free(0x4000, 1 << 20, fwd);
        m.finish();
        const Classification c = classify(*m.trace, *m.dev, defaultRules());
        QCOMPARE(c.pool[m.idOf(0x100)], Pool::Input);
        QCOMPARE(c.pool[m.idOf(0x1000)], Pool::Activation);
        QCOMPARE(c.pool[m.idOf(0x2000)], Pool::Temporary);
        QCOMPARE(c.pool[m.idOf(0x3000)], Pool::Gradient);
        QCOMPARE(c.pool[m.idOf(0x3000)], c.rules[c.rule[m.idOf(0x3000)]].pool);
        QCOMPARE(c.rules[c.rule[m.idOf(0x3000)]].name, std::string("accumulate-grad"));
    }

    void noEvidenceStaysUnknown()
    {
        Mini m;
        m.withTime = false;
        m.alloc(0x1000, 4096);
        m.alloc(0x2000, 4096);
        m.free(0x2000, 4096);
        m.finish();
        const Classification c = classify(*m.trace, *m.dev, defaultRules());
        QCOMPARE(c.pool[m.idOf(0x1000)], Pool::Unknown);
        QCOMPARE(c.rule[m.idOf(0x1000)], c.noRule);
        QCOMPARE(c.confidence[m.idOf(0x1000)], uint8_t(0));
        QCOMPARE(c.pool[m.idOf(0x2000)], Pool::Temporary); // freed at once: quick scratch
        QVERIFY(!c.phases.anyFrameEvidence);
    }

    // A user rule placed first wins, and the explanation names its file.
    void userRuleOverrides()
    {
        RuleSet rules = RuleSet::fromFile(std::string(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
        rules.merge(RuleSet::parse(R"({"rules": [{"name": "kv-cache", "pool": "other", "confidence": 88,
            "reason": "the KV cache of my generation loop", "frames_any": [{"file": "model\\.py$", "function": "^forward$"}],
            "lifetime": ["alive_at_end"]}]})",
                                   "my_rules.json"));
        Mini m;
        m.alloc(0x1000, 1 << 20, m.stack({kForward, kCallImpl, kTrain}));
        m.alloc(0x2000, 1 << 20, m.stack({kForward, kCallImpl, kTrain}));
        m.free(0x2000, 1 << 20, m.stack({kForward, kCallImpl, kTrain}));
        m.finish();
        const Classification c = classify(*m.trace, *m.dev, rules);
        QCOMPARE(c.pool[m.idOf(0x1000)], Pool::Other);
        QCOMPARE(c.pool[m.idOf(0x2000)], Pool::Temporary);
        const Explanation x = explain(*m.trace, *m.dev, c, AllocId(uint32_t(m.idOf(0x1000))));
        QCOMPARE(x.rule, std::string("kv-cache"));
        QCOMPARE(x.reason, std::string("the KV cache of my generation loop"));
        QVERIFY(x.evidence.back().find("my_rules.json") != std::string::npos);
    }

    void explanationsCarryEvidence()
    {
        const TrainingTrace t = makeTrainingTrace(TrainingOptions{});
        const DeviceTrace& dev = t.trace->devices[0];
        const Classification c = classify(*t.trace, dev, defaultRules());
        size_t checked = 0;
        for (size_t i = 0; i < dev.allocations.size(); ++i) {
            const Explanation x = explain(*t.trace, dev, c, AllocId(uint32_t(i)));
            QCOMPARE(x.pool, c.pool[i]);
            QVERIFY(x.evidence.size() >= 5);
            QVERIFY(!x.reason.empty());
            if (c.pool[i] == Pool::Gradient && !dev.allocations[i].preexisting()) {
                // Born in backward, named by the autograd engine's frame; its size mirrors a parameter.
                QVERIFY2(x.evidence[0].find("backward, named by the frame torch::autograd::") != std::string::npos, x.evidence[0].c_str());
                QVERIFY(x.evidence[3].find("1 parameter") != std::string::npos || x.evidence[3].find("2 parameter") != std::string::npos);
                QVERIFY(c.confidence[i] >= 85);
                ++checked;
            }
        }
        QVERIFY(checked > 0);
        QCOMPARE(explain(*t.trace, dev, c, AllocId{}).pool, Pool::Unknown);
    }

    // Sizes: gradients mirror parameters one to one, Adam keeps two state buffers per parameter.
    void sizeMirroring()
    {
        TrainingOptions o;
        o.steps = 1;
        const TrainingTrace t = makeTrainingTrace(o);
        const Classification c = classify(*t.trace, t.trace->devices[0], defaultRules());
        QVERIFY(!c.parameterSizes.empty());
        for (const auto& [size, n] : c.gradientSizes) {
            QCOMPARE(c.parameterSizes.at(size), n);
            QCOMPARE(c.stateSizes.at(size), 2 * n);
        }
    }
};

QTEST_GUILESS_MAIN(TestClassifier)
#include "test_classifier.moc"
