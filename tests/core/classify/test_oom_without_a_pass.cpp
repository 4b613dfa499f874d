// An OOM where nothing names a pass (structural_oom.cpp heldAtOomWithoutAPass). A frameless
// inference job that runs out in its first forward has no frame, no annotation and no backward: the
// stream reading finds no pass, and what the forward held at the OOM was unknown (vit_inference_oom
// without frames: 2.73 GiB, 66 % of allocated; the verdict named "unclassified memory" as the wall).
// A stretch that lets go of its scratch as it goes is read as a forward, below 50 % (no advice); one
// that keeps all it makes (a model being loaded) is not.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "structure_fixtures.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

struct Stretch {
    Fixture f;
    std::vector<uint64_t> kept;
};

// Three layers, each making an output it keeps for the next layer and two scratch blocks it lets go
// of; the fourth layer's scores run out. No frames at all.
Stretch forwardThatRunsOut()
{
    FixtureRecorder r;
    Stretch s;
    uint64_t previous = 0;
    for (int layer = 0; layer < 3; ++layer) {
        const uint64_t a = r.alloc(64 << 20, {}, Pool::Temporary);
        const uint64_t b = r.alloc(192 << 20, {}, Pool::Temporary);
        const uint64_t out = r.alloc(64 << 20, {}, Pool::Activation);
        r.free(a);
        r.free(b);
        if (previous)
            r.free(previous);
        previous = out;
    }
    s.kept.push_back(previous);
    s.kept.push_back(r.alloc(192 << 20, {}, Pool::Activation));
    r.oom(int64_t(768) << 20);
    s.f = r.finish();
    return s;
}

// A model moved to the device block by block until the device is full: nothing let go of.
Fixture modelLoadThatRunsOut()
{
    FixtureRecorder r;
    for (int w = 0; w < 12; ++w)
        r.alloc(int64_t(96 + (w % 3) * 32) << 20, {}, Pool::Parameter);
    r.oom(int64_t(128) << 20);
    return r.finish();
}

} // namespace

class TestOomWithoutAPass : public QObject {
    Q_OBJECT
private slots:
    void forwardHeldAtTheOomIsAGuessedActivation()
    {
        const Stretch s = forwardThatRunsOut();
        const DeviceTrace& dev = s.f.trace->devices.at(0);
        QCOMPARE(dev.ooms.size(), size_t(1));
        const Classification c = classify(*s.f.trace, dev, shippedRules());
        QVERIFY(c.facts.passes.empty());
        size_t held = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            if (!dev.allocations[i].aliveAtEnd())
                continue;
            ++held;
            QCOMPARE(c.pool[i], Pool::Activation);
            QVERIFY2(c.confidence[i] < 50, qPrintable(QString::number(c.confidence[i])));
        }
        QCOMPARE(held, s.kept.size());
    }

    void modelBeingLoadedIsNoForward()
    {
        const Fixture f = modelLoadThatRunsOut();
        const DeviceTrace& dev = f.trace->devices.at(0);
        const Classification c = classify(*f.trace, dev, shippedRules());
        for (size_t i = 0; i < c.size(); ++i)
            QVERIFY2(c.rules[c.rule[i]].name != "held-at-oom-without-a-pass", qPrintable(QString::number(i)));
    }
};

QTEST_GUILESS_MAIN(TestOomWithoutAPass)
#include "test_oom_without_a_pass.moc"
