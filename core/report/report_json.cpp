// The report as JSON: field names are part of the interface (scripts, CI gates, `ranks` reading
// reports back), documented in the README.
#include "core/report/json_text.h"
#include "core/report/report.h"
#include "core/util/units.h"

namespace poolscope {
namespace {

using nlohmann::json;

json orNull(int64_t v, int64_t none) { return v == none ? json(nullptr) : json(v); }
json orNull(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

const char* kindName(DeviceKind k) { return k == DeviceKind::Cuda ? "cuda" : k == DeviceKind::Cpu ? "cpu" : "other"; }

json momentJson(const MomentReport& m)
{
    json j;
    j["at"] = m.at;
    j["label"] = m.label;
    j["index"] = m.index;
    j["time_us"] = orNull(m.timeUs, kNoTime);
    j["allocated"] = m.allocated;
    j["reserved"] = m.reserved;
    j["reserved_known"] = m.reservedKnown;
    if (!m.reservedKnown)
        j["reserved_unknown_why"] = m.reservedUnknownWhy;
    j["cached_free"] = m.cachedFree;
    if (m.oom) // where the failed request came from (null where the dump cannot say)
        j["oom_request"] = {{"site", m.oomSite.empty() ? json(nullptr) : json(m.oomSite)},
                            {"phase", m.oomPhase == Phase::Unknown ? json(nullptr) : json(std::string(phaseName(m.oomPhase)))}};
    if (m.classified) {
        json pools = json::object(), sure = json::object();
        for (size_t p = 0; p < kPoolCount; ++p) {
            pools[std::string(kPoolNames[p])] = m.pools[p];
            if (p < kAllocationPoolCount && m.confidence[p] >= 0)
                sure[std::string(kPoolNames[p])] = m.confidence[p];
        }
        j["pools"] = pools;
        j["confidence"] = sure;
        // Issue 15: what the dump could show (history; per pool, the evidence behind most of its
        // bytes; memory in private pools).
        json basis = json::object(), privatePools = json::array();
        for (size_t p = 0; p < kAllocationPoolCount; ++p)
            if (m.confidence[p] >= 0)
                basis[std::string(kPoolNames[p])] = evidenceText(m.evidence.mainEvidence(Pool(p)));
        for (const auto& [id, bytes] : m.evidence.privatePools)
            privatePools.push_back({{"pool_id", {id.first, id.second}}, {"label", id.label()}, {"bytes", bytes}});
        j["history"] = m.evidence.history;
        j["evidence"] = basis;
        j["private_pools"] = privatePools;
        j["verdict"] = m.verdict.sentence;
    }
    j["fragmentation"] = fragmentationJson(m.fragmentation);
    j["allocator_advice"] = m.allocatorAdvice ? allocatorAdviceJson(*m.allocatorAdvice) : json(nullptr);
    j["outside_pytorch"] = m.outside ? outsideJson(*m.outside) : json(nullptr);
    json top = json::array();
    for (const LiveAllocation& a : m.top) {
        json row = {{"id", a.id.value},
                    {"size", a.size},
                    {"address", formatAddress(a.address)},
                    {"stream", a.stream},
                    {"alloc_index", a.allocIndex},
                    {"preexisting", a.preexisting},
                    {"frame", a.frame},
                    {"age_events", orNull(a.ageEvents)},
                    {"age_us", orNull(a.ageUs)}};
        if (a.pool)
            row["pool"] = std::string(poolName(*a.pool));
        top.push_back(std::move(row));
    }
    j["top"] = top;
    return j;
}

json deviceJson(const DeviceReport& d)
{
    json j;
    j["device"] = d.device;
    j["label"] = d.label;
    j["kind"] = kindName(d.kind);
    j["entries"] = d.entries;
    j["allocations"] = d.allocations;
    j["segments"] = d.segments;
    j["has_time_us"] = d.hasTime;
    j["initial_allocated"] = d.initialAllocated;
    j["peak_allocated"] = d.peakAllocated;
    j["peak_index"] = d.peakIndex;
    j["end_reserved"] = d.endReserved;
    j["orphan_free_bytes"] = d.orphanFreeBytes;
    j["actions"] = d.actions;
    json ooms = json::array();
    for (const OomEvent& o : d.ooms)
        ooms.push_back({{"index", o.index}, {"requested", o.requestedBytes}, {"device_free", o.deviceFree}, {"time_us", orNull(o.timeUs, kNoTime)}});
    j["ooms"] = ooms;
    j["reserved_at_peak"] = d.reservedAtPeak;
    if (d.classified) {
        json peaks = json::object(), atPeak = json::object();
        for (size_t p = 0; p < kPoolCount; ++p) {
            peaks[std::string(kPoolNames[p])] = {{"bytes", d.poolPeaks.bytes[p]}, {"index", d.poolPeaks.index[p]}};
            atPeak[std::string(kPoolNames[p])] = d.poolsAtPeak[p];
        }
        j["pool_peaks"] = peaks;
        j["pools_at_peak"] = atPeak;
    }
    j["moment"] = momentJson(d.moment);
    return j;
}

} // namespace

std::string reportJsonText(const Report& r)
{
    json j;
    j["file"] = r.file;
    j["format"] = r.format;
    j["format_detail"] = r.formatDetail;
    j["warnings"] = r.warnings;
    json devices = json::array();
    for (const DeviceReport& d : r.devices)
        devices.push_back(deviceJson(d));
    j["devices"] = devices;
    return jsonText(j) + "\n";
}

} // namespace poolscope
