// The parameters' lineage (structural_lineage.cpp, parametersMovedBack): the run of blocks a trace
// opens with, whose sizes the next run repeats in order (what is built from each parameter), and
// each later run of that sequence made after the previous one was let go of, are the model moved
// off the device and back. The first run is the lineage's root even when it was moved off again
// before any forward ran with it: zl_decomfl's frameless copy had that first run (477.8 MiB, alone
// on the device for its first 216 events) unknown, 100 % of the bytes at the run's worst moment.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;

namespace {

constexpr int64_t kSizes[] = {4 << 20, 1 << 20, 3 << 20, 1 << 20, 2 << 20, 5 << 20};
constexpr int kRun = 6;

// run 0 (the model), run 1 (state built from it), run 0 let go of, run 2 (the model moved back),
// two forwards. Stacks: the caller's line only (nothing names a pool), the forwards under forward().
std::shared_ptr<Trace> build()
{
    auto t = std::make_shared<Trace>();
    t->path = "lineage_root.pickle";
    const FrameId main = t->frames.internFrame("/home/u/proj/run.py", "main", 20);
    const FrameId fwd = t->frames.internFrame("/home/u/proj/net.py", "forward", 40);
    const FrameId sMain[] = {main}, sFwd[] = {fwd, main};
    const StackId atMain = t->frames.internStack(sMain), inFwd = t->frames.internStack(sFwd);
    DeviceTrace d;
    int64_t time = 0;
    auto push = [&](Action a, uint64_t addr, int64_t size, StackId st) { d.events.push(a, addr, size, 0, ++time, st); };
    auto free = [&](uint64_t addr, int64_t size, StackId st) {
        push(Action::FreeRequested, addr, size, st);
        push(Action::FreeCompleted, addr, size, st);
    };
    auto addr = [](int run, int k) { return 0x7f0000000000ull + uint64_t(run * kRun + k) * (8 << 20); };
    for (int run : {0, 1})
        for (int k = 0; k < kRun; ++k)
            push(Action::Alloc, addr(run, k), kSizes[k], atMain);
    for (int k = 0; k < kRun; ++k)
        free(addr(0, k), kSizes[k], atMain);
    for (int k = 0; k < kRun; ++k)
        push(Action::Alloc, addr(2, k), kSizes[k], atMain);
    for (int pass = 0; pass < 2; ++pass) {
        for (int k = 0; k < 3; ++k)
            push(Action::Alloc, addr(3 + pass, k), 2 << 20, inFwd);
        for (int k = 0; k < 3; ++k)
            free(addr(3 + pass, k), 2 << 20, atMain);
    }
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    t->devices.push_back(std::move(d));
    return t;
}

} // namespace

class TestLineageRoot : public QObject {
    Q_OBJECT
private slots:
    void theFirstRunIsTheModelEvenIfMovedOffBeforeAForward()
    {
        const auto t = build();
        const DeviceTrace& dev = t->devices[0];
        const Classification c = classify(*t, dev, testing::shippedRules());
        for (size_t i = 0; i < c.size(); ++i) {
            if (dev.allocations[i].address >= 0x7f0000000000ull + uint64_t(kRun) * (8 << 20))
                continue; // only run 0
            QVERIFY2(c.pool[i] == Pool::Parameter, (std::string(poolName(c.pool[i])) + " by " + c.rules[c.rule[i]].name).c_str());
        }
    }
};

QTEST_GUILESS_MAIN(TestLineageRoot)
#include "test_lineage_root.moc"
