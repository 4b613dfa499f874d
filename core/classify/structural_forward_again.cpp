#include "core/classify/structural_forward_again.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <vector>

namespace poolscope::classify_detail {
namespace {

struct Birth {
    EventIndex event;
    int64_t size;
};

// The births of each maximal stretch of events in `phase` from event `from` on, in order.
std::vector<std::vector<Birth>> birthsByStretch(const DeviceTrace& dev, const PhaseTimeline& tl, Phase phase, size_t from = 0)
{
    std::vector<std::vector<Birth>> out;
    bool inside = false;
    for (size_t e = from; e < tl.phase.size(); ++e) {
        if (tl.phase[e] != phase) {
            inside = false;
            continue;
        }
        if (!inside)
            out.emplace_back();
        inside = true;
        if (const Allocation* a = bornAt(dev, EventIndex(e)))
            out.back().push_back(Birth{EventIndex(e), sizeKey(a->size)});
    }
    return out;
}

} // namespace

size_t forwardsRepeatingAForward(const DeviceTrace& dev, PhaseTimeline& tl)
{
    if (tl.phase.size() != dev.events.count())
        return 0;
    // The template: the placed forward that makes the most blocks (the whole model; a forward split by
    // the caller's code between its calls is read per piece).
    std::vector<Birth> model;
    for (auto& f : birthsByStretch(dev, tl, Phase::Forward))
        if (f.size() > model.size())
            model = std::move(f);
    if (model.size() < kMinRepeatedBirths)
        return 0;
    // What comes before the first forward is the model being built or loaded: a model is called
    // after it exists (where the batch's tokens equal the width, its weights have activations' sizes).
    const size_t firstForward = size_t(std::find(tl.phase.begin(), tl.phase.end(), Phase::Forward) - tl.phase.begin());
    // An operator more or fewer per layer (a dropout mask in training, none in evaluation) skips a
    // few of the model's births; a block of a size the model never makes is the caller's, skipped.
    constexpr size_t kLookahead = 8;
    size_t placed = 0;
    for (const std::vector<Birth>& stretch : birthsByStretch(dev, tl, Phase::Unknown, firstForward)) {
        if (stretch.size() < kMinRepeatedBirths)
            continue;
        // Greedily in order, restarting where the model's births run out (a loop of calls). `walked`
        // counts the model's births passed over: a backward's scratch, the layers' sizes in reverse,
        // matches a short repeating layer now and then by skipping ahead, a call of the model in step.
        size_t j = 0, matched = 0, walked = 0, first = stretch.size(), last = 0;
        for (size_t i = 0; i < stretch.size(); ++i) {
            size_t k = j;
            while (k < model.size() && k < j + kLookahead && model[k].size != stretch[i].size)
                ++k;
            if (k >= model.size() || k >= j + kLookahead || model[k].size != stretch[i].size) {
                if (j >= model.size() && model[0].size == stretch[i].size)
                    k = 0; // the next call begins
                else
                    continue;
            }
            walked += k >= j ? k + 1 - j : 1;
            j = k + 1;
            ++matched;
            first = std::min(first, i);
            last = i;
        }
        if (matched < kMinRepeatedBirths || matched * 5 < (last + 1 - first) * 4 || matched * 4 < walked * 3)
            continue;
        placeStructural(tl, stretch[first].event, stretch[last].event, Phase::Forward, placed);
    }
    return placed;
}

} // namespace poolscope::classify_detail
