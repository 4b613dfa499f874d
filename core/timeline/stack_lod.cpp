#include "core/timeline/stack_lod.h"

#include "core/util/two_threads.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace poolscope {
namespace {

constexpr StackLod::Extrema kEmpty{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};

void merge(StackLod::Extrema& into, const StackLod::Extrema& e)
{
    into.min = std::min(into.min, e.min);
    into.max = std::max(into.max, e.max);
}

} // namespace

StackLod::StackLod(std::vector<std::vector<int64_t>> layers, std::vector<int64_t> initial)
    : m_layers(std::move(layers)), m_initial(std::move(initial))
{
    if (m_initial.size() != m_layers.size())
        throw std::invalid_argument("StackLod: one initial value per layer");
    m_events = m_layers.empty() ? 0 : m_layers.front().size();
    for (const auto& l : m_layers)
        if (l.size() != m_events)
            throw std::invalid_argument("StackLod: layers differ in length");
    const size_t k = m_layers.size();
    if (k == 0)
        return;

    // Level 0 from the raw samples, then halve until one block remains.
    const size_t samples = sampleCount();
    size_t blocks = (samples + kLeafSamples - 1) / kLeafSamples;
    std::vector<Extrema> level(blocks * k, kEmpty);
    std::vector<const int64_t*> column(k);
    for (size_t l = 0; l < k; ++l)
        column[l] = m_layers[l].data();
    auto leaves = [&](size_t first, size_t last) { // samples [first, last), whole blocks
        // A block at a time, layer by layer: the block's cumulative tops are a row of 16 sums that the
        // compiler keeps in vector registers, where a sample-by-sample walk through the layers
        // (a branch and a read-modify-write of the block's extrema per value) took ~10 ns per value,
        // as long as the pool series itself at a million events.
        for (size_t b = first / kLeafSamples; b * kLeafSamples < last; ++b) {
            const size_t s0 = b * kLeafSamples;
            if (s0 == 0 || s0 + kLeafSamples > samples) { // the initial state, or a ragged last block
                for (size_t s = s0; s < std::min(s0 + kLeafSamples, samples); ++s) {
                    int64_t c = 0;
                    for (size_t l = 0; l < k; ++l) {
                        c += value(l, s);
                        merge(level[b * k + l], Extrema{c, c});
                    }
                }
                continue;
            }
            int64_t top[kLeafSamples] = {};
            for (size_t l = 0; l < k; ++l) {
                const int64_t* v = column[l] + (s0 - 1); // sample s is event s - 1
                int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
                for (size_t j = 0; j < kLeafSamples; ++j) {
                    top[j] += v[j];
                    lo = std::min(lo, top[j]);
                    hi = std::max(hi, top[j]);
                }
                level[b * k + l] = Extrema{lo, hi};
            }
        }
    };
    // Each sample is independent (the stack is summed per sample): at millions of events the
    // leaves are made in two halves on two threads, split at a block edge.
    const size_t middle = blocks / 2 * kLeafSamples;
    if (samples >= kTwoThreadsFrom && middle > 0) {
        onTwoThreads([&] { leaves(0, middle); }, [&] { leaves(middle, samples); });
    } else {
        leaves(0, samples);
    }
    m_levels.push_back(std::move(level));
    while (blocks > 1) {
        const auto& below = m_levels.back();
        const size_t up = (blocks + 1) / 2;
        std::vector<Extrema> next(up * k, kEmpty);
        for (size_t b = 0; b < blocks; ++b)
            for (size_t l = 0; l < k; ++l)
                merge(next[(b / 2) * k + l], below[b * k + l]);
        m_levels.push_back(std::move(next));
        blocks = up;
    }
}

int64_t StackLod::cumulative(size_t layer, size_t sample) const
{
    int64_t c = 0;
    for (size_t l = 0; l <= layer; ++l)
        c += value(l, sample);
    return c;
}

void StackLod::scanRaw(size_t first, size_t last, std::span<Extrema> out) const
{
    const size_t k = m_layers.size();
    for (size_t s = first; s <= last; ++s) {
        int64_t c = 0;
        for (size_t l = 0; l < k; ++l) {
            c += value(l, s);
            merge(out[l], Extrema{c, c});
        }
    }
}

void StackLod::take(size_t level, size_t block, std::span<Extrema> out) const
{
    const size_t k = m_layers.size();
    const Extrema* e = &m_levels[level][block * k];
    for (size_t l = 0; l < k; ++l)
        merge(out[l], e[l]);
}

void StackLod::rangeExtrema(size_t first, size_t last, std::span<Extrema> out) const
{
    std::fill(out.begin(), out.end(), kEmpty);
    if (m_layers.empty())
        return;
    last = std::min(last, sampleCount() - 1);
    if (first > last)
        return;
    // Full leaf blocks [ba, bb); the ragged ends are scanned sample by sample.
    size_t ba = (first + kLeafSamples - 1) / kLeafSamples;
    size_t bb = (last + 1) / kLeafSamples;
    if (ba >= bb) {
        scanRaw(first, last, out);
        return;
    }
    if (first < ba * kLeafSamples)
        scanRaw(first, ba * kLeafSamples - 1, out);
    if (bb * kLeafSamples <= last)
        scanRaw(bb * kLeafSamples, last, out);
    // Bottom-up segment-tree walk: a parent is only taken when both its children lie in range.
    for (size_t level = 0; ba < bb; ++level, ba >>= 1, bb >>= 1) {
        if (ba & 1)
            take(level, ba++, out);
        if (bb & 1)
            take(level, --bb, out);
    }
}

StackLod::Columns StackLod::query(const EventAxis& axis, const PixelMap& pixels) const
{
    Columns cols;
    cols.width = std::max(0, pixels.width);
    cols.layers = m_layers.size();
    const size_t w = size_t(cols.width);
    cols.min.resize(w * cols.layers);
    cols.max.resize(w * cols.layers);
    cols.firstSample.resize(w);
    cols.lastSample.resize(w);
    const size_t maxSample = sampleCount() - 1;
    auto columns = [&](size_t from, size_t to) {
        std::vector<Extrema> e(cols.layers);
        // A column's right edge is the next one's left edge: one search over the axis per column.
        size_t before = axis.countBefore(pixels.columnStart(int(from)));
        for (size_t c = from; c < to; ++c) {
            const double xa = pixels.columnStart(int(c));
            const size_t next = axis.countBefore(pixels.columnStart(int(c) + 1));
            // The state showing at the column's left edge, plus every event that lands inside it,
            // including zero-width states of events sharing the edge's timestamp (a spike that
            // lasted less than a microsecond is still the peak).
            const size_t atOrBefore = axis.countAtOrBefore(xa, before);
            const size_t first = std::min(before == atOrBefore ? atOrBefore : before + 1, maxSample);
            const size_t last = std::min(std::max(first, next), maxSample);
            cols.firstSample[c] = uint32_t(first);
            cols.lastSample[c] = uint32_t(last);
            rangeExtrema(first, last, e);
            for (size_t l = 0; l < cols.layers; ++l) {
                cols.min[l * w + c] = e[l].min;
                cols.max[l * w + c] = e[l].max;
            }
            before = next;
        }
    };
    // Zoomed out, a column's cost is cache misses (an axis search, the pyramid, the raw ends of its
    // range), ~3 us at 1M events: the two halves of a wide view go to two threads.
    const size_t middle = w / 2;
    const size_t from = axis.countBefore(pixels.x0), to = axis.countBefore(pixels.x1);
    if (middle > 0 && to > from && to - from >= kTwoThreadsFrom) {
        onTwoThreads([&] { columns(0, middle); }, [&] { columns(middle, w); });
    } else {
        columns(0, w);
    }
    return cols;
}

} // namespace poolscope
