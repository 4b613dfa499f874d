#include "core/steps/optimizer_cycles.h"

#include <algorithm>

// Why: torch.optim's Optimizer.step (and its record_function window) runs once per optimizer. A run
// that trains two models with two optimizers (a GAN: optimizerD.step() after the discriminator's
// backward passes, optimizerG.step() after the generator's) makes two windows per iteration, and
// each window alone is half an iteration: the discriminator's gradients are made after the
// generator's step and let go of at the next netD.zero_grad(), so memory at window ends alternates
// and "growth per step" reads a fall every other step. What tells the windows apart is the scratch
// each optimizer's update makes and lets go of inside its window (the _multi_tensor_ foreach
// results, one per parameter of its own group, in its own order): the same list at every call of
// one optimizer, another list for another optimizer. Sizes alone would not do: DCGAN's generator
// and discriminator mirror each other, their convolutions have the same weight sizes, but not the
// same list (the generator's first layer and its extra BatchNorm). The state an optimizer makes on
// its first step is kept, so it is not part of the list. One optimizer (the common case, gradient
// accumulation included) makes the same list at every window (P = 1) and its windows stay steps.

namespace poolscope::steps_detail {
namespace {

// The sizes of the blocks made and let go of inside the window, in the order made.
std::vector<int64_t> scratchOf(const DeviceTrace& dev, int64_t from, int64_t to)
{
    std::vector<int64_t> out;
    const auto& ts = dev.events.timeUs;
    const auto first = std::lower_bound(ts.begin(), ts.end(), from);
    EventIndex last = kNoEvent;
    for (auto it = first; it != ts.end() && *it <= to; ++it)
        last = EventIndex(it - ts.begin());
    for (auto it = first; it != ts.end() && *it <= to; ++it) {
        const size_t i = size_t(it - ts.begin());
        if (dev.events.action[i] != Action::Alloc || !dev.eventAlloc[i].valid())
            continue;
        const Allocation& a = dev.allocations[dev.eventAlloc[i].value];
        if (a.freeCompletedEvent != kNoEvent && a.freeCompletedEvent <= last)
            out.push_back(a.size);
    }
    return out;
}

} // namespace

std::vector<std::pair<int64_t, int64_t>> optimizerCycles(const DeviceTrace& dev, const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t openEnd)
{
    const size_t n = spans.size();
    if (n < 4)
        return spans;
    std::vector<std::vector<int64_t>> scratch(n);
    for (size_t k = 0; k < n; ++k)
        scratch[k] = scratchOf(dev, spans[k].first, spans[k].second);
    for (const auto& s : scratch)
        if (s.empty())
            return spans; // a window that makes no scratch says nothing of which optimizer ran
    // Period P: every window makes the list the window P before it made, no window the list of the
    // next one, and at least two whole cycles were recorded.
    for (size_t p = 2; p <= 4 && 2 * p <= n; ++p) {
        bool cycles = true;
        for (size_t k = 0; k + p < n && cycles; ++k)
            cycles = scratch[k] == scratch[k + p];
        for (size_t k = 0; k + 1 < n && cycles; ++k)
            cycles = scratch[k] != scratch[k + 1];
        if (!cycles)
            continue;
        std::vector<std::pair<int64_t, int64_t>> out;
        for (size_t k = 0; k < n; k += p) {
            const size_t last = std::min(n, k + p) - 1;
            out.emplace_back(spans[k].first, last - k + 1 == p ? spans[last].second : openEnd);
        }
        return out;
    }
    return spans;
}

} // namespace poolscope::steps_detail
