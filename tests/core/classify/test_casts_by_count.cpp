// autocast's weight casts told by count where no C++ frame shows the cast (structural_evidence.cpp,
// autocastCastsByCount). An fp32 run whose T tokens x 4 B equal a weight's input width x 2 B makes
// linear outputs of exactly a cast's size, one per weight: wed_training_128 (T = 512, h = 1024)
// with Python frames only had 0.77 GiB of its forward filed as cast cache, which also broke the
// what-if's layer finder (sequence x2 predicted -13.5 %). A cast is made inside its matmul's call,
// before the product; a linear output is its call's last allocation. Real dumps; skipped without
// ../shared/corpus.
#include "core/classify/classifier.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/shipped_rules.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/synth/synth.h"
#include "support/corpus.h"

#include <QtTest>

#include <map>

using namespace poolscope;

namespace {

std::shared_ptr<const Trace> pythonOnly(const char* name)
{
    const QString path = testing::corpusPath(name);
    if (!QFileInfo::exists(path))
        return nullptr;
    RedactOptions o;
    o.frames = FrameKeep::Python;
    return redact(*load(path.toStdString()), o);
}

// Bytes of every allocation over the run that the classifier files as cast cache.
int64_t castCacheBytes(const Trace& t)
{
    const DeviceTrace& dev = t.devices.at(0);
    const Classification c = classify(t, dev, testing::shippedRules());
    int64_t bytes = 0;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::CastCache)
            bytes += dev.allocations[i].size;
    return bytes;
}

// A small GPT at T = 2h (h = 256, one sequence of 512): each layer's dropout mask (T x h x 1 B) has
// an h x h weight's cast size, each softmax output (a x s^2 x 4 B) the cast size of the 8 MiB
// embedding table, a layer norm's output that of an MLP matrix.
SynthModel tokensTwiceTheWidth(SynthDtype dtype)
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 256;
    m.heads = 4;
    m.seq = 512;
    m.microBatch = 1;
    m.vocab = 8192;
    m.dtype = dtype;
    return m;
}

// Two layers of width 128, 64 tokens of batch 2: T = h, so every h x h weight's cast has an
// activation's size.
SynthModel small(SynthDtype dtype)
{
    SynthModel m;
    m.layers = 2;
    m.hidden = 128;
    m.heads = 4;
    m.seq = 64;
    m.microBatch = 2;
    m.vocab = 1000;
    m.dtype = dtype;
    return m;
}

} // namespace

class TestCastsByCount : public QObject {
    Q_OBJECT
private slots:
    void fp32OutputsOfACastsSizeAreNoCasts()
    {
        const auto t = pythonOnly("wed_training_128.pickle");
        if (!t)
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        QCOMPARE(castCacheBytes(*t), int64_t(0));
    }

    // The Python-only copies of runs under autocast keep their casts.
    void autocastRunsKeepTheirCasts_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("k_ctx128_forward_mixed") << "k_ctx128_forward_mixed.pickle";
        QTest::newRow("nh_forward_mixed") << "nh_forward_mixed.pickle";
        QTest::newRow("niu_fwd_200_bf16") << "niu_fwd_200_bf16.pickle";
        // A forward benchmark: the output layer's cast (48.8 MiB) is made at the forward's end and let
        // go of with the graph four events later. With every frame it was an activation (the cast
        // rule wanted a cast that lives long); the Python-only copy counted it a cast by count.
        QTest::newRow("bol_fwd_cl512_bf16") << "bol_fwd_cl512_bf16.pickle";
    }
    void autocastRunsKeepTheirCasts()
    {
        QFETCH(QString, file);
        const auto t = pythonOnly(file.toUtf8().constData());
        if (!t)
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        const QString path = testing::corpusPath(file.toUtf8().constData());
        const int64_t original = castCacheBytes(*load(path.toStdString()));
        QVERIFY(original > 0);
        QCOMPARE(castCacheBytes(*t), original);
    }

    // k_ctx128_forward_mixed's last half, Python-only: a ring buffer's window that opens in the middle
    // of a forward under grad. That forward lets go of nothing its earlier layers saved, so "it lets
    // go of blocks from before recording" could not show that it was open; the earlier layers' casts
    // (3.2 GiB, 64 + 48 blocks of the casts' two sizes) read as saved activations. Blocks from before
    // recording that carry a stack the window's first forward itself makes blocks at show it: the
    // casts from before the window are counted with the recorded ones, one per weight. A program's
    // earlier forward left over (other stacks) is not that: vit_fp16_scaler_sgd holds a Llama's
    // blocks from an earlier run in its process, and none of them is a cast.
    void castsOfAnOpenForwardUnderGrad()
    {
        const QString path = testing::corpusPath("k_ctx128_forward_mixed.pickle");
        if (!QFileInfo::exists(path))
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        const auto whole = load(path.toStdString());
        RedactOptions o;
        o.frames = FrameKeep::Python;
        const auto window = redact(*testing::keepLastEntries(*whole, 0.5), o);
        const int64_t original = castCacheBytes(*redact(*whole, o));
        QVERIFY(original > int64_t(6) << 30);
        // One block more of a cast's size may be taken among the window's (which same-size block is
        // the cast stays a guess): within 1 %.
        const int64_t got = castCacheBytes(*window);
        QVERIFY2(std::abs(got - original) * 100 <= original, qPrintable(QString("%1 B of casts, %2 B in the whole dump").arg(got).arg(original)));
    }
    // The same window without any frame (a forward-only profile under autocast, cut by a ring buffer
    // to its second half): nothing shows that the forward was open, the earlier layers' casts read as
    // weights and the forward's own covered too few weights for the count, so no cast was found.
    // Together they come to exactly one per weight of each cast shape (castsFromBeforeTheWindow).
    void castsFromBeforeAFramelessWindow()
    {
        // T = 96 tokens beside h = 256: no activation has an h x h weight's cast size (at T = h the
        // count cannot tell them apart, whole or cut). Positions = T: the position table's cast has a
        // T x h bf16 output's size, and that one cast the window reads as an earlier layer's output.
        SynthModel m = small(SynthDtype::Autocast);
        m.layers = 8;
        m.hidden = 256;
        m.seq = 96;
        m.microBatch = 1;
        m.forwardOnly = true;
        m.steps = 1;
        const SynthResult r = synthesize(m);
        RedactOptions o;
        o.frames = FrameKeep::None;
        const auto window = redact(*testing::keepLastEntries(r.trace, 0.5), o);
        const DeviceTrace& dev = window->devices.at(0);
        const Classification c = classify(*window, dev, testing::shippedRules());
        // The window's blocks by address, against the run's truth for the block alive there at the end.
        const DeviceTrace& full = r.trace.devices.at(0);
        std::map<uint64_t, Pool> truthAtEnd;
        for (size_t i = 0; i < full.allocations.size(); ++i)
            if (full.allocations[i].aliveAfter(EventIndex(full.events.count()) - 1))
                truthAtEnd[full.allocations[i].address] = r.truth[i];
        int64_t casts = 0, found = 0, before = 0, wrong = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            const auto it = truthAtEnd.find(a.address);
            if (!a.aliveAfter(EventIndex(dev.events.count()) - 1) || it == truthAtEnd.end())
                continue;
            if (it->second == Pool::CastCache) {
                casts += a.size;
                found += c.pool[i] == Pool::CastCache ? a.size : 0;
                before += a.preexisting() ? a.size : 0;
            } else if (c.pool[i] == Pool::CastCache) {
                wrong += a.size;
            }
        }
        QVERIFY(before > 0 && before < casts); // the window opens among the casts
        QVERIFY2(found * 100 >= casts * 95, qPrintable(QString("%1 of %2 B of casts found").arg(found).arg(casts)));
        QCOMPARE(wrong, int64_t(0));
    }
    void noCastsInAnEarlierProgramsForward()
    {
        const auto t = load(POOLSCOPE_TEST_DATA "/gpu_runs/vit_fp16_scaler_sgd.pickle.gz");
        const DeviceTrace& dev = t->devices.at(0);
        const Classification c = classify(*t, dev, testing::shippedRules());
        int64_t before = 0, casts = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (dev.allocations[i].preexisting()) {
                before += dev.allocations[i].size;
                casts += c.pool[i] == Pool::CastCache ? dev.allocations[i].size : 0;
            }
        QVERIFY(before > int64_t(1) << 30);
        QCOMPARE(casts, int64_t(0));
    }

    // The cast cached_cast makes of the output layer's weight is made at the forward's end and let go
    // of by the backward's first steps, a few events later: quick, but let go of in a later pass than
    // its own, held by the backward like every other weight cast (autocast-weight-cast-held-by-
    // backward). With every frame, each cast of the generator's autocast model is cast cache.
    void aQuickCastHeldByTheBackwardIsACast()
    {
        // The layers' weights cast by autocast (the variant layers' mixed precision), and few events
        // between lm_head's cast and its backward: 32, the quick limit.
        SynthModel m = small(SynthDtype::Mixed);
        m.ffn = 128;
        const SynthResult r = synthesize(m);
        const DeviceTrace& dev = r.trace.devices.at(0);
        const Classification c = classify(r.trace, dev, testing::shippedRules());
        int casts = 0, quick = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            if (r.truth[i] != Pool::CastCache)
                continue;
            ++casts;
            const Allocation& a = dev.allocations[i];
            const EventIndex freed = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
            if (!a.preexisting() && freed != kNoEvent && freed - a.allocEvent <= kQuickEvents)
                ++quick;
            QCOMPARE(int(c.pool[i]), int(Pool::CastCache));
        }
        QVERIFY(casts > 0);
        QVERIFY(quick > 0); // the output layer's, once per step
    }

    // Sizes a pass keeps more than twice as often as there are weights to cast are no evidence of
    // autocast: without them, an fp32 run at T = 2h has no cast cache at any moment, with Python
    // frames only or none (it had 5.0 MiB and 8.5 MiB, 4.5 % of the allocated bytes mid-forward).
    void fp32AtTwiceTheWidthHasNoCasts_data()
    {
        QTest::addColumn<int>("frames");
        QTest::newRow("python-only") << int(FrameKeep::Python);
        QTest::newRow("frameless") << int(FrameKeep::None);
    }
    void fp32AtTwiceTheWidthHasNoCasts()
    {
        QFETCH(int, frames);
        const SynthResult fp32 = synthesize(tokensTwiceTheWidth(SynthDtype::Fp32));
        RedactOptions o;
        o.frames = FrameKeep(frames);
        QCOMPARE(castCacheBytes(*redact(fp32.trace, o)), int64_t(0));
        // The same shapes under autocast, with Python frames, keep every cast the C++ frames name
        // (and some look-alikes: at T = 2h the count cannot tell them all apart). Frameless, no size
        // is unambiguous at T = 2h, so no cast is claimed: before, it claimed 1.6x the casts.
        if (FrameKeep(frames) == FrameKeep::Python) {
            const SynthResult autocast = synthesize(tokensTwiceTheWidth(SynthDtype::Autocast));
            const int64_t named = castCacheBytes(autocast.trace);
            QVERIFY(named > 0);
            QVERIFY(castCacheBytes(*redact(autocast.trace, o)) >= named);
        }
    }

    // The backward tells autocast where the frames do not: a weight cast to 16 bits for its matmul gets
    // its gradient in 16 bits, copied to fp32 on its way into .grad, and that 16-bit block is the first
    // let go of after the copy is made. An fp32 training run, whose backward shows no such copy for any
    // weight whose cast the count would claim, has no casts, whatever its sizes: frameless,
    // wed_training_128 (T = 512, h = 1024) filed 0.75 GiB of its forward as cast cache at the run's
    // worst moment, and the generator's fp32 models up to 9 % of their peak. The runs under autocast
    // keep theirs (niu_fb_200_bf16: 87 of its 90 gradients show the copy).
    void anFp32BackwardRulesOutCasts_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("frames");
        QTest::addColumn<bool>("autocast");
        QTest::newRow("wed_training_128 frameless") << "wed_training_128.pickle" << int(FrameKeep::None) << false;
        QTest::newRow("niu_fb_200_bf16 python-only") << "niu_fb_200_bf16.pickle" << int(FrameKeep::Python) << true;
        QTest::newRow("synth fp32 frameless") << "" << int(FrameKeep::None) << false;
        QTest::newRow("synth autocast frameless") << "" << int(FrameKeep::None) << true;
    }
    void anFp32BackwardRulesOutCasts()
    {
        QFETCH(QString, file);
        QFETCH(int, frames);
        QFETCH(bool, autocast);
        std::shared_ptr<const Trace> original;
        if (file.isEmpty()) {
            SynthModel m = small(autocast ? SynthDtype::Autocast : SynthDtype::Fp32);
            m.steps = 4;
            original = std::make_shared<const Trace>(synthesize(m).trace);
        } else {
            const QString path = testing::corpusPath(file.toUtf8().constData());
            if (!QFileInfo::exists(path))
                QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
            original = load(path.toStdString());
        }
        RedactOptions o;
        o.frames = FrameKeep(frames);
        const int64_t copy = castCacheBytes(*redact(*original, o));
        if (autocast)
            QVERIFY(copy > 0);
        else
            QCOMPARE(copy, int64_t(0));
    }
};

QTEST_GUILESS_MAIN(TestCastsByCount)
#include "test_casts_by_count.moc"
