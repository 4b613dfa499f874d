// A recording in which nothing was ever let go of (structural_state.cpp
// builtLayerByLayerWithoutRelease): a model being loaded, the usual OOM before any step. Without
// frames it was all unclassified. A load keeps what it makes, layer after layer of the same shapes;
// a computation lets go of its scratch, and a cache or a dataset built block by block does not
// repeat a layer's several shapes.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;

namespace {

// Blocks of `sizes` made one after another without frames and kept; `releaseAt` >= 0: one scratch
// block made and let go of after that many; `oom`: an OOM entry at the end.
std::shared_ptr<Trace> built(const std::vector<int64_t>& sizes, int releaseAt = -1, bool oom = true)
{
    auto t = std::make_shared<Trace>();
    t->path = "built_without_release.pickle";
    DeviceTrace d;
    uint64_t next = 0x7f0000000000ull;
    int64_t time = 0;
    auto push = [&](Action a, uint64_t addr, int64_t size) { d.events.push(a, addr, size, 0, ++time, StackId{}); };
    for (size_t k = 0; k < sizes.size(); ++k) {
        if (int(k) == releaseAt) {
            push(Action::Alloc, next, 4096);
            push(Action::FreeRequested, next, 4096);
            push(Action::FreeCompleted, next, 4096);
            next += 1 << 20;
        }
        push(Action::Alloc, next, sizes[k]);
        next += (uint64_t(sizes[k]) + (1 << 20)) & ~uint64_t(0xfffff);
    }
    if (oom)
        push(Action::Oom, 0, sizes.back());
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    t->devices.push_back(std::move(d));
    return t;
}

constexpr int64_t kH = 1024;

// An embedding, `layers` transformer layers (qkv, its bias, out, its bias, two norms, the MLP's two
// matrices and biases), a final norm and the output layer, in bf16.
std::vector<int64_t> model(int layers)
{
    std::vector<int64_t> s{32000 * kH * 2};
    for (int l = 0; l < layers; ++l)
        for (int64_t b : {3 * kH * kH, 3 * kH, kH * kH, kH, kH, kH, 4 * kH * kH, 4 * kH, 4 * kH * kH, kH, kH, kH})
            s.push_back(b * 2);
    s.push_back(kH * 2);
    s.push_back(32000 * kH * 2);
    return s;
}

struct Read {
    int64_t parameter = 0, unknown = 0, other = 0;
    int most = 0; // the highest confidence given
};

Read read(const Trace& t)
{
    const DeviceTrace& dev = t.devices.at(0);
    const Classification c = classify(t, dev, testing::shippedRules());
    Read r;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.freeCompletedEvent != kNoEvent)
            continue;
        (c.pool[i] == Pool::Parameter ? r.parameter : c.pool[i] == Pool::Unknown ? r.unknown : r.other) += a.size;
        if (c.pool[i] == Pool::Parameter)
            r.most = std::max(r.most, int(c.confidence[i]));
    }
    return r;
}

} // namespace

class TestBuiltWithoutRelease : public QObject {
    Q_OBJECT
private slots:
    // A model loaded layer by layer up to an OOM: every block is a parameter, below sure (the
    // embedding and the output layer, outside the repeating stretch, too).
    void aModelLoadedUntilItRanOut()
    {
        for (bool oom : {true, false}) {
            const Read r = read(*built(model(6), -1, oom));
            QCOMPARE(r.unknown, int64_t(0));
            QCOMPARE(r.other, int64_t(0));
            QVERIFY(r.parameter > 0);
            QVERIFY(r.most <= 55);
        }
    }

    // A computation ran (one block let go of): not this reading.
    void aReleaseMeansAComputationRan()
    {
        const Read r = read(*built(model(6), 40));
        QVERIFY2(r.unknown > 0, "blocks after the release are not a load's");
    }

    // No layers' repetition: a cache of one size per layer (keys and values alike), blocks of sizes
    // that never repeat, or too few repeats.
    void withoutLayersNothingIsClaimed_data()
    {
        QTest::addColumn<std::vector<int64_t>>("sizes");
        std::vector<int64_t> cache, distinct, twoLayers = model(2);
        for (int l = 0; l < 24; ++l)
            cache.insert(cache.end(), {64 << 20, 64 << 20});
        for (int k = 1; k <= 40; ++k)
            distinct.push_back(int64_t(k) << 20);
        QTest::newRow("a KV cache, keys and values per layer") << cache;
        QTest::newRow("sizes that never repeat") << distinct;
        QTest::newRow("two layers only") << twoLayers;
    }
    void withoutLayersNothingIsClaimed()
    {
        QFETCH(std::vector<int64_t>, sizes);
        const Read r = read(*built(sizes));
        QCOMPARE(r.parameter, int64_t(0));
    }
};

QTEST_GUILESS_MAIN(TestBuiltWithoutRelease)
#include "test_built_without_release.moc"
