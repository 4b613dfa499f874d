// Level of detail against a brute-force reference: for random stacks, axes and zooms, every pixel
// column's min/max of every cumulative layer must equal a plain scan of the states it shows.
#include "core/timeline/event_axis.h"
#include "core/timeline/stack_lod.h"

#include <QTest>

#include <algorithm>
#include <limits>
#include <random>

using namespace poolscope;

namespace {

struct Fixture {
    std::vector<std::vector<int64_t>> layers;
    std::vector<int64_t> initial;
    std::vector<int64_t> times;
};

Fixture randomFixture(std::mt19937_64& rng, size_t n, size_t k)
{
    Fixture f;
    std::uniform_int_distribution<int64_t> bytes(0, 1 << 20), step(0, 3), spike(0, 50);
    f.layers.assign(k, std::vector<int64_t>(n));
    for (size_t l = 0; l < k; ++l) {
        int64_t v = bytes(rng);
        f.initial.push_back(v);
        for (size_t i = 0; i < n; ++i) {
            v = std::max<int64_t>(0, v + bytes(rng) / 2 - (1 << 18));
            // Rare one-event spikes: exactly what downsampling must not lose.
            f.layers[l][i] = spike(rng) == 0 ? v + (int64_t(1) << 30) : v;
        }
    }
    int64_t t = 1'700'000'000'000'000;
    for (size_t i = 0; i < n; ++i) {
        t += step(rng) == 0 ? 0 : step(rng) * 17; // repeated timestamps happen
        f.times.push_back(t);
    }
    return f;
}

// Reference: the samples a column [xa, xb) shows are the one holding at xa and every event whose
// position lies in [xa, xb). Scans every sample; no shared code with the pyramid walk.
void bruteColumn(const Fixture& f, const EventAxis& axis, double xa, double xb, std::vector<int64_t>& mn,
                 std::vector<int64_t>& mx)
{
    const size_t k = f.layers.size(), n = axis.eventCount();
    mn.assign(k, std::numeric_limits<int64_t>::max());
    mx.assign(k, std::numeric_limits<int64_t>::min());
    size_t holding = 0; // sample index holding at xa
    for (size_t i = 0; i < n; ++i)
        if (double(axis.position(EventIndex(i))) <= xa)
            holding = i + 1;
    for (size_t s = 0; s <= n; ++s) {
        const bool inside = s > 0 && double(axis.position(EventIndex(s - 1))) >= xa && double(axis.position(EventIndex(s - 1))) < xb;
        if (s != holding && !inside)
            continue;
        int64_t c = 0;
        for (size_t l = 0; l < k; ++l) {
            c += s == 0 ? f.initial[l] : f.layers[l][s - 1];
            mn[l] = std::min(mn[l], c);
            mx[l] = std::max(mx[l], c);
        }
    }
}

// Each range's extrema from the pyramid against a plain scan of the cumulative tops: the first
// disagreement, or an empty string.
QString rangeMismatch(const StackLod& lod, const std::vector<std::pair<size_t, size_t>>& ranges)
{
    const size_t k = lod.layerCount();
    std::vector<StackLod::Extrema> got(k);
    for (const auto& [first, last] : ranges) {
        lod.rangeExtrema(first, last, got);
        for (size_t l = 0; l < k; ++l) {
            int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
            for (size_t s = first; s <= last; ++s) {
                lo = std::min(lo, lod.cumulative(l, s));
                hi = std::max(hi, lod.cumulative(l, s));
            }
            if (got[l].min != lo || got[l].max != hi)
                return QStringLiteral("samples [%1, %2] layer %3: lod [%4, %5] scan [%6, %7]")
                    .arg(first).arg(last).arg(l).arg(got[l].min).arg(got[l].max).arg(lo).arg(hi);
        }
    }
    return {};
}

} // namespace

class TestStackLod : public QObject {
    Q_OBJECT
private slots:
    void matchesBruteForce_data()
    {
        QTest::addColumn<int>("events");
        QTest::addColumn<int>("layers");
        QTest::addColumn<bool>("byTime");
        QTest::newRow("tiny-index") << 5 << 2 << false;
        QTest::newRow("leaf-boundary") << 47 << 3 << false;
        QTest::newRow("index") << 3000 << 4 << false;
        QTest::newRow("time") << 3000 << 4 << true;
        QTest::newRow("time-9-layers") << 1200 << 9 << true;
    }
    void matchesBruteForce()
    {
        QFETCH(int, events);
        QFETCH(int, layers);
        QFETCH(bool, byTime);
        std::mt19937_64 rng(uint64_t(events * 131 + layers));
        Fixture f = randomFixture(rng, size_t(events), size_t(layers));
        const EventAxis axis = byTime ? EventAxis::byTime(f.times) : EventAxis::byIndex(f.times.size());
        const StackLod lod(f.layers, f.initial);
        QCOMPARE(lod.sampleCount(), size_t(events) + 1);

        std::uniform_real_distribution<double> frac(-0.1, 1.1);
        std::uniform_int_distribution<int> widths(1, 700);
        const double end = double(axis.end());
        std::vector<int64_t> mn, mx;
        for (int round = 0; round < 40; ++round) {
            double a = frac(rng) * end, b = frac(rng) * end;
            if (a > b)
                std::swap(a, b);
            if (round == 0) {
                a = 0;
                b = end; // the reset view
            }
            if (b - a < 1e-3)
                b = a + 1;
            const PixelMap px{a, b, widths(rng)};
            const auto cols = lod.query(axis, px);
            QCOMPARE(cols.width, px.width);
            for (int c = 0; c < px.width; ++c) {
                bruteColumn(f, axis, px.columnStart(c), px.columnStart(c + 1), mn, mx);
                for (size_t l = 0; l < size_t(layers); ++l) {
                    if (cols.maxAt(l, c) != mx[l] || cols.minAt(l, c) != mn[l])
                        QFAIL(qPrintable(QStringLiteral("round %1 column %2 layer %3: lod [%4, %5] brute [%6, %7]")
                                             .arg(round).arg(c).arg(l)
                                             .arg(cols.minAt(l, c)).arg(cols.maxAt(l, c)).arg(mn[l]).arg(mx[l])));
                }
            }
        }
    }

    // A view showing more than kTwoThreadsFrom samples is read in two halves on two threads: every
    // column, the seam included, against the samples the full axis searches give and a scan of the
    // pyramid's extrema; a few columns (both sides of the seam) against the brute-force reference.
    void wideViewOnTwoThreads()
    {
        std::mt19937_64 rng(99);
        const size_t n = StackLod::kTwoThreadsFrom + 50'000;
        Fixture f = randomFixture(rng, n, 3);
        const EventAxis axis = EventAxis::byTime(f.times);
        const StackLod lod(f.layers, f.initial);
        const double end = double(axis.end());
        const PixelMap px{-end * 0.01, end, 501};
        QVERIFY(axis.countBefore(px.x1) - axis.countBefore(px.x0) >= StackLod::kTwoThreadsFrom);
        const auto cols = lod.query(axis, px);
        std::vector<StackLod::Extrema> e(3);
        for (int c = 0; c < px.width; ++c) {
            const double xa = px.columnStart(c);
            const size_t before = axis.countBefore(xa), atOrBefore = axis.countAtOrBefore(xa);
            const size_t first = std::min(before == atOrBefore ? atOrBefore : before + 1, n);
            const size_t last = std::min(std::max(first, axis.countBefore(px.columnStart(c + 1))), n);
            QCOMPARE(cols.firstSample[size_t(c)], uint32_t(first));
            QCOMPARE(cols.lastSample[size_t(c)], uint32_t(last));
            lod.rangeExtrema(first, last, e);
            for (size_t l = 0; l < 3; ++l)
                if (cols.minAt(l, c) != e[l].min || cols.maxAt(l, c) != e[l].max)
                    QFAIL(qPrintable(QStringLiteral("column %1 layer %2").arg(c).arg(l)));
        }
        std::vector<int64_t> mn, mx;
        for (int c : {0, 1, px.width / 2 - 1, px.width / 2, px.width / 2 + 1, px.width - 1}) {
            bruteColumn(f, axis, px.columnStart(c), px.columnStart(c + 1), mn, mx);
            for (size_t l = 0; l < 3; ++l) {
                QCOMPARE(cols.minAt(l, c), mn[l]);
                QCOMPARE(cols.maxAt(l, c), mx[l]);
            }
        }
    }

    // Every level of the pyramid, block 0 (which holds the initial sample) included: extrema of
    // sample ranges against a plain scan, for ranges inside one leaf, on leaf edges and across levels.
    void rangeExtremaMatchScan_data()
    {
        QTest::addColumn<int>("shape");
        QTest::newRow("random") << 0;
        QTest::newRow("increasing") << 1;
        QTest::newRow("decreasing") << -1;
    }
    void rangeExtremaMatchScan()
    {
        QFETCH(int, shape);
        std::mt19937_64 rng(99);
        const size_t n = 1000, k = 3;
        Fixture f = randomFixture(rng, n, k);
        // Monotone stacks put the extrema of every range on its ends, so a sample taken from the
        // neighbouring block (or a missed one) shows at once.
        for (size_t l = 0; shape != 0 && l < k; ++l) {
            f.initial[l] = shape > 0 ? 0 : int64_t(n + 1);
            for (size_t i = 0; i < n; ++i)
                f.layers[l][i] = shape > 0 ? int64_t(i + 1) : int64_t(n - i);
        }
        const StackLod lod(f.layers, f.initial);
        std::vector<std::pair<size_t, size_t>> ranges{{0, 0}, {0, 15}, {0, 16}, {1, 16}, {0, 31}, {15, 16}, {16, 31}, {0, n}, {n - 3, n}};
        std::uniform_int_distribution<size_t> pos(0, n);
        for (int r = 0; r < 500; ++r) {
            size_t a = pos(rng), b = pos(rng);
            ranges.emplace_back(std::min(a, b), std::max(a, b));
        }
        const QString mismatch = rangeMismatch(lod, ranges);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
    }

    // Past kTwoThreadsFrom the leaves are made in two halves on two threads: every block of both
    // halves, and ranges across the seam, against a plain scan.
    void leavesOfBothHalves()
    {
        std::mt19937_64 rng(7);
        const size_t n = StackLod::kTwoThreadsFrom + 1001, k = 3;
        const Fixture f = randomFixture(rng, n, k);
        const StackLod lod(f.layers, f.initial);
        const size_t middle = (lod.sampleCount() + StackLod::kLeafSamples - 1) / StackLod::kLeafSamples / 2 * StackLod::kLeafSamples;
        std::vector<std::pair<size_t, size_t>> ranges{{0, n}, {middle - 1, middle}, {middle - 40, middle + 40}};
        for (size_t first = 0; first + 32 <= lod.sampleCount(); first += 32)
            ranges.emplace_back(first, first + 31);
        const QString mismatch = rangeMismatch(lod, ranges);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
    }

    // The global peak survives the most extreme zoom-out: one column for the whole trace.
    void peakSurvivesOneColumn()
    {
        std::vector<std::vector<int64_t>> layers{std::vector<int64_t>(100'000, 10)};
        layers[0][77'777] = 1'000'000'007;
        const StackLod lod(layers, {0});
        const auto cols = lod.query(EventAxis::byIndex(100'000), PixelMap{0, 100'000, 1});
        QCOMPARE(cols.maxAt(0, 0), int64_t(1'000'000'007));
        // Event 0 sits at x = 0, so the initial state (0 bytes) is already replaced there.
        QCOMPARE(cols.minAt(0, 0), int64_t(10));
        const auto before = lod.query(EventAxis::byIndex(100'000), PixelMap{-1, 100'000, 1});
        QCOMPARE(before.minAt(0, 0), int64_t(0));
    }

    void rangeExtremaEdges()
    {
        std::vector<std::vector<int64_t>> layers{{5, 1, 9, 3}, {1, 1, 1, 1}};
        const StackLod lod(layers, {2, 0});
        std::vector<StackLod::Extrema> e(2);
        lod.rangeExtrema(0, 0, e);
        QCOMPARE(e[0].max, int64_t(2));
        QCOMPARE(e[1].max, int64_t(2));
        lod.rangeExtrema(1, 4, e);
        QCOMPARE(e[0].min, int64_t(1));
        QCOMPARE(e[0].max, int64_t(9));
        QCOMPARE(e[1].max, int64_t(10));
        lod.rangeExtrema(3, 99, e); // clamped to the last sample
        QCOMPARE(e[1].min, int64_t(4));
        QCOMPARE(lod.cumulative(1, 3), int64_t(10));
    }

    void rejectsRaggedLayers()
    {
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, StackLod({{1, 2}, {1}}, {0, 0}));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, StackLod({{1, 2}}, {0, 0}));
    }

    void emptyTrace()
    {
        const StackLod lod({{}}, {42});
        const auto cols = lod.query(EventAxis::byIndex(0), PixelMap{0, 1, 3});
        for (int c = 0; c < 3; ++c)
            QCOMPARE(cols.maxAt(0, c), int64_t(42));
    }
};

QTEST_APPLESS_MAIN(TestStackLod)
#include "test_stack_lod.moc"
