#include "core/report/series_export.h"

#include "core/report/json_text.h"

#include <algorithm>
#include <array>

namespace poolscope {
namespace {

// The columns a bucket must keep the maximum of: allocated, reserved and every pool that holds bytes.
struct Columns {
    const DeviceDocument& dev;
    bool classified;
    PoolBytes at(EventIndex i) const { return classified ? dev.poolsAt(i) : PoolBytes{}; }
};

} // namespace

std::vector<EventIndex> seriesEvents(const DeviceDocument& dev, const SeriesOptions& options)
{
    const DeviceTrace& d = dev.device();
    const auto n = EventIndex(d.eventCount());
    std::vector<EventIndex> out;
    if (options.every <= 1) {
        out.resize(size_t(n));
        for (EventIndex i = 0; i < n; ++i)
            out[size_t(i)] = i;
        return out;
    }
    const Columns cols{dev, dev.classified()};
    for (EventIndex begin = 0; begin < n; begin += options.every) {
        const EventIndex end = std::min(n, begin + options.every);
        // argmax per column within the bucket; the first event reaching it, as peaks are named elsewhere
        EventIndex bestAlloc = begin, bestReserved = begin;
        std::array<EventIndex, kPoolCount> bestPool;
        bestPool.fill(begin);
        PoolBytes top = cols.at(begin);
        for (EventIndex i = begin + 1; i < end; ++i) {
            if (d.allocated[size_t(i)] > d.allocated[size_t(bestAlloc)])
                bestAlloc = i;
            if (d.reserved[size_t(i)] > d.reserved[size_t(bestReserved)])
                bestReserved = i;
            if (cols.classified) {
                const PoolBytes b = cols.at(i);
                for (size_t p = 0; p < kPoolCount; ++p)
                    if (b[p] > top[p]) {
                        top[p] = b[p];
                        bestPool[p] = i;
                    }
            }
        }
        std::vector<EventIndex> keep{bestAlloc, bestReserved};
        if (cols.classified)
            keep.insert(keep.end(), bestPool.begin(), bestPool.end());
        std::sort(keep.begin(), keep.end());
        keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
        out.insert(out.end(), keep.begin(), keep.end());
    }
    return out;
}

void writeSeriesCsv(std::ostream& out, const DeviceDocument& dev, const SeriesOptions& options)
{
    const DeviceTrace& d = dev.device();
    const bool classified = dev.classified();
    const bool reservedKnown = d.reservedKnown();
    out << "index,time_us,allocated,reserved";
    if (classified)
        for (auto name : kPoolNames)
            out << ',' << name;
    out << '\n';
    for (EventIndex i : seriesEvents(dev, options)) {
        out << i << ',';
        if (d.events.timeUs[size_t(i)] != kNoTime)
            out << d.events.timeUs[size_t(i)];
        out << ',' << d.allocatedAt(i) << ',';
        if (reservedKnown)
            out << d.reservedAt(i);
        if (classified) {
            const PoolBytes b = dev.poolsAt(i);
            for (size_t p = 0; p < kPoolCount; ++p)
                out << ',' << b[p];
        }
        out << '\n';
    }
}

void writeSeriesJsonl(std::ostream& out, const DeviceDocument& dev, const SeriesOptions& options)
{
    const DeviceTrace& d = dev.device();
    const bool classified = dev.classified();
    const bool reservedKnown = d.reservedKnown();
    for (EventIndex i : seriesEvents(dev, options)) {
        nlohmann::json row;
        row["index"] = i;
        row["time_us"] = d.events.timeUs[size_t(i)] == kNoTime ? nlohmann::json(nullptr) : nlohmann::json(d.events.timeUs[size_t(i)]);
        row["allocated"] = d.allocatedAt(i);
        row["reserved"] = reservedKnown ? nlohmann::json(d.reservedAt(i)) : nlohmann::json(nullptr);
        if (classified) {
            const PoolBytes b = dev.poolsAt(i);
            nlohmann::json pools = nlohmann::json::object();
            for (size_t p = 0; p < kPoolCount; ++p)
                pools[std::string(kPoolNames[p])] = b[p];
            row["pools"] = pools;
        }
        out << jsonText(row, -1) << '\n';
    }
}

} // namespace poolscope
