#include "core/classify/structural_across.h"
#include "core/classify/structural_common.h"

#include <vector>

namespace poolscope::classify_detail {

void parametersMovedBack(const DeviceTrace& dev, Classification& c)
{
    if (!c.history || c.facts.firstForward == kNoEvent)
        return;
    // Births in event order (allocations are sorted by allocEvent, those from before recording first).
    std::vector<uint32_t> births;
    for (size_t i = 0; i < c.size(); ++i)
        if (!dev.allocations[i].preexisting())
            births.push_back(uint32_t(i));
    size_t beforeForward = 0;
    while (beforeForward < births.size() && dev.allocations[births[beforeForward]].allocEvent < c.facts.firstForward)
        ++beforeForward;
    auto sizeAt = [&](size_t k) { return dev.allocations[births[k]].size; };
    // The first run: the shortest prefix (at least 4 births, two sizes) that the next births repeat.
    constexpr size_t kMaxRun = 4096;
    size_t p = 0;
    for (size_t len = 4; len <= kMaxRun && 2 * len <= beforeForward && !p; ++len) {
        bool same = true;
        for (size_t k = 0; k < len && same; ++k)
            same = sizeAt(k) == sizeAt(len + k);
        bool twoSizes = false;
        for (size_t k = 1; k < len && !twoSizes; ++k)
            twoSizes = sizeAt(k) != sizeAt(0);
        if (same && twoSizes)
            p = len;
    }
    if (!p)
        return;
    // Parameters and what is built from them live across the forwards; a loop's scratch, which
    // repeats its sizes too, does not. A run counts where every block of it outlives a whole forward.
    auto acrossForward = [&](size_t from) {
        for (size_t j = 0; j < p; ++j) {
            const Allocation& a = dev.allocations[births[from + j]];
            const EventIndex gone = freeEventOf(a);
            bool across = false;
            for (const Pass& pass : c.facts.passes)
                if (pass.phase == Phase::Forward && pass.first > a.allocEvent && (gone == kNoEvent || gone > pass.last)) {
                    across = true;
                    break;
                }
            if (!across)
                return false;
        }
        return true;
    };
    if (!acrossForward(p))
        return; // what the next run repeats is no state kept across forwards
    // Every later run of that sequence (non-overlapping, in order).
    std::vector<size_t> runs{0};
    for (size_t k = p; k + p <= births.size();) {
        bool same = true;
        for (size_t j = 0; j < p && same; ++j)
            same = sizeAt(k + j) == sizeAt(j);
        if (same) {
            runs.push_back(k);
            k += p;
        } else {
            ++k;
        }
    }
    // The parameters' lineage: the first run, then each run made after the current one was wholly
    // let go of.
    std::vector<size_t> lineage{0};
    for (size_t r = 1; r < runs.size(); ++r) {
        const size_t cur = lineage.back();
        const EventIndex start = dev.allocations[births[runs[r]]].allocEvent;
        bool released = true;
        for (size_t j = 0; j < p && released; ++j) {
            const EventIndex gone = freeEventOf(dev.allocations[births[cur + j]]);
            released = gone != kNoEvent && gone < start;
        }
        if (released)
            lineage.push_back(runs[r]);
    }
    if (lineage.size() < 2)
        return; // never moved back: the other structural rules read a run that keeps its parameters
    uint16_t rule = 0;
    for (size_t from : lineage) {
        // A later run moved off again before any forward ran with it is left to the other rules; the
        // first run is the lineage's root whether or not a forward ran with it (the model moved to the
        // device, then off and back before the first forward: zl_decomfl's frameless copy had its 477 MiB
        // unknown until the next run came).
        if (from != 0 && !acrossForward(from))
            continue;
        for (size_t j = 0; j < p; ++j) {
            const uint32_t i = births[from + j];
            const Pool pool = c.pool[i];
            // Open: what phase and lifetime alone guessed (as stateRewrittenBetweenPasses reads it).
            const bool open = pool == Pool::Unknown || pool == Pool::Activation || pool == Pool::Temporary || pool == Pool::Other;
            if (!open || (c.evidenceOf(i) & kEvidenceFrames))
                continue;
            if (!rule)
                rule = addRule(c, "parameters-moved-back",
                               "one of the run of blocks the trace opens with, whose sizes the next run repeats in the same "
                               "order (what is built from each parameter), or of a later run of that sequence made after the "
                               "previous one was let go of entirely: the model's parameters, moved off the device and back",
                               Pool::Parameter, kEvidenceLifetime | kEvidenceSize);
            decide(c, i, Pool::Parameter, rule, 55);
        }
    }
}

} // namespace poolscope::classify_detail
