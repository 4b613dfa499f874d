// The comparison as JSON (the field names) and as text for people.
#include "core/compare/comparison.h"

#include "core/classify/pool_display.h"
#include "core/util/units.h"

#include <algorithm>
#include <cstdio>

namespace poolscope {
namespace {

using nlohmann::json;

json poolTable(const std::array<PoolChange, kPoolCount>& pools)
{
    json out = json::object();
    for (size_t p = 0; p < kPoolCount; ++p) {
        const PoolChange& pc = pools[p];
        const auto r = pc.ratio();
        out[std::string(kPoolNames[p])] = {{"a", pc.a}, {"b", pc.b}, {"ratio", r ? json(*r) : json(nullptr)}, {"delta", pc.delta()}};
    }
    return out;
}

json momentSide(bool present, EventIndex e, Phase phase, int64_t allocated)
{
    if (!present)
        return nullptr;
    return {{"index", e}, {"phase", std::string(phaseName(phase))}, {"allocated", allocated}};
}

std::string pad(std::string s, size_t width, bool right = false)
{
    if (s.size() >= width)
        return s;
    return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string ratioCell(const PoolChange& pc)
{
    if (auto r = pc.ratio()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "x%.2f", *r);
        return buf;
    }
    return pc.b > 0 ? "new" : "-";
}

std::string deltaCell(int64_t d)
{
    if (d == 0)
        return "0";
    return (d < 0 ? "-" : "+") + formatBytes(d < 0 ? -d : d);
}

std::string momentCell(bool present, EventIndex e, Phase phase, int64_t allocated)
{
    if (!present)
        return "none";
    std::string s = e < 0 ? "initial state" : "event " + std::to_string(e);
    if (phase != Phase::Unknown)
        s += " (" + std::string(phaseName(phase)) + ")";
    return s + "  " + formatBytes(allocated);
}

void table(std::string& out, const std::array<PoolChange, kPoolCount>& pools, const std::vector<Pool>* changed)
{
    out += "  " + pad("pool", 18) + pad("A", 12, true) + pad("B", 12, true) + pad("delta", 14, true) + pad("ratio", 9, true) + "\n";
    for (size_t p = 0; p < kPoolCount; ++p) {
        const PoolChange& pc = pools[p];
        if (pc.a == 0 && pc.b == 0)
            continue;
        const bool moved = changed && std::find(changed->begin(), changed->end(), Pool(p)) != changed->end();
        out += "  " + pad(std::string(poolDisplayName(Pool(p))) + (moved ? " *" : ""), 18) + pad(formatBytes(pc.a), 12, true) + pad(formatBytes(pc.b), 12, true) +
               pad(deltaCell(pc.delta()), 14, true) + pad(ratioCell(pc), 9, true) + "\n";
    }
}

} // namespace

nlohmann::json comparisonJson(const Comparison& c)
{
    json j;
    j["run_a"] = c.runA;
    j["run_b"] = c.runB;
    j["at"] = std::string(compareMomentName(c.at));
    json moments = json::array();
    for (const MomentPair& m : c.moments)
        moments.push_back({{"name", std::string(compareMomentName(m.kind))},
                           {"a", momentSide(m.inA, m.a, m.phaseA, m.allocatedA)},
                           {"b", momentSide(m.inB, m.b, m.phaseB, m.allocatedB)},
                           {"note", m.note.empty() ? json(nullptr) : json(m.note)}});
    j["moments"] = moments;
    j["pools"] = poolTable(c.pools);
    j["pool_peaks"] = poolTable(c.poolPeaks);
    json changed = json::array();
    for (Pool p : c.changed)
        changed.push_back(std::string(poolName(p)));
    j["changed"] = changed;
    j["peak_pool_a"] = std::string(poolName(c.peakPoolA));
    j["peak_pool_b"] = std::string(poolName(c.peakPoolB));
    json axes = json::array();
    for (const CompareAxis& a : c.axes)
        axes.push_back({{"name", a.name},
                        {"a", a.a.empty() ? json(nullptr) : json(a.a)},
                        {"b", a.b.empty() ? json(nullptr) : json(a.b)},
                        {"ratio", a.ratio ? json(*a.ratio) : json(nullptr)},
                        {"evidence", a.evidence}});
    j["axes"] = axes;
    j["one_axis"] = c.oneAxis;
    j["verdict"] = c.verdict;
    j["caveats"] = c.caveats;
    j["cut_short"] = c.cutShort.empty() ? json(nullptr) : json(c.cutShort);
    j["notes"] = c.notes;
    return j;
}

std::string comparisonText(const Comparison& c)
{
    std::string out = "A  " + c.runA + "\nB  " + c.runB + "\n\n";
    out += "moments\n";
    for (const MomentPair& m : c.moments) {
        out += "  " + pad(std::string(compareMomentName(m.kind)), 14) + pad(momentCell(m.inA, m.a, m.phaseA, m.allocatedA), 40) +
               momentCell(m.inB, m.b, m.phaseB, m.allocatedB) + "\n";
        if (!m.note.empty())
            out += "  " + std::string(14, ' ') + m.note + "\n";
    }
    out += "\nat " + std::string(compareMomentLabel(c.at)) + " (* moved by more than 10% and 64 MiB)\n";
    table(out, c.pools, &c.changed);
    out += "\neach pool's own peak\n";
    table(out, c.poolPeaks, nullptr);
    out += "\nlargest pool at the peak: A " + std::string(poolDisplayName(c.peakPoolA)) + ", B " + std::string(poolDisplayName(c.peakPoolB)) + "\n";
    out += "\naxes";
    if (c.axes.empty())
        out += ": none\n";
    else
        out += c.oneAxis ? " (one axis)\n" : " (" + std::to_string(c.axes.size()) + ": not a one-axis pair)\n";
    for (const CompareAxis& a : c.axes) {
        out += "  " + a.name + ": " + (a.a.empty() && a.b.empty() ? "" : a.a + " -> " + a.b + "  ");
        if (a.ratio) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "x%.3g", *a.ratio);
            out += buf;
        }
        out += "\n    " + a.evidence + "\n";
    }
    out += "\n" + c.verdict + "\n";
    if (!c.notes.empty()) {
        out += "\nnotes:\n";
        for (const auto& n : c.notes)
            out += "  " + n + "\n";
    }
    return out;
}

} // namespace poolscope
