#include "core/report/gate.h"

#include "core/util/units.h"

namespace poolscope {

std::optional<MemoryLimit> parseMemoryLimit(const std::string& text, bool withPool, std::string* error)
{
    auto fail = [&](std::string why) -> std::optional<MemoryLimit> {
        if (error)
            *error = std::move(why);
        return std::nullopt;
    };
    MemoryLimit limit;
    std::string size = text;
    if (withPool) {
        const auto gt = text.find('>');
        if (gt == std::string::npos)
            return fail("expected POOL>SIZE such as optimizer_state>40GiB, got '" + text + "'");
        limit.pool = parsePool(text.substr(0, gt));
        if (!limit.pool || *limit.pool == Pool::CachedFree) {
            std::string names;
            for (size_t p = 0; p < kAllocationPoolCount; ++p)
                names += (names.empty() ? "" : ", ") + std::string(kPoolNames[p]);
            return fail("'" + text.substr(0, gt) + "' is not a pool (pools: " + names + ")");
        }
        size = text.substr(gt + 1);
    }
    limit.bytes = parseBytes(size);
    if (limit.bytes <= 0)
        return fail("expected a size such as 40GiB, got '" + size + "'");
    return limit;
}

std::vector<std::string> checkLimits(const Report& report, const std::vector<MemoryLimit>& limits)
{
    std::vector<std::string> over;
    for (const DeviceReport& d : report.devices)
        for (const MemoryLimit& l : limits) {
            if (l.pool && !d.classified)
                continue; // no pools to judge (--no-pools); the command refuses that combination
            const int64_t value = l.pool ? d.poolPeaks.bytes[size_t(*l.pool)] : d.peakAllocated;
            if (value <= l.bytes)
                continue;
            const std::string what = l.pool ? std::string(poolName(*l.pool)) + " peak" : "peak allocated";
            const EventIndex at = l.pool ? d.poolPeaks.index[size_t(*l.pool)] : d.peakIndex;
            over.push_back(d.label + " " + what + " " + formatBytes(value) + " is over the limit " + formatBytes(l.bytes) + " by " +
                           formatBytes(value - l.bytes) + (at >= 0 ? " (event " + std::to_string(at) + ")" : ""));
        }
    return over;
}

} // namespace poolscope
