#pragma once
#include "core/classify/classifier.h"
#include "core/classify/pool.h"
#include "core/classify/pool_series.h"

#include <array>
#include <span>
#include <string>
#include <string_view>

namespace poolscope {

// The verdict in words at one moment, e.g.
// "At the OOM: optimizer_state 25.38 GiB (49%), gradient 12.72 GiB, parameter 12.95 GiB, activation
//  0.05 GiB. The wall is optimizer state: shard it (ZeRO/FSDP), offload it, or pick a lower-state
//  optimizer; cutting the micro-batch frees at most 0.05 GiB."
struct Verdict {
    Pool dominant = Pool::Unknown; // CachedFree when reserved-but-free memory outweighs every pool
    std::string breakdown;         // "At the OOM: optimizer_state 25.38 GiB (49%), ..."
    std::string advice;            // "The wall is optimizer state: ..."
    std::string sentence;          // breakdown + " " + advice
    int confidence = -1;           // the classifier's confidence in the dominant pool's bytes; -1: not given
};

// How sure the classifier is of the bytes alive at one moment, per pool: the byte-weighted mean of the
// alive allocations' confidences (0-100); -1 where the pool holds none of them (and for CachedFree,
// which is measured, not classified).
using PoolConfidence = std::array<int, kPoolCount>;
PoolConfidence aliveConfidence(const Classification& c, const std::vector<Allocation>& allocations, std::span<const AllocId> alive);

// Below this the verdict says "probably" and how sure it is: a dump without allocation history (only
// the final segments) is classified from stacks and sizes alone, at 65% for pre-existing memory.
constexpr int kSureConfidence = 70;

// `moment` names the moment: "At the OOM", "At the peak", "At event #1234".
// Percentages are of allocated bytes; cached_free is named when it is the wall or at least a tenth
// of what is allocated. Empty pools and pools under 0.005 GiB are left out of the list. With
// `confidence`, a wall the classifier is less than kSureConfidence sure of is named as probable.
Verdict makeVerdict(std::string_view moment, const PoolBytes& pools, const PoolConfidence* confidence = nullptr);

// What to do when `pool` is the wall, as one clause ("shard it (ZeRO/FSDP), ...").
std::string_view poolAdvice(Pool pool);
// "optimizer state", "cached but free memory (fragmentation)"
std::string_view poolPhrase(Pool pool);

} // namespace poolscope
