#pragma once
// Private to core/whatif's precision what-if (plan_precision.cpp, plan_autocast_casts.cpp): which
// recorded tensors autocast can change the element size of, and how far back a matmul's fp32 input
// may lie in the allocation stream.
#include "core/whatif/plan.h"

#include <cstddef>

namespace poolscope::autocast_detail {

inline constexpr int kInputWindow = 32; // allocations back where a matmul's fp32 input may be

// Activations and the temporaries around them: what changes element size with autocast.
inline bool eligible(const TraceModel& m, size_t a)
{
    const Pool p = m.pool[a];
    if (p != Pool::Activation && p != Pool::Temporary && p != Pool::Other && p != Pool::Unknown)
        return false;
    return !m.weightCast[a] && m.lawEvidence[a] != LawEvidence::Phase && !m.stepWorkspace[a];
}

} // namespace poolscope::autocast_detail
