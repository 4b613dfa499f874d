#pragma once
#include "core/compare/run_profile.h"
#include "core/compare/site_pairs.h"

#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// One thing that differs between two runs, inferred from the traces, with what showed it.
// Names: sequence, micro_batch, tokens (the traces cannot tell which of the two), precision,
// trainable_parameters, optimizer, sharding, sharding_or_optimizer (the traces cannot tell),
// checkpointing, model, recorded_window, grad_mode (torch.no_grad or not, from what a forward keeps).
struct CompareAxis {
    std::string name;
    std::string a, b;            // from -> to in words; empty where only a ratio is known
    std::optional<double> ratio; // B over A, where the axis has one
    std::string evidence;
    std::string phrase; // how the verdict names it: "sequence x2", "precision fp32 -> autocast (16-bit)"
};

struct AxisInference {
    std::vector<CompareAxis> axes;
    // Differences that are not an axis but make the pair less than clean (memory allocated before
    // recording, an OOM that cut one run short), and what the traces could not tell.
    std::vector<std::string> caveats;
    std::string cutShort; // "B ran out of memory in its forward (event 166)": an outcome, not an axis
    std::vector<std::string> notes;
};

AxisInference inferAxes(const RunProfile& a, const RunProfile& b, const SitePairing& sites);

// Which way precision moved from A to B: -1 lower in B (autocast or 16-bit weights appear), +1 higher, 0 the same.
// Defined in axes.cpp; the token axes need it to tell element sizes from token counts.
struct PrecisionChange {
    int direction = 0;
    std::optional<CompareAxis> axis;
};

struct TensorRelation;
// Defined in axes_precision.cpp: `params` relates B's parameter tensors to A's.
PrecisionChange inferPrecision(const RunProfile& a, const RunProfile& b, const TensorRelation& params, const SitePairing& sites);

// Defined in axes_tokens.cpp: sequence, micro-batch or tokens from the paired call sites.
void inferTokenAxes(const SitePairing& sites, int precisionDirection, AxisInference& out);

// "x2", "x0.5", "x1.33"
std::string ratioText(double r);
bool nearRatio(double x, double y, double tolerance = 0.02);

} // namespace poolscope
