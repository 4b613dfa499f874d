// An optimizer's state made at its first step where nothing placed the step
// (structural_step_state.h): a frameless run that accumulates gradients into a flat buffer made at
// set-up (Megatron's grad_data) makes no gradient-sized block in backward, so the stream places no
// optimizer step and the state had no pool (the synth Megatron scenario frameless: 96 MiB unknown,
// 41.4 % of the bytes at its worst moment). And an optimizer stepped inside the backward by a hook
// per parameter (torchtune's optimizer_in_bwd), whose moments, made in the first backward, read as
// gradients.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/structure_fixtures.h"

#include <QtTest>

#include <functional>

using namespace poolscope;
using poolscope::testing::Fixture;
using poolscope::testing::FixtureRecorder;

namespace {

constexpr const char* kRule = "kept-from-after-first-backward";
const std::vector<int64_t> kParams = {3 << 20, 1536 << 10, 768 << 10, 320 << 10};
constexpr int kLayers = 12;

struct Run {
    int steps = 3;
    bool stateAtFirstStep = true; // the optimizer makes two moments per parameter at its first step
    bool stepAtEnd = false;       // the recording ends right after the first step (no backward after it)
    // The state made in one burst before the update (torch.optim's _init_group), or per parameter
    // inside the update's loop (a hand-written optimizer: `if "m" not in state: ...`), each
    // parameter's moments among its update's temporaries.
    bool stateInBurst = false;
};

// A forward saving one block per layer (three scratch blocks each), then the engine walking it back:
// per layer an input gradient, the saved block let go of, `atWeight(l)` where layer l has a weight.
std::vector<uint64_t> forwardSaving(FixtureRecorder& r)
{
    std::vector<uint64_t> saved;
    for (int l = 0; l < kLayers; ++l) {
        for (int k = 0; k < 3; ++k)
            r.free(r.alloc(128 << 10, {}, Pool::Temporary));
        saved.push_back(r.alloc(2 << 20, {}, Pool::Activation));
    }
    return saved;
}

void backwardWalk(FixtureRecorder& r, const std::vector<uint64_t>& saved, const std::function<void(size_t)>& atWeight)
{
    for (int l = kLayers - 1; l >= 0; --l) {
        const uint64_t gradIn = r.alloc(256 << 10, {}, Pool::Temporary);
        r.free(saved[size_t(l)]);
        if (size_t(l) < kParams.size())
            atWeight(size_t(l));
        r.free(gradIn);
    }
}

// Weights and a flat gradient buffer at set-up; per micro-batch a batch copied in (the last one let
// go of), a forward saving a block per layer, a backward releasing them while it adds each weight's
// gradient into the buffer (a temporary per weight); per step the gradients' norm, then, at the
// first, the state, and the update's temporaries. No frame.
Fixture flatBufferTraining(const Run& run)
{
    FixtureRecorder r;
    int64_t flat = 0;
    for (int64_t s : kParams) {
        r.alloc(s, {}, Pool::Parameter);
        flat += s;
    }
    r.alloc(flat, {}, Pool::Gradient);
    uint64_t batch = 0;
    auto nextBatch = [&] { // the loop rebinds its batch: the next one copied in, the last one let go of
        const uint64_t b = r.alloc(64 << 10, {}, Pool::Input);
        if (batch)
            r.free(batch);
        batch = b;
    };
    for (int step = 0; step < run.steps; ++step) {
        {
            nextBatch();
            const std::vector<uint64_t> saved = forwardSaving(r);
            backwardWalk(r, saved, [&](size_t w) { r.free(r.alloc(kParams[w], {}, Pool::Temporary)); }); // added into the buffer
        }
        // The gradients' norm clipped (Megatron's clip_grad_norm, the Trainer's max_grad_norm).
        for (int k = 0; k < 4; ++k)
            r.free(r.alloc(4096, {}, Pool::Temporary));
        const bool makeState = step == 0 && run.stateAtFirstStep;
        if (makeState && run.stateInBurst)
            for (int64_t s : kParams) {
                r.alloc(s, {}, Pool::OptimizerState);
                r.alloc(s, {}, Pool::OptimizerState);
            }
        for (int64_t s : kParams) { // the update's temporaries
            if (makeState && !run.stateInBurst) {
                r.alloc(s, {}, Pool::OptimizerState);
                r.alloc(s, {}, Pool::OptimizerState);
            }
            for (int k = 0; k < 4; ++k)
                r.free(r.alloc(s, {}, Pool::Temporary));
        }
        if (run.stepAtEnd)
            break;
    }
    return r.finish();
}

// Gradients stepped in the backward (a post-accumulate-grad hook per weight: torchtune's
// optimizer_in_bwd): each weight's gradient made, at the first step its two moments, the update's
// temporary, the gradient let go of; then the engine goes on. Or, `cloned`, the look-alike: plain
// AccumulateGrad cloning the node's product it could not steal (the product let go of at once) into a
// gradient kept from step to step (zero_grad(set_to_none=False)), one kept block per product.
Fixture inBackwardTraining(bool cloned)
{
    FixtureRecorder r;
    for (int64_t s : kParams)
        r.alloc(s, {}, Pool::Parameter);
    std::vector<uint64_t> kept(kParams.size(), 0);
    for (int step = 0; step < 3; ++step) {
        const uint64_t batch = r.alloc(64 << 10, {}, Pool::Input);
        const std::vector<uint64_t> saved = forwardSaving(r);
        backwardWalk(r, saved, [&](size_t w) {
            const int64_t s = kParams[w];
            if (cloned) {
                const uint64_t product = r.alloc(s, {}, Pool::Temporary);
                if (!kept[w])
                    kept[w] = r.alloc(s, {}, Pool::Gradient); // the clone, kept
                r.free(product);
                return;
            }
            const uint64_t grad = r.alloc(s, {}, Pool::Gradient);
            if (!kept[w]) {
                kept[w] = r.alloc(s, {}, Pool::OptimizerState);
                r.alloc(s, {}, Pool::OptimizerState);
            }
            r.free(r.alloc(s, {}, Pool::Temporary)); // the update's temporary
            r.free(grad);                            // zero_grad in the hook
        });
        r.free(batch);
    }
    return r.finish();
}

std::vector<size_t> decidedBy(const Classification& c, const char* rule)
{
    std::vector<size_t> out;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.rules[c.rule[i]].name == rule)
            out.push_back(i);
    return out;
}

} // namespace

class TestStepState : public QObject {
    Q_OBJECT
private slots:
    void firstStepStateFromWhatItKeeps_data()
    {
        QTest::addColumn<int>("steps");
        QTest::newRow("three steps") << 3;
        QTest::newRow("two steps") << 2; // the second step's batch is kept to the end
    }
    void firstStepStateFromWhatItKeeps()
    {
        QFETCH(int, steps);
        Run run;
        run.steps = steps;
        const Fixture f = flatBufferTraining(run);
        const Classification c = classify(*f.trace, f.trace->devices[0], testing::shippedRules());
        QCOMPARE(c.facts.backwardPasses, size_t(steps));
        QCOMPARE(c.facts.optimizerSteps, size_t(0)); // no gradient-sized block placed a step
        const std::vector<size_t> state = decidedBy(c, kRule);
        QCOMPARE(state.size(), kParams.size() * 2);
        for (size_t i : state) {
            QCOMPARE(poolName(f.truth[i]), poolName(Pool::OptimizerState));
            QVERIFY(c.confidence[i] < 60);
        }
        // The batches made between a backward and the next forward are let go of a step later.
        for (size_t i = 0; i < c.size(); ++i)
            if (f.truth[i] == Pool::Input)
                QVERIFY(c.pool[i] != Pool::OptimizerState);
    }

    // The state made in one burst of the weights' sizes (torch.optim's _init_group, zeros_like one
    // weight after the other) opens the first step where no gradient of a weight's size does
    // (structural_state_bursts.h): the step is placed and its state read from it, sure of the
    // phase. The later steps make no state and no block of a gradient's size: no step is placed.
    void firstStepOpenedByItsStateBurst()
    {
        Run run;
        run.stateInBurst = true;
        const Fixture f = flatBufferTraining(run);
        const Classification c = classify(*f.trace, f.trace->devices[0], testing::shippedRules());
        QCOMPARE(c.facts.backwardPasses, size_t(run.steps));
        QCOMPARE(c.facts.optimizerSteps, size_t(1));
        size_t state = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (f.truth[i] == Pool::OptimizerState) {
                QCOMPARE(poolName(c.pool[i]), poolName(Pool::OptimizerState));
                QCOMPARE(c.phases.phase[size_t(f.trace->devices[0].allocations[i].allocEvent)], Phase::OptimizerStep);
                ++state;
            }
        QCOMPARE(state, kParams.size() * 2);
        for (size_t i = 0; i < c.size(); ++i)
            if (f.truth[i] == Pool::Input)
                QVERIFY(c.pool[i] != Pool::OptimizerState);
    }

    // Nothing to read: no state made (SGD without momentum), or no backward after the step (a
    // batch made for a step the recording did not reach would look the same).
    void nothingClaimedWithoutEvidence()
    {
        for (const bool stepAtEnd : {false, true}) {
            Run run;
            run.stateAtFirstStep = stepAtEnd;
            run.stepAtEnd = stepAtEnd;
            const Fixture f = flatBufferTraining(run);
            const Classification c = classify(*f.trace, f.trace->devices[0], testing::shippedRules());
            QVERIFY2(decidedBy(c, kRule).empty(), stepAtEnd ? "step at the end" : "no state");
        }
    }

    // Frameless, a hook's step inside the backward: the moments, made in the first backward and
    // kept, read as gradients kept past it. Two blocks of the gradient's size made while it lived
    // and kept: the optimizer's state; the gradient itself a gradient. One kept block per product
    // (AccumulateGrad's clone, kept by zero_grad(set_to_none=False)) is the gradient: not read.
    void stateSteppedInBackward()
    {
        const Fixture f = inBackwardTraining(false);
        const Classification c = classify(*f.trace, f.trace->devices[0], testing::shippedRules());
        const std::vector<size_t> state = decidedBy(c, "state-stepped-in-backward");
        QCOMPARE(state.size(), kParams.size() * 2);
        for (size_t i : state)
            QCOMPARE(poolName(f.truth[i]), poolName(Pool::OptimizerState));
        for (size_t i : decidedBy(c, "gradient-stepped-in-backward"))
            QCOMPARE(poolName(f.truth[i]), poolName(Pool::Gradient));
        QCOMPARE(decidedBy(c, "gradient-stepped-in-backward").size(), kParams.size());

        const Fixture g = inBackwardTraining(true);
        const Classification d = classify(*g.trace, g.trace->devices[0], testing::shippedRules());
        QVERIFY(decidedBy(d, "state-stepped-in-backward").empty());
        for (size_t i = 0; i < d.size(); ++i)
            if (g.truth[i] == Pool::Gradient)
                QVERIFY2(d.pool[i] != Pool::OptimizerState, d.rules[d.rule[i]].name.c_str());
    }
};

QTEST_GUILESS_MAIN(TestStepState)
#include "test_step_state.moc"
