// TRL's GRPOTrainer as a dump with known pools (poolscope synth --scenario grpo-rollout): generate()
// grows a KV cache per token between two training steps. Each copy (all, renamed, Python-only,
// frameless) is classified against the generator's truth at the default moment (the training's
// peak), and where the first generate()'s cache is whole after the prefill and at its largest (the
// last token), which the peak does not see.
#include "core/classify/classifier.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

#include <algorithm>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// The first event where the bytes alive that the truth files under `pool` are at their highest.
EventIndex truthPeak(const DeviceTrace& dev, const std::vector<Pool>& truth, Pool pool)
{
    std::vector<int64_t> delta(dev.eventCount() + 1, 0);
    for (size_t i = 0; i < truth.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (truth[i] != pool || a.preexisting())
            continue;
        delta[size_t(a.allocEvent)] += a.size;
        if (!a.aliveAtEnd())
            delta[size_t(a.freeCompletedEvent)] -= a.size;
    }
    int64_t alive = 0, best = 0;
    EventIndex at = kNoEvent;
    for (size_t e = 0; e < dev.eventCount(); ++e) {
        alive += delta[e];
        if (alive > best)
            best = alive, at = EventIndex(e);
    }
    return at;
}

// The event before the first block the truth files under `pool` is let go of (the prefill's keys and
// values, whole, as the first decode step concatenates onto them).
EventIndex beforeFirstRelease(const DeviceTrace& dev, const std::vector<Pool>& truth, Pool pool)
{
    EventIndex first = kNoEvent;
    for (size_t i = 0; i < truth.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (truth[i] == pool && !a.aliveAtEnd() && (first == kNoEvent || a.freeCompletedEvent < first))
            first = a.freeCompletedEvent;
    }
    return first == kNoEvent ? kNoEvent : first - 1;
}

} // namespace

class TestSynthRollout : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kRolloutScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth({}); }

    // The cache of a generate() inside a training step is a cache, not activations held for a
    // backward, in every copy: the blocks each decode step lets go of, the prefill's keys and values
    // and the newest blocks, let go of when generate() returns.
    void cacheAtItsLargest_data() { addTruthRows(kRolloutScenarios); }
    void cacheAtItsLargest()
    {
        const ClassifiedRow row = classifiedRow();
        const ScenarioFixture& f = row.f;
        const DeviceTrace& dev = row.dev();
        const Classification& c = row.c;
        const QString& variant = row.variant;
        const EventIndex largest = truthPeak(dev, f.truth, Pool::KvCache);
        QVERIFY(largest != kNoEvent && largest < dev.peakIndex); // the first generate() comes before the training's peak
        for (EventIndex at : {beforeFirstRelease(dev, f.truth, Pool::KvCache), largest}) {
            const Wrong w = wrongAt(dev, c, f.truth, at, nullptr);
            const std::string what = variant.toStdString() + " at event " + std::to_string(at) + ": " + percent(w.fraction) + " wrong; " + w.detail;
            qInfo("%s", what.c_str());
            QVERIFY2(w.fraction <= (variant == "none" ? 0.05 : 0.02), what.c_str());
        }
    }
};

QTEST_GUILESS_MAIN(TestSynthRollout)
#include "test_synth_rollout.moc"
