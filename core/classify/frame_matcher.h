#pragma once
#include "core/classify/rules.h"
#include "core/model/frames.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope {

// Answers "does this stack contain a frame matching pattern p?" fast. Regexes run once per distinct
// filename and function name of the trace (a dump with 768k frame references has ~700 distinct
// frames); a frame's answers are a bitset over patterns, and a stack's the OR of its frames',
// computed the first time the stack is asked about.
class FrameMatcher {
public:
    FrameMatcher(const RuleSet& rules, const FrameTable& frames);

    // Patterns are the distinct (file, function) regex pairs of the rule set; -1 if unknown.
    int patternId(const FramePattern& p) const;
    size_t patternCount() const { return m_patterns.size(); }

    bool stackMatches(StackId stack, int pattern);
    bool stackMatchesInnermost(StackId stack, int pattern, int innermost) const;
    // The same over the N innermost Python frames (a .py file or a <...> pseudo-file; CPython's own C
    // frames that carry a line number do not count).
    bool stackMatchesInnermostPython(StackId stack, int pattern, int innermost) const;
    bool frameMatches(FrameId frame, int pattern) const { return test(frameBits(frame), pattern); }
    // A Kineto allocation has no stack but the operator around it; it is matched as a function name.
    bool opMatches(const std::string& opName, int pattern);

    // The phase named by the innermost frame that matches a phase pattern (Unknown when none), and
    // that frame; except that a teardown marker with no backward marker outside it wins (saved
    // tensors released by deleteNode under a traceback's deallocation are not a backward pass).
    // Cached per stack.
    Phase stackPhase(StackId stack, FrameId* decisive = nullptr);
    Phase opPhase(const std::string& opName);

    const FrameTable& frames() const { return m_frameTable; }

private:
    struct Pair {
        int file = -1, function = -1;
    };
    const uint64_t* frameBits(FrameId f) const { return &m_frameBits[size_t(f.value) * m_words]; }
    static bool test(const uint64_t* bits, int p) { return (bits[size_t(p) >> 6] >> (unsigned(p) & 63)) & 1u; }
    const uint64_t* stackBits(StackId s);

    const FrameTable& m_frameTable;
    std::vector<Pair> m_patterns;
    size_t m_words = 1;
    std::vector<uint64_t> m_frameBits; // frameCount x m_words
    std::vector<uint8_t> m_pythonFrame; // per frame: a Python source frame
    std::vector<uint64_t> m_stackBits; // stackCount x m_words, filled lazily
    std::vector<uint8_t> m_stackDone;
    std::vector<uint8_t> m_stackPhase; // 0xFF: not computed
    std::vector<FrameId> m_stackPhaseFrame;
    std::vector<int> m_phasePattern; // per RuleSet phase pattern: pattern id
    std::vector<Phase> m_phaseOf;
    std::unordered_map<std::string, std::vector<uint64_t>> m_opBits;
    const RuleSet& m_rules;
};

} // namespace poolscope
