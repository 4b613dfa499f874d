// Blocks from before recording, without frames, in a run that shows no backward, of a size the
// recorded forward makes and keeps again and again (structural_preexisting.cpp,
// earlierLayersOfTheOpenForward). Where the recording cannot be shown to open inside a forward (a
// forward that keeps all it makes lets go of nothing from before recording), such a block is a
// weight of that shape or what an earlier layer or call kept, and the dump cannot tell which: a
// guess below 50 %, so no verdict advises on it as weights. eval_with_grad (tests/data/gpu_runs: an
// evaluation loop in grad mode that keeps each call's logits, so every call's graph) cut to its last
// fifth and stripped of frames read 2.1 GiB of earlier calls' graphs as weights at 60 %, and the
// verdict advised quantising them.
#include "core/classify/gpu_truth.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/shipped_rules.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::gpu_truth;
using poolscope::testing::shippedRules;

namespace {

const std::string kDir = POOLSCOPE_TEST_DATA "/gpu_runs/";
constexpr const char* kRule = "weight-or-kept-like-the-recorded-forward";

struct Read {
    std::shared_ptr<const Trace> trace;
    Classification c;
    Score s;
};

Read frameless(const std::string& run, double kept)
{
    Read r;
    auto t = load(kDir + run + ".pickle.gz");
    if (kept < 1.0)
        t = testing::keepLastEntries(*t, kept);
    r.trace = copyOf(t, "none", shippedRules());
    r.c = classify(*r.trace, r.trace->devices.at(0), shippedRules());
    r.s = score(r.trace->devices.at(0), r.c, readTruth(kDir + run + ".truth.json.gz"));
    return r;
}

int64_t bytesByRule(const Read& r, uint8_t* highest = nullptr)
{
    int64_t bytes = 0;
    for (size_t i = 0; i < r.c.size(); ++i)
        if (r.c.rules[r.c.rule[i]].name == kRule) {
            bytes += r.trace->devices.at(0).allocations[i].size;
            if (highest)
                *highest = std::max(*highest, r.c.confidence[i]);
        }
    return bytes;
}

} // namespace

class TestWeightOrKept : public QObject {
    Q_OBJECT
private slots:
    void earlierCallsGraphsAreAGuess()
    {
        const Read r = frameless("eval_with_grad", 0.2);
        uint8_t highest = 0;
        QVERIFY2(bytesByRule(r, &highest) > int64_t(2) << 30, std::to_string(bytesByRule(r)).c_str());
        QVERIFY(highest < 50);
        // The earlier calls' activations from before recording still read as weights are all a guess.
        for (const Misfiled& m : r.s.misfiled)
            if (const Allocation& a = r.trace->devices.at(0).allocations[m.allocation];
                m.truth == Pool::Activation && m.got == Pool::Parameter && a.preexisting() && a.size > (1 << 20))
                QVERIFY2(r.c.confidence[m.allocation] < 50, r.c.rules[r.c.rule[m.allocation]].name.c_str());
    }

    // A run with backward lets go of what its forwards kept: its weights keep their reading, even
    // where a kept activation has a weight's size (DDP keeps its gradients in flat buckets, so no
    // gradient has a weight's size to exclude it).
    void aRunWithBackwardKeepsItsWeights()
    {
        const Read r = frameless("ddp_fused_adamw", 1.0);
        QCOMPARE(bytesByRule(r), int64_t(0));
    }
};

QTEST_GUILESS_MAIN(TestWeightOrKept)
#include "test_weight_or_kept.moc"
