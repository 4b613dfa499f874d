#pragma once
// The generator's own size law for every allocation, found the way a user would check one: the
// same model generated again with the micro-batch doubled and with the sequence doubled, the
// allocations lined up one by one (the generator's allocation stream does not depend on the sizes).
#include "core/synth/synth.h"

#include <cstdint>
#include <string>
#include <vector>

namespace poolscope {

// bytes ~ b^batch * s^seq; -1 where doubling gave no power of two (or the streams differ).
struct SynthLaw {
    int8_t batch = -1;
    int8_t seq = -1;
    bool known() const { return batch >= 0 && seq >= 0; }
    std::string text() const; // "fixed", "x b*s", "x b*s^2", "x s", "x s^2", "x b", "?"
};

// Per allocation of synthesize(model).trace.devices[0], in that order. Empty when a variant ran
// out of memory or its stream differs.
std::vector<SynthLaw> synthTruthLaws(const SynthModel& model);

} // namespace poolscope
