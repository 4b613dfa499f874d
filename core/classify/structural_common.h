#pragma once
// Private to core/classify: what the structural deciders (structural_evidence.cpp,
// structural_unrecorded.cpp) share: where an allocation was let go of, and how a decider records its
// rule and its decision.
#include "core/classify/classifier.h"

#include <algorithm>
#include <string>

namespace poolscope::classify_detail {

inline EventIndex freeEventOf(const Allocation& a)
{
    return a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
}

inline uint16_t addRule(Classification& c, std::string name, std::string reason, Pool pool, uint8_t evidence, uint16_t roles = 0)
{
    c.rules.push_back(RuleInfo{std::move(name), std::move(reason), "built-in", pool, evidence, roles});
    return uint16_t(c.rules.size() - 1);
}

inline void decide(Classification& c, size_t i, Pool pool, uint16_t rule, int confidence)
{
    c.pool[i] = pool;
    c.rule[i] = rule;
    c.confidence[i] = uint8_t(std::clamp(confidence, 1, 99));
}

} // namespace poolscope::classify_detail
