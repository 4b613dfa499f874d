#include "core/classify/structural_across.h"
#include "core/classify/structural_common.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <unordered_map>
#include <vector>

namespace poolscope::classify_detail {
namespace {

// Lives on the GPU devices of the trace, by exact bytes: (birth, let go of; INT64_MAX when never)
// times, sorted by birth.
using Lives = std::vector<std::pair<int64_t, int64_t>>;
std::unordered_map<int64_t, Lives> deviceLives(const Trace& trace)
{
    std::unordered_map<int64_t, Lives> out;
    for (const DeviceTrace& d : trace.devices) {
        if (d.kind != DeviceKind::Cuda)
            continue;
        auto timeOf = [&](EventIndex e) { return e == kNoEvent || size_t(e) >= d.events.count() ? kNoTime : d.events.timeUs[size_t(e)]; };
        for (const Allocation& a : d.allocations) {
            const int64_t born = a.preexisting() ? kNoTime : timeOf(a.allocEvent);
            if (born == kNoTime)
                continue;
            const EventIndex gone = freeEventOf(a);
            out[a.size].emplace_back(born, gone == kNoEvent || timeOf(gone) == kNoTime ? INT64_MAX : timeOf(gone));
        }
    }
    for (auto& [size, lives] : out)
        std::sort(lives.begin(), lives.end());
    return out;
}

// Whether the frames named this block's pool: then they decide, not this.
bool framesDecided(const Classification& c, size_t i) { return (c.rules[c.rule[i]].evidence & kEvidenceFrames) != 0; }

} // namespace

void hostBatchesCopiedToDevice(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    if (dev.kind != DeviceKind::Cpu || !c.history || !dev.hasTime)
        return;
    const auto onDevice = deviceLives(trace);
    if (onDevice.empty())
        return;
    const auto& ev = dev.events;
    auto timeOf = [&](EventIndex e) { return e == kNoEvent || size_t(e) >= ev.count() ? kNoTime : ev.timeUs[size_t(e)]; };
    // Only blocks big enough to be a batch (a scalar's 4 or 8 bytes on the host and on the device
    // pair by chance): at least one page.
    constexpr int64_t kMinBatch = 4096;
    // Per host block, when the host next makes one of the same bytes.
    std::unordered_map<size_t, int64_t> nextHostBirth;
    {
        std::unordered_map<int64_t, size_t> last; // size -> latest block of it so far
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (a.preexisting() || a.size < kMinBatch)
                continue;
            if (auto it = last.find(a.size); it != last.end())
                nextHostBirth[it->second] = timeOf(a.allocEvent);
            last[a.size] = i;
        }
    }
    uint16_t batchRule = 0, partRule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.size < kMinBatch || framesDecided(c, i))
            continue;
        auto it = onDevice.find(a.size);
        if (it == onDevice.end())
            continue;
        const int64_t born = timeOf(a.allocEvent);
        if (born == kNoTime)
            continue;
        // A device block of the same bytes made after it and before the host makes the next one of
        // that size: the copy to the device. Not bounded by this block's free: a 2021 profiler
        // records no addresses, and which free closes which block is then the reader's guess.
        const auto next = nextHostBirth.find(i);
        const int64_t until = next != nextHostBirth.end() ? next->second : INT64_MAX;
        const Lives& lives = it->second;
        auto copy = std::lower_bound(lives.begin(), lives.end(), std::pair<int64_t, int64_t>{born, INT64_MIN});
        if (copy == lives.end() || copy->first >= until)
            continue;
        // A copy follows its source at once: where the device made a block of those bytes closer
        // before this one than the next after it, this is the copy of that one to the host (an
        // output's .cpu() each step), not a batch for the device.
        if (copy != lives.begin() && born - std::prev(copy)->first < copy->first - born)
            continue;
        if (!batchRule)
            batchRule = addRule(c, "host-batch-copied-to-device",
                                "host memory whose exact bytes a GPU device of the same trace allocates after it was made "
                                "and before the host makes the next of that size, sooner than the device made one before it "
                                "(a copy follows its source): the batch the host built and copied to the device "
                                "(.to()/.cuda())",
                                Pool::Input, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Input, batchRule, 60);
        // The samples it was stacked from: host blocks of one size let go of in one burst of frees
        // right after the batch was made (nothing batch-sized made in between), k of them with k x size =
        // its bytes.
        std::unordered_map<int64_t, std::vector<uint32_t>> burst; // by size
        for (size_t e = size_t(a.allocEvent) + 1; e < ev.count(); ++e) {
            const AllocId id = dev.eventAlloc[e];
            if (ev.action[e] == Action::Alloc) {
                if (id.valid() && dev.allocations[id.value].size >= kMinBatch)
                    break;
                continue; // the labels' few bytes, stacked beside the samples
            }
            if (!id.valid() || freeEventOf(dev.allocations[id.value]) != EventIndex(e))
                continue;
            const Allocation& p = dev.allocations[id.value];
            if (!p.preexisting() && p.allocEvent < a.allocEvent && p.size < a.size)
                burst[p.size].push_back(id.value);
        }
        const std::vector<uint32_t>* parts = nullptr;
        for (const auto& [size, ids] : burst)
            if (ids.size() > 1 && int64_t(ids.size()) * size == a.size)
                parts = &ids;
        if (!parts)
            continue;
        if (!partRule)
            partRule = addRule(c, "host-samples-of-a-batch",
                               "host blocks of one size let go of together right after a batch that went to the device was made, "
                               "adding up to its bytes: the samples it was stacked from (the DataLoader's collate)",
                               Pool::Input, kEvidenceLifetime | kEvidenceSize);
        for (uint32_t p : *parts)
            if (!framesDecided(c, p))
                decide(c, p, Pool::Input, partRule, 55);
    }
}

} // namespace poolscope::classify_detail
