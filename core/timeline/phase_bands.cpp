#include "core/timeline/phase_bands.h"

#include <algorithm>
#include <limits>
#include <map>

namespace poolscope {
namespace {

// Maps a [startUs, endUs] window onto the events it covers; false when it covers none.
bool windowToEvents(const DeviceTimeline& tl, int64_t startUs, int64_t endUs, EventIndex& first, EventIndex& last)
{
    const EventAxis& axis = tl.axis(AxisMode::WallTime);
    if (axis.mode() != AxisMode::WallTime || axis.eventCount() == 0)
        return false;
    const int64_t origin = axis.originUs();
    const double a = startUs == std::numeric_limits<int64_t>::min() ? -1.0 : double(startUs - origin);
    const double b = endUs == std::numeric_limits<int64_t>::max() ? 9.5e18 : double(endUs - origin);
    first = EventIndex(axis.countBefore(a));             // first event at or after the start
    last = EventIndex(axis.countAtOrBefore(b)) - 1;      // last event at or before the end
    return first <= last;
}

std::string phaseLabel(Phase p) { return std::string(phaseWords(p)); }

} // namespace

std::vector<PhaseBand> phaseBands(const DeviceTimeline& tl, const Classification* c, size_t minEvents)
{
    std::vector<PhaseBand> bands;
    // Phases the allocation stream's shape placed (no frame or annotation named them) are drawn
    // too, labelled as inferred.
    auto inferred = [&](const PhaseTimeline::Run& run) {
        return size_t(run.first) < c->phases.source.size() && c->phases.source[size_t(run.first)] == PhaseSource::Structure;
    };
    const bool structural = c && std::any_of(c->phases.runs.begin(), c->phases.runs.end(), inferred);
    if (c && (c->phases.anyFrameEvidence || structural)) {
        for (const auto& run : c->phases.runs) {
            if (run.phase == Phase::Unknown || size_t(run.last - run.first + 1) < minEvents)
                continue;
            if (!bands.empty() && bands.back().phase == run.phase && run.first - bands.back().last <= EventIndex(minEvents)) {
                bands.back().last = run.last; // a short interruption does not split a phase
                continue;
            }
            bands.push_back(PhaseBand{run.first, run.last, run.phase, phaseLabel(run.phase) + (inferred(run) ? " (inferred)" : "")});
        }
        return bands;
    }
    if (c && !c->phases.windows.empty()) {
        for (const PhaseWindow& w : c->phases.windows) {
            PhaseBand b;
            if (!windowToEvents(tl, w.startUs, w.endUs, b.first, b.last))
                continue;
            b.phase = w.phase;
            b.label = w.name.empty() ? phaseLabel(w.phase) : w.name;
            bands.push_back(std::move(b));
        }
        return bands;
    }
    // No classifier evidence: pair raw START/END annotations of this device by name.
    const int device = tl.device().device;
    std::map<std::string, std::vector<int64_t>> open;
    for (const Annotation& a : tl.trace().annotations) {
        if (a.device != device || a.timeUs == kNoTime)
            continue;
        if (a.start) {
            open[a.name].push_back(a.timeUs);
            continue;
        }
        auto& starts = open[a.name];
        const int64_t start = starts.empty() ? std::numeric_limits<int64_t>::min() : starts.back();
        if (!starts.empty())
            starts.pop_back();
        PhaseBand b;
        if (windowToEvents(tl, start, a.timeUs, b.first, b.last)) {
            b.label = a.name;
            bands.push_back(std::move(b));
        }
    }
    for (const auto& [name, starts] : open)
        for (int64_t s : starts) {
            PhaseBand b;
            if (windowToEvents(tl, s, std::numeric_limits<int64_t>::max(), b.first, b.last)) {
                b.label = name;
                bands.push_back(std::move(b));
            }
        }
    std::sort(bands.begin(), bands.end(), [](const PhaseBand& x, const PhaseBand& y) { return x.first < y.first; });
    return bands;
}

} // namespace poolscope
