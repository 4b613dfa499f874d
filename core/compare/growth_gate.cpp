#include "core/compare/growth_gate.h"

#include "core/util/units.h"

#include <cstdio>
#include <cstdlib>

namespace poolscope {

std::optional<GrowthLimit> parseGrowthLimit(const std::string& text, std::string* error)
{
    auto fail = [&](std::string why) -> std::optional<GrowthLimit> {
        if (error)
            *error = std::move(why);
        return std::nullopt;
    };
    GrowthLimit limit;
    std::string amount = text;
    if (const auto colon = text.find(':'); colon != std::string::npos) {
        limit.pool = parsePool(text.substr(0, colon));
        if (!limit.pool || *limit.pool == Pool::CachedFree)
            return fail("'" + text.substr(0, colon) + "' is not a pool");
        amount = text.substr(colon + 1);
    }
    const bool percent = !amount.empty() && amount.back() == '%';
    if (percent)
        amount.pop_back();
    char* end = nullptr;
    const double v = amount.empty() ? -1 : std::strtod(amount.c_str(), &end);
    if (amount.empty() || end != amount.c_str() + amount.size() || !(v >= 0) || v > 1e6)
        return fail("expected a growth such as 5% or activation:5%, got '" + text + "'");
    limit.fraction = percent ? v / 100.0 : v;
    return limit;
}

std::vector<std::string> checkGrowth(const Comparison& c, int64_t peakA, int64_t peakB, const std::vector<GrowthLimit>& limits)
{
    std::vector<std::string> over;
    for (const GrowthLimit& l : limits) {
        const int64_t a = l.pool ? c.poolPeaks[size_t(*l.pool)].a : peakA;
        const int64_t b = l.pool ? c.poolPeaks[size_t(*l.pool)].b : peakB;
        const std::string what = l.pool ? std::string(poolName(*l.pool)) + " peak" : "peak allocated";
        // A pool the baseline did not have grew without bound: any bytes of it are over.
        const bool grew = a > 0 ? double(b - a) > l.fraction * double(a) : b > 0;
        if (!grew)
            continue;
        char pct[64];
        if (a > 0)
            std::snprintf(pct, sizeof pct, "+%.1f%%, limit %.1f%%", 100.0 * double(b - a) / double(a), 100.0 * l.fraction);
        else
            std::snprintf(pct, sizeof pct, "new in B, limit %.1f%%", 100.0 * l.fraction);
        over.push_back(what + " grew " + formatBytes(a) + " -> " + formatBytes(b) + " (" + pct + ")");
    }
    return over;
}

} // namespace poolscope
