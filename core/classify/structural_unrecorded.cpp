// The structural deciders for what the recording did not see being made: blocks from before
// recording began, and dumps without any history (see structural_evidence.h).
#include "core/classify/structural_common.h"
#include "core/classify/structural_evidence.h"
#include "core/redact/code_names.h"

#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace poolscope::classify_detail {

namespace {

// Code anyone can read: PyTorch's and installed packages' Python files, PyTorch's, CUDA's and the
// collective libraries' native symbols. A checkout of a library run from its own folder is, to
// the dump, the user's program.
bool publicFrame(const Frame& f)
{
    if (f.isPython()) {
        const auto lib = libraryRelativePath(f.filename);
        return lib && lib->rfind("/site-packages/", 0) == 0;
    }
    for (std::string_view ns : {"c10::", "at::", "torch::", "cublas", "cudnn", "nccl", "cufft", "cusparse", "cutlass"})
        if (f.name.find(ns) != std::string::npos)
            return true;
    return false;
}

} // namespace

void programNamesWithoutHistory(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    if (c.history)
        return;
    std::unordered_map<uint32_t, bool> programOnly; // per stack: frames, none of them public
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] == Pool::Unknown || !(c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue;
        const StackId st = dev.allocations[i].stack;
        if (!st.valid())
            continue;
        auto it = programOnly.find(st.value);
        if (it == programOnly.end()) {
            const auto frames = trace.frames.stack(st);
            bool any = false, pub = false;
            for (FrameId f : frames) {
                any = true;
                pub = pub || publicFrame(trace.frames.frame(f));
            }
            it = programOnly.emplace(st.value, any && !pub).first;
        }
        if (!it->second)
            continue;
        if (!rule)
            rule = addRule(c, "program-names-only-without-history",
                           "no allocation history, and every frame of its stack is the program's own code (not PyTorch's or an "
                           "installed package's): only the names the program gave its functions hint at what it is, and a name is "
                           "not evidence (a renamed copy would have none); poolscope explain shows the stack",
                           Pool::Unknown, 0);
        decide(c, i, Pool::Unknown, rule, 1);
        c.confidence[i] = 0;
    }
}

void weightFamilyWithoutHistory(const DeviceTrace& dev, Classification& c)
{
    if (c.history)
        return;
    const uint16_t unrecorded = bit(Lifetime::NoHistory) | bit(Lifetime::Unrecorded);
    auto guessed = [&](size_t i) { return c.pool[i] == Pool::Parameter && (c.lifetime[i] & unrecorded) == unrecorded; };
    std::unordered_map<int64_t, int> family; // sizes of weights the frames named
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::Parameter && !guessed(i) && (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            ++family[mirrorKey(dev.allocations[i].size)];
    size_t named = 0;
    for (const auto& [size, n] : family)
        named += size_t(n);
    if (named < 16)
        return; // a handful of named weights is no family of shapes to judge the rest by
    uint16_t inFamily = 0, outside = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (!guessed(i))
            continue;
        if (family.count(mirrorKey(dev.allocations[i].size))) {
            if (!inFamily)
                inFamily = addRule(c, "no-history-weight-size",
                                   "no history and no stack, older than the blocks that carry one, and of a size the weights the "
                                   "frames name have: one of the model's weights, by its size",
                                   Pool::Parameter, kEvidenceSize | kEvidenceLifetime);
            decide(c, i, Pool::Parameter, inFamily, 45);
        } else {
            if (!outside)
                outside = addRule(c, "no-history-not-a-weight-size",
                                  "no history and no stack, and of a size none of the weights the frames name has (a feature map "
                                  "or a buffer): nothing in the dump says what it is",
                                  Pool::Unknown, 0);
            decide(c, i, Pool::Unknown, outside, 1);
            c.confidence[i] = 0;
        }
    }
}

void gradientsBeforeRecording(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    // A pre-existing block's requested size, as the rules count it (what a gradient of the same shape asked for).
    std::unordered_map<uint64_t, int64_t> requested;
    std::unordered_map<uint64_t, size_t> segmentOf;
    std::vector<uint8_t> touched(dev.segments.size(), 0); // the segment also holds what the recording saw
    for (size_t k = 0; k < dev.segments.size(); ++k)
        for (const Block& b : dev.segments[k].blocks) {
            if (b.state == BlockState::Inactive) {
                touched[k] = 1;
                continue;
            }
            if (b.requestedSize > 0)
                requested.emplace(b.address, b.requestedSize);
            segmentOf.emplace(b.address, k);
            if (b.stack.valid() && !trace.frames.stack(b.stack).empty())
                touched[k] = 1;
        }
    auto keyOf = [&](const Allocation& a) {
        const auto it = requested.find(a.address);
        return mirrorKey(it != requested.end() ? it->second : a.size);
    };
    auto stackless = [&](const Allocation& a) { return !a.stack.valid() || trace.frames.stack(a.stack).empty(); };
    // The optimizer's state from before recording, per size: its blocks and the distinct stacks
    // (lines of the step) that made them. Adam makes two per parameter at two lines.
    std::unordered_map<int64_t, std::pair<int64_t, std::set<uint32_t>>> state;
    std::unordered_map<int64_t, std::vector<uint32_t>> candidates;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || a.freeCompletedEvent != kNoEvent || a.freeRequestedEvent != kNoEvent)
            continue;
        if (c.pool[i] == Pool::OptimizerState && !stackless(a)) {
            auto& s = state[keyOf(a)];
            ++s.first;
            s.second.insert(a.stack.value);
        } else if (c.pool[i] == Pool::Parameter && stackless(a)) {
            candidates[keyOf(a)].push_back(uint32_t(i));
        }
    }
    if (state.empty() || candidates.empty())
        return;
    // Per size, as many per-parameter buffers per line as there are blocks without a stack over two:
    // a parameter and its gradient each. Most of the bytes must agree, or the sizes say nothing.
    int64_t agreeing = 0, all = 0;
    std::vector<std::pair<int64_t, int64_t>> split; // size -> gradients
    for (const auto& [key, ids] : candidates) {
        const int64_t bytes = key * int64_t(ids.size());
        all += bytes;
        const auto st = state.find(key);
        if (st == state.end() || st->second.second.empty())
            continue;
        const int64_t lines = int64_t(st->second.second.size());
        if (st->second.first % lines != 0)
            continue;
        const int64_t perLine = st->second.first / lines;
        if (int64_t(ids.size()) != 2 * perLine)
            continue;
        agreeing += bytes;
        split.emplace_back(key, perLine);
    }
    if (agreeing == 0 || agreeing * 10 < all * 9)
        return;
    const uint16_t rule = addRule(
        c, "gradients-beside-parameters-before-recording",
        "made before recording began, without a stack, alive throughout, of a size the optimizer keeps per-parameter state "
        "for (made by its step at as many lines as it has buffers), and twice as many of that size as one line's buffers: "
        "one parameter and one gradient each (a Python-only capture records no frame on the autograd engine's thread). Of "
        "each pair the one in a segment that also holds what the recording saw is the gradient: parameters come first, "
        "in segments of their own",
        Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
    for (const auto& [key, grads] : split) {
        auto& ids = candidates[key];
        std::stable_sort(ids.begin(), ids.end(), [&](uint32_t x, uint32_t y) {
            const auto sx = segmentOf.find(dev.allocations[x].address), sy = segmentOf.find(dev.allocations[y].address);
            const bool tx = sx != segmentOf.end() && touched[sx->second], ty = sy != segmentOf.end() && touched[sy->second];
            if (tx != ty)
                return tx;
            return dev.allocations[x].address < dev.allocations[y].address;
        });
        for (int64_t k = 0; k < grads; ++k)
            decide(c, ids[size_t(k)], Pool::Gradient, rule, 55);
    }
}

} // namespace poolscope::classify_detail
