#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace poolscope {

// The pools PoolScope names. CachedFree is not an allocation pool: it is reserved - allocated
// (the allocator's cache and fragmentation), shown on top of the stack in charts and reports.
enum class Pool : uint8_t {
    Parameter,
    Gradient,
    OptimizerState,
    Activation,
    Temporary,
    Input,
    Other,
    Unknown,
    CachedFree,
};
constexpr size_t kPoolCount = 9;
constexpr size_t kAllocationPoolCount = 8; // all but CachedFree

constexpr std::array<std::string_view, kPoolCount> kPoolNames = {
    "parameter", "gradient", "optimizer_state", "activation", "temporary", "input", "other", "unknown", "cached_free"};

constexpr std::string_view poolName(Pool p) { return kPoolNames[size_t(p)]; }
inline std::optional<Pool> parsePool(std::string_view name)
{
    for (size_t i = 0; i < kPoolCount; ++i)
        if (kPoolNames[i] == name)
            return Pool(i);
    return std::nullopt;
}

} // namespace poolscope
