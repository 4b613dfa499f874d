#pragma once
#include "core/classify/pool.h"
#include "core/compare/comparison.h"
#include "core/compare/run_profile.h"

#include <cstddef>
#include <string>
#include <vector>

namespace poolscope {

// Maps run A's events onto B's event axis so that the paired moments line up: piecewise linear
// between anchors (the start, the end of each paired phase, the end unless an OOM cut a run short),
// one event for one event past the last anchor.
class MomentAlignment {
public:
    explicit MomentAlignment(const Comparison& c, EventIndex lastA, EventIndex lastB);
    double position(EventIndex a) const; // on B's axis
    const std::vector<std::pair<EventIndex, EventIndex>>& anchors() const { return m_anchors; }

private:
    std::vector<std::pair<EventIndex, EventIndex>> m_anchors; // (A, B), increasing in both
};

// One run's stacked pools, one column per slice of the aligned axis: the state after the event of
// highest allocated bytes in the slice (a peak is never hidden, and the stack stays one moment's).
struct ChartRun {
    std::vector<double> x;                    // left edge of each column on the aligned axis
    std::vector<std::vector<int64_t>> top;    // per layer: the layer's top (cumulative bytes) per column
    int64_t highest = 0;                      // the highest stack of any column
};

struct ComparisonChart {
    std::vector<Pool> layers; // bottom to top: the allocation pools either run holds
    ChartRun a, b;            // a on B's axis through MomentAlignment
    double xMin = -1, xMax = 0;
    enum class MarkKind : uint8_t { PhaseEnd, Moment, Oom };
    struct Mark {
        double x = 0;
        std::string label; // "end of forward", "peak (B)", "OOM (A)"
        MarkKind kind = MarkKind::PhaseEnd;
    };
    // The paired phase ends, the compared moment in each run (one mark where they coincide) and the
    // OOMs, all on B's axis.
    std::vector<Mark> marks;
};

// `columns` slices across [xMin, xMax]; every event of both runs falls in one.
ComparisonChart comparisonChart(const RunInput& a, const RunInput& b, const Comparison& c, size_t columns = 800);

} // namespace poolscope
