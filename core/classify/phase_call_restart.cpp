#include "core/classify/phase_call_restart.h"

#include "core/facts/graph_kept.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace poolscope {
namespace {

bool pythonSource(const Frame& f)
{
    const std::string& file = f.filename;
    return (file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0) || (!file.empty() && file.front() == '<' && file != "<op>");
}

// A stack's Python frames, outermost first (C++ frames recorded with stacks='all' left out, so a
// Python-only capture of the same run reads the same).
class PythonFrames {
public:
    explicit PythonFrames(const FrameTable& frames) : m_frames(frames) {}
    const std::vector<FrameId>& of(StackId st)
    {
        auto [it, fresh] = m_cache.try_emplace(st.value);
        if (fresh) {
            const auto s = m_frames.stack(st);
            for (auto f = s.rbegin(); f != s.rend(); ++f)
                if (pythonSource(m_frames.frame(*f)))
                    it->second.push_back(*f);
        }
        return it->second;
    }

private:
    const FrameTable& m_frames;
    std::unordered_map<uint32_t, std::vector<FrameId>> m_cache;
};

// Whether a call's allocations, (stack, size) in order, repeat within it: at some lag, three quarters
// or more of at least 8 of them equal the one `lag` before (a model's layers do; one layer does not).
bool repeatsWithin(const std::vector<std::pair<uint32_t, int64_t>>& seq)
{
    constexpr size_t kMinRun = 8;
    for (size_t lag = 2; lag * 2 <= seq.size(); ++lag) {
        const size_t pairs = seq.size() - lag;
        if (pairs < kMinRun)
            break;
        size_t same = 0;
        for (size_t i = lag; i < seq.size(); ++i)
            same += seq[i] == seq[i - lag];
        if (same * 4 >= pairs * 3)
            return true;
    }
    return false;
}

// Whether the restarts found in one forward run are calls of the model: the calls after the first
// (which may make one-off state: a workspace, a table built lazily) make the same blocks from the
// same sites in the same order, the last one as far as the dump goes; and each call keeps a
// quarter or more of what it made past the next one (an output of every call kept with its graph).
// Under no_grad a layer's tensors go within the next layer, so a loop over layers in the model's own
// forward (whose first block is made inside the loop) never passes; with grad on, only a loop over
// identical layers would.
// Two calls only (a ring buffer's window that holds two, opening where a call begins) pass where the
// first makes exactly what the second does: it made nothing one-off, so it was no first call either.
bool callsThatKeepTheirGraphs(const DeviceTrace& dev, const std::vector<size_t>& starts, size_t runEnd)
{
    if (starts.size() < 2)
        return false;
    const auto& ev = dev.events;
    const auto sequence = [&](size_t k) {
        std::vector<std::pair<uint32_t, int64_t>> seq;
        const size_t end = k + 1 < starts.size() ? starts[k + 1] : runEnd + 1;
        for (size_t e = starts[k]; e < end; ++e)
            if (ev.action[e] == Action::Alloc)
                seq.emplace_back(ev.stack[e].value, ev.size[e]);
        return seq;
    };
    const auto model = sequence(1);
    if (starts.size() == 2) {
        // The second (the last: the dump may cut it) goes as far as the first along the same blocks.
        const auto first = sequence(0);
        if (model.empty() || model.size() > first.size() || !std::equal(model.begin(), model.end(), first.begin()))
            return false;
    }
    for (size_t k = 2; k < starts.size(); ++k) {
        const auto seq = sequence(k);
        const bool last = k + 1 == starts.size();
        if (last ? (seq.size() > model.size() || !std::equal(seq.begin(), seq.end(), model.begin())) : seq != model)
            return false;
    }
    // A call runs its model's layers, whose allocations repeat within it; one layer does not repeat
    // within itself. A window that opens inside one forward with grad on (a ring buffer ending in an
    // OOM) restarts at its first block's site at every one of a stage's identical blocks, and they
    // keep what they make: without this, resnet50_adam_oom's last fifth read three "calls" and two
    // leak suspects; the whole dump reads one forward.
    if (!repeatsWithin(sequence(0).size() > model.size() ? sequence(0) : model))
        return false;
    size_t made = 0, kept = 0;
    for (size_t k = 0; k + 1 < starts.size(); ++k) {
        const size_t nextEnd = k + 2 < starts.size() ? starts[k + 2] - 1 : runEnd;
        for (size_t e = starts[k]; e < starts[k + 1]; ++e) {
            const AllocId id = dev.eventAlloc[e];
            if (ev.action[e] != Action::Alloc || !id.valid())
                continue;
            ++made;
            kept += dev.allocations[id.value].aliveAfter(EventIndex(nextEnd)) ? 1 : 0;
        }
    }
    return keepsGraphShare(kept, made);
}

// Where a recording begins inside a call (a ring buffer, or recording started mid-forward), the
// run's first allocation sits inside the model, often inside its loop over layers, and the "restarts"
// found at its site are the layers'. The calls still show where a function shallower than that loop
// went back to an earlier line under the same frames above it (the model's top-level forward, called
// again by the caller's loop): the allocations where the shallowest such move back happens, if it is
// shallower than the one the opening's restarts showed, are the calls' starts. `allocs`: the run's
// allocations with Python frames, in order. Returns the starts (the run's opening first), or nothing.
std::vector<size_t> shallowRestarts(PythonFrames& python, const FrameTable& frames, const DeviceTrace& dev,
                                    const std::vector<size_t>& allocs, const std::vector<size_t>& starts)
{
    if (starts.empty() || allocs.size() < 2)
        return {};
    // The depth at which two allocations' frames part, and whether there, in the same function,
    // the later one sits at an earlier line (it went back).
    const auto wentBackAt = [&](size_t a, size_t b, bool* back) {
        const std::vector<FrameId>& x = python.of(dev.events.stack[a]);
        const std::vector<FrameId>& y = python.of(dev.events.stack[b]);
        size_t d = 0;
        while (d < x.size() && d < y.size() && x[d] == y[d])
            ++d;
        *back = false;
        if (d < x.size() && d < y.size()) {
            const Frame& was = frames.frame(x[d]);
            const Frame& now = frames.frame(y[d]);
            *back = now.filename == was.filename && now.name == was.name && now.line < was.line;
        }
        return d;
    };
    // No restart at the opening's site (it sat in the call's tail, after the loops): any depth will do.
    bool back = false;
    size_t openingDepth = std::numeric_limits<size_t>::max();
    if (starts.size() >= 2) {
        const auto firstRestart = std::find(allocs.begin(), allocs.end(), starts[1]);
        if (firstRestart == allocs.begin() || firstRestart == allocs.end())
            return {};
        openingDepth = wentBackAt(*std::prev(firstRestart), *firstRestart, &back);
    }
    size_t shallowest = openingDepth;
    std::vector<size_t> out{starts[0]};
    for (size_t k = 1; k < allocs.size(); ++k) {
        const size_t d = wentBackAt(allocs[k - 1], allocs[k], &back);
        if (!back || d > shallowest)
            continue;
        if (d < shallowest) {
            shallowest = d;
            out.assign(1, starts[0]);
        }
        out.push_back(allocs[k]);
    }
    if (shallowest == openingDepth || out.size() < 2)
        return {};
    // A recording that began mid-call shows it in the lines: where the opening's frames part from
    // those of the first call found, the opening sits at a later line of the same function (the cut
    // call was past the point where every call begins). A whole first call (an OOM in the first
    // forward, whose layers alone move back) opens before its loop: an earlier line.
    bool midCall = false;
    wentBackAt(out[0], out[1], &midCall);
    return midCall ? out : std::vector<size_t>{};
}

} // namespace

size_t splitRestartedCalls(const FrameTable& frames, const DeviceTrace& dev, const PhaseTimeline& tl, std::vector<uint8_t>& boundary)
{
    const auto& ev = dev.events;
    const size_t n = ev.count();
    if (std::find(tl.phase.begin(), tl.phase.end(), Phase::Backward) != tl.phase.end())
        return 0;
    PythonFrames python(frames);
    std::vector<FrameId> opening;  // the Python frames of the current forward run's first allocation
    std::vector<uint8_t> movedOn;  // per depth: that function went on to a later line under the same frames above
    std::vector<size_t> starts;    // the current run's opening and the restarts found after it
    std::vector<size_t> allocs;    // the current run's allocations with Python frames
    // The first event a frame or an annotation named: a run that opens there may open mid-call.
    const size_t firstNamed = size_t(std::find_if(tl.phase.begin(), tl.phase.end(), [](Phase p) { return p != Phase::Unknown; }) -
                                     tl.phase.begin());
    size_t added = 0;
    const auto judgeRun = [&](size_t runEnd) {
        if (callsThatKeepTheirGraphs(dev, starts, runEnd)) {
            for (size_t k = 1; k < starts.size(); ++k, ++added)
                boundary[starts[k]] = 1;
        } else if (!starts.empty() && starts[0] >= firstNamed && !allocs.empty() && allocs[0] == starts[0] &&
                   std::all_of(tl.phase.begin() + ptrdiff_t(firstNamed), tl.phase.begin() + ptrdiff_t(starts[0]),
                               [](Phase p) { return p == Phase::Forward; }) &&
                   std::none_of(boundary.begin() + ptrdiff_t(std::min(firstNamed + 1, starts[0])), boundary.begin() + ptrdiff_t(starts[0]),
                                [](uint8_t b) { return b != 0; })) {
            const std::vector<size_t> calls = shallowRestarts(python, frames, dev, allocs, starts);
            if (callsThatKeepTheirGraphs(dev, calls, runEnd))
                for (size_t k = 1; k < calls.size(); ++k, ++added)
                    boundary[calls[k]] = 1;
        }
        starts.clear();
        opening.clear();
        allocs.clear();
    };
    for (size_t i = 0; i < n; ++i) {
        if (tl.phase[i] != Phase::Forward || boundary[i] || (i > 0 && tl.phase[i - 1] != Phase::Forward)) {
            if (!starts.empty())
                judgeRun(i - 1);
            if (tl.phase[i] != Phase::Forward)
                continue;
        }
        if (!ev.stack[i].valid() || ev.stack[i].value >= frames.stackCount())
            continue;
        const std::vector<FrameId>& here = python.of(ev.stack[i]);
        if (here.empty())
            continue; // the engine's thread, or a C++-only stack: neither opens nor restarts a call
        const bool alloc = ev.action[i] == Action::Alloc;
        if (alloc)
            allocs.push_back(i);
        if (opening.empty()) {
            if (!alloc)
                continue; // a pass opens with what it makes
            opening = here;
            movedOn.assign(opening.size(), 0);
            starts.assign(1, i);
            continue;
        }
        size_t same = 0; // frames shared with the opening, from the outermost
        while (same < opening.size() && same < here.size() && opening[same] == here[same])
            ++same;
        // The opening's own allocation site again, every frame the same, under a function that had
        // moved on past it: a new call. Only the whole site counts: two modules' `forward` methods
        // in one file are one function by file and name, and a call of the other one in between
        // (a head after the body) looks like a move back otherwise.
        bool restarted = false;
        if (alloc && same == opening.size() && same == here.size())
            for (size_t d = 0; d < same && !restarted; ++d)
                restarted = movedOn[d] != 0;
        if (restarted) {
            starts.push_back(i);
            movedOn.assign(opening.size(), 0);
            continue;
        }
        if (same < opening.size() && same < here.size()) {
            const Frame& was = frames.frame(opening[same]);
            const Frame& now = frames.frame(here[same]);
            if (now.filename == was.filename && now.name == was.name && now.line > was.line)
                movedOn[same] = 1;
        }
    }
    if (!starts.empty())
        judgeRun(n - 1);
    return added;
}

} // namespace poolscope
