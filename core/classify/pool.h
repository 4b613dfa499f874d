#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace poolscope {

// The pools PoolScope names, in the order charts stack them (bottom to top) and tables list them.
// CachedFree is not an allocation pool: it is reserved - allocated (the allocator's cache and
// fragmentation), shown on top of the stack in charts and reports.
// CastCache: autocast's cache of low-precision weight copies (at::autocast::cached_cast), kept until
// autocast exits; it follows the parameters and the precision, not the micro-batch. KvCache: an
// inference engine's attention key/value cache (vLLM, SGLang, Hugging Face caches), sized by the
// engine's cache budget. Workspace: scratch that a library keeps per handle or communicator (cuBLAS,
// cuDNN, NCCL), sized by the library's configuration.
enum class Pool : uint8_t {
    Parameter,
    CastCache,
    Gradient,
    OptimizerState,
    KvCache,
    Activation,
    Temporary,
    Workspace,
    Input,
    Other,
    Unknown,
    CachedFree,
};
constexpr size_t kPoolCount = 12;
constexpr size_t kAllocationPoolCount = 11; // all but CachedFree

constexpr std::array<std::string_view, kPoolCount> kPoolNames = {
    "parameter", "cast_cache", "gradient", "optimizer_state", "kv_cache", "activation",
    "temporary", "workspace",  "input",    "other",           "unknown",  "cached_free"};

constexpr std::string_view poolName(Pool p) { return kPoolNames[size_t(p)]; }
inline std::optional<Pool> parsePool(std::string_view name)
{
    for (size_t i = 0; i < kPoolCount; ++i)
        if (kPoolNames[i] == name)
            return Pool(i);
    return std::nullopt;
}

} // namespace poolscope
