#pragma once
// Private to core/classify: which of the blocks an out-of-place optimizer step rebuilds is the
// parameter, where nothing the recording kept names it (a ring buffer's window that lost the
// parameters' birth). See structural_step_rebuilt.cpp.
#include "core/classify/classifier.h"

#include <vector>

namespace poolscope::classify_detail {

// A block an optimizer step made that replaced one of its size (stepReplacements) and took its pool
// from a block no frame named: from before recording, or a guess (a weight made before the first
// forward, at 60 %).
struct GuessedReplacement {
    uint32_t block = 0;
    EventIndex birth = 0;
};

// One step's guessed replacements (the step: events first..last). Where a size's parameters exist
// nowhere else across the step (no block of that size but gradients lives through it untouched),
// the step rebuilt them: one block per parameter's turn is the parameter, and the update computes it
// from the new state, so it is made last in its turn. Parameter at 50 %; the turn's others optimizer
// state (at 60 % at most where they were, at 50 % where they were read as weights).
void parametersRebuiltInTurns(const DeviceTrace& dev, Classification& c, EventIndex first, EventIndex last,
                              const std::vector<GuessedReplacement>& replaced);

} // namespace poolscope::classify_detail
