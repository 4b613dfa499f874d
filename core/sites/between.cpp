#include "core/sites/between.h"

#include "core/util/units.h"

#include <algorithm>
#include <array>
#include <sstream>
#include <unordered_map>

namespace poolscope {

Between betweenMoments(const DeviceDocument& dev, EventIndex a, const std::string& labelA, EventIndex b, const std::string& labelB, int top)
{
    Between d;
    std::string la = labelA, lb = labelB;
    if (b < a) {
        std::swap(a, b);
        std::swap(la, lb);
    }
    d.a = a;
    d.b = b;
    d.labelA = la;
    d.labelB = lb;
    const DeviceTrace& t = dev.device();
    d.allocatedA = t.allocatedAt(a);
    d.allocatedB = t.allocatedAt(b);
    const Classification* c = dev.classification();
    d.classified = c != nullptr;
    std::vector<AllocId> atA = dev.alive().aliveAfter(a), atB = dev.alive().aliveAfter(b);
    std::sort(atA.begin(), atA.end());
    std::sort(atB.begin(), atB.end());
    const SiteNames names(dev.trace());
    std::array<BetweenRow, kAllocationPoolCount> pools{};
    std::unordered_map<SiteKey, BetweenRow> sites;
    auto add = [&](AllocId id, bool inA, bool inB) {
        const Allocation& al = t.allocations[id.value];
        const int64_t s = al.size;
        BetweenRow& p = pools[c ? size_t(c->pool[id.value]) : size_t(Pool::Unknown)];
        BetweenRow& r = sites[names.key(al)];
        for (BetweenRow* row : {&p, &r}) {
            if (inA)
                row->atA += s;
            if (inB)
                row->atB += s;
            if (inB && !inA) {
                row->born += s;
                ++row->bornCount;
            }
            if (inA && !inB) {
                row->died += s;
                ++row->diedCount;
            }
        }
    };
    // Merge the two sorted sets.
    size_t i = 0, j = 0;
    while (i < atA.size() || j < atB.size()) {
        if (j == atB.size() || (i < atA.size() && atA[i] < atB[j]))
            add(atA[i++], true, false);
        else if (i == atA.size() || atB[j] < atA[i])
            add(atB[j++], false, true);
        else {
            add(atA[i++], true, true);
            ++j;
        }
    }
    // Churn: born after A and dead by B (allocations are sorted by birth).
    for (const Allocation& al : t.allocations)
        if (al.allocEvent > a && al.allocEvent <= b && al.freeCompletedEvent != kNoEvent && al.freeCompletedEvent <= b) {
            d.churnBytes += al.size;
            ++d.churnCount;
        }
    for (size_t p = 0; p < kAllocationPoolCount; ++p) {
        BetweenRow r = pools[p];
        if (r.atA || r.atB || r.born || r.died) {
            r.name = c ? std::string(poolName(Pool(p))) : "allocated (unclassified)";
            d.byPool.push_back(std::move(r));
        }
    }
    std::sort(d.byPool.begin(), d.byPool.end(), [](const BetweenRow& x, const BetweenRow& y) { return x.born + x.died > y.born + y.died; });
    std::vector<std::pair<SiteKey, BetweenRow*>> changed;
    for (auto& [key, row] : sites)
        if (row.born || row.died)
            changed.emplace_back(key, &row);
    d.sitesChanged = changed.size();
    std::sort(changed.begin(), changed.end(), [](const auto& x, const auto& y) {
        const int64_t vx = x.second->born + x.second->died, vy = y.second->born + y.second->died;
        return vx != vy ? vx > vy : x.first < y.first;
    });
    for (size_t k = 0; k < changed.size() && int(k) < top; ++k) {
        BetweenRow r = *changed[k].second;
        r.name = names.label(changed[k].first);
        d.bySite.push_back(std::move(r));
    }
    return d;
}

namespace {
std::string signedBytes(int64_t v) { return (v >= 0 ? "+" : "-") + formatBytes(v >= 0 ? v : -v); }
} // namespace

std::string betweenText(const std::string& deviceLabel, const Between& d)
{
    std::ostringstream o;
    o << deviceLabel << ": between A = " << d.labelA << " and B = " << d.labelB << "\n";
    o << "  allocated " << formatBytes(d.allocatedA) << " -> " << formatBytes(d.allocatedB) << " (" << signedBytes(d.allocatedB - d.allocatedA)
      << "); made and freed in between: " << formatBytes(d.churnBytes) << " in " << d.churnCount << " allocations\n";
    auto table = [&](const char* title, const std::vector<BetweenRow>& rows) {
        o << "  " << title << "\n    " ;
        char line[512];
        std::snprintf(line, sizeof line, "%-12s %-12s %-12s %-12s %-12s %s\n", "at A", "at B", "born", "died", "net", "");
        o << line;
        for (const BetweenRow& r : rows) {
            std::snprintf(line, sizeof line, "    %-12s %-12s %-12s %-12s %-12s %s\n", formatBytes(r.atA).c_str(), formatBytes(r.atB).c_str(),
                          ("+" + formatBytes(r.born)).c_str(), ("-" + formatBytes(r.died)).c_str(), signedBytes(r.net()).c_str(),
                          r.name.c_str());
            o << line;
        }
    };
    table("by pool:", d.byPool);
    table(("by call site (" + std::to_string(d.bySite.size()) + " of " + std::to_string(d.sitesChanged) + " that changed):").c_str(), d.bySite);
    return o.str();
}

nlohmann::json betweenJson(const Between& d)
{
    using nlohmann::json;
    auto rows = [](const std::vector<BetweenRow>& rs, const char* key) {
        json arr = json::array();
        for (const BetweenRow& r : rs)
            arr.push_back({{key, r.name}, {"at_a", r.atA}, {"at_b", r.atB}, {"born", r.born}, {"died", r.died}, {"net", r.net()},
                           {"born_count", r.bornCount}, {"died_count", r.diedCount}});
        return arr;
    };
    return json{{"a", {{"event", d.a}, {"label", d.labelA}, {"allocated", d.allocatedA}}},
                {"b", {{"event", d.b}, {"label", d.labelB}, {"allocated", d.allocatedB}}},
                {"churn_bytes", d.churnBytes},
                {"churn_count", d.churnCount},
                {"by_pool", rows(d.byPool, "pool")},
                {"by_site", rows(d.bySite, "site")},
                {"sites_changed", d.sitesChanged}};
}

} // namespace poolscope
