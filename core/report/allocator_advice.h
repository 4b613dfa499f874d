#pragma once
// The one place that says what to do about memory the caching allocator holds but cannot hand out
// (cached-free at an OOM). Kept apart so that advice computed by replaying the allocator under other
// settings can replace it without touching the verdict.
#include "core/report/verdict.h"

#include <string>

namespace poolscope {

// Advice when cached-free memory is the wall (at an OOM, or near a known capacity).
std::string allocatorAdvice(const MomentEvidence& evidence);

} // namespace poolscope
