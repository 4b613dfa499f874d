#pragma once
// A small training run for the ranks tests (core and window): poolscope synth's generator, so the
// frames are real ones and the classifier names the pools; an OOM where a capacity is given.
#include "core/synth/synth.h"

#include <optional>

namespace poolscope::testing {

inline SynthModel rankModel(int microBatch, std::optional<int64_t> capacity, int64_t startUs = 1'700'000'000'000'000)
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 512;
    m.heads = 8;
    m.seq = 256;
    m.microBatch = microBatch;
    m.vocab = 4096;
    m.steps = 2;
    m.capacity = capacity;
    m.startTimeUs = startUs;
    return m;
}

} // namespace poolscope::testing
