#pragma once
#include "core/compare/run_profile.h"

#include <cstdint>
#include <string>
#include <vector>

namespace poolscope {

// Allocations of one size ratio (B over A) between paired call sites, within 2 % of each other.
struct RatioCluster {
    double ratio = 1.0; // byte-weighted mean of the members' ratios
    int64_t bytes = 0;  // A's and B's bytes of the members together
    int count = 0;      // paired allocations
    // The largest member, for evidence: where it was made and its sizes in A and B.
    std::string site;
    int64_t exampleA = 0, exampleB = 0;
};

// Cast-shaped allocations (RunProfile::SiteAllocation::castShaped) that one run makes and the other
// does not: left unpaired. An activation that merely has a weight's half size by coincidence is
// made by both runs at the same site and pairs; autocast's weight casts are extra allocations at
// the layers' call sites, one per weight, so they stay unpaired and cover several weight sizes.
struct CastEvidence {
    int count = 0;
    int64_t bytes = 0;
    int distinctSizes = 0;
    bool autocast() const { return count >= 4 && distinctSizes >= 2; }
};

// Allocations of A and B paired by call site: the n-th allocation a (phase block, Python call
// site) made in A with the n-th that the same site made in B, where both runs made the same number
// there. The same program run with other sizes makes its allocations in the same order, so the
// pairs are the same tensor; their size ratio says how that tensor scaled. Only pairs that follow
// the tokens in either run (the what-if engine's laws) enter the clusters.
struct SitePairing {
    std::vector<RatioCluster> linear;    // tensors linear in the tokens, largest cluster first
    std::vector<RatioCluster> quadratic; // b*a*s*s score tensors (the what-if engine's law in either run)
    std::vector<RatioCluster> input;     // the input pool: integer token ids and labels
    // Pairs made by fp32-list operators in both runs (softmax, exp, norms): no precision changes their
    // element size, so under a precision change they still read the tokens (linear) and b*s^2 (scores).
    std::vector<RatioCluster> linearKept, quadraticKept;
    int pairedSites = 0, pairedAllocations = 0;
    int unpairedSites = 0; // sites in both runs with a different number of allocations, or in one run only
    int64_t pairedBytes = 0;
    CastEvidence castsA, castsB;

    static int64_t total(const std::vector<RatioCluster>& clusters);
};

SitePairing pairSites(const RunProfile& a, const RunProfile& b);

// Clusters whose ratios lie within `tolerance` (relative) of each other, largest bytes first.
struct RatioSample {
    double ratio = 1.0;
    int64_t a = 0, b = 0;
    const std::string* site = nullptr;
};
std::vector<RatioCluster> clusterRatios(std::vector<RatioSample> samples, double tolerance = 0.02);

} // namespace poolscope
