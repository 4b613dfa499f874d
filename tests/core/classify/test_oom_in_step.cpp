// An OOM inside the optimizer's step (structural_oom.cpp heldAtOomInStep). What the step made and
// still held when the OOM ended the dump was "kept past the step" only because the dump ends there:
// optimizer-step-state called the update's scratch (torch._foreach_sqrt's list) optimizer state at
// 90 %, with every frame. An optimizer makes its state once, before its first update; so a block
// made after the step's state initialiser, or in a later step where the state already exists, is
// the update's scratch. Without frames, a first step's update shows as a second sweep over the
// parameters' sizes after the state's; where the sizes do not show it, state, below sure.
#include "core/classify/shipped_rules.h"
#include "frame_ablation.h"

#include "core/classify/classifier.h"
#include "core/classify/structural_oom.h"
#include "core/model/trace_builder.h"
#include "core/synth/synth.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

SynthModel tinyMixed()
{
    SynthModel m;
    m.layers = 2;
    m.hidden = 128;
    m.heads = 4;
    m.seq = 64;
    m.microBatch = 2;
    m.vocab = 1000;
    m.dtype = SynthDtype::Mixed;
    m.optimizer = SynthOptimizer::AdamW;
    m.steps = 2;
    return m;
}

bool madeIn(const Trace& t, StackId s, std::string_view function)
{
    if (!s.valid())
        return false;
    for (FrameId f : t.frames.stack(s))
        if (t.frames.frame(f).name == function)
            return true;
    return false;
}

// The run as its dump would read had it run out of memory at event `at` (an allocation it then
// could not make): the events before it, then the OOM with that allocation's request and stack. The
// final segments are the allocator's state at the OOM.
std::shared_ptr<Trace> outOfMemoryAt(const Trace& t, EventIndex at)
{
    auto out = std::make_shared<Trace>();
    out->path = "oom_in_step.pickle";
    out->frames = t.frames;
    const DeviceTrace& s = t.devices.at(0);
    DeviceTrace d;
    for (EventIndex e = 0; e < at; ++e)
        d.events.push(s.events.action[size_t(e)], s.events.addr[size_t(e)], s.events.size[size_t(e)], s.events.stream[size_t(e)],
                      s.events.timeUs[size_t(e)], s.events.stack[size_t(e)]);
    d.events.push(Action::Oom, 0, s.events.size[size_t(at)], s.events.stream[size_t(at)], s.events.timeUs[size_t(at)],
                  s.events.stack[size_t(at)]);
    // The allocator's state at the OOM: every block alive then (those from before recording too), a
    // segment each.
    for (const Allocation& a : s.allocations) {
        if (!(a.preexisting() ? a.freeCompletedEvent == kNoEvent || a.freeCompletedEvent >= at : a.aliveAfter(at - 1)))
            continue;
        Segment seg;
        seg.address = a.address;
        seg.totalSize = seg.allocatedSize = seg.activeSize = seg.requestedSize = a.size;
        seg.blocks.push_back(Block{a.address, a.size, a.size, BlockState::ActiveAllocated, a.stack});
        d.segments.push_back(std::move(seg));
    }
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    out->devices.push_back(std::move(d));
    return out;
}

struct Held {
    int64_t scratch = 0, state = 0;             // bytes held at the OOM, by what made them
    int64_t scratchAsTemporary = 0, stateAsState = 0;
    int sureWrong = 0;                          // held blocks in another pool at 70 % or more
};

// The blocks the step made and still held at the OOM, told apart by the generator's own frames in
// `named` (the update's, _multi_tensor_adamw; the state's, _init_group): what the copy's classifier
// made of them.
Held heldAtTheOom(const Trace& named, const Trace& copy)
{
    const DeviceTrace& dev = copy.devices.at(0);
    const Classification c = classify(copy, dev, shippedRules());
    Held h;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.freeRequestedEvent != kNoEvent || a.freeCompletedEvent != kNoEvent)
            continue;
        const StackId s = named.devices.at(0).events.stack[size_t(a.allocEvent)];
        const bool update = madeIn(named, s, "_multi_tensor_adamw"), init = madeIn(named, s, "_init_group");
        if (!update && !init)
            continue;
        const Pool truth = update ? Pool::Temporary : Pool::OptimizerState;
        (update ? h.scratch : h.state) += a.size;
        if (c.pool[i] == truth)
            (update ? h.scratchAsTemporary : h.stateAsState) += a.size;
        else if (c.confidence[i] >= 70)
            ++h.sureWrong;
    }
    return h;
}

} // namespace

class TestOomInStep : public QObject {
    Q_OBJECT
private slots:
    // The first step: _init_group made the moments, then _multi_tensor_adamw's torch._foreach_sqrt
    // ran out of memory part-way through its list. With the optimizer's frames (every frame, renamed,
    // Python-only) the list is the update's scratch and the moments stay state; without frames the
    // list visits the parameters' sizes again in the moments' order, one block each.
    void firstStepUpdateScratch_data()
    {
        QTest::addColumn<int>("keep"); // -1: every frame; else a KeepFrames
        QTest::newRow("every frame") << -1;
        QTest::newRow("renamed") << int(KeepFrames::Renamed);
        QTest::newRow("python") << int(KeepFrames::Python);
        QTest::newRow("none") << int(KeepFrames::None);
    }
    void firstStepUpdateScratch()
    {
        QFETCH(int, keep);
        SynthModel m = tinyMixed();
        m.capacity = 11000000;
        const SynthResult r = synthesize(m);
        QCOMPARE(r.trace.devices.at(0).ooms.size(), size_t(1));
        const auto copy = keep < 0 ? std::make_shared<Trace>(r.trace) : ablateFrames(r.trace, KeepFrames(keep));
        const Held h = heldAtTheOom(r.trace, *copy);
        QVERIFY(h.scratch > 0 && h.state > 0);
        QCOMPARE(h.sureWrong, 0);
        QCOMPARE(h.stateAsState, h.state);
        QCOMPARE(h.scratchAsTemporary, h.scratch);
    }

    // A later step: the moments exist since the first. The second step's update ran out of memory
    // part-way through its list; what it held is its scratch in every copy, frames or none, and the
    // first step's moments stay state.
    void laterStepUpdateScratch_data() { firstStepUpdateScratch_data(); }
    void laterStepUpdateScratch()
    {
        QFETCH(int, keep);
        const SynthResult r = synthesize(tinyMixed());
        const DeviceTrace& full = r.trace.devices.at(0);
        std::vector<EventIndex> update;
        for (EventIndex e = 0; e < EventIndex(full.eventCount()); ++e)
            if (full.events.action[size_t(e)] == Action::Alloc && madeIn(r.trace, full.events.stack[size_t(e)], "_multi_tensor_adamw"))
                update.push_back(e);
        QVERIFY(update.size() >= 12 && update.size() % 2 == 0); // the same list in both steps
        const auto cut = outOfMemoryAt(r.trace, update[update.size() / 2 + 5]);
        const auto copy = keep < 0 ? cut : ablateFrames(*cut, KeepFrames(keep));
        const Held h = heldAtTheOom(*cut, *copy);
        QVERIFY(h.scratch > 0 && h.state > 0);
        QCOMPARE(h.scratchAsTemporary, h.scratch);
        QCOMPARE(h.stateAsState, h.state);
        QCOMPARE(h.sureWrong, 0);
    }

    // The sizes alone: the second sweep is found where one split reads so, and nowhere else.
    void secondSweepBySizes_data()
    {
        QTest::addColumn<std::vector<int64_t>>("sizes");
        QTest::addColumn<int>("update"); // -1: none
        QTest::newRow("moments, then the list") << std::vector<int64_t>{8, 8, 3, 3, 1, 1, 1, 1, 5, 5, 8, 3, 1} << 10;
        QTest::newRow("three per parameter") << std::vector<int64_t>{8, 8, 8, 3, 3, 3, 8, 3} << 6;
        QTest::newRow("the moments only (an OOM making them)") << std::vector<int64_t>{8, 8, 3, 3, 1, 1} << -1;
        QTest::newRow("one block of the list: too little to say") << std::vector<int64_t>{8, 8, 3, 3, 8} << -1;
        QTest::newRow("one size throughout") << std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 4} << -1;
        QTest::newRow("one block per parameter (SGD's momentum)") << std::vector<int64_t>{8, 3, 1, 8, 3, 1} << -1;
        QTest::newRow("the second parameter group's update") << std::vector<int64_t>{8, 8, 3, 3, 8, 8, 5, 5, 1, 1, 5, 1} << 10;
        QTest::newRow("one group's moments after another's") << std::vector<int64_t>{8, 8, 3, 3, 5, 5, 1, 1} << -1;
        QTest::newRow("the list in another order") << std::vector<int64_t>{8, 8, 3, 3, 1, 1, 3, 8} << -1;
        QTest::newRow("a single-tensor update's scratch") << std::vector<int64_t>{8, 8, 3, 3, 1, 1, 3, 3} << -1;
    }
    void secondSweepBySizes()
    {
        QFETCH(std::vector<int64_t>, sizes);
        QFETCH(int, update);
        const size_t got = classify_detail::updateAfterStateSweep(sizes);
        QCOMPARE(got == std::string::npos ? -1 : int(got), update);
    }

    // An OOM inside _init_group: everything the step held is state, in every copy.
    void anOomMakingTheStateHoldsState_data() { firstStepUpdateScratch_data(); }
    void anOomMakingTheStateHoldsState()
    {
        QFETCH(int, keep);
        SynthModel m = tinyMixed();
        m.capacity = 9000000;
        const SynthResult r = synthesize(m);
        const auto copy = keep < 0 ? std::make_shared<Trace>(r.trace) : ablateFrames(r.trace, KeepFrames(keep));
        const Held h = heldAtTheOom(r.trace, *copy);
        QCOMPARE(h.scratch, int64_t(0));
        QVERIFY(h.state > 0);
        QCOMPARE(h.stateAsState, h.state);
    }
};

QTEST_GUILESS_MAIN(TestOomInStep)
#include "test_oom_in_step.moc"
