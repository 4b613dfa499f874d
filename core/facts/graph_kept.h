#pragma once
// How much of what a call of the model made must outlive the next call before the run is read as
// keeping each call's autograd graph (grad mode on, an output of every call held). One threshold
// for the two readers: RunFacts::graphsKeptAcrossCalls (run_facts.cpp) over forward passes, and the
// split of one forward run into calls (core/classify/phase_call_restart.cpp).
#include <cstddef>

namespace poolscope {

// By count, not bytes: a cache preallocated in the first call is few blocks however large.
// Measured on the real runs of tests/data/gpu_runs: 46 % where an evaluation kept each call's
// logits with grad on; 0.0-1.9 % under no_grad (an embedding service, generate() with a grown or a
// preallocated cache, a Trainer's evaluation: 4.3 %); a cache preallocated in the first call is
// about a seventh of what a layer makes.
inline constexpr double kGraphKeptShare = 0.25;

// Whether `kept` of `made` blocks is that share.
inline bool keepsGraphShare(size_t kept, size_t made)
{
    return made > 0 && double(kept) >= kGraphKeptShare * double(made);
}

} // namespace poolscope
