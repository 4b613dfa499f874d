#include "core/classify/structural_graph_release.h"

#include <algorithm>
#include <vector>

namespace poolscope {
namespace {

// Of all pairs (i < j) in `births`, the share with births[i] > births[j]: 1 for blocks let go of
// last-made-first, about 0.5 for an order that has nothing to do with when they were made.
// Counted by merge sort (n log n): a fall can release tens of thousands of blocks.
double descendingShare(std::vector<EventIndex> births)
{
    const size_t n = births.size();
    if (n < 2)
        return 1.0;
    std::vector<EventIndex> tmp(n);
    uint64_t descending = 0;
    for (size_t width = 1; width < n; width *= 2)
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            const size_t mid = std::min(lo + width, n), hi = std::min(lo + 2 * width, n);
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (births[j] < births[i]) {
                    descending += mid - i; // every left one still waiting was made later
                    tmp[k++] = births[j++];
                } else {
                    tmp[k++] = births[i++];
                }
            }
            while (i < mid)
                tmp[k++] = births[i++];
            while (j < hi)
                tmp[k++] = births[j++];
            std::copy(tmp.begin() + long(lo), tmp.begin() + long(hi), births.begin() + long(lo));
        }
    return double(descending) / (double(n) * double(n - 1) / 2.0);
}

} // namespace

// What the fall must show, and why each holds:
// - Its releases (after the peak, of blocks the rise made and kept more than a few events) begin
//   with a stretch of blocks made late in the rise, followed by "the list": blocks made before the
//   oldest of that stretch. (Blocks made later still and let go of after the list, the backward's
//   last products kept to the step's end, belong to neither.) A backward that drops saved tensors
//   as it goes releases the whole rise last-made-first, so any split looks like this; what tells
//   the two apart is the next two points.
// - The list is released in no order of making (under 60 % of its pairs last-made-first; 50 % is
//   no order at all): one node dropping its saved list at once, not an engine walking layer after
//   layer (the eager backwards of the corpus: 76 % at the least, most over 95 %). The first stretch
//   is released last-made-first (90 % of its pairs at least): the engine consuming what that
//   node's backward made, in reverse of its making.
// - The list holds a real part of the fall (16 blocks and a quarter of the bytes at least), so
//   that a few stragglers at the end of an ordinary backward (an input, the first layer's output)
//   are no such list.
// Then the rise up to the first stretch's oldest block was the forward, and from there on the
// backward made what the first stretch released: it cannot be what the node saved, which the list
// is, all of it made before.
EventIndex backwardStartFromGraphRelease(const DeviceTrace& dev, EventIndex fStart, EventIndex peak, EventIndex end)
{
    const auto& ev = dev.events;
    struct Release {
        EventIndex birth;
        int64_t bytes;
    };
    std::vector<Release> rel;
    int64_t total = 0;
    for (EventIndex e = peak + 1; e < end && size_t(e) < ev.count(); ++e) {
        const AllocId id = dev.eventAlloc[size_t(e)];
        if (!id.valid() || ev.action[size_t(e)] == Action::Alloc)
            continue;
        const Allocation& a = dev.allocations[id.value];
        const EventIndex r = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
        if (r != e || a.preexisting() || a.allocEvent < fStart || a.allocEvent > peak || e - a.allocEvent <= 16)
            continue;
        rel.push_back({a.allocEvent, a.size});
        total += a.size;
    }
    const size_t m = rel.size();
    if (m < 32 || total <= 0)
        return kNoEvent;
    // Where the releases switch from the first stretch to the list, the next block released is much
    // older than every one released before it. The largest such drops are the places to try (an
    // engine walking the rise last-made-first drops by a few events at each release).
    std::vector<EventIndex> prefMin(m);
    for (size_t k = 0; k < m; ++k)
        prefMin[k] = k ? std::min(prefMin[k - 1], rel[k].birth) : rel[k].birth;
    std::vector<std::pair<EventIndex, size_t>> drops; // (drop, split after release k)
    for (size_t k = 15; k + 1 < m; ++k)
        if (rel[k + 1].birth < prefMin[k])
            drops.push_back({prefMin[k] - rel[k + 1].birth, k});
    std::sort(drops.begin(), drops.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    drops.resize(std::min<size_t>(drops.size(), 16));
    size_t best = 0;
    double bestShare = 1.0;
    for (const auto& [drop, k] : drops) {
        // The list: what was released after the split and made before the first stretch's oldest
        // block. Blocks made later and released after the list (the backward's last products, kept
        // to the step's end) belong to neither.
        std::vector<EventIndex> first, list;
        int64_t listBytes = 0;
        for (size_t j = 0; j < m; ++j) {
            if (j <= k)
                first.push_back(rel[j].birth);
            else if (rel[j].birth < prefMin[k]) {
                list.push_back(rel[j].birth);
                listBytes += rel[j].bytes;
            }
        }
            // Of the splits that qualify, the one whose list is in the least order of making: a split
        // inside the first stretch leaves some of it in the list, and that part is in order.
        const double listShare = descendingShare(list);
        if (list.size() >= 16 && listBytes * 4 >= total && listShare < 0.6 && listShare < bestShare && descendingShare(first) >= 0.9) {
            best = k + 1;
            bestShare = listShare;
        }
    }
    if (best == 0)
        return kNoEvent;
    EventIndex oldest = rel[0].birth;
    for (size_t k = 0; k < best; ++k)
        oldest = std::min(oldest, rel[k].birth);
    return oldest - 1;
}

} // namespace poolscope
