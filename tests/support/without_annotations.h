#pragma once
// A run as PyTorch before 2.5 writes it: the same trace without any record_function annotation (no
// Optimizer.step#..., no ProfilerStep#N), so steps and the optimizer must be read from structure.
#include "core/model/trace.h"

#include <memory>

namespace poolscope::testing {

inline std::shared_ptr<const Trace> withoutAnnotations(const std::shared_ptr<const Trace>& t)
{
    auto bare = std::make_shared<Trace>(*t);
    bare->annotations.clear();
    return bare;
}

} // namespace poolscope::testing
