#pragma once
#include "core/timeline/event_axis.h"

#include <cstdint>
#include <span>
#include <vector>

namespace poolscope {

// Level of detail for a stacked area chart: per pixel column, the min and max of every layer's
// cumulative top over all states the column shows. Taking the max keeps every peak visible at any
// zoom (heaptrack's "max since the last point"); since cumulative tops are ordered at every event,
// the per-column maxima stay ordered too, so the stack never crosses itself.
//
// Built once (a min/max pyramid over blocks of kLeafSamples), queried per replot in
// O(columns * layers * log n).
class StackLod {
public:
    static constexpr size_t kLeafSamples = 16;
    // Samples from which the leaves are made on two threads, and a query showing as many samples
    // reads its two halves on two threads.
    static constexpr size_t kTwoThreadsFrom = 200'000;

    struct Extrema {
        int64_t min;
        int64_t max;
    };

    // Columns of one query; arrays are [layer * width + column].
    struct Columns {
        int width = 0;
        size_t layers = 0;
        std::vector<int64_t> min;
        std::vector<int64_t> max;
        std::vector<uint32_t> firstSample; // the samples a column shows: [first, last]
        std::vector<uint32_t> lastSample;
        int64_t maxAt(size_t layer, int c) const { return max[layer * size_t(width) + size_t(c)]; }
        int64_t minAt(size_t layer, int c) const { return min[layer * size_t(width) + size_t(c)]; }
    };

    StackLod() = default;
    // layers[k][i]: bytes of layer k after event i (bottom layer first); initial[k]: before event 0.
    StackLod(std::vector<std::vector<int64_t>> layers, std::vector<int64_t> initial);

    size_t layerCount() const { return m_layers.size(); }
    size_t eventCount() const { return m_events; }
    size_t sampleCount() const { return m_events + 1; } // sample 0 = initial state
    // Bytes of layer k at sample s (non-cumulative), and the cumulative top of layer k.
    int64_t value(size_t layer, size_t sample) const
    {
        return sample == 0 ? m_initial[layer] : m_layers[layer][sample - 1];
    }
    int64_t cumulative(size_t layer, size_t sample) const;

    // Extrema of each layer's cumulative top over samples [first, last] (inclusive).
    void rangeExtrema(size_t first, size_t last, std::span<Extrema> perLayer) const;
    Columns query(const EventAxis& axis, const PixelMap& pixels) const;

private:
    void scanRaw(size_t first, size_t last, std::span<Extrema> out) const;
    void take(size_t level, size_t block, std::span<Extrema> out) const;

    std::vector<std::vector<int64_t>> m_layers;
    std::vector<int64_t> m_initial;
    size_t m_events = 0;
    // m_levels[L] covers blocks of kLeafSamples << L samples; entry [block * layers + k].
    std::vector<std::vector<Extrema>> m_levels;
};

} // namespace poolscope
