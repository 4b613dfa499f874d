#pragma once
// The rules the project ships, read from the source tree (an edit to rules.json shows in the tests
// without a rebuild of the binary's compiled-in copy), parsed once per test program.
#include "core/classify/rules.h"

#include <string>

namespace poolscope::testing {

inline const RuleSet& shippedRules()
{
    static const RuleSet rules = RuleSet::fromFile(std::string(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
    return rules;
}

} // namespace poolscope::testing
