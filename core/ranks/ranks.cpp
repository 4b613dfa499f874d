#include "core/ranks/ranks.h"

#include "core/classify/pool_display.h"
#include "core/engine/document.h"
#include "core/report/json_text.h"
#include "core/util/units.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

namespace poolscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kMaxReportBytes = int64_t(16) << 20; // a report of one dump is kilobytes

bool rankInputName(const fs::path& p)
{
    const std::string name = p.filename().string();
    for (const char* ext : {".pickle", ".pkl", ".json", ".gz", ".zst", ".html"})
        if (name.size() > std::string_view(ext).size() && name.compare(name.size() - std::string_view(ext).size(), std::string::npos, ext) == 0)
            return true;
    return false;
}

// A JSON object that `poolscope report --json` wrote: a devices array whose entries carry
// peak_allocated. Snapshots in JSON have segments instead, and are far larger than a report.
std::optional<json> readReportJson(const std::string& file)
{
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec || size > uint64_t(kMaxReportBytes))
        return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    char first = 0;
    while (in.get(first) && std::isspace(static_cast<unsigned char>(first)))
        ;
    if (first != '{')
        return std::nullopt;
    in.seekg(0);
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("devices") || !j["devices"].is_array() || j.contains("segments"))
        return std::nullopt;
    for (const json& d : j["devices"])
        if (!d.is_object() || !d.contains("peak_allocated"))
            return std::nullopt;
    return j;
}

// The devices a row is made for: the CUDA ones when there are any (a profiler trace lists the CPU
// too), else every device.
template <typename IsCuda>
std::vector<size_t> rowDevices(size_t count, IsCuda isCuda)
{
    std::vector<size_t> cuda, all;
    for (size_t i = 0; i < count; ++i) {
        all.push_back(i);
        if (isCuda(i))
            cuda.push_back(i);
    }
    return cuda.empty() ? all : cuda;
}

std::optional<Pool> largestPool(const PoolBytes& b)
{
    std::optional<Pool> best;
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (b[p] > 0 && (!best || b[p] > b[size_t(*best)]))
            best = Pool(p);
    return best;
}

std::vector<RankRow> rowsFromReport(const std::string& path, const json& report)
{
    std::vector<RankRow> rows;
    const json& devices = report["devices"];
    const std::string file = report.value("file", path);
    for (size_t i : rowDevices(devices.size(), [&](size_t k) { return devices[k].value("kind", "cuda") == "cuda"; })) {
        const json& d = devices[i];
        RankRow r;
        r.file = file;
        r.device = d.value("device", 0);
        r.label = d.value("label", "cuda:" + std::to_string(r.device));
        r.peakAllocated = d.value("peak_allocated", int64_t(0));
        r.peakIndex = d.value("peak_index", int64_t(kNoEvent));
        r.reserved = d.value("reserved_at_peak", d.value("end_reserved", int64_t(0)));
        if (d.contains("pools_at_peak") && d["pools_at_peak"].is_object()) {
            r.classified = true;
            for (const auto& [name, bytes] : d["pools_at_peak"].items())
                if (const auto p = parsePool(name); p && bytes.is_number_integer())
                    r.poolsAtPeak[size_t(*p)] = bytes.get<int64_t>();
            r.peakPool = largestPool(r.poolsAtPeak);
        }
        if (d.contains("ooms") && d["ooms"].is_array() && !d["ooms"].empty()) {
            const json& o = d["ooms"].back();
            RankOom oom;
            oom.index = o.value("index", int64_t(kNoEvent));
            oom.timeUs = o.contains("time_us") && o["time_us"].is_number_integer() ? o["time_us"].get<int64_t>() : kNoTime;
            oom.requested = o.value("requested", int64_t(0));
            oom.free = o.value("device_free", int64_t(-1));
            r.oom = oom;
        }
        rows.push_back(std::move(r));
    }
    return rows;
}

std::vector<RankRow> rowsFromDump(const std::string& file, const RanksOptions& options)
{
    DocumentOptions documentOptions;
    documentOptions.rules = options.rules;
    documentOptions.eagerTimelines = false; // nothing is drawn
    documentOptions.poolSeries = false;     // one moment per device: the peak
    const auto doc = Document::open(file, documentOptions);
    std::vector<RankRow> rows;
    for (size_t i : rowDevices(doc->deviceCount(), [&](size_t k) { return doc->device(k).device().kind == DeviceKind::Cuda; })) {
        const DeviceDocument& dev = doc->device(i);
        const DeviceTrace& d = dev.device();
        if (d.eventCount() == 0 && d.segments.empty())
            continue; // listed by the dump (an empty device_traces entry) but holding nothing: no rank there
        RankRow r;
        r.file = file;
        r.device = d.device;
        r.label = d.label();
        r.peakAllocated = d.peakAllocated;
        r.peakIndex = d.peakIndex;
        r.reserved = d.reservedAt(d.peakIndex);
        r.classified = dev.classified();
        if (r.classified) {
            r.poolsAtPeak = dev.poolsAt(d.peakIndex);
            r.peakPool = largestPool(r.poolsAtPeak);
        }
        if (!d.ooms.empty())
            r.oom = RankOom{d.ooms.back().index, d.ooms.back().timeUs, d.ooms.back().requestedBytes, d.ooms.back().deviceFree};
        rows.push_back(std::move(r));
    }
    return rows;
}

} // namespace

std::vector<std::string> expandRankInputs(const std::vector<std::string>& paths)
{
    std::vector<std::string> out;
    for (const std::string& p : paths) {
        std::error_code ec;
        if (!fs::is_directory(p, ec)) {
            out.push_back(p);
            continue;
        }
        std::vector<std::string> inDir;
        for (const auto& e : fs::directory_iterator(p, ec))
            if (e.is_regular_file(ec) && rankInputName(e.path()))
                inDir.push_back(e.path().string());
        std::sort(inDir.begin(), inDir.end());
        out.insert(out.end(), inDir.begin(), inDir.end());
    }
    return out;
}

std::vector<RankRow> rankRows(const std::string& file, const RanksOptions& options)
{
    try {
        if (auto report = readReportJson(file))
            return rowsFromReport(file, *report);
        auto rows = rowsFromDump(file, options);
        if (rows.empty()) {
            RankRow r;
            r.file = file;
            r.error = file + ": the dump holds no device data";
            rows.push_back(std::move(r));
        }
        return rows;
    } catch (const std::bad_alloc&) {
        RankRow r;
        r.file = file;
        r.error = file + ": out of memory while loading";
        return {r};
    } catch (const std::exception& e) {
        RankRow r;
        r.file = file;
        r.error = e.what();
        return {r};
    }
}

RankTable summarizeRanks(const std::vector<std::string>& files, const RanksOptions& options)
{
    std::vector<std::vector<RankRow>> perFile(files.size());
    std::atomic<size_t> next{0};
    std::mutex progressLock;
    size_t done = 0;
    auto work = [&] {
        for (size_t i = next++; i < files.size(); i = next++) {
            if (options.cancel && options.cancel->load())
                return;
            perFile[i] = rankRows(files[i], options); // the document is dropped here, before the next file
            if (options.progress) {
                std::lock_guard lock(progressLock);
                options.progress(++done, files.size());
            }
        }
    };
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const size_t workers = std::min<size_t>(files.size(), options.workers ? options.workers : hw);
    std::vector<std::thread> threads;
    for (size_t w = 1; w < workers; ++w)
        threads.emplace_back(work);
    work();
    for (auto& t : threads)
        t.join();
    RankTable table;
    for (auto& rows : perFile)
        for (auto& r : rows)
            table.rows.push_back(std::move(r));
    judgeRanks(table);
    return table;
}

void judgeRanks(RankTable& t)
{
    std::vector<int64_t> peaks;
    for (size_t i = 0; i < t.rows.size(); ++i) {
        const RankRow& r = t.rows[i];
        if (!r.error.empty())
            continue;
        peaks.push_back(r.peakAllocated);
        if (!r.oom)
            continue;
        if (r.oom->timeUs == kNoTime) {
            t.oomsWithoutTime = true;
            continue;
        }
        if (!t.firstOom || r.oom->timeUs < t.rows[*t.firstOom].oom->timeUs)
            t.firstOom = i;
    }
    // A single OOM is the first one, with or without a time.
    if (!t.firstOom) {
        std::optional<size_t> only;
        size_t count = 0;
        for (size_t i = 0; i < t.rows.size(); ++i)
            if (t.rows[i].error.empty() && t.rows[i].oom) {
                only = i;
                ++count;
            }
        if (count == 1)
            t.firstOom = only;
    }
    if (!peaks.empty()) {
        std::sort(peaks.begin(), peaks.end());
        const size_t n = peaks.size();
        const double median = n % 2 ? double(peaks[n / 2]) : (double(peaks[n / 2 - 1]) + double(peaks[n / 2])) / 2;
        t.maxOverMedian = median > 0 ? double(peaks.back()) / median : 0;
    }
    int64_t widest = 0;
    for (size_t p = 0; p < kAllocationPoolCount; ++p) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (const RankRow& r : t.rows)
            if (r.error.empty() && r.classified) {
                lo = std::min(lo, r.poolsAtPeak[p]);
                hi = std::max(hi, r.poolsAtPeak[p]);
            }
        if (hi > lo && hi - lo > widest) {
            widest = hi - lo;
            t.imbalancePool = Pool(p);
        }
    }
}

std::string ranksJsonText(const RankTable& t)
{
    json rows = json::array();
    for (const RankRow& r : t.rows) {
        json row;
        row["file"] = r.file;
        row["error"] = r.error.empty() ? json(nullptr) : json(r.error);
        if (r.error.empty()) {
            row["device"] = r.device;
            row["label"] = r.label;
            row["peak_allocated"] = r.peakAllocated;
            row["peak_index"] = r.peakIndex;
            row["reserved"] = r.reserved;
            row["peak_pool"] = r.peakPool ? json(std::string(poolName(*r.peakPool))) : json(nullptr);
            json pools = json::object();
            if (r.classified)
                for (size_t p = 0; p < kPoolCount; ++p)
                    pools[std::string(kPoolNames[p])] = r.poolsAtPeak[p];
            row["pools_at_peak"] = r.classified ? pools : json(nullptr);
            row["oom"] = r.oom ? json{{"index", r.oom->index},
                                      {"time_us", r.oom->timeUs == kNoTime ? json(nullptr) : json(r.oom->timeUs)},
                                      {"requested", r.oom->requested},
                                      {"free", r.oom->free}}
                               : json(nullptr);
        }
        rows.push_back(std::move(row));
    }
    json j;
    j["rows"] = rows;
    j["first_oom"] = t.firstOom ? json{{"file", t.rows[*t.firstOom].file}, {"device", t.rows[*t.firstOom].device}} : json(nullptr);
    j["ooms_without_time"] = t.oomsWithoutTime;
    j["imbalance"] = {{"max_over_median", t.maxOverMedian},
                      {"pool", t.imbalancePool ? json(std::string(poolName(*t.imbalancePool))) : json(nullptr)}};
    return jsonText(j) + "\n";
}

std::string ranksText(const RankTable& t)
{
    auto pad = [](std::string s, size_t w, bool right = false) {
        if (s.size() >= w)
            return s + " ";
        return right ? std::string(w - s.size(), ' ') + s + " " : s + std::string(w - s.size(), ' ') + " ";
    };
    size_t fileWidth = 4;
    for (const RankRow& r : t.rows)
        fileWidth = std::max(fileWidth, std::min<size_t>(fs::path(r.file).filename().string().size(), 40));
    std::string out = pad("file", fileWidth) + pad("device", 7) + pad("peak", 11, true) + " " + pad("pool at peak", 16) + pad("reserved", 11, true) +
                      " OOM\n";
    for (size_t i = 0; i < t.rows.size(); ++i) {
        const RankRow& r = t.rows[i];
        std::string name = fs::path(r.file).filename().string();
        if (name.size() > 40)
            name = "…" + name.substr(name.size() - 39);
        if (!r.error.empty()) { // the whole line is in the JSON; a table row keeps its start
            out += pad(name, fileWidth) + "error: " + (r.error.size() > 160 ? r.error.substr(0, 159) + "…" : r.error) + "\n";
            continue;
        }
        std::string oom = "-";
        if (r.oom)
            oom = "event " + std::to_string(r.oom->index) + ": asked " + formatBytes(r.oom->requested) +
                  (r.oom->free >= 0 ? ", " + formatBytes(r.oom->free) + " free" : "") + (t.firstOom == i ? "  (first)" : "");
        out += pad(name, fileWidth) + pad(r.label, 7) + pad(formatBytes(r.peakAllocated), 11, true) + " " +
               pad(r.peakPool ? std::string(poolDisplayName(*r.peakPool)) : r.classified ? "-" : "unclassified", 16) +
               pad(formatBytes(r.reserved), 11, true) + " " + oom + "\n";
    }
    out += "\n";
    if (t.firstOom)
        out += "first OOM: " + t.rows[*t.firstOom].file + " " + t.rows[*t.firstOom].label +
               (t.rows[*t.firstOom].oom->timeUs == kNoTime ? " (the only OOM)" : "") + "\n";
    else if (t.oomsWithoutTime)
        out += "first OOM: cannot be told (the OOMs carry no time_us)\n";
    else
        out += "first OOM: none (no rank ran out of memory)\n";
    if (t.oomsWithoutTime && t.firstOom)
        out += "  (some OOMs carry no time_us and were not ordered)\n";
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", t.maxOverMedian);
    out += "imbalance: largest peak / median peak = " + std::string(ratio);
    if (t.imbalancePool) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (const RankRow& r : t.rows)
            if (r.error.empty() && r.classified) {
                lo = std::min(lo, r.poolsAtPeak[size_t(*t.imbalancePool)]);
                hi = std::max(hi, r.poolsAtPeak[size_t(*t.imbalancePool)]);
            }
        out += "; " + std::string(poolDisplayName(*t.imbalancePool)) + " differs most (" + formatBytes(lo) + " to " + formatBytes(hi) + " at the peaks)";
    }
    out += "\n";
    return out;
}

} // namespace poolscope
