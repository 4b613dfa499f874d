// cuBLAS makes a handle's workspace at its first matmul (structural_evidence.cpp, workspaceBySize):
// in a run without optimizer steps (a service, an evaluation) the first call's block of a workspace
// size is it, and a later call's block of the same size is that call's output, since the handle
// was equipped by then. bert_embed_service (a truth run: Python frames only) keeps its first call's
// 32 MiB workspace beside four later calls' 32 MiB outputs; five blocks of one size on one stream
// read as "more than one per handle", so all five were activations (stop 60). A window that opens
// between calls holds the workspace as a block from before recording, and its first call then makes
// no workspace: it reads none as a second one.
#include "frame_ablation.h"
#include "ring_buffer.h"
#include "shipped_rules.h"
#include "core/classify/classifier.h"
#include "core/load.h"

#include <QtTest>

using namespace poolscope;

namespace {

constexpr int64_t kWorkspace = int64_t(32) << 20;
constexpr uint64_t kFirstCallsBlock = 0x7f62d2000000ull; // made at event 39, in the first call

std::shared_ptr<const Trace> bertService()
{
    return load(POOLSCOPE_TEST_DATA "/gpu_runs/bert_embed_service.pickle.gz");
}

} // namespace

class TestWorkspaceFirstCall : public QObject {
    Q_OBJECT
private slots:
    void theFirstCallsBlockIsTheWorkspace_data()
    {
        QTest::addColumn<int>("keep"); // -1: every frame the run recorded; else a KeepFrames
        QTest::newRow("as recorded") << -1;
        QTest::newRow("renamed") << int(testing::KeepFrames::Renamed);
        QTest::newRow("python") << int(testing::KeepFrames::Python);
    }
    void theFirstCallsBlockIsTheWorkspace()
    {
        QFETCH(int, keep);
        const auto original = bertService();
        const auto t = keep < 0 ? original : testing::ablateFrames(*original, testing::KeepFrames(keep));
        const DeviceTrace& dev = t->devices.at(0);
        const Classification c = classify(*t, dev, testing::shippedRules());
        const EventIndex end = EventIndex(dev.eventCount()) - 1;
        int workspaces = 0, outputs = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (a.size != kWorkspace || !a.aliveAfter(end))
                continue;
            const QString what = QStringLiteral("block at 0x%1 (event %2): %3 (%4)")
                                     .arg(a.address, 0, 16)
                                     .arg(a.allocEvent)
                                     .arg(QString::fromLatin1(poolName(c.pool[i]).data()), QString::fromStdString(c.rules[c.rule[i]].name));
            if (a.address == kFirstCallsBlock) {
                QVERIFY2(c.pool[i] == Pool::Workspace, qPrintable(what));
                ++workspaces;
            } else {
                QVERIFY2(c.pool[i] == Pool::Activation, qPrintable(what));
                ++outputs;
            }
        }
        QCOMPARE(workspaces, 1);
        QCOMPARE(outputs, 4);
    }

    // The last fifth: the workspace is from before recording; the window's first call makes a
    // 32 MiB output like the later ones, and no second workspace is read.
    void aWindowBetweenCallsReadsNoSecondWorkspace()
    {
        const auto window = testing::ablateFrames(*testing::keepLastEntries(*bertService(), 0.2), testing::KeepFrames::Python);
        const DeviceTrace& dev = window->devices.at(0);
        const Classification c = classify(*window, dev, testing::shippedRules());
        const EventIndex end = EventIndex(dev.eventCount()) - 1;
        int64_t workspace = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (dev.allocations[i].size == kWorkspace && dev.allocations[i].aliveAfter(end) && c.pool[i] == Pool::Workspace) {
                QVERIFY2(dev.allocations[i].address == kFirstCallsBlock,
                         qPrintable(QStringLiteral("0x%1 read as a workspace").arg(dev.allocations[i].address, 0, 16)));
                workspace += dev.allocations[i].size;
            }
        QCOMPARE(workspace, kWorkspace);
    }
};

QTEST_GUILESS_MAIN(TestWorkspaceFirstCall)
#include "test_workspace_first_call.moc"
