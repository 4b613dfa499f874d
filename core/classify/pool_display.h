#pragma once
// The name of a pool that a person reads (tables, verdicts, legends, images, terminal text): "cast
// cache", "KV cache", "optimizer state". poolName() (pool.h) stays the identifier for JSON keys, CSV
// columns, rules files and options such as --fail-pool.
#include "core/classify/pool.h"

namespace poolscope {

constexpr std::array<std::string_view, kPoolCount> kPoolDisplayNames = {
    "parameter", "cast cache", "gradient", "optimizer state", "KV cache", "activation",
    "temporary", "workspace",  "input",    "other",           "unknown",  "cached free"};
constexpr std::string_view poolDisplayName(Pool p) { return kPoolDisplayNames[size_t(p)]; }
// Memory the caching allocator holds in segments that no tensor uses: "cached free", and where it
// is explained, always this one explanation (window legend and table, review image, hover, report
// and compare text). ASCII, as terminal text is.
constexpr std::string_view kCachedFreeExplained = "(reserved - allocated)";
constexpr std::string_view kCachedFreeLabel = "cached free (reserved - allocated)";

} // namespace poolscope
