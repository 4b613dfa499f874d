#pragma once
#include "core/classify/pool_series.h"
#include "core/classify/rules.h"
#include "core/model/ids.h"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// `poolscope ranks`: one row per (dump, device) of a distributed job, which rank ran out first, and
// how unequal the ranks were. Each dump is opened, summarised and dropped by one of a few workers, so
// memory stays near one open dump per worker however many ranks there are. Reports that
// `poolscope report --json` wrote elsewhere (one per rank, under the cluster's own scheduler) are
// rows too: a thousand ranks aggregate from small files.

struct RankOom {
    EventIndex index = kNoEvent;
    int64_t timeUs = kNoTime;
    int64_t requested = 0;
    int64_t free = -1; // -1: unknown
};

struct RankRow {
    std::string file;
    int device = 0;
    std::string label;         // "cuda:0"
    int64_t peakAllocated = 0;
    EventIndex peakIndex = kNoEvent;
    bool classified = false;
    std::optional<Pool> peakPool; // the largest pool at the peak
    PoolBytes poolsAtPeak{};
    int64_t reserved = 0; // at the peak
    std::optional<RankOom> oom; // the last (fatal) OOM
    std::string error;          // the loader's one line for a file that failed; the row has nothing else
};

struct RankTable {
    std::vector<RankRow> rows;
    std::optional<size_t> firstOom; // the row whose OOM came first in time
    bool oomsWithoutTime = false;   // some OOMs carry no time_us, so "first" could not be decided among them
    double maxOverMedian = 0;       // largest peak / median peak, over rows that loaded
    std::optional<Pool> imbalancePool; // the pool whose bytes at the peak differ most between rows
};

struct RanksOptions {
    std::shared_ptr<const RuleSet> rules; // null: pools unclassified
    unsigned workers = 0;                 // 0: one per hardware thread
    const std::atomic<bool>* cancel = nullptr;
    std::function<void(size_t done, size_t total)> progress; // called from the workers, serialised
};

// Files named directly stay; a directory gives its dumps and reports (by extension), sorted by name.
std::vector<std::string> expandRankInputs(const std::vector<std::string>& paths);

// Rows in the order of `files` (devices in order within a file). A file that fails gives one row with
// the error; it never aborts the table.
RankTable summarizeRanks(const std::vector<std::string>& files, const RanksOptions& options);
// The rows of one input: a report JSON's devices, or a dump opened, summarised and dropped.
std::vector<RankRow> rankRows(const std::string& file, const RanksOptions& options);
// First OOM, imbalance: from the rows.
void judgeRanks(RankTable& table);

std::string ranksText(const RankTable& table);
std::string ranksJsonText(const RankTable& table);

} // namespace poolscope
