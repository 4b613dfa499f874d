#pragma once
// The redaction ablation (issue 22's proof): classify a dump as it is and after each redaction
// (code renamed, Python frames only, no frames but the history), and measure at the default moment
// and at the peak how many bytes change pool. A classifier that decides from the run's structure
// moves few; one that decides from names and frames moves many, or keeps its confidence where the
// frames it rested on are gone.
#include "core/classify/classifier.h"
#include "core/model/trace.h"
#include "core/redact/ablation_run.h"
#include "core/redact/redact.h"

#include <memory>
#include <string>
#include <vector>

namespace poolscope {

class RuleSet;

struct AblationVariant {
    std::string name; // "renamed", "python", "none"
    RedactOptions options;
};
// The three the issue names: --rename-code; --frames python; --frames none.
std::vector<AblationVariant> standardAblations();

struct AblationMoment {
    EventIndex index = kNoEvent;
    int64_t bytes = 0; // alive allocations' bytes (Allocation::size)
    int64_t moved = 0; // ... in another pool than in the original
    // ... at confidence >= 70 % in the redacted copy although the frames that were its evidence are
    // gone: the original decision rested on frames and the copy's pool differs (the evidence that
    // decided it no longer does), or the copy's rule claims frames evidence on a stack with none.
    int64_t confidentWithoutFrames = 0;
    double movedFraction() const { return bytes > 0 ? double(moved) / double(bytes) : 0.0; }
};

struct AblationCell {
    std::string variant;
    AblationMoment atDefault, atPeak;
    // Bytes per (original pool -> redacted pool) at the default moment, largest first: what moved where.
    std::vector<std::pair<std::string, int64_t>> flows;
    // The same per (original pool and rule -> redacted pool and rule): which decision moved them.
    std::vector<std::pair<std::string, int64_t>> ruleFlows;
    // Over every moment of the run: where the largest share of the alive bytes sits in another pool
    // (ablation_run.h); catches misreadings whose tensors are gone by the default moment and the peak.
    AblationRunWorst wholeRun;
};

struct AblationDevice {
    std::string label;          // "cuda:0"
    std::string defaultMoment;  // "oom" | "peak"
    bool history = true;        // the dump records allocation history (frameless targets apply)
    bool hadFrames = false;     // any allocation's stack held a frame before redaction
    std::vector<AblationCell> cells;
};

struct AblationResult {
    std::string file;
    std::vector<AblationDevice> devices;
};

constexpr int kConfidentPercent = 70;

// Classifies `trace` and every variant's redaction with `rules`; each classified device is one row.
AblationResult ablate(const std::shared_ptr<const Trace>& trace, const std::shared_ptr<const RuleSet>& rules,
                      const std::vector<AblationVariant>& variants = standardAblations());

// One markdown table: a row per file and device, per variant the moved share at the default moment,
// at the peak and at the run's worst moment, and the confident-without-frames bytes.
std::string ablationMarkdown(const std::vector<AblationResult>& results);

} // namespace poolscope
