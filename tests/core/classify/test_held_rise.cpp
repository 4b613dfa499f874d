// A forward held to the end of a recording, read past one operator's transients (stop 58,
// structural_held_rise.h). A GCN's every layer runs a sparse product that asks for 4.7 GB for a few
// events beside the 0.6 GB the forward keeps: on the raw curve the rise "fell back" from its top, and
// the transients set the swings' threshold, so a frameless ring-buffer window that ends in that
// forward left its activations `unknown` at 0 %.
#include "core/classify/gpu_truth.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/structural_held_rise.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::gpu_truth;
using poolscope::testing::shippedRules;

namespace {

constexpr int64_t MiB = int64_t(1) << 20;

// A curve: `lead` events at `base`, then a rise of `step` bytes per event kept for `events` events,
// with a transient of `spike` bytes for 3 events every 40 (from the 20th).
std::vector<int64_t> curve(int64_t base, size_t lead, size_t events, int64_t step, int64_t spike)
{
    std::vector<int64_t> v(lead, base);
    int64_t level = base;
    for (size_t e = 0; e < events; ++e) {
        level += step;
        v.push_back(level + (spike && e % 40 >= 20 && e % 40 < 23 ? spike : 0));
    }
    return v;
}

} // namespace

class TestHeldRise : public QObject {
    Q_OBJECT
private slots:
    void transientsDoNotHideAHeldRise()
    {
        const auto v = curve(0, 50, 400, 2 * MiB, 4700 * MiB);
        const EventIndex low = heldRiseStart(v, 0, (4700 * MiB + 800 * MiB) / 20);
        QVERIFY(low != kNoEvent);
        QVERIFY2(low >= 45 && low <= 50, qPrintable(QString::number(low))); // where the rise began
    }
    void aRiseLetGoOfIsNoHeldRise()
    {
        auto v = curve(0, 50, 400, 2 * MiB, 0);
        for (size_t e = 0; e < 100; ++e) // then most of it let go of, and held there
            v.push_back(100 * MiB);
        QCOMPARE(heldRiseStart(v, 0, 40 * MiB), kNoEvent);
    }
    void tooLittleKeptIsNoHeldRise()
    {
        const auto v = curve(0, 50, 400, MiB / 8, 0); // 50 MiB kept
        QCOMPARE(heldRiseStart(v, 0, 200 * MiB), kNoEvent);
    }

    // The GCN run's last half without frames: annotations name the optimizer step and zero_grad,
    // and the forward after them, held to the dump, is that forward's (547 MiB: 99.9 % of the named
    // bytes were `unknown` or misfiled before; the 130 MiB of inputs made before recording, read as
    // weights as in the whole dump, are what is left).
    void theForwardAfterTheStepIsRead()
    {
        const std::string dir = POOLSCOPE_TEST_DATA "/gpu_runs/";
        const auto window = copyOf(testing::keepLastEntries(*load(dir + "gcn_adam_cpp.pickle.gz"), 0.5), "none", shippedRules());
        const DeviceTrace& dev = window->devices.at(0);
        const Classification c = classify(*window, dev, shippedRules());
        const Score s = score(dev, c, readTruth(dir + "gcn_adam_cpp.truth.json.gz"));
        QVERIFY2(s.wrongShare() < 0.2, qPrintable(QString::number(s.wrongShare())));
        bool forward = false;
        for (const Pass& p : c.facts.passes)
            forward = forward || (p.phase == Phase::Forward && p.last == EventIndex(dev.eventCount()) - 1);
        QVERIFY(forward);
    }
};

QTEST_GUILESS_MAIN(TestHeldRise)
#include "test_held_rise.moc"
