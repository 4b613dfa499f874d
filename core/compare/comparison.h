#pragma once
#include "core/classify/phase.h"
#include "core/classify/pool.h"
#include "core/compare/axes.h"
#include "core/compare/run_profile.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope {

// The moments two runs are compared at: each run's own peak, OOM and last event, and the end of
// each phase of the first step (forward, backward, optimizer step) from annotations or the
// classifier's phases.
enum class CompareMoment : uint8_t { Peak, Oom, End, ForwardEnd, BackwardEnd, StepEnd };
constexpr size_t kCompareMomentCount = 6;
std::string_view compareMomentName(CompareMoment m);  // "peak", "oom", "end", "forward_end", "backward_end", "step_end"
std::string_view compareMomentLabel(CompareMoment m); // "the peak", "the end of forward", ...
std::optional<CompareMoment> parseCompareMoment(std::string_view name);

struct MomentPair {
    CompareMoment kind = CompareMoment::Peak;
    bool inA = false, inB = false;        // whether the run has this moment at all
    EventIndex a = kNoEvent, b = kNoEvent; // kNoEvent with inX: the initial state (an empty trace)
    Phase phaseA = Phase::Unknown, phaseB = Phase::Unknown; // the phase the moment falls in
    int64_t allocatedA = 0, allocatedB = 0;
    std::string note; // "B has no OOM: no partner"
    bool paired() const { return inA && inB; }
};

struct PoolChange {
    int64_t a = 0, b = 0;
    int64_t delta() const { return b - a; }
    std::optional<double> ratio() const { return a > 0 ? std::optional<double>(double(b) / double(a)) : std::nullopt; }
    // Moved by more than 10 % (of A's bytes) and 64 MiB.
    bool changed() const;
};

struct Comparison {
    std::string runA, runB; // "file.pickle cuda:0"
    CompareMoment at = CompareMoment::Peak;
    std::vector<MomentPair> moments; // every kind, in enum order
    std::array<PoolChange, kPoolCount> pools{};     // at the paired moment `at` (CachedFree: reserved - allocated)
    std::array<PoolChange, kPoolCount> poolPeaks{}; // each pool's own peak in each run
    std::vector<Pool> changed;                      // pools at `at` that moved by more than 10 % and 64 MiB, largest move first
    Pool peakPoolA = Pool::Unknown, peakPoolB = Pool::Unknown; // the largest pool at each run's own peak
    std::vector<CompareAxis> axes;
    bool oneAxis = false;
    std::string verdict;
    std::vector<std::string> caveats; // what makes the pair less than clean, said in the verdict
    std::string cutShort;             // which run an OOM cut short, said in the verdict
    std::vector<std::string> notes;   // what the traces could not tell

    const MomentPair& moment(CompareMoment m) const { return moments[size_t(m)]; }
};

struct CompareOptions {
    CompareMoment at = CompareMoment::Peak;
};

// Compares run B against run A. Throws std::invalid_argument when a run lacks the moment `at`
// (no OOM, no backward recorded).
Comparison compareRuns(const RunInput& a, const RunInput& b, const CompareOptions& options = {});

// {pools {name: {a, b, ratio}}, pool_peaks (same), changed, peak_pool_a, peak_pool_b,
//  axes [{name, a, b, ratio, evidence}], one_axis, verdict} plus run_a, run_b, at, moments, caveats, notes.
nlohmann::json comparisonJson(const Comparison& c);
std::string comparisonText(const Comparison& c);

} // namespace poolscope
