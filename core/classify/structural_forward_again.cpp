#include "core/classify/structural_forward_again.h"

#include "core/classify/structural_backward_tail.h"
#include "core/classify/structural_common.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace poolscope::classify_detail {
namespace {

struct Birth {
    EventIndex event;
    int64_t size;
};

// Where the stream's shape alone read an optimizer step: the blocks of a gradient's size made after
// a backward, from the first to the last. An evaluation forward between the backward and the step
// makes such blocks too (its logits, a projection's output), and that reading takes it whole.
bool stepReadFromShape(const PhaseTimeline& tl, size_t e)
{
    return tl.phase[e] == Phase::OptimizerStep && tl.source[e] == PhaseSource::Structure;
}

// The births of each maximal stretch of events nothing placed, or that only the stream's shape read
// as an optimizer step, from event `from` on, in order; or with `forward`, of each stretch of
// forward events.
std::vector<std::vector<Birth>> birthsByStretch(const DeviceTrace& dev, const PhaseTimeline& tl, bool forward, size_t from = 0)
{
    std::vector<std::vector<Birth>> out;
    bool inside = false;
    for (size_t e = from; e < tl.phase.size(); ++e) {
        const bool in = forward ? tl.phase[e] == Phase::Forward : tl.phase[e] == Phase::Unknown || stepReadFromShape(tl, e);
        if (!in) {
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

// Four births in a row: where a stretch is lost against the model (the caller's blocks before the
// call, a skip too long), the next four that the model makes in a row say where it is again.
constexpr size_t kSeed = 4;
uint64_t seedAt(const std::vector<Birth>& v, size_t i)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < kSeed; ++k)
        h = (h ^ uint64_t(v[i + k].size)) * 1099511628211ull;
    return h;
}

} // namespace

size_t forwardsRepeatingAForward(const DeviceTrace& dev, PhaseTimeline& tl, const StateBursts& bursts)
{
    if (tl.phase.size() != dev.events.count())
        return 0;
    // The template: a placed forward of the usual length (the median of those long enough). The
    // longest may hold more than the model's call: where the stream's shape alone placed the
    // passes, a rise that never falls is a forward to the end of the dump, optimizer step included.
    std::vector<std::vector<Birth>> forwards = birthsByStretch(dev, tl, true);
    std::erase_if(forwards, [](const std::vector<Birth>& f) { return f.size() < kMinRepeatedBirths; });
    if (forwards.empty())
        return 0;
    std::sort(forwards.begin(), forwards.end(), [](const auto& x, const auto& y) { return x.size() < y.size(); });
    const std::vector<Birth> model = std::move(forwards[(forwards.size() - 1) / 2]);
    std::unordered_map<uint64_t, size_t> seeds; // the first place the model makes each four in a row
    for (size_t t = 0; t + kSeed <= model.size(); ++t)
        seeds.try_emplace(seedAt(model, t), t);
    auto seededAt = [&](const std::vector<Birth>& stretch, size_t i) -> size_t {
        if (i + kSeed > stretch.size())
            return model.size();
        const auto it = seeds.find(seedAt(stretch, i));
        if (it == seeds.end())
            return model.size();
        for (size_t k = 0; k < kSeed; ++k)
            if (model[it->second + k].size != stretch[i + k].size)
                return model.size();
        return it->second;
    };
    // What comes before the first forward is the model being built or loaded: a model is called
    // after it exists (where the batch's tokens equal the width, its weights have activations' sizes).
    const size_t firstForward = size_t(std::find(tl.phase.begin(), tl.phase.end(), Phase::Forward) - tl.phase.begin());
    // The sizes of the run's state where the first forward starts (the weights'), found on first use.
    std::optional<RunState> state;
    auto stateSizes = [&]() -> const std::unordered_set<int64_t>& {
        if (!state)
            state = runStateAt(dev, EventIndex(firstForward));
        return state->sizes;
    };
    // An operator more or fewer per layer (a dropout mask in training, none in evaluation) skips a
    // few of the model's births; a block of a size the model never makes is the caller's, skipped.
    constexpr size_t kLookahead = 8;
    size_t placed = 0;
    for (const std::vector<Birth>& stretch : birthsByStretch(dev, tl, false, firstForward)) {
        if (stretch.size() < kMinRepeatedBirths)
            continue;
        // In order: each birth within a few of the model's next, else where four in a row say (a
        // call's start, or back in step after the caller's blocks). `walked` counts the model's births
        // passed over: a backward's scratch, the layers' sizes in reverse, matches a short repeating
        // layer now and then by skipping ahead, never four in a row; a call of the model is in step.
        // A match behind the last one begins a piece: the next call (the caller's code between two
        // calls is its own, not the model's), or the model found again after a lost stretch.
        size_t j = model.size(), matched = 0, walked = 0, first = stretch.size(), last = 0;
        std::vector<std::pair<size_t, size_t>> pieces;
        for (size_t i = 0; i < stretch.size(); ++i) {
            size_t k = j;
            while (k < model.size() && k < j + kLookahead && model[k].size != stretch[i].size)
                ++k;
            if (k >= model.size() || k >= j + kLookahead) {
                k = seededAt(stretch, i);
                if (k >= model.size())
                    continue;
                walked += 1;
            } else {
                walked += k + 1 - j;
            }
            if (pieces.empty() || k < j)
                pieces.emplace_back(i, i);
            pieces.back().second = i;
            j = k + 1;
            ++matched;
            first = std::min(first, i);
            last = i;
        }
        if (matched < kMinRepeatedBirths || matched * 5 < (last + 1 - first) * 4 || matched * 4 < walked * 3)
            continue;
        for (const auto& [from, to] : pieces) {
            bool stateBurst = true;
            for (size_t i = from; i <= to && stateBurst; ++i)
                stateBurst = bursts.at(stretch[i].event) && stateSizes().count(sizeKey(stretch[i].size)) > 0;
            if (stateBurst)
                continue;
            for (EventIndex e = stretch[from].event; e <= stretch[to].event; ++e)
                if (stepReadFromShape(tl, size_t(e))) {
                    tl.phase[size_t(e)] = Phase::Unknown;
                    tl.source[size_t(e)] = PhaseSource::None;
                }
            placeStructural(tl, stretch[from].event, stretch[to].event, Phase::Forward, placed);
        }
    }
    return placed;
}

} // namespace poolscope::classify_detail
