// A capture recorded with context="state" (torch.cuda.memory._record_memory_history(context="state"))
// keeps a stack for each block alive at the snapshot and none on the history's entries. The reader
// gives an allocation made under recording and alive to the end its final block's stack, so the
// tables, explain and the leak suspects name the line that holds the bytes; the classifier reads the
// history as recorded (frameless), since stacks on the survivors alone would read as sites and calls
// that differ from the freed blocks around them. Built here from a truth run of this project's own
// (tests/data/gpu_runs/graph_leak: a forward output kept in a list each step) by emptying every
// entry's frames and writing the snapshot again, as PyTorch writes such a capture.
#include "core/classify/classifier.h"
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/steps/steps_report.h"

#include <QtTest>

#include <fstream>

using namespace poolscope;

namespace {

bool hasFrames(const Trace& t, StackId s)
{
    return s.valid() && !t.frames.stack(s).empty();
}

// graph_leak as context="state" writes it: the entries without frames, the blocks with theirs.
std::shared_ptr<const Trace> stateContextCopy(const QTemporaryDir& dir)
{
    auto t = std::make_shared<Trace>(*load(std::string(POOLSCOPE_TEST_DATA "/gpu_runs/graph_leak.pickle.gz")));
    for (DeviceTrace& d : t->devices)
        for (StackId& s : d.events.stack)
            s = StackId{};
    const std::string path = dir.filePath("graph_leak_state.pickle").toStdString();
    {
        std::ofstream out(path, std::ios::binary);
        writeSnapshot(*t, out);
    }
    return load(path);
}

// The same history with no frame anywhere (blocks too): what the classifier must read alike.
std::shared_ptr<const Trace> withoutBlockStacks(const Trace& state)
{
    auto t = std::make_shared<Trace>(state);
    for (DeviceTrace& d : t->devices) {
        for (const auto& [i, entryStack] : d.stacksFromFinalBlocks)
            d.allocations[i].stack = entryStack;
        d.stacksFromFinalBlocks.clear();
    }
    return t;
}

} // namespace

class TestStateContext : public QObject {
    Q_OBJECT
private slots:
    void survivorsCarryTheirBlocksStacks()
    {
        QTemporaryDir dir;
        const auto t = stateContextCopy(dir);
        const DeviceTrace& d = t->devices.at(0);
        QVERIFY(!d.stacksFromFinalBlocks.empty());
        size_t framedSurvivors = 0, framedFreed = 0;
        for (const Allocation& a : d.allocations) {
            if (a.preexisting())
                continue;
            if (a.aliveAtEnd())
                framedSurvivors += hasFrames(*t, a.stack);
            else
                framedFreed += hasFrames(*t, a.stack);
        }
        QCOMPARE(framedFreed, size_t(0)); // nothing invents a stack for a block the snapshot no longer holds
        QCOMPARE(framedSurvivors, d.stacksFromFinalBlocks.size());
        // explain says where the stack came from, and that the reading did not use it.
        const RuleSet rules = RuleSet::builtin();
        const Classification c = classify(*t, d, rules);
        const Explanation x = explain(*t, d, c, AllocId{d.stacksFromFinalBlocks.front().first});
        QVERIFY(std::any_of(x.evidence.begin(), x.evidence.end(),
                            [](const std::string& e) { return e.find("context=\"state\"") != std::string::npos; }));
    }

    // Pools and rules as if no block had a stack: the survivors' stacks are for showing.
    void classifierReadsTheHistoryAsRecorded()
    {
        QTemporaryDir dir;
        const auto t = stateContextCopy(dir);
        const auto bare = withoutBlockStacks(*t);
        const RuleSet rules = RuleSet::builtin();
        const Classification a = classify(*t, t->devices.at(0), rules);
        const Classification b = classify(*bare, bare->devices.at(0), rules);
        QCOMPARE(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
            QCOMPARE(a.pool[i], b.pool[i]);
            QCOMPARE(a.confidence[i], b.confidence[i]);
        }
    }

    // The leak graph_leak plants (a forward output kept every step) is named by its line, as with
    // full frames: before, "(no frames) 131072000-byte allocations".
    void leakSuspectNamesTheLine()
    {
        QTemporaryDir dir;
        DocumentOptions o;
        o.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
        o.eagerTimelines = false;
        const auto doc = Document::fromTrace(stateContextCopy(dir), o);
        const DeviceSteps s = deviceSteps(doc->device(0));
        QVERIFY(!s.leaks.suspects.empty());
        const LeakSuspect& top = s.leaks.suspects.front();
        QVERIFY2(top.site.find("modeling_llama.py:") != std::string::npos, top.site.c_str());
        QVERIFY2(top.calledFrom.find("graph_leak") != std::string::npos, top.calledFrom.c_str());
        QCOMPARE(top.bytesPerStep, int64_t(131072000));
    }
};

QTEST_GUILESS_MAIN(TestStateContext)
#include "test_state_context.moc"
