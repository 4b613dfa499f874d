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
        if (s.a + s.b > largest) {
            largest = s.a + s.b;
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
    void add(const std::vector<SiteAllocation>& allocations)
    {
        for (const SiteAllocation& x : allocations)
            if (x.castShaped) {
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
    std::vector<RatioSample> linear, quadratic, input;
    for (const auto& [key, inA] : a.sites) {
        const auto it = b.sites.find(key);
        if (it == b.sites.end() || it->second.size() != inA.size()) {
            ++p.unpairedSites;
            castsA.add(inA);
            if (it != b.sites.end())
                castsB.add(it->second);
            continue;
        }
        const std::string* name = &a.siteNames.at(key);
        bool any = false;
        for (size_t i = 0; i < inA.size(); ++i) {
            const SiteAllocation& x = inA[i];
            const SiteAllocation& y = it->second[i];
            // Inputs follow the batch whatever phase they were made in (the what-if laws keep those made
            // around zero_grad fixed).
            if (x.size <= 0 || y.size <= 0 || (x.law == SizeLaw::Fixed && y.law == SizeLaw::Fixed && !x.input && !y.input))
                continue;
            const RatioSample s{double(y.size) / double(x.size), x.size, y.size, name};
            const bool quad = x.law == SizeLaw::Quadratic || y.law == SizeLaw::Quadratic;
            (x.input || y.input ? input : quad ? quadratic : linear).push_back(s);
            ++p.pairedAllocations;
            p.pairedBytes += x.size + y.size;
            any = true;
        }
        p.pairedSites += any;
    }
    for (const auto& [key, inB] : b.sites)
        if (!a.sites.count(key)) {
            ++p.unpairedSites;
            castsB.add(inB);
        }
    p.linear = clusterRatios(std::move(linear));
    p.quadratic = clusterRatios(std::move(quadratic));
    p.input = clusterRatios(std::move(input));
    return p;
}

} // namespace poolscope
