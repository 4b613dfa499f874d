#pragma once
#include "core/engine/document.h"

#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// `poolscope explain` as data: one allocation found by address (and moment), its pool, the rule
// and the evidence that decided it, and its stack.
struct ExplainQuery {
    uint64_t address = 0;
    std::optional<EventIndex> index; // the allocation alive at this event (addresses are reused)
    std::optional<int> device;
};

struct ExplainReport {
    std::string file;
    std::string device; // "cuda:0"
    uint64_t queriedAddress = 0;
    AllocId id;
    Allocation allocation;
    std::string operatorName; // Kineto: the enclosing operator
    size_t allocationsAtAddress = 0; // how many allocations used the address (pick another with --index)
    bool classified = false;
    Explanation explanation;
    std::vector<Frame> stack; // innermost first
};

// Addresses are reused: the allocation that starts at the address (or contains it) and was alive at
// `index`; without an index the one alive at the peak, else the most recent one. Devices are tried
// CUDA first. std::invalid_argument when nothing matches, saying what was searched.
ExplainReport explainAllocation(const Document& doc, const ExplainQuery& query);

std::string explainText(const ExplainReport& r);
std::string explainJsonText(const ExplainReport& r);

} // namespace poolscope
