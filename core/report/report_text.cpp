// The report for people: binary units with two decimals, aligned columns.
#include "core/report/report.h"

#include "core/classify/pool_display.h"
#include "core/util/units.h"

#include <algorithm>
#include <cstdio>

namespace poolscope {
namespace {

std::string pad(std::string s, size_t width, bool right = false)
{
    if (s.size() >= width)
        return s;
    return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

void momentText(std::string& out, const MomentReport& m)
{
    auto line = [&](const std::string& k, const std::string& v) { out += "  " + pad(k, 22) + v + "\n"; };
    out += "\n  at " + m.label + "\n";
    line("allocated", formatBytes(m.allocated));
    if (m.reservedKnown) {
        line("reserved", formatBytes(m.reserved));
        line(std::string(poolDisplayName(Pool::CachedFree)), formatBytes(m.cachedFree) + " " + std::string(kCachedFreeExplained));
    } else {
        line("reserved", "unknown (" + m.reservedUnknownWhy + ")");
    }
    if (m.outside)
        out += outsideText(*m.outside, "  ");
    else if (m.oom && m.oom->deviceFree >= 0)
        line("outside PyTorch", "unknown: the dump has no device total (pass --capacity 80GiB or a preset such as a100-80gb, "
                                "or record with the capture helper)");
    if (m.fragmentation.known)
        out += fragmentationText(m.fragmentation, "  ");
    if (m.classified)
        out += "\n  " + m.verdict.sentence + "\n";
    const bool anyPool = m.classified && std::any_of(m.pools.begin(), m.pools.end(), [](int64_t b) { return b != 0; });
    if (anyPool) {
        // Shares of reserved (pools and cache make 100%), as the window shows them; of allocated
        // where the source records no reserved bytes.
        const char* ofWhat = m.reservedKnown ? "of reserved" : "of allocated";
        out += "\n  " + pad("pool", 18) + pad("bytes", 12, true) + pad(ofWhat, 14, true) + pad("confidence", 12, true) + "  evidence\n";
        const double total = double(std::max<int64_t>(1, m.reservedKnown ? std::max(m.reserved, m.allocated) : m.allocated));
        for (size_t p = 0; p < kPoolCount; ++p) {
            const int64_t bytes = m.pools[p];
            if (bytes == 0)
                continue;
            char share[16];
            std::snprintf(share, sizeof share, "%.1f%%", 100.0 * double(bytes) / total);
            const std::string conf = p < kAllocationPoolCount && m.confidence[p] >= 0 ? std::to_string(m.confidence[p]) + "%" : "";
            const std::string why = conf.empty() ? "" : "  " + evidenceText(m.evidence.mainEvidence(Pool(p)));
            out += "  " + pad(std::string(poolDisplayName(Pool(p))), 18) + pad(formatBytes(bytes), 12, true) + pad(share, 14, true) + pad(conf, 12, true) +
                   why + "\n";
        }
    }
    if (m.top.empty())
        return;
    out += "\n  " + pad("size", 12, true) + "  " + pad("address", 16) + pad("age", 12, true) + "  " + (m.classified ? pad("pool", 16) : "") +
           "frame\n";
    for (const LiveAllocation& r : m.top) {
        std::string age = "before rec.";
        if (r.ageUs)
            age = formatDurationUs(*r.ageUs);
        else if (r.ageEvents)
            age = std::to_string(*r.ageEvents) + " ev";
        out += "  " + pad(formatBytes(r.size), 12, true) + "  " + pad(formatAddress(r.address), 16) + pad(age, 12, true) + "  " +
               (r.pool ? pad(std::string(poolDisplayName(*r.pool)), 16) : "") + r.frame + "\n";
    }
}

} // namespace

std::string reportText(const Report& report)
{
    std::string out = report.file + "  (" + report.format + ")\n";
    for (const DeviceReport& d : report.devices) {
        out += "\n" + d.label + "\n";
        auto line = [&](const std::string& k, const std::string& v) { out += "  " + pad(k, 22) + v + "\n"; };
        line("entries", std::to_string(d.entries));
        line("allocations", std::to_string(d.allocations));
        line("initial allocated", formatBytes(d.initialAllocated));
        line("peak allocated", formatBytes(d.peakAllocated) + (d.peakIndex >= 0 ? "  at event " + std::to_string(d.peakIndex) : "  (before recording)"));
        line("reserved at end", formatBytes(d.endReserved));
        if (d.ooms.empty())
            line("OOM events", "none");
        for (const OomEvent& o : d.ooms)
            line("OOM", "event " + std::to_string(o.index) + ": tried to allocate " + formatBytes(o.requestedBytes) +
                            (o.deviceFree >= 0 ? ", " + formatBytes(o.deviceFree) + " free on the device" : "") +
                            (d.moment.oom && d.moment.oom->index == o.index ? oomRequestWhere(d.moment) : std::string()) +
                            (o.atProcessLimit() ? ". The device had room for it: a limit of this process refused it "
                                                  "(torch.cuda.set_per_process_memory_fraction, or the share of the GPU a "
                                                  "framework keeps for itself)"
                                                : ""));
        momentText(out, d.moment);
    }
    if (!report.warnings.empty()) {
        out += "\nwarnings:\n";
        for (const std::string& w : report.warnings)
            out += "  " + w + "\n";
    }
    return out;
}

} // namespace poolscope
