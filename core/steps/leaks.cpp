#include "core/steps/leaks.h"

#include "core/redact/code_names.h"
#include "core/util/units.h"

#include <algorithm>
#include <array>
#include <map>

namespace poolscope {
namespace {

struct SiteTally {
    std::vector<int64_t> delta;     // per complete step: + bytes alive at that step's end, - where they die
    std::vector<uint8_t> retained;  // per complete step: something born in it outlived the next step
    std::array<int64_t, kAllocationPoolCount> poolBytes{};
    std::array<int64_t, kPhaseCount> phaseBytes{};
    int64_t callerBytes = 0, passBytes = 0;
    StackId stack; // one retained allocation's, for the program's own line it was made under
};

bool pythonFile(const Frame& f)
{
    const std::string& file = f.filename;
    return file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0;
}

// The innermost Python line of the program's own code on `stack`, when the innermost Python line is
// a library's (an installed package, PyTorch, Python's own): "" otherwise. Library code is told by
// its path (libraryRelativePath), never by a name.
std::string programLine(const FrameTable& frames, StackId stack)
{
    if (!stack.valid() || stack.value >= frames.stackCount())
        return {};
    bool library = false;
    for (FrameId f : frames.stack(stack)) {
        const Frame& fr = frames.frame(f);
        if (!pythonFile(fr))
            continue;
        if (libraryRelativePath(fr.filename)) {
            library = true;
            continue;
        }
        return library ? fr.filename + ":" + std::to_string(fr.line) + " " + fr.name : std::string();
    }
    return {};
}

// The usual causes, by what the allocations' birth says (the sentence a reader acts on).
std::string causeOf(const LeakSuspect& s, size_t forwardSitesGrowing)
{
    if (s.bytesPerStep <= 1024)
        return "a scalar kept every step: usually a loss logged without .item() (`losses.append(loss)`); "
               "append loss.item() instead";
    if (forwardSitesGrowing >= 3 && s.birthPhase == Phase::Forward)
        return "the forward's graph is kept from step to step: a loss or output kept with its graph "
               "(`total_loss += loss`); accumulate loss.item() or keep .detach()ed tensors";
    if (s.bornInCallerCode || s.birthPhase == Phase::Unknown || s.birthPhase == Phase::OptimizerStep)
        return "a dict or list of tensors that only grows (a cache keyed by step or batch): bound it, or drop "
               "old entries";
    if (s.birthPhase == Phase::Forward)
        return "a forward output kept past its step: a hook or a list that stores module outputs; store "
               ".detach() copies (or .cpu()) and clear the list each step";
    return "tensors made every step and never released: look for a container or a closure that keeps them";
}

} // namespace

LeakReport findLeaks(const DeviceDocument& doc, const StepTable& table)
{
    LeakReport out;
    std::vector<const Step*> steps;
    for (const Step& s : table.steps)
        if (s.complete)
            steps.push_back(&s);
    const size_t m = steps.size();
    if (m < 3) {
        out.notes.push_back(m < 2 ? "leaks need several steps; the dump holds " + std::to_string(m) + " complete step" +
                                        (m == 1 ? "" : "s")
                                  : "two complete steps: too few to tell a leak from state made once (leaks need three)");
        return out;
    }
    out.judged = true;
    const DeviceTrace& dev = doc.device();
    const Classification* c = doc.classification();
    const SiteNames names(doc.trace());
    // A frameless allocation's site is its size; the phase it was born in splits one size's blocks
    // further, where the dump can (graph_leak without frames: the kept logits and the embedding's
    // gradient, made in the backward and let go of at each zero_grad, share 131,072,000 bytes; as one
    // site their 125 MiB per step read as 41.67).
    constexpr uint8_t kNotSplit = 0xff;
    std::map<std::pair<SiteKey, uint8_t>, SiteTally> sites;
    // Allocations are sorted by birth: walk them beside the steps.
    size_t k = 0;
    for (size_t id = 0; id < dev.allocations.size(); ++id) {
        const Allocation& a = dev.allocations[id];
        if (a.preexisting())
            continue;
        while (k < m && steps[k]->end < a.allocEvent)
            ++k;
        if (k == m)
            break;
        if (a.allocEvent < steps[k]->start)
            continue; // between steps (set-up, an incomplete step's stretch)
        const EventIndex death = a.freeCompletedEvent; // kNoEvent: alive at the end
        auto aliveAfter = [&](size_t j) { return death == kNoEvent || death > steps[j]->end; };
        if (!aliveAfter(k))
            continue; // most allocations: gone within their step
        const SiteKey siteKey = names.key(a);
        const uint8_t bornIn = SiteNames::hasCode(siteKey) || !c || size_t(a.allocEvent) >= c->phases.phase.size()
                                   ? kNotSplit
                                   : uint8_t(c->phases.phase[size_t(a.allocEvent)]);
        SiteTally& t = sites[{siteKey, bornIn}];
        if (t.delta.empty()) {
            t.delta.assign(m + 1, 0);
            t.retained.assign(m, 0);
        }
        t.delta[k] += a.size;
        size_t j = k + 1;
        while (j < m && aliveAfter(j))
            ++j;
        t.delta[j] -= a.size; // not alive at step j's end (j == m: alive through the last one)
        if (k + 1 < m && aliveAfter(k + 1)) {
            t.retained[k] = 1;
            if (!t.stack.valid())
                t.stack = a.stack;
            if (c)
                t.poolBytes[size_t(c->pool[id])] += a.size;
            Phase ph = c && size_t(a.allocEvent) < c->phases.phase.size() ? c->phases.phase[size_t(a.allocEvent)] : Phase::Unknown;
            t.phaseBytes[size_t(ph)] += a.size;
            const bool caller = c && size_t(a.allocEvent) < c->phases.source.size() &&
                                c->phases.source[size_t(a.allocEvent)] == PhaseSource::Inherited && a.stack.valid();
            (caller ? t.callerBytes : t.passBytes) += a.size;
        }
    }
    for (auto& [site, t] : sites) {
        const SiteKey key = site.first;
        int retainedSteps = 0;
        for (uint8_t r : t.retained)
            retainedSteps += r;
        if (retainedSteps < 2)
            continue; // made once (warm-up, first-step state) or held for a single step
        std::vector<int64_t> held(m);
        int64_t run = 0;
        for (size_t j = 0; j < m; ++j)
            held[j] = run += t.delta[j];
        size_t rises = 0;
        for (size_t j = 0; j + 1 < m; ++j)
            rises += held[j + 1] > held[j];
        // Growing to the very end, at most boundaries: a cache that filled to its budget has stopped.
        // At every boundary where the steps are the stream's own passes (their ends can fall before
        // the caller let go of the previous call's output: bert_embed_service's last 80 % without
        // frames held 64, 96, 96, 128 MiB of one size at step ends, its frames' ends 0, 0, 0).
        const size_t needed = table.passesFromStream ? m - 1 : std::max<size_t>(2, (6 * (m - 1) + 9) / 10);
        if (held[m - 1] <= held[m - 2] || held[m - 1] <= held[0] || rises < std::min(needed, m - 1))
            continue;
        LeakSuspect s;
        s.key = key;
        s.site = names.label(key);
        if (site.second != kNotSplit) {
            s.splitPhase = Phase(site.second);
            if (*s.splitPhase != Phase::Unknown)
                s.site += " made in the " + std::string(phaseWords(*s.splitPhase));
        }
        if (SiteNames::hasCode(key))
            s.calledFrom = programLine(doc.trace().frames, t.stack);
        s.bytesPerStep = (held[m - 1] - held[0]) / int64_t(m - 1);
        s.steps = retainedSteps;
        s.heldAtStepEnds = held;
        if (c)
            s.pool = Pool(std::max_element(t.poolBytes.begin(), t.poolBytes.end()) - t.poolBytes.begin());
        s.birthPhase = Phase(std::max_element(t.phaseBytes.begin(), t.phaseBytes.end()) - t.phaseBytes.begin());
        s.bornInCallerCode = t.callerBytes > t.passBytes;
        out.suspects.push_back(std::move(s));
    }
    std::sort(out.suspects.begin(), out.suspects.end(), [](const LeakSuspect& a, const LeakSuspect& b) {
        return a.bytesPerStep != b.bytesPerStep ? a.bytesPerStep > b.bytesPerStep : a.site < b.site;
    });
    size_t forwardSites = 0;
    for (const auto& s : out.suspects)
        forwardSites += s.birthPhase == Phase::Forward && !s.bornInCallerCode;
    int64_t total = 0;
    for (auto& s : out.suspects) {
        s.cause = causeOf(s, forwardSites);
        total += s.bytesPerStep;
    }
    if (out.suspects.empty()) {
        out.verdict = "no leak suspect: no call site keeps more memory at every step end (" + std::to_string(m) +
                      " complete steps compared)";
        return out;
    }
    const LeakSuspect& top = out.suspects.front();
    out.verdict = "memory held at step ends grows by " + formatBytes(total) + " per step from " +
                  std::to_string(out.suspects.size()) + " call site" + (out.suspects.size() == 1 ? "" : "s") + "; most from " +
                  top.site + (top.calledFrom.empty() ? "" : ", called from " + top.calledFrom) + " (" + formatBytes(top.bytesPerStep) + " per step" +
                  (top.pool ? ", " + std::string(poolName(*top.pool)) : "") + "): " + top.cause;
    out.notes.push_back("a suspect still growing at the end of the recording may be a cache that has not reached its budget yet");
    return out;
}

bool madeAtSuspectSite(const LeakSuspect& s, const SiteNames& names, const Classification* c, const Allocation& a)
{
    if (names.key(a) != s.key)
        return false;
    if (!s.splitPhase)
        return true;
    const Phase born = c && !a.preexisting() && size_t(a.allocEvent) < c->phases.phase.size() ? c->phases.phase[size_t(a.allocEvent)] : Phase::Unknown;
    return born == *s.splitPhase;
}

} // namespace poolscope
