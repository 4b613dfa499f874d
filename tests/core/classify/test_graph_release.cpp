// A backward that holds the forward's saved tensors to its end (structural_graph_release.h), in
// frameless histories whose every phase is known: the bytes keep rising after the forward ended
// (the backward's products), and the fall releases those products last-made-first, then the saved
// list in the list's own order. Without frames only that order tells where the backward began
// (hta_df_index_resolver cuda:1 frameless read the whole rise as a forward: 47.3 % of its bytes moved).
#include "core/classify/shipped_rules.h"
#include "structure_fixtures.h"

#include "core/classify/classifier.h"
#include "core/classify/structural_graph_release.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

int64_t weightGradBytes() { return 1536 << 10; }

enum class ListOrder { Scrambled, LastMadeFirst, TailScrambled };

struct Steps {
    Fixture f;
    std::vector<EventIndex> forwardEnd; // per step: the forward's last event
    std::vector<EventIndex> forwardStart;
};

// Weights made first, then `steps` steps of: a forward of `layers` layers (two scratch blocks made
// and freed, one block saved), a backward that makes, per layer, an input gradient (freed at once)
// and a weight's gradient (kept to the backward's end), then lets go of the gradients last made
// first and of the saved blocks in `order`. No frame anywhere.
Steps compiledSteps(int steps, int layers, ListOrder order)
{
    FixtureRecorder r;
    Steps out;
    const StackId none{};
    for (int l = 0; l < layers; ++l)
        r.alloc(1536 << 10, none, Pool::Parameter);
    const int64_t weightGrad = weightGradBytes(); // a weight's size
    uint32_t seed = 12345;
    for (int step = 0; step < steps; ++step) {
        std::vector<uint64_t> saved, grads;
        for (int l = 0; l < layers; ++l) {
            const uint64_t a = r.alloc(512 << 10, none, Pool::Temporary);
            const uint64_t b = r.alloc(768 << 10, none, Pool::Temporary);
            if (l == 0)
                out.forwardStart.push_back(EventIndex(r.eventCount()) - 2);
            r.free(a);
            saved.push_back(r.alloc(1 << 20, none, Pool::Activation));
            r.free(b);
        }
        out.forwardEnd.push_back(EventIndex(r.eventCount()) - 1);
        for (int l = layers; l-- > 0;) {
            const uint64_t gradIn = r.alloc(1 << 20, none, Pool::Temporary);
            grads.push_back(r.alloc(weightGrad, none, Pool::Temporary));
            r.free(gradIn);
        }
        for (size_t k = grads.size(); k-- > 0;)
            r.free(grads[k]);
        std::vector<size_t> idx(saved.size());
        for (size_t k = 0; k < idx.size(); ++k)
            idx[k] = order == ListOrder::Scrambled ? k : idx.size() - 1 - k;
        // Fisher-Yates with a fixed LCG (the same every run): all of the list, or its last ten
        // releases (the first layers' blocks) only.
        const size_t from = order == ListOrder::Scrambled ? 0 : order == ListOrder::TailScrambled ? idx.size() - 10 : idx.size();
        for (size_t k = idx.size(); k-- > from + 1;) {
            seed = seed * 1664525u + 1013904223u;
            std::swap(idx[k], idx[from + (seed >> 8) % (k + 1 - from)]);
        }
        for (size_t k : idx)
            r.free(saved[k]);
    }
    out.f = r.finish();
    return out;
}

} // namespace

class TestGraphRelease : public QObject {
    Q_OBJECT
private slots:
    // The list released in no order: the backward began right after the forward's last event.
    void scrambledListMarksTheBackward()
    {
        const Steps s = compiledSteps(3, 48, ListOrder::Scrambled);
        const DeviceTrace& dev = s.f.trace->devices.at(0);
        const Classification c = classify(*s.f.trace, dev, shippedRules());
        for (size_t k = 0; k < s.forwardEnd.size(); ++k) {
            const EventIndex end = s.forwardEnd[k];
            // The boundary falls before the backward's first kept product: its first operator's
            // scratch, made just before, may go with the forward (a few events).
            QCOMPARE(c.phases.phase[size_t(end)], Phase::Forward);
            QCOMPARE(c.phases.phase[size_t(end) + 4], Phase::Backward);
        }
        // What the forward saved is activation; what the backward made and let go of is not.
        for (size_t i = 0; i < c.size(); ++i) {
            if (s.f.truth[i] == Pool::Activation)
                QCOMPARE(c.pool[i], Pool::Activation);
            if (s.f.truth[i] == Pool::Temporary && dev.allocations[i].size == weightGradBytes() && dev.allocations[i].freeRequestedEvent - dev.allocations[i].allocEvent > 16)
                QVERIFY2(c.pool[i] != Pool::Activation, ("#" + std::to_string(i) + " " + c.rules[c.rule[i]].name).c_str());
        }
    }

    // Negative: the same rise released last-made-first throughout (an engine walking the graph
    // layer by layer) shows no list: nothing to split, the rule gives no boundary.
    void orderedReleaseIsNoList()
    {
        const Steps s = compiledSteps(1, 48, ListOrder::LastMadeFirst);
        const DeviceTrace& dev = s.f.trace->devices.at(0);
        EventIndex peak = 0;
        int64_t alive = 0, high = 0;
        for (size_t e = 0; e < dev.events.count(); ++e) {
            alive += dev.events.action[e] == Action::Alloc ? dev.events.size[e] : dev.events.action[e] == Action::FreeCompleted ? -dev.events.size[e] : 0;
            if (alive > high) {
                high = alive;
                peak = EventIndex(e);
            }
        }
        QCOMPARE(backwardStartFromGraphRelease(dev, s.forwardStart[0], peak, EventIndex(dev.events.count())), kNoEvent);
        // The scrambled copy gives the forward's end (the check above is not vacuous).
        const Steps t = compiledSteps(1, 48, ListOrder::Scrambled);
        const EventIndex found = backwardStartFromGraphRelease(t.f.trace->devices.at(0), t.forwardStart[0], peak, EventIndex(t.f.trace->devices.at(0).events.count()));
        QVERIFY(found >= t.forwardEnd[0] && found < t.forwardEnd[0] + 4);
    }

    // Negative: an ordinary backward whose last few releases (the first layers' blocks, an input)
    // come in no order: too small a part of the fall to be a node's saved list.
    void fewStragglersAreNoList()
    {
        const Steps s = compiledSteps(1, 48, ListOrder::TailScrambled);
        const DeviceTrace& dev = s.f.trace->devices.at(0);
        const Steps t = compiledSteps(1, 48, ListOrder::Scrambled);
        const EventIndex peak = t.forwardEnd[0] + 4 * 48; // the same events up to the fall
        const EventIndex found = backwardStartFromGraphRelease(t.f.trace->devices.at(0), t.forwardStart[0], peak, EventIndex(dev.events.count()));
        QVERIFY(found >= t.forwardEnd[0] && found < t.forwardEnd[0] + 4);
        QCOMPARE(backwardStartFromGraphRelease(dev, s.forwardStart[0], peak, EventIndex(dev.events.count())), kNoEvent);
    }
};

QTEST_GUILESS_MAIN(TestGraphRelease)
#include "test_graph_release.moc"
