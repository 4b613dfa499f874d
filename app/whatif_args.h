#pragma once
// The what-if knobs as command-line options, shared by `poolscope whatif` and `render --whatif`.
#include "app/args.h"
#include "core/whatif/scenario.h"

#include <string>
#include <vector>

namespace poolscope::app {

// `--checkpoint` without a mode means full checkpointing: rewrites it into --checkpoint=full.
std::vector<std::string> normaliseWhatIfArgs(std::vector<std::string> argv);
// Takes the knobs (--batch-scale, --seq-scale, --checkpoint, --optimizer, --zero/--fsdp, --ranks,
// --offload-optimizer, --autocast, --trainable/--freeze, --accumulate, --capacity, --alloc-conf) out of `args`;
// UsageError when one does not parse or they contradict each other.
Scenario whatIfScenario(Args& args);

} // namespace poolscope::app
