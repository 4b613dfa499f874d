// The cuBLAS workspace a handle made before recording began (stop 56): a recording switched on after
// a warm-up step, or a ring buffer, holds it as a block from before recording, alive to the end, and
// its lifetime alone read it as a weight. The real runs (tests/data/gpu_runs, H200) name every
// parameter, gradient and optimizer state by address; the 32 MiB blocks from before recording they do
// not name are the forward's and the autograd engine's workspaces. The synthetic runs hold what must
// stay weights: a weight of exactly that size beside the workspace the recording saw made, and a
// family of them.
#include "core/classify/gpu_truth.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/training_trace.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::gpu_truth;
using poolscope::testing::shippedRules;

namespace {

const std::string kDir = POOLSCOPE_TEST_DATA "/gpu_runs/";
constexpr int64_t kHopperWorkspace = int64_t(32) << 20;

// Never freed in the recording, not even a free requested and pending on a stream.
bool keptToTheEnd(const Allocation& a)
{
    return a.aliveAtEnd() && a.freeRequestedEvent == kNoEvent;
}

bool keptFromBeforeRecording(const Allocation& a)
{
    return a.preexisting() && keptToTheEnd(a);
}

} // namespace

class TestWorkspacePreexisting : public QObject {
    Q_OBJECT
private slots:
    void unnamedWorkspaceBlocksAreWorkspace_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<QString>("copy");
        // Recorded after a warm-up: both handles' workspaces predate the recording (adam_step_oom,
        // compiled_llama), or the forward's does and the engine's is recorded (llama_autocast_adamw_oom).
        for (const char* run : {"adam_step_oom", "compiled_llama", "llama_autocast_adamw_oom"})
            for (const char* copy : {"all", "python", "none"})
                QTest::newRow((std::string(run) + " " + copy).c_str()) << run << copy;
    }
    void unnamedWorkspaceBlocksAreWorkspace()
    {
        QFETCH(QString, run);
        QFETCH(QString, copy);
        const auto original = load(kDir + run.toStdString() + ".pickle.gz");
        const auto trace = copyOf(original, copy.toStdString(), shippedRules());
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, shippedRules());
        const auto truth = readTruth(kDir + run.toStdString() + ".truth.json.gz");
        int workspaces = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            const Named* n = nameOf(truth, a);
            // No block the run named (a weight, its gradient, its state, the batch) reads as workspace.
            if (n && keptFromBeforeRecording(a))
                QVERIFY2(c.pool[i] != Pool::Workspace, (std::to_string(a.address) + " " + c.rules[c.rule[i]].name).c_str());
            if (n || !keptFromBeforeRecording(a) || a.size != kHopperWorkspace)
                continue;
            ++workspaces;
            QVERIFY2(c.pool[i] == Pool::Workspace, (std::to_string(a.address) + " read as " + std::string(poolName(c.pool[i])) +
                                                     " by " + c.rules[c.rule[i]].name)
                                                        .c_str());
            // Where only this reading names it: a weight of exactly that size, alone, would look the same.
            if (c.rules[c.rule[i]].name == "library-workspace-kept-from-before-recording")
                QVERIFY(c.confidence[i] < 70);
        }
        QVERIFY(workspaces >= 1);
    }

    // An inference run whose recording saw its one handle make the workspace: a weight of exactly the
    // workspace's size from before recording is no second workspace.
    void inferenceWeightBesideTheRecordedWorkspace()
    {
        testing::TrainingOptions o;
        o.forwardOnly = true;
        o.paramsBeforeRecording = true;
        o.paramBytes = kHopperWorkspace; // layer 0's weight is exactly 32 MiB
        o.stacks = testing::StackMode::PythonOnly;
        const testing::TrainingTrace t = testing::makeTrainingTrace(o);
        const DeviceTrace& dev = t.trace->devices.at(0);
        const Classification c = classify(*t.trace, dev, shippedRules());
        int weights = 0, recorded = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (a.size != kHopperWorkspace)
                continue;
            if (keptFromBeforeRecording(a)) {
                ++weights;
                QCOMPARE(c.pool[i], Pool::Parameter);
            } else if (!a.preexisting() && keptToTheEnd(a) && c.pool[i] == Pool::Workspace) {
                ++recorded;
            }
        }
        QCOMPARE(weights, 1);
        QCOMPARE(recorded, 1);
    }

    // Three weights of that size from before recording: a family of a layer's shape, no handle's.
    void aFamilyOfThatSizeStaysWeights()
    {
        testing::TrainingOptions o;
        o.forwardOnly = true;
        o.paramsBeforeRecording = true;
        o.workspace = false;
        o.layers = 13; // layers 0, 6 and 12 hold exactly 32 MiB
        o.paramBytes = kHopperWorkspace;
        o.stacks = testing::StackMode::PythonOnly;
        const testing::TrainingTrace t = testing::makeTrainingTrace(o);
        const DeviceTrace& dev = t.trace->devices.at(0);
        const Classification c = classify(*t.trace, dev, shippedRules());
        int weights = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (keptFromBeforeRecording(dev.allocations[i]) && dev.allocations[i].size == kHopperWorkspace) {
                ++weights;
                QCOMPARE(c.pool[i], Pool::Parameter);
            }
        QCOMPARE(weights, 3);
    }
};

QTEST_GUILESS_MAIN(TestWorkspacePreexisting)
#include "test_workspace_preexisting.moc"
