#include "core/compare/site_pairs.h"

#include <algorithm>
#include <unordered_set>

namespace poolscope {

int64_t SitePairing::total(const std::vector<RatioCluster>& clusters)
{
    int64_t t = 0;
    for (const RatioCluster& c : clusters)
        t += c.bytes;
    return t;
}

std::vector<RatioCluster> clusterRatios(std::vector<RatioSample> samples, double tolerance)
{
    std::sort(samples.begin(), samples.end(), [](const RatioSample& x, const RatioSample& y) { return x.ratio < y.ratio; });
    std::vector<RatioCluster> out;
    double first = 0, weighted = 0;
    int64_t largest = -1;
    for (const RatioSample& s : samples) {
        if (out.empty() || s.ratio > first * (1 + tolerance)) {
            if (!out.empty())
                out.back().ratio = weighted / double(out.back().bytes);
            out.push_back(RatioCluster{});
            first = s.ratio;
            weighted = 0;
            largest = -1;
        }
        RatioCluster& c = out.back();
        const int64_t w = s.a + s.b;
        c.bytes += w;
        c.count += 1;
        weighted += s.ratio * double(w);
        // The example: the largest member whose site a user can find (Python frames) before any other.
        const bool named = s.site && !s.site->empty() && s.site->front() != '(';
        const int64_t rank = (s.a + s.b) + (named ? int64_t(1) << 62 : 0);
        if (rank > largest) {
            largest = rank;
            c.site = s.site ? *s.site : std::string();
            c.exampleA = s.a;
            c.exampleB = s.b;
        }
    }
    if (!out.empty())
        out.back().ratio = out.back().bytes > 0 ? weighted / double(out.back().bytes) : first;
    std::stable_sort(out.begin(), out.end(), [](const RatioCluster& x, const RatioCluster& y) { return x.bytes > y.bytes; });
    return out;
}

namespace {

struct CastCounter {
    CastEvidence& out;
    std::unordered_set<int64_t> sizes;
    // Up to `extra` cast-shaped allocations of a site where this run made `extra` more than the
    // other: autocast's casts are additions at the layers' call sites. The run with fewer
    // allocations there counts none: its cast-shaped ones have partners of the other run.
    void add(const std::vector<SiteAllocation>& allocations, size_t extra)
    {
        for (const SiteAllocation& x : allocations) {
            if (extra == 0)
                break;
            if (!x.castShaped)
                continue;
            --extra;
            ++out.count;
            out.bytes += x.size;
            sizes.insert(x.size);
        }
        out.distinctSizes = int(sizes.size());
    }
};

} // namespace

SitePairing pairSites(const RunProfile& a, const RunProfile& b)
{
    SitePairing p;
    CastCounter castsA{p.castsA, {}}, castsB{p.castsB, {}};
    std::vector<RatioSample> linear, quadratic, input, linearKept, quadraticKept;
    auto pair = [&](const std::vector<SiteAllocation>& inA, const std::vector<SiteAllocation>& inB, const std::string* name) {
        bool any = false;
        for (size_t i = 0; i < std::min(inA.size(), inB.size()); ++i) {
            const SiteAllocation& x = inA[i];
            const SiteAllocation& y = inB[i];
            // Inputs follow the batch whatever phase they were made in (the what-if laws keep those made
            // around zero_grad fixed).
            if (x.size <= 0 || y.size <= 0 || (x.law == SizeLaw::Fixed && y.law == SizeLaw::Fixed && !x.input && !y.input))
                continue;
            const RatioSample s{double(y.size) / double(x.size), x.size, y.size, name};
            const bool quad = x.law == SizeLaw::Quadratic || y.law == SizeLaw::Quadratic;
            (x.input || y.input ? input : quad ? quadratic : linear).push_back(s);
            // fp32 in both only where one run is under autocast (its fp32 list) and the other not at all.
            if (x.fp32List && y.fp32List && x.autocastRun != y.autocastRun && !x.input && !y.input)
                (quad ? quadraticKept : linearKept).push_back(s);
            ++p.pairedAllocations;
            p.pairedBytes += x.size + y.size;
            any = true;
        }
        p.pairedSites += any;
    };
    // First by the full Python stacks; what does not pair so, by the user's frames alone, the
    // allocations of a user site taken in event order across its full-stack sites.
    std::unordered_map<uint64_t, std::vector<SiteAllocation>> restA, restB;
    std::unordered_map<uint64_t, const std::string*> restName;
    auto defer = [](std::unordered_map<uint64_t, std::vector<SiteAllocation>>& rest, const RunProfile& run, uint64_t key) {
        auto& v = rest[run.userSiteOf.at(key)];
        const auto& add = run.sites.at(key);
        v.insert(v.end(), add.begin(), add.end());
    };
    // In the block an OOM cut short, the run that ran out made a prefix of what the other made.
    auto cut = [&](uint64_t key) { return siteWhereOf(key) == a.oomWhere || siteWhereOf(key) == b.oomWhere; };
    for (const auto& [key, inA] : a.sites) {
        const auto it = b.sites.find(key);
        if (it != b.sites.end() && (it->second.size() == inA.size() || cut(key))) {
            pair(inA, it->second, &a.siteNames.at(key));
            continue;
        }
        defer(restA, a, key);
        restName.emplace(a.userSiteOf.at(key), &a.siteNames.at(key));
        if (it != b.sites.end())
            defer(restB, b, key);
    }
    for (const auto& [key, inB] : b.sites)
        if (!a.sites.count(key))
            defer(restB, b, key);
    auto byEvent = [](std::vector<SiteAllocation>& v) {
        std::stable_sort(v.begin(), v.end(), [](const SiteAllocation& x, const SiteAllocation& y) { return x.event < y.event; });
    };
    for (auto& [key, inA] : restA) {
        byEvent(inA);
        const auto it = restB.find(key);
        const size_t inB = it == restB.end() ? 0 : it->second.size();
        if (it != restB.end())
            byEvent(it->second);
        if (it != restB.end() && (inB == inA.size() || cut(key))) {
            pair(inA, it->second, restName.at(key));
            continue;
        }
        ++p.unpairedSites;
        castsA.add(inA, inA.size() > inB ? inA.size() - inB : 0);
        if (it != restB.end())
            castsB.add(it->second, inB > inA.size() ? inB - inA.size() : 0);
    }
    for (auto& [key, inB] : restB)
        if (!restA.count(key)) {
            ++p.unpairedSites;
            castsB.add(inB, inB.size());
        }
    p.linear = clusterRatios(std::move(linear));
    p.quadratic = clusterRatios(std::move(quadratic));
    p.input = clusterRatios(std::move(input));
    p.linearKept = clusterRatios(std::move(linearKept));
    p.quadraticKept = clusterRatios(std::move(quadraticKept));
    return p;
}

} // namespace poolscope
