#include "core/compare/comparison.h"

#include "core/classify/pool_display.h"
#include "core/compare/site_pairs.h"
#include "core/report/verdict.h"
#include "core/util/units.h"
#include "core/whatif/trace_model.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <stdexcept>

namespace poolscope {
namespace {

constexpr std::array<std::string_view, kCompareMomentCount> kMomentNames = {"peak", "oom", "end", "forward_end", "backward_end", "step_end"};
constexpr std::array<std::string_view, kCompareMomentCount> kMomentLabels = {
    "the peak", "the OOM", "the end", "the end of forward", "the end of backward", "the end of the optimizer step"};

constexpr int64_t kChangedBytes = 64 * kMiB;

struct RunMoments {
    std::array<bool, kCompareMomentCount> has{};
    std::array<EventIndex, kCompareMomentCount> at{};
};

RunMoments findMoments(const DeviceTrace& dev, const RunProfile& p)
{
    RunMoments m;
    m.at.fill(kNoEvent);
    m.has[size_t(CompareMoment::Peak)] = true;
    m.at[size_t(CompareMoment::Peak)] = dev.peakIndex;
    m.has[size_t(CompareMoment::End)] = true;
    m.at[size_t(CompareMoment::End)] = EventIndex(dev.eventCount()) - 1;
    if (!dev.ooms.empty()) {
        m.has[size_t(CompareMoment::Oom)] = true;
        m.at[size_t(CompareMoment::Oom)] = dev.ooms.back().index;
    }
    // The first step's phases: a later step of one run is paired with the first of the other only
    // through the recorded-window axis, never silently.
    auto firstEnd = [&](Phase phase, CompareMoment kind) {
        for (const PhaseBlock& b : p.blocks)
            if (b.phase == phase) {
                // A phase the OOM cut short has no end.
                if (p.endsInOom && b.last >= p.oomIndex)
                    return;
                m.has[size_t(kind)] = true;
                m.at[size_t(kind)] = b.last;
                return;
            }
    };
    firstEnd(Phase::Forward, CompareMoment::ForwardEnd);
    firstEnd(Phase::Backward, CompareMoment::BackwardEnd);
    firstEnd(Phase::OptimizerStep, CompareMoment::StepEnd);
    return m;
}

Phase phaseAt(const Classification& c, EventIndex e)
{
    return e >= 0 && size_t(e) < c.phases.phase.size() ? c.phases.phase[size_t(e)] : Phase::Unknown;
}

std::string missingNote(CompareMoment kind, bool inA, bool inB)
{
    const std::string who = !inA && !inB ? "neither run has" : !inA ? "A has" : "B has";
    std::string what;
    switch (kind) {
    case CompareMoment::Oom: what = "an OOM"; break;
    case CompareMoment::ForwardEnd: what = "a complete forward pass"; break;
    case CompareMoment::BackwardEnd: what = "a complete backward pass"; break;
    case CompareMoment::StepEnd: what = "a complete optimizer step"; break;
    default: what = "this moment"; break;
    }
    if (!inA && !inB)
        return who + " " + what;
    return who + " no " + what.substr(what.find(' ') + 1) + ": no partner";
}

Pool largestPool(const PoolBytes& b)
{
    Pool best = Pool::Unknown;
    int64_t most = -1;
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (b[p] > most) {
            most = b[p];
            best = Pool(p);
        }
    return best;
}

bool plural(Pool p)
{
    switch (p) {
    case Pool::Parameter:
    case Pool::CastCache:
    case Pool::Gradient:
    case Pool::Activation:
    case Pool::Temporary:
    case Pool::Workspace:
    case Pool::Input:
        return true;
    default:
        return false;
    }
}

std::string capitalised(std::string_view s)
{
    std::string out(s);
    if (!out.empty())
        out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
}

std::string signedBytes(int64_t delta) { return (delta < 0 ? "-" : "+") + formatBytes(delta < 0 ? -delta : delta); }

std::string change(const PoolChange& pc)
{
    std::string s = signedBytes(pc.delta());
    if (auto r = pc.ratio())
        s += " (" + ratioText(*r) + ")";
    else
        s += " (from none)";
    return s;
}

std::string phaseText(Phase p)
{
    return p == Phase::Unknown ? "unnamed phase" : std::string(phaseWords(p));
}

// What an axis is called where the verdict says it does not limit the run.
std::string axisNoun(const CompareAxis& a)
{
    if (a.name == "sequence")
        return "the sequence length";
    if (a.name == "micro_batch")
        return "the micro-batch";
    if (a.name == "tokens")
        return "the token count";
    if (a.name == "trainable_parameters")
        return "the trainable fraction";
    if (a.name == "sharding_or_optimizer")
        return "the optimizer state";
    if (a.name == "checkpointing")
        return "activation checkpointing";
    if (a.name == "sharding")
        return "sharding";
    return "the " + a.name;
}

std::string numberWord(size_t n)
{
    static const char* kWords[] = {"No", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten"};
    return n < std::size(kWords) ? kWords[n] : std::to_string(n);
}

std::string joinAnd(const std::vector<std::string>& parts)
{
    std::string s;
    for (size_t i = 0; i < parts.size(); ++i)
        s += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
    return s;
}

std::string makeVerdict(const Comparison& c)
{
    const std::string moment(kMomentLabels[size_t(c.at)]);
    std::string v;
    const auto& axes = c.axes;
    std::vector<std::string> phrases;
    bool window = false;
    for (const auto& a : axes) {
        phrases.push_back(a.phrase);
        window |= a.name == "recorded_window";
    }
    // The largest pool at the moment in each run, and what moved.
    PoolBytes atA{}, atB{};
    for (size_t p = 0; p < kPoolCount; ++p) {
        atA[p] = c.pools[p].a;
        atB[p] = c.pools[p].b;
    }
    const Pool wallA = largestPool(atA), wallB = largestPool(atB);
    if (axes.size() >= 2) {
        v = numberWord(axes.size()) + " axes changed (" + joinAnd(phrases) + "): a postmortem from this pair would be false; rerun changing one.";
    } else if (window) {
        v = "One axis changed: the recorded window (A: " + axes[0].a + "; B: " + axes[0].b +
            "). The runs cannot be compared moment for moment; record the same phases and steps in both.";
    } else if (axes.empty() && c.changed.empty() && nearRatio(double(allocatedBytes(atB)), double(allocatedBytes(atA)), 0.05)) {
        v = "No axis changed: the runs match at " + moment + " (allocated " + formatBytes(allocatedBytes(atA)) + " and " +
            formatBytes(allocatedBytes(atB)) + ").";
    } else if (axes.empty()) {
        const PoolChange total{allocatedBytes(atA), allocatedBytes(atB)};
        const std::string what = c.changed.empty() ? "allocated memory moved " + change(total)
                                                   : std::string(poolPhrase(c.changed.front())) + " moved " + change(c.pools[size_t(c.changed.front())]);
        v = "No axis found, yet " + what + " at " + moment + ": the runs differ in something the traces do not name.";
    } else {
        v = "One axis changed: " + axes[0].phrase + ".";
        // Peaks in different phases hold different pools: compare each pool's own peak instead.
        const MomentPair& peak = c.moment(CompareMoment::Peak);
        const bool peaksApart = c.at == CompareMoment::Peak && peak.phaseA != peak.phaseB;
        const auto& table = peaksApart ? c.poolPeaks : c.pools;
        // A run an OOM cut short never reached some pools (the state of a step it did not get to):
        // those are not what the axis changed.
        const bool cutA = !c.cutShort.empty() && c.cutShort[0] == 'A', cutB = !c.cutShort.empty() && c.cutShort[0] == 'B';
        std::vector<Pool> moved;
        for (size_t p = 0; p < kAllocationPoolCount; ++p)
            if (table[p].changed() && !(cutA && table[p].a == 0) && !(cutB && table[p].b == 0))
                moved.push_back(Pool(p));
        std::stable_sort(moved.begin(), moved.end(), [&](Pool x, Pool y) { return std::abs(table[size_t(x)].delta()) > std::abs(table[size_t(y)].delta()); });
        if (peaksApart)
            v += " The peak moves from A's " + phaseText(peak.phaseA) + " (" + formatBytes(peak.allocatedA) + ") to B's " + phaseText(peak.phaseB) + " (" +
                 formatBytes(peak.allocatedB) + "); each pool's own peak:";
        if (moved.empty()) {
            v += peaksApart ? " none moved by more than 10% and 64 MiB" : " At " + moment + " no pool moved by more than 10% and 64 MiB";
        } else {
            std::vector<std::string> moves;
            for (size_t i = 0; i < std::min<size_t>(2, moved.size()); ++i)
                moves.push_back((i == 0 && !peaksApart ? capitalised(poolPhrase(moved[i])) : std::string(poolPhrase(moved[i]))) + " " +
                                change(table[size_t(moved[i])]));
            v += " " + joinAnd(moves);
            if (c.at != CompareMoment::Peak)
                v += " at " + moment;
        }
        if (!peaksApart && c.pools[size_t(Pool::CachedFree)].changed())
            v += "; " + std::string(kCachedFreeLabel) + " " + change(c.pools[size_t(Pool::CachedFree)]);
        // The largest pool that did not move, named as unchanged.
        Pool steady = Pool::CachedFree;
        for (size_t p = 0; p < kAllocationPoolCount; ++p)
            if (!table[p].changed() && table[p].b >= kChangedBytes && (steady == Pool::CachedFree || table[p].b > table[size_t(steady)].b))
                steady = Pool(p);
        if (steady != Pool::CachedFree && steady != wallB)
            v += "; " + std::string(poolPhrase(steady)) + " unchanged";
        v += ".";
        const bool wallMoved = std::find(moved.begin(), moved.end(), wallB) != moved.end();
        if (wallMoved && wallA == wallB)
            v += " This pair shows " + std::string(poolPhrase(wallB)) + (plural(wallB) ? " are" : " is") + " the wall.";
        else if (wallMoved)
            v += " The wall moves from " + std::string(poolPhrase(wallA)) + " to " + std::string(poolPhrase(wallB)) + ": this pair shows " +
                 std::string(poolPhrase(wallB)) + (plural(wallB) ? " become" : " becomes") + " the wall.";
        else if (wallA == wallB) {
            const PoolChange& w = table[size_t(wallB)];
            v += " " + capitalised(poolPhrase(wallB)) + (plural(wallB) ? " set " : " sets ") + moment + " in both runs (" + formatBytes(w.a) +
                 " -> " + formatBytes(w.b) + ")";
            if (w.a > 0 && nearRatio(double(w.b), double(w.a), 0.10))
                v += std::string(" and ") + (plural(wallB) ? "do" : "does") + " not move: " + axisNoun(axes[0]) + " is not what limits this run.";
            else
                v += ", moving by less than 64 MiB.";
        }
        else
            v += " The largest pool is " + std::string(poolPhrase(wallA)) + " in A and " + std::string(poolPhrase(wallB)) + " in B.";
    }
    if (!c.cutShort.empty())
        v += " " + capitalised(c.cutShort) + ".";
    if (!c.caveats.empty()) {
        v += std::string(axes.size() == 1 && !window ? " Not a clean pair, though: " : " Also: ");
        for (size_t i = 0; i < c.caveats.size(); ++i)
            v += (i ? "; " : "") + c.caveats[i];
        v += ".";
    }
    return v;
}

} // namespace

std::string_view compareMomentName(CompareMoment m) { return kMomentNames[size_t(m)]; }
std::string_view compareMomentLabel(CompareMoment m) { return kMomentLabels[size_t(m)]; }

std::optional<CompareMoment> parseCompareMoment(std::string_view name)
{
    for (size_t i = 0; i < kCompareMomentCount; ++i)
        if (kMomentNames[i] == name)
            return CompareMoment(i);
    return std::nullopt;
}

bool PoolChange::changed() const
{
    const int64_t d = delta() < 0 ? -delta() : delta();
    return d > kChangedBytes && (a == 0 || double(d) > 0.10 * double(a));
}

Comparison compareRuns(const RunInput& a, const RunInput& b, const CompareOptions& options)
{
    std::optional<TraceModel> ownA, ownB;
    if (!a.model)
        ownA = buildTraceModel(a.trace, a.device, a.classification);
    if (!b.model)
        ownB = buildTraceModel(b.trace, b.device, b.classification);
    const RunProfile pa = profileRun(a, a.model ? *a.model : *ownA);
    const RunProfile pb = profileRun(b, b.model ? *b.model : *ownB);

    Comparison c;
    c.runA = pa.label;
    c.runB = pb.label;
    c.at = options.at;
    const RunMoments ma = findMoments(a.device, pa), mb = findMoments(b.device, pb);
    for (size_t k = 0; k < kCompareMomentCount; ++k) {
        MomentPair m;
        m.kind = CompareMoment(k);
        m.inA = ma.has[k];
        m.inB = mb.has[k];
        m.a = ma.at[k];
        m.b = mb.at[k];
        if (m.inA) {
            m.phaseA = phaseAt(a.classification, m.a);
            m.allocatedA = a.device.allocatedAt(m.a);
        }
        if (m.inB) {
            m.phaseB = phaseAt(b.classification, m.b);
            m.allocatedB = b.device.allocatedAt(m.b);
        }
        if (!m.paired())
            m.note = missingNote(m.kind, m.inA, m.inB);
        else if (m.kind == CompareMoment::Peak && m.phaseA != m.phaseB)
            m.note = "the peaks fall in different phases (A: " + std::string(phaseName(m.phaseA)) + ", B: " + std::string(phaseName(m.phaseB)) + ")";
        c.moments.push_back(std::move(m));
    }
    const MomentPair& at = c.moment(options.at);
    if (!at.paired())
        throw std::invalid_argument("cannot compare at " + std::string(kMomentLabels[size_t(options.at)]) + ": " + at.note + " (" +
                                    (at.inA ? pb.label : pa.label) + ")");
    const PoolBytes nowA = a.series.at(at.a), nowB = b.series.at(at.b);
    for (size_t p = 0; p < kPoolCount; ++p) {
        c.pools[p] = PoolChange{nowA[p], nowB[p]};
        c.poolPeaks[p] = PoolChange{a.series.peak()[p], b.series.peak()[p]};
        if (c.pools[p].changed())
            c.changed.push_back(Pool(p));
    }
    std::stable_sort(c.changed.begin(), c.changed.end(), [&](Pool x, Pool y) {
        return std::abs(c.pools[size_t(x)].delta()) > std::abs(c.pools[size_t(y)].delta());
    });
    c.peakPoolA = largestPool(a.series.at(a.device.peakIndex));
    c.peakPoolB = largestPool(b.series.at(b.device.peakIndex));

    const SitePairing sites = pairSites(pa, pb);
    AxisInference inferred = inferAxes(pa, pb, sites);
    c.axes = std::move(inferred.axes);
    c.caveats = std::move(inferred.caveats);
    c.cutShort = std::move(inferred.cutShort);
    c.notes = std::move(inferred.notes);
    c.verdict = makeVerdict(c);
    // One flag, one sentence: the flag is what the verdict's first words say, so they cannot disagree.
    c.oneAxis = c.verdict.rfind("One axis changed", 0) == 0;
    return c;
}

} // namespace poolscope
