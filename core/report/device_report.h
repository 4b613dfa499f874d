#pragma once
#include "core/model/trace.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace poolscope {

struct ReportOptions {
    std::optional<int> device; // all CUDA devices when unset
    std::string at = "peak";   // peak | oom | end | INDEX
    int top = 10;
    bool classify = true;  // pools, per-pool peaks and the verdict (the classifier's rules)
    std::string rulesFile; // user rules extending the shipped ones (--rules)
};

// `poolscope report` as data: one object with a `devices` array, field names as the issue fixes them
// (entries, allocations, initial_allocated, peak_allocated, peak_index, end_reserved, ooms, moment),
// plus `pool_peaks` per device and `pools` + `verdict` under each device's moment.
// Throws std::invalid_argument for a device or moment the trace lacks (the CLI exits 2).
nlohmann::json buildReport(const Trace& trace, const ReportOptions& options);

// The same report for people: binary units with two decimals, aligned columns.
std::string renderReportText(const nlohmann::json& report);

} // namespace poolscope
