#pragma once
#include "core/classify/pool.h"
#include "core/report/report.h"

#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// Memory gates for CI: a limit on a device's peak allocated bytes (report --fail-over 70GiB) or on a
// pool's own peak (report --fail-pool optimizer_state>40GiB). A run over any of them exits with
// kGateExitCode and one line saying what went over and by how much.
constexpr int kGateExitCode = 3;

struct MemoryLimit {
    std::optional<Pool> pool; // none: the peak of allocated bytes
    int64_t bytes = 0;
};

// "70GiB" (no pool) or "optimizer_state>40GiB"; nullopt and `error` set when it is neither.
std::optional<MemoryLimit> parseMemoryLimit(const std::string& text, bool withPool, std::string* error);

// Every device and limit that went over, as one line each: "cuda:0 peak allocated 72.31 GiB is over
// the limit 70.00 GiB by 2.31 GiB". Empty when everything is within.
std::vector<std::string> checkLimits(const Report& report, const std::vector<MemoryLimit>& limits);

} // namespace poolscope
