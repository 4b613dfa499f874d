// Precision: autocast appearing (frames, the cast_cache pool, or 16-bit copies of the weights that
// only one run makes, with tensors whose element size changed as autocast changes it), and weights
// stored narrower (every parameter tensor half its bytes, with no collective to shard them).
#include "core/compare/axes.h"

#include "core/compare/tensor_relation.h"
#include "core/util/units.h"

#include <cmath>

namespace poolscope {
namespace {

// The share of the linear tensors' paired bytes whose element size changed the way autocast
// changes it: halved relative to the tokens when autocast is in B, doubled when it is in A. The
// tokens' own ratio comes from the integer inputs, else from the tensors that kept their size.
double elementSizeShare(const SitePairing& sites, bool autocastInB)
{
    const int64_t total = SitePairing::total(sites.linear);
    if (total == 0)
        return 0;
    double tokens = 0;
    if (!sites.input.empty()) {
        tokens = sites.input.front().ratio;
    } else {
        for (const RatioCluster& c : sites.linear)
            if (c.bytes * 20 >= total && (tokens == 0 || (autocastInB ? c.ratio > tokens : c.ratio < tokens)))
                tokens = c.ratio;
    }
    int64_t changed = 0;
    for (const RatioCluster& c : sites.linear)
        if (nearRatio(c.ratio, tokens * (autocastInB ? 0.5 : 2.0)))
            changed += c.bytes;
    return double(changed) / double(total);
}

// Frames and the classifier's cast_cache pool say autocast outright. Cast-shaped allocations alone
// could be activations of a weight's half size by coincidence: they count when paired tensors also
// changed their element size as autocast changes it.
bool autocastIn(const RunProfile& p, const CastEvidence& casts, const SitePairing& sites, bool isB)
{
    return p.autocastFrameAllocations > 0 || p.castCacheBytes > 0 || p.autocastFact == Known::Yes ||
           (casts.autocast() && elementSizeShare(sites, isB) >= 0.05);
}

std::string autocastEvidence(const RunProfile& p, const CastEvidence& casts)
{
    std::vector<std::string> parts;
    if (p.autocastFrameAllocations > 0)
        parts.push_back(std::to_string(p.autocastFrameAllocations) + " allocations under autocast frames");
    if (casts.autocast())
        parts.push_back(std::to_string(casts.count) + " allocations in the first forward pass of exactly half a parameter's bytes (" +
                        formatBytes(casts.bytes) + ", " + std::to_string(casts.distinctSizes) +
                        " sizes) that the other run does not make: 16-bit copies of fp32 weights");
    if (p.castCacheBytes > 0)
        parts.push_back("a cast_cache pool of " + formatBytes(p.castCacheBytes));
    else if (p.autocastFact == Known::Yes)
        parts.push_back("autocast's casts in the run facts");
    std::string s;
    for (const auto& x : parts)
        s += (s.empty() ? "" : ", ") + x;
    return s;
}

// How the paired tensors' sizes split: under a precision change with the tokens fixed, some halve
// (or double) and the rest, computed in fp32 either way or integer, keep their size.
std::string elementSizeEvidence(const SitePairing& sites)
{
    std::vector<RatioCluster> all = sites.linear;
    all.insert(all.end(), sites.quadratic.begin(), sites.quadratic.end());
    all.insert(all.end(), sites.input.begin(), sites.input.end());
    const int64_t total = SitePairing::total(all);
    if (total == 0)
        return {};
    int64_t half = 0, same = 0, twice = 0;
    for (const RatioCluster& c : all) {
        if (nearRatio(c.ratio, 0.5))
            half += c.bytes;
        else if (nearRatio(c.ratio, 1.0))
            same += c.bytes;
        else if (nearRatio(c.ratio, 2.0))
            twice += c.bytes;
    }
    auto pct = [&](int64_t x) { return std::to_string(int(std::lround(100.0 * double(x) / double(total)))) + "%"; };
    std::string s = "paired batch-dependent tensors: ";
    if (half * 200 > total)
        s += pct(half) + " of their bytes halved, ";
    if (twice * 200 > total)
        s += pct(twice) + " doubled, ";
    s += pct(same) + " kept their size";
    return s;
}

} // namespace

PrecisionChange inferPrecision(const RunProfile& a, const RunProfile& b, const TensorRelation& params, const SitePairing& sites)
{
    PrecisionChange pc;
    const bool autoA = autocastIn(a, sites.castsA, sites, false), autoB = autocastIn(b, sites.castsB, sites, true);
    // Every weight at half (or twice) its bytes, as many weights, and no collective to shard them:
    // the element size changed (ZeRO-3 over 2 ranks would gather the full weights back).
    int weights = 0;
    if (params.kind == Relation::Scaled && (nearRatio(params.factor, 0.5) || nearRatio(params.factor, 2.0))) {
        const RunProfile& smaller = params.factor < 1 ? b : a;
        if (smaller.collectiveAllocations == 0 && smaller.transientParameterBytes == 0)
            weights = params.factor < 1 ? -1 : 1;
    }
    if (autoA == autoB && weights == 0)
        return pc;
    auto label = [&](bool autocast, bool narrow) {
        std::string s = narrow ? "16-bit" : "fp32";
        if (autocast)
            s = narrow ? "16-bit + autocast" : "autocast (16-bit)";
        return s;
    };
    const bool narrowA = weights > 0, narrowB = weights < 0;
    CompareAxis axis;
    axis.name = "precision";
    axis.a = label(autoA, narrowA);
    axis.b = label(autoB, narrowB);
    axis.phrase = "precision " + axis.a + " -> " + axis.b;
    std::vector<std::string> ev;
    if (autoA != autoB) {
        const RunProfile& with = autoB ? b : a;
        ev.push_back(std::string("autocast appears in ") + (autoB ? "B" : "A") + " only: " + autocastEvidence(with, autoB ? sites.castsB : sites.castsA));
    }
    if (weights != 0) {
        axis.ratio = params.factor;
        ev.push_back("every parameter tensor is " + std::string(weights < 0 ? "half" : "twice") + " its bytes in A (" +
                     tensorsText(params.countA, params.bytesA) + " -> " + formatBytes(params.bytesB) +
                     ") with no collective or gathered weights: the element size changed");
    }
    if (auto sizes = elementSizeEvidence(sites); !sizes.empty())
        ev.push_back(sizes);
    for (const auto& e : ev)
        axis.evidence += (axis.evidence.empty() ? "" : "; ") + e;
    // Lower in B when B gained autocast or narrower weights.
    pc.direction = (autoB && !autoA) || weights < 0 ? -1 : 1;
    pc.axis = std::move(axis);
    return pc;
}

} // namespace poolscope
