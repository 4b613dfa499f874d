#include "core/steps/step_boundaries.h"

#include "core/steps/optimizer_cycles.h"
#include "core/steps/unnamed_step_ends.h"

#include <algorithm>
#include <limits>
#include <regex>
#include <unordered_map>

namespace poolscope::steps_detail {
namespace {

constexpr int64_t kOpenEnd = std::numeric_limits<int64_t>::max();

// Events are in time order; the few without a time (kNoTime, the smallest int64) sit wherever they
// were recorded, so the searches below skip them by treating them as "before".
EventIndex firstEventAtOrAfter(const DeviceTrace& dev, int64_t t)
{
    const auto& ts = dev.events.timeUs;
    auto it = std::partition_point(ts.begin(), ts.end(), [&](int64_t v) { return v < t; });
    return EventIndex(it - ts.begin());
}
EventIndex lastEventAtOrBefore(const DeviceTrace& dev, int64_t t)
{
    const auto& ts = dev.events.timeUs;
    auto it = std::partition_point(ts.begin(), ts.end(), [&](int64_t v) { return v <= t; });
    return EventIndex(it - ts.begin()) - 1;
}

struct Window {
    std::string name;
    int64_t start = std::numeric_limits<int64_t>::min(), end = kOpenEnd;
};

// START/END annotations of this device whose name `keep` accepts, paired by name (innermost first).
template <typename Keep>
std::vector<Window> windows(const Trace& trace, const DeviceTrace& dev, Keep keep)
{
    std::vector<const Annotation*> anns;
    for (const auto& a : trace.annotations)
        if (a.timeUs != kNoTime && (a.device == dev.device || a.device < 0) && keep(a.name))
            anns.push_back(&a);
    std::stable_sort(anns.begin(), anns.end(), [](const Annotation* a, const Annotation* b) { return a->timeUs < b->timeUs; });
    std::unordered_map<std::string, std::vector<int64_t>> open;
    std::vector<Window> out;
    for (const Annotation* a : anns) {
        if (a->start) {
            open[a->name].push_back(a->timeUs);
            continue;
        }
        Window w{a->name, std::numeric_limits<int64_t>::min(), a->timeUs};
        if (auto& s = open[a->name]; !s.empty()) {
            w.start = s.back();
            s.pop_back();
        }
        out.push_back(std::move(w));
    }
    for (auto& [name, starts] : open)
        for (int64_t s : starts)
            out.push_back(Window{name, s, kOpenEnd});
    std::sort(out.begin(), out.end(), [](const Window& a, const Window& b) { return a.end < b.end; });
    return out;
}

bool isPass(Phase p) { return p == Phase::Forward || p == Phase::Backward || p == Phase::ZeroGrad; }

int64_t allocsIn(const DeviceTrace& dev, EventIndex from, EventIndex to)
{
    int64_t n = 0;
    for (EventIndex i = std::max<EventIndex>(from, 0); i <= to && size_t(i) < dev.eventCount(); ++i)
        n += dev.events.action[size_t(i)] == Action::Alloc;
    return n;
}

// The stretch after the last step is a step the recording stopped inside only when it does a
// step's worth of work: a tenth of an average step's allocations (a stray allocation after the last
// optimizer step, or the first of the next zero_grad, is no step).
bool substantialTail(const DeviceTrace& dev, EventIndex from, EventIndex to, const std::vector<Range>& steps)
{
    if (from > to)
        return false;
    int64_t total = 0, count = 0;
    for (const Range& r : steps)
        if (r.complete) {
            total += allocsIn(dev, r.start, r.end);
            ++count;
        }
    const int64_t tail = allocsIn(dev, from, to);
    return tail > 0 && (count == 0 || tail * 10 * count >= total);
}

} // namespace

std::vector<Range> profilerSteps(const Trace& trace, const DeviceTrace& dev)
{
    static const std::regex kName(R"(^ProfilerStep#\d+$)");
    if (!dev.hasTime || dev.eventCount() == 0)
        return {};
    const auto ws = windows(trace, dev, [](const std::string& n) { return std::regex_match(n, kName); });
    std::vector<Range> out;
    const EventIndex last = EventIndex(dev.eventCount()) - 1;
    for (const Window& w : ws) {
        Range r;
        r.name = w.name;
        r.start = w.start == std::numeric_limits<int64_t>::min() ? 0 : firstEventAtOrAfter(dev, w.start);
        r.end = w.end == kOpenEnd ? last : lastEventAtOrBefore(dev, w.end);
        r.complete = w.end != kOpenEnd && w.start != std::numeric_limits<int64_t>::min();
        if (r.end >= r.start && r.start <= last)
            out.push_back(std::move(r));
    }
    return out;
}

std::vector<Range> optimizerSteps(const Trace& trace, const DeviceTrace& dev, const Classification* c)
{
    if (!dev.hasTime || dev.eventCount() == 0)
        return {};
    std::vector<std::pair<int64_t, int64_t>> spans; // optimizer-step windows (start, end) in µs
    // The rules' annotation patterns (which know other frameworks' names too), else PyTorch's own
    // record_function name for Optimizer.step.
    if (c)
        for (const PhaseWindow& w : c->phases.windows)
            if (w.phase == Phase::OptimizerStep)
                spans.emplace_back(w.startUs, w.endUs);
    if (spans.empty())
        for (const Window& w : windows(trace, dev, [](const std::string& n) { return n.rfind("Optimizer.step#", 0) == 0; }))
            spans.emplace_back(w.start, w.end);
    if (spans.empty())
        return {};
    // Nested or overlapping windows (a framework's own scope around Optimizer.step) are one step.
    std::sort(spans.begin(), spans.end());
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (const auto& sp : spans) {
        if (!merged.empty() && sp.first <= merged.back().second)
            merged.back().second = std::max(merged.back().second, sp.second);
        else
            merged.push_back(sp);
    }
    spans = std::move(merged);
    // Several optimizers stepped in turn (a GAN's D and G): one step per cycle (optimizer_cycles.h).
    spans = optimizerCycles(dev, spans, kOpenEnd);
    const EventIndex last = EventIndex(dev.eventCount()) - 1;
    // The first step begins where the run's first phase does (a recording often starts with the
    // model's construction, which is set-up, not a step).
    EventIndex start = 0;
    if (c) {
        for (const auto& run : c->phases.runs)
            if (isPass(run.phase)) {
                start = run.first;
                break;
            }
    }
    std::vector<Range> out;
    for (const auto& [s, e] : spans) {
        Range r;
        r.start = start;
        r.complete = e != kOpenEnd;
        r.end = e == kOpenEnd ? last : lastEventAtOrBefore(dev, e);
        if (r.end < r.start)
            continue; // an optimizer step before any pass (e.g. nested windows): part of the last step
        start = r.end + 1;
        out.push_back(std::move(r));
        if (start > last)
            break;
    }
    if (start <= last && substantialTail(dev, start, last, out))
        out.push_back(Range{start, last, {}, false}); // the recording stopped inside the next step
    return out;
}

std::vector<Range> phaseSteps(const DeviceTrace& dev, const Classification& c, bool* silentUndecided)
{
    const auto& runs = c.phases.runs;
    const EventIndex lastEv = EventIndex(dev.eventCount()) - 1;
    bool anyOpt = false, anyBackward = false;
    for (const auto& r : runs) {
        anyOpt = anyOpt || r.phase == Phase::OptimizerStep;
        anyBackward = anyBackward || r.phase == Phase::Backward;
    }
    std::vector<Range> out;
    auto source = [&](const PhaseTimeline::Run& r) { return c.phases.source[size_t(r.first)]; };
    if (anyOpt || anyBackward) {
        // A step closes at the end of its optimizer step (or, without one, of its backward) once a
        // new pass begins; an optimizer step with no pass before it (state made in a constructor) is
        // set-up. An optimizer step that allocates nothing leaves no event to name it: SGD's momentum
        // or a fused AdamW after the first step, whose state then exists. A zero_grad that lets go
        // of the gradients after a backward, with no optimizer step seen since, closes that step
        // (graph_leak without annotations: four steps, not the first and one more of three; micro-
        // batches of an accumulation have no zero_grad between them).
        // Where no frame names the zero_grad either (a frameless dump), its frees do: most gradients a
        // backward made let go of before the next forward, with no optimizer step or zero_grad read
        // between, close the step at the last of them (an accumulation keeps them into the next
        // micro-batch's forward).
        const std::vector<EventIndex> gradientsLetGo = anyOpt ? gradientsLetGoBeforeTheNextForward(dev, c) : std::vector<EventIndex>{};
        SilentSteps silentSteps = anyOpt ? silentStepStarts(dev, c, gradientsLetGo) : SilentSteps{};
        if (silentUndecided)
            *silentUndecided = silentSteps.undecided;
        const std::vector<bool>& silentStarts = silentSteps.starts;
        EventIndex start = kNoEvent, closeAt = kNoEvent;
        bool pass = false, backwardSinceClose = false, silent = false;
        for (size_t k = 0; k < runs.size(); ++k) {
            const auto& r = runs[k];
            if (!silentStarts.empty() && silentStarts[k] && closeAt == kNoEvent && pass) {
                closeAt = r.first - 1;
                silent = true;
            }
            // In a run with backwards, an optimizer step closes a step that held one (or continues the
            // close before it): one read after a forward alone is the forward's own misread tail.
            const bool closes = anyOpt ? (r.phase == Phase::OptimizerStep && (!anyBackward || backwardSinceClose || closeAt != kNoEvent)) ||
                                             (r.phase == Phase::ZeroGrad && backwardSinceClose)
                                       : r.phase == Phase::Backward;
            if (closes && pass) {
                closeAt = r.last;
                backwardSinceClose = false;
                continue;
            }
            backwardSinceClose = backwardSinceClose || r.phase == Phase::Backward;
            if (!isPass(r.phase))
                continue;
            if (closeAt != kNoEvent && r.phase != Phase::Backward) {
                out.push_back(Range{start, closeAt, {}, true, silent});
                start = closeAt + 1;
                closeAt = kNoEvent;
                silent = false;
            }
            if (start == kNoEvent)
                start = r.first;
            pass = true;
            if (!gradientsLetGo.empty() && gradientsLetGo[k] != kNoEvent) {
                closeAt = gradientsLetGo[k];
                backwardSinceClose = false;
            }
        }
        if (closeAt != kNoEvent) {
            out.push_back(Range{start, closeAt, {}, true, silent});
            if (closeAt < lastEv && substantialTail(dev, closeAt + 1, lastEv, out)) {
                // Only a pass after the last step's end makes a step of the tail.
                for (const auto& r : runs)
                    if (r.first > closeAt && (r.phase == Phase::Forward || r.phase == Phase::Backward)) {
                        out.push_back(Range{closeAt + 1, lastEv, {}, false});
                        break;
                    }
            }
        } else if (start != kNoEvent && substantialTail(dev, start, lastEv, out)) {
            out.push_back(Range{start, lastEv, {}, false});
        }
        return out;
    }
    // Forward only: each pass (a run that frames or an annotation opened, not the caller's code
    // between two calls) begins a step; passes far smaller than the largest are folded into the step
    // before them (a stray frame in the caller's code is no new forward).
    std::vector<std::pair<EventIndex, int64_t>> passes; // first event, allocations
    for (size_t k = 0; k < runs.size(); ++k) {
        const auto& r = runs[k];
        if (r.phase != Phase::Forward || source(r) == PhaseSource::Inherited)
            continue;
        int64_t allocs = 0;
        for (EventIndex i = r.first; i <= r.last; ++i)
            allocs += dev.events.action[size_t(i)] == Action::Alloc;
        passes.emplace_back(r.first, allocs);
    }
    // A pass that continues after a caller stretch with no allocation of its own is the same pass.
    int64_t largest = 0;
    for (auto& p : passes)
        largest = std::max(largest, p.second);
    std::vector<EventIndex> starts;
    for (const auto& p : passes)
        if (starts.empty() || p.second * 10 >= largest)
            starts.push_back(p.first);
    for (size_t k = 0; k < starts.size(); ++k)
        out.push_back(Range{starts[k], k + 1 < starts.size() ? starts[k + 1] - 1 : lastEv, {}, true});
    return out;
}

std::vector<Range> repeatingSteps(const DeviceTrace& dev, int64_t* period)
{
    // Tokens: one per allocation event, its (stack, size). A renamed dump keeps both; a frameless one
    // keeps the sizes.
    std::vector<uint64_t> tok;
    std::vector<EventIndex> tokEvent;
    for (size_t i = 0; i < dev.eventCount(); ++i)
        if (dev.events.action[i] == Action::Alloc) {
            tok.push_back((uint64_t(dev.events.stack[i].value) * 0x9E3779B97F4A7C15ull) ^ uint64_t(dev.events.size[i]));
            tokEvent.push_back(EventIndex(i));
        }
    const size_t n = tok.size();
    if (n < 64)
        return {};
    // Candidate lags: how far back each 8-gram was last seen.
    constexpr size_t kGram = 8;
    std::unordered_map<uint64_t, size_t> lastSeen;
    std::unordered_map<size_t, size_t> lagCount;
    lastSeen.reserve(n);
    uint64_t h = 0;
    for (size_t i = 0; i + kGram <= n; ++i) {
        h = 1469598103934665603ull;
        for (size_t k = 0; k < kGram; ++k)
            h = (h ^ tok[i + k]) * 1099511628211ull;
        auto [it, fresh] = lastSeen.try_emplace(h, i);
        if (!fresh) {
            const size_t lag = i - it->second;
            if (lag >= kGram)
                ++lagCount[lag];
            it->second = i;
        }
    }
    std::vector<std::pair<size_t, size_t>> lags(lagCount.begin(), lagCount.end()); // lag, count
    std::sort(lags.begin(), lags.end(), [](auto a, auto b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
    if (lags.size() > 48)
        lags.resize(48);
    // How often the stream equals itself shifted by the lag, over the later half of the pairs (the
    // first step is longer: optimizer state and warm-up are made once, and shift everything after
    // them); sampled, a few hundred thousand pairs.
    auto match = [&](size_t lag) {
        const size_t pairs = n - lag;
        const size_t stride = std::max<size_t>(1, pairs / 400000);
        size_t same = 0, seen = 0;
        for (size_t i = pairs / 2; i < pairs; i += stride, ++seen)
            same += tok[i] == tok[i + lag];
        return seen ? double(same) / double(seen) : 0.0;
    };
    double best = 0;
    std::vector<std::pair<size_t, double>> scored;
    for (auto [lag, count] : lags) {
        if (double(n) / double(lag) < 1.8)
            continue; // fewer than two repetitions
        const double f = match(lag);
        scored.emplace_back(lag, f);
        best = std::max(best, f);
    }
    if (best < 0.8)
        return {};
    // The smallest lag nearly as good as the best: a multiple of the step repeats too, and a layer's
    // lag fails wherever the step does something other than layers (embedding, loss, optimizer).
    size_t lag = 0;
    for (auto [l, f] : scored)
        if (f >= best - 0.02 && (lag == 0 || l < lag))
            lag = l;
    *period = int64_t(lag);
    // Boundaries at the lowest allocated bytes: found in the last full period, then a period back
    // at a time, each within a quarter period of where the period says.
    auto lowest = [&](size_t fromTok, size_t toTok) {
        EventIndex best = tokEvent[fromTok];
        int64_t low = std::numeric_limits<int64_t>::max();
        const EventIndex a = tokEvent[fromTok], b = tokEvent[std::min(toTok, n - 1)];
        for (EventIndex i = a; i <= b; ++i)
            if (dev.allocated[size_t(i)] <= low) {
                low = dev.allocated[size_t(i)];
                best = i;
            }
        return best;
    };
    auto tokenAt = [&](EventIndex ev) { return size_t(std::lower_bound(tokEvent.begin(), tokEvent.end(), ev) - tokEvent.begin()); };
    std::vector<EventIndex> bounds; // events after which a step begins
    bounds.push_back(lowest(n - lag, n - 1));
    const size_t slack = std::max<size_t>(1, lag / 4);
    while (true) {
        const size_t t = tokenAt(bounds.back());
        if (t < lag + slack)
            break;
        // Where memory only climbs (each call keeps its graph), the lowest point of the window is a
        // temporary's dip at its early edge, a slack early at every boundary: there the period places
        // the boundary (eval_with_grad without frames drifted by a quarter period per step).
        const EventIndex low = lowest(t - lag - slack, t - lag + slack);
        bounds.push_back(tokenAt(low) < t - lag - slack + std::max<size_t>(1, slack / 4) ? tokEvent[t - lag] - 1 : low);
    }
    // The first repetition: the search above needs a period and its slack before a boundary, so a
    // recording that opens at a call's or a step's start left its first one as set-up (without
    // frames, bert_embed_service's first batch of five). Where the tokens before the earliest boundary
    // repeat the period after it as closely as the period was chosen for, they are a repetition too,
    // from the lowest memory before them (the recording's start included).
    if (const size_t t = tokenAt(bounds.back()); t >= kGram && t + slack >= lag && t < lag + slack) {
        const size_t m = std::min(t, lag);
        size_t same = 0;
        for (size_t i = t - m; i < t; ++i)
            same += i + lag < n && tok[i] == tok[i + lag];
        if (double(same) >= 0.8 * double(m)) {
            EventIndex first = -1;
            int64_t low = dev.allocatedAt(-1);
            for (EventIndex i = 0; i <= tokEvent[t + slack - lag]; ++i)
                if (dev.allocated[size_t(i)] <= low) {
                    low = dev.allocated[size_t(i)];
                    first = i;
                }
            if (first < bounds.back())
                bounds.push_back(first);
        }
    }
    std::reverse(bounds.begin(), bounds.end());
    std::vector<Range> out;
    for (size_t k = 0; k + 1 < bounds.size(); ++k)
        out.push_back(Range{bounds[k] + 1, bounds[k + 1], {}, true});
    const EventIndex lastEv = EventIndex(dev.eventCount()) - 1;
    if (bounds.back() < lastEv) {
        const size_t tailTokens = n - tokenAt(bounds.back() + 1);
        if (tailTokens * 10 >= lag || out.empty())
            out.push_back(Range{bounds.back() + 1, lastEv, {}, false});
        else
            out.back().end = lastEv;
    }
    return out;
}

namespace {

// Whether a repetition's own allocations repeat within it (a call runs its model's layers, whose
// allocations repeat; one layer does not), as repeatingSteps tokenises them: (stack, size), where at
// some lag at least `share` of the allocations equal the one `lag` before.
bool repeatsWithin(const DeviceTrace& dev, const Range& unit, double share)
{
    std::vector<uint64_t> tok;
    for (EventIndex e = unit.start; e <= unit.end; ++e)
        if (dev.events.action[size_t(e)] == Action::Alloc)
            tok.push_back((uint64_t(dev.events.stack[size_t(e)].value) * 0x9E3779B97F4A7C15ull) ^ uint64_t(dev.events.size[size_t(e)]));
    constexpr size_t kMinRun = 8; // at least a few allocations alike, as the period's 8-grams ask
    for (size_t lag = 2; lag * 2 <= tok.size(); ++lag) {
        if (tok.size() - lag < kMinRun)
            break;
        size_t same = 0;
        for (size_t j = 0; j + lag < tok.size(); ++j)
            same += tok[j] == tok[j + lag];
        if (double(same) >= share * double(tok.size() - lag))
            return true;
    }
    return false;
}

} // namespace

bool repetitionsAreLayers(const DeviceTrace& dev, const std::vector<Range>& ranges)
{
    std::vector<const Range*> complete;
    size_t keeping = 0;
    for (const Range& r : ranges) {
        if (!r.complete || r.end <= r.start)
            continue;
        const int64_t start = dev.allocatedAt(r.start - 1), end = dev.allocatedAt(r.end);
        int64_t peak = start;
        for (EventIndex e = r.start; e <= r.end; ++e)
            peak = std::max(peak, dev.allocatedAt(e));
        complete.push_back(&r);
        keeping += peak > start && (end - start) * 2 >= peak - start;
    }
    if (complete.size() < 2 || keeping * 4 < complete.size() * 3)
        return false;
    return !repeatsWithin(dev, *complete[1], 0.5); // the second: the first can hold warm-up
}

bool repetitionsInsidePasses(const DeviceTrace& dev, const Classification& c, const std::vector<Range>& ranges)
{
    const auto& passes = c.facts.passes;
    std::vector<size_t> held(passes.size(), 0);
    std::vector<const Range*> complete;
    for (const Range& r : ranges) {
        if (!r.complete)
            continue;
        complete.push_back(&r);
        // Passes are in event order and do not overlap: the last one starting at or before r.
        auto it = std::upper_bound(passes.begin(), passes.end(), r.start, [](EventIndex e, const Pass& p) { return e < p.first; });
        if (it != passes.begin() && r.end <= std::prev(it)->last)
            ++held[size_t(std::prev(it) - passes.begin())];
    }
    size_t inside = 0;
    for (size_t n : held)
        inside += n >= 2 ? n : 0;
    if (complete.size() < 2 || inside * 2 <= complete.size())
        return false;
    // Without frames the tokens are sizes alone, and a layer's own same-size products (q, k, v; a
    // head's scores) repeat at a short lag for up to 58 % of its allocations in the corpus; a call's
    // layers repeat for 79 to 98 %. Nine repetitions spread over the run at most: the test is
    // quadratic in a repetition's allocations, and the repetitions are alike.
    const size_t sampled = std::min<size_t>(complete.size(), 9);
    size_t calls = 0;
    for (size_t k = 0; k < sampled; ++k)
        calls += repeatsWithin(dev, *complete[k * complete.size() / sampled], 0.75) ? 1 : 0;
    return calls * 2 <= sampled;
}

bool structuralPassesAreSteps(const DeviceTrace& dev, const Classification& c, const std::vector<Range>& ranges)
{
    std::vector<const Range*> complete;
    for (const Range& r : ranges)
        if (r.complete && r.end > r.start)
            complete.push_back(&r);
    if (complete.size() < 2)
        return false;
    // A run's steps are alike: what one step allocates, the next does again (the first step's
    // optimizer state included, it stays within a factor of two). Steps that differ more were cut by
    // a misread phase: a checkpointed backward's recomputing forward read as the next step's, an
    // optimizer step read again between each parameter's update. Past two, the first is left out: it
    // can hold the warm-up, or start where the recording did.
    int64_t fewest = std::numeric_limits<int64_t>::max(), most = 0;
    for (size_t k = complete.size() > 2 ? 1 : 0; k < complete.size(); ++k) {
        const int64_t n = allocsIn(dev, complete[k]->start, complete[k]->end);
        fewest = std::min(fewest, n);
        most = std::max(most, n);
    }
    if (most > 2 * fewest)
        return false;
    for (const auto& run : c.phases.runs)
        if (run.phase == Phase::Backward && c.phases.source[size_t(run.first)] == PhaseSource::Structure)
            return true;
    // As repetitionsInsidePasses samples: nine spread over the run at most, the test being quadratic
    // in a step's allocations.
    const size_t sampled = std::min<size_t>(complete.size(), 9);
    size_t calls = 0;
    for (size_t k = 0; k < sampled; ++k)
        calls += repeatsWithin(dev, *complete[k * complete.size() / sampled], 0.75) ? 1 : 0;
    return calls * 2 > sampled;
}

} // namespace poolscope::steps_detail
