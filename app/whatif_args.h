#pragma once
// The what-if knobs as command-line options, shared by `poolscope whatif` and `render --whatif`.
#include "app/args.h"
#include "core/whatif/scenario.h"

#include <memory>
#include <string>
#include <vector>

namespace poolscope::app {

// `--checkpoint` without a mode means full checkpointing: rewrites it into --checkpoint=full (a mode
// after it is folded in; anything else, such as the FILE, is left alone).
std::vector<std::string> normaliseWhatIfArgs(std::vector<std::string> argv);

// The knobs' text as parsed; whatIfScenario turns them into a Scenario once parsing is done.
struct WhatIfKnobs {
    std::string batchScale, activationScale, seqScale, checkpoint, optimizer, zero, fsdp, autocast, autocastRegion, trainable, freeze, capacity;
    std::optional<int> ranks;
    bool offloadOptimizer = false;
    int accumulate = 1;
    std::vector<CLI::Option*> options; // every knob's option (render ties them to --whatif)
    CLI::Option* capacityOption = nullptr;
};
// Declares --batch-scale, --activation-scale, --seq-scale, --checkpoint, --optimizer, --zero/--fsdp,
// --ranks, --offload-optimizer, --autocast, --autocast-region, --trainable/--freeze, --accumulate and --capacity on `app`.
void addWhatIfKnobs(CLI::App& app, WhatIfKnobs& knobs);
// UsageError when the knobs contradict each other (Scenario::validate).
Scenario whatIfScenario(const WhatIfKnobs& knobs);

} // namespace poolscope::app
