// Blocks from before recording that are a parameter, its gradient or its optimizer state, with
// nothing in the capture to say which (see the declaration in structural_across.h).
#include "core/classify/structural_across.h"
#include "core/classify/structural_common.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope::classify_detail {

namespace {

// Below kGuessConfidence (50, core/report/verdict.h): the verdict then names no pool and gives no
// advice, and says why (MomentEvidence::indistinctBytes).
constexpr int kIndistinctConfidence = 40;

} // namespace

namespace {

struct Copies {
    int k = 0;                                        // each weight size held k times (or a multiple); 0: not copies
    std::map<int64_t, std::vector<uint32_t>> bySize; // requested bytes -> blocks alive throughout
};

// Blocks from before recording, alive throughout, by requested size, and k where every size held
// more than once is held k times or a multiple of k (see preexistingCopiesIndistinct's declaration).
Copies findCopies(const DeviceTrace& dev, const Classification& c)
{
    Copies r;
    if (!c.history)
        return r;
    // Requested bytes of the blocks from before recording (their allocation's own size; the
    // allocator rounds a block up, and a split block keeps its rounding).
    const auto requested = requestedBytesByAddress(dev);
    auto& bySize = r.bySize;
    int64_t total = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || freeEventOf(a) != kNoEvent)
            continue;
        auto it = requested.find(a.address);
        const int64_t req = it != requested.end() ? it->second : a.size;
        if (isCublasWorkspaceSize(req)) // a library's per-handle scratch, not a weight
            continue;
        bySize[req].push_back(uint32_t(i));
        total += a.size;
    }
    // A model holds some weight shapes an odd number of times, most often once (the final norm of
    // 2L + 1 norms, an embedding, a head, a patch or position embedding): with parameters alone the
    // counts per size share no factor. A gradient and each optimizer moment have their parameter's
    // size, so where every size held more than once comes k times or a multiple of k, each weight
    // is there k times: k = 4, a parameter, its .grad and Adam's two moments; k = 3, two of those
    // (Adam after zero_grad(set_to_none=True), SGD with momentum and .grad). Sizes held once may
    // stay out only while they hold under 1 % of the bytes (a scalar buffer, a library's scratch):
    // a tied embedding held once is a large share of a model, and it says "parameters alone".
    // k = 2 is not read: a model with an even number of layers and an untied head shows it with
    // parameters alone. What can still fool it: a model with no weight held an odd number of times
    // (4m layers, no affine norm, an untied head in 4m blocks); then only confidence is lost.
    for (int k : {4, 3}) {
        int64_t inCopies = 0;
        size_t classes = 0;
        bool every = true;
        for (const auto& [size, blocks] : bySize) {
            if (blocks.size() < 2)
                continue;
            if (blocks.size() % size_t(k) != 0) {
                every = false;
                break;
            }
            ++classes;
            for (uint32_t i : blocks)
                inCopies += dev.allocations[i].size;
        }
        // Two weight shapes at least, and the copies hold 99 % of the bytes from before recording.
        if (every && classes >= 2 && inCopies * 100 >= total * 99) {
            r.k = k;
            break;
        }
    }
    return r;
}

} // namespace

std::unordered_map<int64_t, int64_t> parameterCopiesBeyondOne(const DeviceTrace& dev, const Classification& c)
{
    std::unordered_map<int64_t, int64_t> beyond;
    const Copies cp = findCopies(dev, c);
    if (!cp.k)
        return beyond;
    for (const auto& [size, blocks] : cp.bySize) {
        if (blocks.size() < 2)
            continue;
        const auto inParameters = std::count_if(blocks.begin(), blocks.end(), [&](uint32_t i) { return c.pool[i] == Pool::Parameter; });
        const int64_t surplus = int64_t(inParameters) - int64_t(blocks.size()) / cp.k;
        if (surplus > 0)
            beyond[mirrorKey(size)] += surplus;
    }
    return beyond;
}

void preexistingCopiesIndistinct(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    const Copies cp = findCopies(dev, c);
    const int copies = cp.k;
    const auto& bySize = cp.bySize;
    if (!copies)
        return;
    c.preexistingCopies = copies;
    // Only what no frame named and only the guess from timing alone (a parameter at 60 % at most).
    auto guessed = [&](uint32_t i) {
        const Allocation& a = dev.allocations[i];
        const bool stackless = !a.stack.valid() || trace.frames.stack(a.stack).empty();
        return stackless && !(c.evidenceOf(i) & kEvidenceFrames) && c.pool[i] == Pool::Parameter && c.confidence[i] <= 60;
    };
    uint16_t rule = 0;
    for (const auto& [size, blocks] : bySize) {
        // Where the blocks' own stacks (or a recorded step that rewrites them) named some of a size
        // as gradient or state, the guessed rest are the parameters by elimination: that reading stays.
        if (blocks.size() < 2 || !std::all_of(blocks.begin(), blocks.end(), guessed))
            continue;
        for (uint32_t i : blocks) {
            if (!rule)
                rule = addRule(c, "preexisting-copies-indistinct",
                               "allocated before recording, alive throughout, with no stack; every weight size from before "
                               "recording is held " +
                                   std::to_string(copies) + " times or a multiple of " + std::to_string(copies) +
                                   " (a model holds some shapes once): each weight is here with its gradient and optimizer "
                                   "state, all of one size. Which block is the parameter, the gradient or a moment, nothing "
                                   "recorded says, nor where it sits in its segment (a model's own weights sit in same-size "
                                   "pairs as Adam's moments do): called parameter as a guess (by count, one block in " +
                                   std::to_string(copies) + " of each size is one)",
                               Pool::Parameter, kEvidenceLifetime | kEvidenceSize, kRoleIndistinctCopies);
            decide(c, i, Pool::Parameter, rule, kIndistinctConfidence);
        }
    }
}

} // namespace poolscope::classify_detail
