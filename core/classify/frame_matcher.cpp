#include "core/classify/frame_matcher.h"

#include <algorithm>

namespace poolscope {
namespace {

std::string normalizedPath(const std::string& file)
{
    std::string out = file;
    std::replace(out.begin(), out.end(), '\\', '/');
    return out;
}

} // namespace

FrameMatcher::FrameMatcher(const RuleSet& rules, const FrameTable& frames) : m_frameTable(frames), m_rules(rules)
{
    auto addPair = [&](const FramePattern& p) {
        for (const auto& q : m_patterns)
            if (q.file == p.fileRegex && q.function == p.functionRegex)
                return;
        m_patterns.push_back(Pair{p.fileRegex, p.functionRegex});
    };
    for (const auto& r : rules.rules()) {
        for (const auto& p : r.framesAny)
            addPair(p);
        for (const auto& p : r.framesAll)
            addPair(p);
        for (const auto& p : r.framesNone)
            addPair(p);
        for (const auto& p : r.freeFramesAny)
            addPair(p);
        for (const auto& p : r.freeFramesNone)
            addPair(p);
    }
    for (const auto& ph : rules.phasePatterns())
        addPair(ph.pattern);
    m_words = std::max<size_t>(1, (m_patterns.size() + 63) / 64);
    for (const auto& ph : rules.phasePatterns()) {
        m_phasePattern.push_back(patternId(ph.pattern));
        m_phaseOf.push_back(ph.phase);
    }

    // Each regex runs once per distinct string: filenames repeat across thousands of frames.
    const auto& regexes = rules.regexes();
    std::unordered_map<std::string, std::vector<uint8_t>> fileHits, functionHits;
    auto hits = [&](std::unordered_map<std::string, std::vector<uint8_t>>& cache, const std::string& text) -> std::vector<uint8_t>& {
        auto it = cache.find(text);
        if (it != cache.end())
            return it->second;
        std::vector<uint8_t> v(regexes.size(), 2); // 2: not evaluated yet
        return cache.emplace(text, std::move(v)).first->second;
    };
    const size_t nFrames = frames.frameCount();
    m_frameBits.assign(nFrames * m_words, 0);
    m_pythonFrame.assign(nFrames, 0);
    for (size_t f = 0; f < nFrames; ++f) {
        const Frame& fr = frames.frame(FrameId(uint32_t(f)));
        const std::string file = normalizedPath(fr.filename);
        m_pythonFrame[f] = (file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0) ||
                           (!file.empty() && file.front() == '<' && file != "<op>");
        auto& fh = hits(fileHits, file);
        auto& nh = hits(functionHits, fr.name);
        uint64_t* bits = &m_frameBits[f * m_words];
        for (size_t p = 0; p < m_patterns.size(); ++p) {
            const Pair& pr = m_patterns[p];
            bool ok = true;
            if (pr.file >= 0) {
                auto& h = fh[size_t(pr.file)];
                if (h == 2)
                    h = regexes[size_t(pr.file)].search(file) ? 1 : 0;
                ok = h == 1;
            }
            if (ok && pr.function >= 0) {
                auto& h = nh[size_t(pr.function)];
                if (h == 2)
                    h = regexes[size_t(pr.function)].search(fr.name) ? 1 : 0;
                ok = h == 1;
            }
            if (ok)
                bits[p >> 6] |= uint64_t(1) << (p & 63);
        }
    }
    const size_t nStacks = frames.stackCount();
    m_stackBits.assign(nStacks * m_words, 0);
    m_stackDone.assign(nStacks, 0);
    m_stackPhase.assign(nStacks, 0xFF);
    m_stackPhaseFrame.assign(nStacks, FrameId{});
}

int FrameMatcher::patternId(const FramePattern& p) const
{
    for (size_t i = 0; i < m_patterns.size(); ++i)
        if (m_patterns[i].file == p.fileRegex && m_patterns[i].function == p.functionRegex)
            return int(i);
    return -1;
}

const uint64_t* FrameMatcher::stackBits(StackId s)
{
    uint64_t* bits = &m_stackBits[size_t(s.value) * m_words];
    if (!m_stackDone[s.value]) {
        for (FrameId f : m_frameTable.stack(s)) {
            const uint64_t* fb = frameBits(f);
            for (size_t w = 0; w < m_words; ++w)
                bits[w] |= fb[w];
        }
        m_stackDone[s.value] = 1;
    }
    return bits;
}

bool FrameMatcher::stackMatches(StackId stack, int pattern)
{
    if (!stack.valid() || pattern < 0 || stack.value >= m_stackDone.size())
        return false;
    return test(stackBits(stack), pattern);
}

bool FrameMatcher::stackMatchesInnermost(StackId stack, int pattern, int innermost) const
{
    if (!stack.valid() || pattern < 0 || stack.value >= m_stackDone.size())
        return false;
    auto frames = m_frameTable.stack(stack);
    const size_t n = std::min(frames.size(), size_t(innermost));
    for (size_t i = 0; i < n; ++i)
        if (test(frameBits(frames[i]), pattern))
            return true;
    return false;
}

bool FrameMatcher::stackMatchesInnermostPython(StackId stack, int pattern, int innermost) const
{
    if (!stack.valid() || pattern < 0 || stack.value >= m_stackDone.size())
        return false;
    int seen = 0;
    for (FrameId f : m_frameTable.stack(stack)) {
        if (!m_pythonFrame[f.value])
            continue;
        if (test(frameBits(f), pattern))
            return true;
        if (++seen >= innermost)
            break;
    }
    return false;
}

bool FrameMatcher::opMatches(const std::string& opName, int pattern)
{
    if (opName.empty() || pattern < 0)
        return false;
    auto it = m_opBits.find(opName);
    if (it == m_opBits.end()) {
        std::vector<uint64_t> bits(m_words, 0);
        const auto& regexes = m_rules.regexes();
        for (size_t p = 0; p < m_patterns.size(); ++p) {
            const Pair& pr = m_patterns[p];
            // An operator has no file: a pattern that needs one cannot match it.
            if (pr.file >= 0 || pr.function < 0)
                continue;
            if (regexes[size_t(pr.function)].search(opName))
                bits[p >> 6] |= uint64_t(1) << (p & 63);
        }
        it = m_opBits.emplace(opName, std::move(bits)).first;
    }
    return test(it->second.data(), pattern);
}

Phase FrameMatcher::stackPhase(StackId stack, FrameId* decisive)
{
    if (!stack.valid() || stack.value >= m_stackPhase.size())
        return Phase::Unknown;
    if (m_stackPhase[stack.value] == 0xFF) {
        // The innermost marker decides (Lightning and LBFGS run forward and backward inside
        // optimizer.step's closure), except that a forward below a backward marker is
        // torch.utils.checkpoint recomputing activations: that is backward; and a teardown marker
        // (deleteNode, a traceback's deallocation) with no backward marker outside it is teardown,
        // whatever autograd node released its saved tensors below it.
        Phase found = Phase::Unknown;
        FrameId where, teardownAt;
        bool decided = false, backwardOutsideTeardown = false;
        // The innermost marker is backward and a forward encloses it: autograd called inside a
        // forward (torch.autograd.functional.jvp, torch.autograd.grad for a penalty), not the
        // training backward. Its products belong to that forward.
        bool innermostBackward = false, nestedInForward = false;
        for (FrameId f : m_frameTable.stack(stack)) {
            const uint64_t* fb = frameBits(f);
            Phase here = Phase::Unknown;
            for (size_t k = 0; k < m_phasePattern.size(); ++k) {
                if (m_phasePattern[k] >= 0 && test(fb, m_phasePattern[k])) {
                    here = m_phaseOf[k];
                    break;
                }
            }
            if (here == Phase::Unknown)
                continue;
            if (here == Phase::Teardown) {
                if (!teardownAt.valid())
                    teardownAt = f;
                continue;
            }
            if (teardownAt.valid() && here == Phase::Backward)
                backwardOutsideTeardown = true;
            if (innermostBackward && here == Phase::Forward && !nestedInForward) {
                nestedInForward = true;
                where = f;
            }
            if (decided)
                continue;
            if (found == Phase::Unknown) {
                found = here;
                where = f;
                decided = found != Phase::Forward;
                innermostBackward = found == Phase::Backward;
            } else if (here == Phase::Backward) {
                found = here;
                where = f;
                decided = true;
            }
        }
        if (nestedInForward && found == Phase::Backward)
            found = Phase::Forward;
        if (teardownAt.valid() && !backwardOutsideTeardown) {
            found = Phase::Teardown;
            where = teardownAt;
        }
        m_stackPhase[stack.value] = uint8_t(found);
        m_stackPhaseFrame[stack.value] = where;
    }
    if (decisive)
        *decisive = m_stackPhaseFrame[stack.value];
    return Phase(m_stackPhase[stack.value]);
}

Phase FrameMatcher::opPhase(const std::string& opName)
{
    for (size_t k = 0; k < m_phasePattern.size(); ++k)
        if (opMatches(opName, m_phasePattern[k]))
            return m_phaseOf[k];
    return Phase::Unknown;
}

} // namespace poolscope
