#pragma once
#include "core/engine/document.h"

#include <cstdint>
#include <ostream>
#include <vector>

namespace poolscope {

// `poolscope series`: the pools over time as rows for notebooks and dashboards: event index, time,
// allocated, reserved and every pool's bytes after that event.
//
// Thinned (one bucket per `every` events) it stays peak-keeping: each bucket gives the events where
// allocated, reserved and each pool reach their highest value within it (usually one or two events),
// so every column's maximum over any bucket, and the overall peaks, are in the output exactly. Rows
// are real events, so each row still adds up.
struct SeriesOptions {
    int64_t every = 1; // bucket size in events; 1: every event
};

// The events written, in order: all of them for every == 1.
std::vector<EventIndex> seriesEvents(const DeviceDocument& dev, const SeriesOptions& options);
// Header: index,time_us,allocated,reserved,<pools...>; empty fields where unknown (no time_us, no
// reserved figure). Pools only when classified.
void writeSeriesCsv(std::ostream& out, const DeviceDocument& dev, const SeriesOptions& options);
// One JSON object per line, the same fields; null where unknown.
void writeSeriesJsonl(std::ostream& out, const DeviceDocument& dev, const SeriesOptions& options);

} // namespace poolscope
