#pragma once
#include "core/classify/pool.h"
#include "core/classify/pool_series.h"

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
};

// `moment` names the moment: "At the OOM", "At the peak", "At event #1234".
// Percentages are of allocated bytes; cached_free is named when it is the wall or at least a tenth
// of what is allocated. Empty pools and pools under 0.005 GiB are left out of the list.
Verdict makeVerdict(std::string_view moment, const PoolBytes& pools);

// What to do when `pool` is the wall, as one clause ("shard it (ZeRO/FSDP), ...").
std::string_view poolAdvice(Pool pool);
// "optimizer state", "cached but free memory (fragmentation)"
std::string_view poolPhrase(Pool pool);

} // namespace poolscope
