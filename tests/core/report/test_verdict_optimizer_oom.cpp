// What the verdict adds at an OOM the optimizer's step explains (core/report/verdict.cpp): the
// update's list of outputs held by an OOM inside the step (the fused and per-tensor paths do without
// it), and the state the first step made, alive at an OOM in a later forward (the first forward and
// backward fit without it: the state, not the batch, is what changed). Each on generated runs that
// end so, with every frame, Python-only and without frames.
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/report/report.h"
#include "core/synth/synth.h"
#include "../classify/frame_ablation.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

SynthModel gpt(int64_t seq, int64_t capacityMiB)
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 1024;
    m.heads = 16;
    m.seq = seq;
    m.microBatch = seq == 256 ? 2 : 4;
    m.vocab = 32000;
    m.dtype = SynthDtype::Mixed;
    m.optimizer = SynthOptimizer::AdamW;
    m.steps = 2;
    if (capacityMiB > 0)
        m.capacity = capacityMiB << 20;
    return m;
}

// The verdict at the run's OOM (or its peak, where it has none), for every copy of the frames.
std::vector<std::string> verdicts(const SynthModel& m)
{
    const SynthResult r = synthesize(m);
    std::vector<std::string> out;
    for (int keep : {-1, int(KeepFrames::Python), int(KeepFrames::None)}) {
        const std::shared_ptr<const Trace> copy = keep < 0 ? std::make_shared<Trace>(r.trace) : ablateFrames(r.trace, KeepFrames(keep));
        DocumentOptions options;
        options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
        options.eagerTimelines = false;
        const auto doc = Document::fromTrace(copy, options);
        const DeviceTrace& dev = copy->devices.at(0);
        const EventIndex at = dev.ooms.empty() ? dev.peakIndex : dev.ooms.front().index;
        out.push_back(momentReport(doc->device(0), at, "oom", 0, std::nullopt, false).verdict.sentence);
    }
    return out;
}

bool says(const std::string& verdict, const std::string& what) { return verdict.find(what) != std::string::npos; }

} // namespace

class TestVerdictOptimizerOom : public QObject {
    Q_OBJECT
private slots:
    // An OOM in the first step's torch._foreach_sqrt: where the list is a tenth of the memory, the
    // verdict names the paths that do without it; at an OOM making the state, or at a peak, it does not.
    void theUpdatesList()
    {
        const std::string knob = "fused=True (torch.optim Adam, AdamW, SGD) or foreach=False";
        for (const std::string& v : verdicts(gpt(256, 1600))) {
            QVERIFY2(says(v, "The wall is optimizer state"), v.c_str());
            QVERIFY2(says(v, "GiB are the optimizer step's scratch, held when it ran out of memory"), v.c_str());
            QVERIFY2(says(v, knob), v.c_str());
        }
        for (int64_t capacity : {int64_t(1400), int64_t(0)}) // in _init_group; no OOM
            for (const std::string& v : verdicts(gpt(256, capacity)))
                QVERIFY2(!says(v, knob), v.c_str());
    }

    // The second step's forward ran out with the moments the first step made alive; the first step
    // peaked at 1.91 GiB without them. The wall is the activations, and the verdict says the state is
    // what changed. Not where the first step did not fit either, nor at a peak.
    void theStateTheFirstStepMade()
    {
        const std::string changed = "Before the first optimizer step made the optimizer's state the run peaked at 1.91 GiB; 0.62 GiB "
                                    "of that state is alive here";
        for (const std::string& v : verdicts(gpt(512, 2300))) {
            QVERIFY2(says(v, "The wall is activations"), v.c_str());
            QVERIFY2(says(v, changed), v.c_str());
            QVERIFY2(says(v, "8-bit or sharded optimizer state"), v.c_str());
        }
        for (int64_t capacity : {int64_t(1700), int64_t(0)}) // in the first step; no OOM
            for (const std::string& v : verdicts(gpt(512, capacity)))
                QVERIFY2(!says(v, "Before the first optimizer step made"), v.c_str());
    }
};

QTEST_GUILESS_MAIN(TestVerdictOptimizerOom)
#include "test_verdict_optimizer_oom.moc"
