#include "core/report/device_report.h"

#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/report/verdict.h"
#include "core/timeline/alive_index.h"
#include "core/timeline/moment.h"
#include "core/util/units.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace poolscope {
namespace {

using nlohmann::json;

std::string frameText(const Trace& trace, const Allocation& a)
{
    if (!trace.opName(a).empty())
        return trace.opName(a);
    const FrameId f = trace.frames.userFrame(a.stack);
    if (!f)
        return {};
    const Frame& fr = trace.frames.frame(f);
    if (fr.isPython())
        return fr.filename + ":" + std::to_string(fr.line) + " " + fr.name;
    return fr.name;
}

std::string verdictMoment(const std::string& at, EventIndex index)
{
    if (at == "oom")
        return "At the OOM";
    if (at == "peak")
        return "At the peak";
    if (at == "end")
        return "At the end";
    return "At event #" + std::to_string(index);
}

json liveAllocations(const Trace& trace, const DeviceTrace& dev, EventIndex at, std::vector<AllocId> alive, int top,
                     const Classification* c)
{
    const size_t k = std::min<size_t>(alive.size(), size_t(std::max(top, 0)));
    // Largest first; address breaks ties so the order is stable across runs.
    std::partial_sort(alive.begin(), alive.begin() + ptrdiff_t(k), alive.end(), [&](AllocId x, AllocId y) {
        const auto& a = dev.allocations[x.value];
        const auto& b = dev.allocations[y.value];
        return a.size != b.size ? a.size > b.size : a.address < b.address;
    });
    const int64_t nowUs = at >= 0 ? dev.events.timeUs[size_t(at)] : kNoTime;
    json rows = json::array();
    for (size_t i = 0; i < k; ++i) {
        const Allocation& a = dev.allocations[alive[i].value];
        json row = {{"id", alive[i].value},
                    {"size", a.size},
                    {"address", formatAddress(a.address)},
                    {"stream", a.stream},
                    {"alloc_index", a.allocEvent},
                    {"preexisting", a.preexisting()},
                    {"frame", frameText(trace, a)}};
        if (c)
            row["pool"] = std::string(poolName(c->pool[alive[i].value]));
        row["age_events"] = a.preexisting() ? json(nullptr) : json(at - a.allocEvent);
        row["age_us"] = (nowUs != kNoTime && a.allocTimeUs != kNoTime) ? json(nowUs - a.allocTimeUs) : json(nullptr);
        rows.push_back(std::move(row));
    }
    return rows;
}

json deviceReport(const Trace& trace, const DeviceTrace& dev, const ReportOptions& options, const RuleSet* rules)
{
    json d;
    d["device"] = dev.device;
    d["label"] = dev.label();
    d["kind"] = dev.kind == DeviceKind::Cuda ? "cuda" : dev.kind == DeviceKind::Cpu ? "cpu" : "other";
    d["entries"] = dev.eventCount();
    d["allocations"] = dev.allocations.size();
    d["segments"] = dev.segments.size();
    d["has_time_us"] = dev.hasTime;
    d["initial_allocated"] = dev.initialAllocated;
    d["peak_allocated"] = dev.peakAllocated;
    d["peak_index"] = dev.peakIndex;
    d["end_reserved"] = dev.endReserved;
    d["orphan_free_bytes"] = dev.orphanFreeBytes;
    json actions = json::object();
    for (Action a : dev.events.action)
        actions[std::string(actionName(a))] = actions.value(std::string(actionName(a)), 0) + 1;
    d["actions"] = actions;
    json ooms = json::array();
    for (const OomEvent& o : dev.ooms)
        ooms.push_back({{"index", o.index},
                        {"requested", o.requestedBytes},
                        {"device_free", o.deviceFree},
                        {"time_us", o.timeUs == kNoTime ? json(nullptr) : json(o.timeUs)}});
    d["ooms"] = ooms;

    std::string error;
    const auto moment = resolveMoment(dev, options.at, &error);
    if (!moment)
        throw std::invalid_argument(dev.label() + ": " + error);
    const EventIndex at = moment->event;
    json m;
    m["at"] = options.at;
    m["label"] = moment->label;
    m["index"] = at;
    m["time_us"] = (at >= 0 && dev.events.timeUs[size_t(at)] != kNoTime) ? json(dev.events.timeUs[size_t(at)]) : json(nullptr);
    m["allocated"] = dev.allocatedAt(at);
    m["reserved"] = dev.reservedAt(at);
    m["reserved_known"] = dev.reservedKnown();
    m["cached_free"] = dev.reservedKnown() ? dev.reservedAt(at) - dev.allocatedAt(at) : 0;
    std::vector<AllocId> alive = AliveIndex(dev.allocations).aliveAfter(at);
    std::optional<Classification> classification;
    if (rules) {
        classification = classify(trace, dev, *rules);
        const PoolSeries series = computePoolSeries(dev, *classification);
        json peaks = json::object();
        for (size_t p = 0; p < kPoolCount; ++p)
            peaks[std::string(kPoolNames[p])] = {{"bytes", series.peak()[p]}, {"index", series.peakIndex(Pool(p))}};
        d["pool_peaks"] = peaks;
        const PoolBytes now = series.at(at);
        json pools = json::object();
        for (size_t p = 0; p < kPoolCount; ++p)
            pools[std::string(kPoolNames[p])] = now[p];
        m["pools"] = pools;
        const MomentEvidence evidence = momentEvidence(*classification, dev.allocations, alive);
        json sure = json::object(), basis = json::object();
        for (size_t p = 0; p < kAllocationPoolCount; ++p)
            if (evidence.confidence[p] >= 0) {
                sure[std::string(kPoolNames[p])] = evidence.confidence[p];
                basis[std::string(kPoolNames[p])] = evidenceText(evidence.mainEvidence(Pool(p)));
            }
        m["confidence"] = sure;
        // Issue 15: what the dump could show (history; per pool, the evidence behind most of its bytes;
        // memory in private pools). The lead folds these into the typed report.
        m["history"] = evidence.history;
        m["evidence"] = basis;
        json privatePools = json::array();
        for (const auto& [id, bytes] : evidence.privatePools)
            privatePools.push_back({{"pool_id", {id.first, id.second}}, {"label", id.label()}, {"bytes", bytes}});
        m["private_pools"] = privatePools;
        m["verdict"] = makeVerdict(verdictMoment(options.at, at), now, evidence).sentence;
    }
    m["top"] = liveAllocations(trace, dev, at, std::move(alive), options.top, classification ? &*classification : nullptr);
    d["moment"] = m;
    return d;
}

std::string pad(std::string s, size_t width, bool right = false)
{
    if (s.size() >= width)
        return s;
    return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

} // namespace

json buildReport(const Trace& trace, const ReportOptions& options)
{
    json report;
    report["file"] = trace.path;
    report["format"] = std::string(formatName(trace.format));
    report["format_detail"] = trace.formatDetail;
    report["warnings"] = trace.warnings;
    json devices = json::array();
    bool found = false;
    std::optional<RuleSet> rules;
    if (options.classify)
        rules = RuleSet::load(options.rulesFile);
    for (const DeviceTrace& dev : trace.devices) {
        if (options.device && dev.device != *options.device)
            continue;
        found = true;
        devices.push_back(deviceReport(trace, dev, options, rules ? &*rules : nullptr));
    }
    if (options.device && !found) {
        std::string have;
        for (const auto& d : trace.devices)
            have += (have.empty() ? "" : ", ") + std::to_string(d.device);
        throw std::invalid_argument("device " + std::to_string(*options.device) + " is not in this dump (devices: " +
                                    (have.empty() ? "none" : have) + ")");
    }
    report["devices"] = devices;
    return report;
}

std::string renderReportText(const json& report)
{
    std::string out = report.value("file", "") + "  (" + report.value("format", "") + ")\n";
    for (const json& d : report["devices"]) {
        out += "\n" + d.value("label", "") + "\n";
        auto line = [&](const std::string& k, const std::string& v) { out += "  " + pad(k, 22) + v + "\n"; };
        line("entries", std::to_string(d["entries"].get<int64_t>()));
        line("allocations", std::to_string(d["allocations"].get<int64_t>()));
        line("initial allocated", formatBytes(d["initial_allocated"].get<int64_t>()));
        const int64_t peakIndex = d["peak_index"].get<int64_t>();
        line("peak allocated", formatBytes(d["peak_allocated"].get<int64_t>()) +
                                   (peakIndex >= 0 ? "  at event " + std::to_string(peakIndex) : "  (before recording)"));
        line("reserved at end", formatBytes(d["end_reserved"].get<int64_t>()));
        if (d["ooms"].empty())
            line("OOM events", "none");
        for (const json& o : d["ooms"])
            line("OOM", "event " + std::to_string(o["index"].get<int64_t>()) + ": tried to allocate " +
                            formatBytes(o["requested"].get<int64_t>()) +
                            (o["device_free"].get<int64_t>() >= 0 ? ", " + formatBytes(o["device_free"].get<int64_t>()) + " free on the device" : ""));
        const json& m = d["moment"];
        out += "\n  at " + m.value("label", "") + "\n";
        line("allocated", formatBytes(m["allocated"].get<int64_t>()));
        const bool reservedKnown = m.value("reserved_known", true);
        if (reservedKnown) {
            line("reserved", formatBytes(m["reserved"].get<int64_t>()));
            line("reserved - allocated", formatBytes(m["cached_free"].get<int64_t>()));
        } else {
            line("reserved", "unknown (this source records no reserved bytes: no segments, no totals)");
        }
        if (m.contains("verdict"))
            out += "\n  " + m["verdict"].get<std::string>() + "\n";
        const bool anyPool = m.contains("pools") && std::any_of(m["pools"].begin(), m["pools"].end(), [](const json& b) { return b.get<int64_t>() != 0; });
        if (anyPool) {
            const bool sure = m.contains("confidence");
            // Shares of reserved (pools and cache make 100%), as the window shows them; of allocated
            // where the source records no reserved bytes.
            const char* ofWhat = reservedKnown ? "of reserved" : "of allocated";
            const bool basis = m.contains("evidence");
            out += "\n  " + pad("pool", 18) + pad("bytes", 12, true) + pad(ofWhat, 14, true) + (sure ? pad("confidence", 12, true) : "") +
                   (basis ? "  evidence" : "") + "\n";
            const double total = double(std::max<int64_t>(
                1, reservedKnown ? std::max(m["reserved"].get<int64_t>(), m["allocated"].get<int64_t>()) : m["allocated"].get<int64_t>()));
            for (const auto name : kPoolNames) {
                const json& bytes = m["pools"][std::string(name)];
                if (bytes.get<int64_t>() == 0)
                    continue;
                char share[16];
                std::snprintf(share, sizeof share, "%.1f%%", 100.0 * double(bytes.get<int64_t>()) / total);
                std::string conf;
                if (sure && m["confidence"].contains(std::string(name)))
                    conf = std::to_string(m["confidence"][std::string(name)].get<int>()) + "%";
                std::string why;
                if (basis && m["evidence"].contains(std::string(name)))
                    why = "  " + m["evidence"][std::string(name)].get<std::string>();
                out += "  " + pad(std::string(name), 18) + pad(formatBytes(bytes.get<int64_t>()), 12, true) + pad(share, 14, true) +
                       (sure ? pad(conf, 12, true) : "") + why + "\n";
            }
        }
        if (!m["top"].empty()) {
            const bool pools = m["top"].front().contains("pool");
            out += "\n  " + pad("size", 12, true) + "  " + pad("address", 16) + pad("age", 12, true) + "  " +
                   (pools ? pad("pool", 16) : "") + "frame\n";
            for (const json& r : m["top"]) {
                std::string age = "before rec.";
                if (!r["age_us"].is_null())
                    age = formatDurationUs(r["age_us"].get<int64_t>());
                else if (!r["age_events"].is_null())
                    age = std::to_string(r["age_events"].get<int64_t>()) + " ev";
                out += "  " + pad(formatBytes(r["size"].get<int64_t>()), 12, true) + "  " + pad(r["address"].get<std::string>(), 16) +
                       pad(age, 12, true) + "  " + (pools ? pad(r["pool"].get<std::string>(), 16) : "") + r["frame"].get<std::string>() + "\n";
            }
        }
    }
    if (!report["warnings"].empty()) {
        out += "\nwarnings:\n";
        for (const json& w : report["warnings"])
            out += "  " + w.get<std::string>() + "\n";
    }
    return out;
}

} // namespace poolscope
