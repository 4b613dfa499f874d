#pragma once
#include "core/model/trace.h"

#include <cstdint>
#include <string>
#include <vector>

namespace poolscope {

// Which line of code made an allocation: the first user frame of its stack ("file:line function",
// as `report` prints it), the Kineto operator, or, for an allocation without frames, its size (a
// frameless dump still repeats the same sizes from the same code). A key is a number so tables of
// millions of allocations group by it cheaply.
using SiteKey = uint64_t;

class SiteNames {
public:
    explicit SiteNames(const Trace& trace);
    SiteKey key(const Allocation& a) const;
    std::string label(SiteKey key) const;
    // True when the key names code (a frame or an operator), false for the size of a frameless one.
    static bool hasCode(SiteKey key) { return (key >> 62) != 3; }

private:
    const Trace& m_trace;
    mutable std::vector<int64_t> m_userFrame; // per StackId, lazily: its user frame, -1 none, -2 not yet known
};

// The text `report` prints for an allocation's frame (empty when it has none).
std::string allocationSiteText(const Trace& trace, const Allocation& a);
// A stack's user frame as a sentence can carry it (no path too long to wrap): an installed package's
// file from the package on ("timm/layers/mlp.py:49 forward"), another file by its folder and name
// ("capture/truth_runs.py:436 adam_step_oom"), a C++ frame by its function. Empty without frames.
std::string shortStackSite(const Trace& trace, StackId stack);

} // namespace poolscope
