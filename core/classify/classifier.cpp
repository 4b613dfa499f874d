#include "core/classify/classifier.h"
#include "core/classify/size_ledger.h"

#include "core/classify/builtin_evidence.h"
#include "core/classify/frame_matcher.h"
#include "core/classify/structural_common.h"
#include "core/classify/structural_evidence.h"
#include "core/classify/structural_oom.h"
#include "core/classify/structural_phases.h"
#include "core/classify/structural_passes.h"

#include <algorithm>
#include <limits>
#include <array>
#include <map>
#include <unordered_set>

namespace poolscope {
namespace {

constexpr size_t kMaxCachedCells = size_t(32) << 20;

struct CompiledRule {
    const Rule* rule = nullptr;
    size_t index = 0;
    std::vector<int> any, all, none;
    std::vector<int> freeAny, freeNone;
    bool hasFrameConditions = false;
    bool hasFreeFrameConditions = false;
};

// One per allocation (millions): fields ordered widest first, 32 bytes with no padding.
struct Features {
    int64_t mirrorSize = 0; // mirrorKey of its size (the block's requested size when pre-existing)
    int64_t size = 0;       // the same size, unrounded: the half-parameter mirror doubles it
    StackId stack;     // where it was allocated; invalid when unknown
    StackId freeStack; // where the program let go of it; invalid when never freed or unknown
    // The rules whose phase, free-phase and lifetime conditions hold, as an index into the
    // engine's candidate sets: decide() tries only these. Most rules fail on those three, and
    // scanning all of them for each of a million allocations was most of the classifier's time.
    uint16_t candidateSet = 0;
    uint16_t lifetime = 0;
    Phase birth = Phase::Unknown;
    Phase free = Phase::Unknown;
    bool freed = false;
    bool emptyStack = true;
};
static_assert(sizeof(Features) <= 32);

class Engine {
public:
    Engine(const Trace& trace, const DeviceTrace& dev, const RuleSet& rules)
        : m_trace(trace), m_dev(dev), m_rules(rules), m_matcher(rules, trace.frames)
    {
        for (const auto& r : rules.rules()) {
            CompiledRule c;
            c.rule = &r;
            for (const auto& p : r.framesAny)
                c.any.push_back(m_matcher.patternId(p));
            for (const auto& p : r.framesAll)
                c.all.push_back(m_matcher.patternId(p));
            for (const auto& p : r.framesNone)
                c.none.push_back(m_matcher.patternId(p));
            for (const auto& p : r.freeFramesAny)
                c.freeAny.push_back(m_matcher.patternId(p));
            for (const auto& p : r.freeFramesNone)
                c.freeNone.push_back(m_matcher.patternId(p));
            c.hasFrameConditions = !c.any.empty() || !c.all.empty() || !c.none.empty();
            c.hasFreeFrameConditions = !c.freeAny.empty() || !c.freeNone.empty();
            c.index = m_compiled.size();
            m_compiled.push_back(std::move(c));
        }
        // Candidate sets are bitsets over the rules, m_words 64-bit words each; set 0 holds every
        // rule (the fallback when more combinations occur than an index can name).
        m_words = std::max<size_t>(1, (m_compiled.size() + 63) / 64);
        m_mirrorMask.assign(m_words, 0);
        for (size_t k = 0; k < m_compiled.size(); ++k)
            if (m_compiled[k].rule->mirrors != SizeMirror::None)
                m_mirrorMask[k >> 6] |= uint64_t(1) << (k & 63);
        m_candidateSets.assign(m_words, 0);
        for (size_t k = 0; k < m_compiled.size(); ++k)
            m_candidateSets[k >> 6] |= uint64_t(1) << (k & 63);
        // Per stack, one bit per rule, twice (its allocations' stacks, its frees' stacks), computed
        // the first time a stack is asked about; past a bound (millions of distinct stacks) answers
        // are computed each time instead, so memory stays bounded whatever the dump holds.
        const size_t words = trace.frames.stackCount() * m_words;
        if (words <= kMaxCachedCells / 8) {
            m_frameMasks.assign(words, 0);
            m_freeFrameMasks.assign(words, 0);
            m_frameMaskDone.assign(trace.frames.stackCount(), 0);
            m_freeFrameMaskDone.assign(trace.frames.stackCount(), 0);
        }
    }

    Classification run()
    {
        Classification c;
        c.device = m_dev.device;
        c.kind = m_dev.kind;
        for (const auto& r : m_rules.rules())
            c.rules.push_back(RuleInfo{r.name, r.reason, r.origin, r.pool, ruleEvidence(r), r.roles});
        c.noRule = uint16_t(c.rules.size());
        c.rules.push_back(RuleInfo{std::string(kNoRuleName), "no rule matched: no frame, phase or lifetime evidence names a pool",
                                   "built-in", Pool::Unknown, 0});
        c.history = hasHistory(m_dev);
        c.phases = computePhases(m_trace, m_dev, m_rules, m_matcher);
        c.facts = buildRunFacts(m_dev, c.phases, c.history);
        computeFeatures(c);

        const size_t n = m_dev.allocations.size();
        c.pool.assign(n, Pool::Unknown);
        c.confidence.assign(n, 0);
        c.rule.assign(n, c.noRule);
        // Pass 1: no size-mirroring rules; learn the sizes of parameters and gradients.
        for (size_t a = 0; a < n; ++a)
            decide(c, a, false);
        countSizes(c);
        // Pass 2: everything, with the sizes of pass 1. Rules before the first size-mirroring rule
        // saw the same facts in pass 1, so only allocations decided at or after it are looked at again.
        size_t firstMirror = m_compiled.size();
        for (size_t k = 0; k < m_compiled.size(); ++k)
            if (m_compiled[k].rule->mirrors != SizeMirror::None) {
                firstMirror = k;
                break;
            }
        for (size_t a = 0; a < n; ++a) {
            if (c.rule[a] == c.noRule || c.rule[a] >= firstMirror)
                decide(c, a, true, firstMirror);
            adjustConfidence(c, a);
        }
        countSizes(c);
        std::vector<LedgerBlock> blocks(n);
        for (size_t i = 0; i < n; ++i)
            blocks[i] = {m_features[i].mirrorSize, bool(m_features[i].lifetime & bit(Lifetime::AliveWholeTrace)), m_features[i].emptyStack};
        sizeLedger(m_dev, blocks, c);
        // Structure over names (structural_passes.cpp holds the order).
        classify_detail::structureFromLifetimes(m_trace, m_dev, c);
        countSizes(c);
        classify_detail::structureFromSizes(m_trace, m_dev, c);
        // Again with the gradients structure found (a backward the stream's shape ends early leaves
        // its last gradients to a later pass): the first count can miss them (size_ledger.h).
        sizeLedger(m_dev, blocks, c);
        countSizes(c);
        judgeUntracked(c);
        capStructuralConfidence(m_dev, c);
        classify_detail::assignPrivatePools(m_dev, c);
        addPoolFacts(c.facts, m_dev, c);
        return c;
    }

    // Alloc or free entries: a trace that is one snapshot entry (an OOM observer's dump) or none
    // (segments only) shows where memory is, not how it came and went.
    static bool hasHistory(const DeviceTrace& dev)
    {
        for (Action a : dev.events.action)
            if (a == Action::Alloc || a == Action::FreeRequested || a == Action::FreeCompleted)
                return true;
        return false;
    }

private:
    void computeFeatures(Classification& c)
    {
        const auto& allocs = m_dev.allocations;
        const auto& tl = c.phases;
        m_features.resize(allocs.size());
        c.birthPhase.resize(allocs.size());
        c.freePhase.resize(allocs.size());
        c.lifetime.resize(allocs.size());
        // Pre-existing allocations carry their block's rounded size; the block's requested size is
        // what a gradient of the same tensor shape records.
        std::unordered_map<uint64_t, int64_t> requested;
        for (const auto& seg : m_dev.segments)
            for (const auto& b : seg.blocks)
                if (b.state != BlockState::Inactive && b.requestedSize > 0)
                    requested.emplace(b.address, b.requestedSize);
        const std::unordered_set<int64_t> stateSizes = classify_detail::sizesHeldBeforeFirstForward(m_dev, c.facts.firstForward, requested);
        // Whether the dump recorded anyone's birth: history, or a stack on some block. Only then does
        // a block with neither predate recording (Lifetime::Unrecorded).
        bool recordedAny = c.history;
        for (size_t i = 0; i < allocs.size() && !recordedAny; ++i)
            recordedAny = allocs[i].stack.valid() && !m_trace.frames.stack(allocs[i].stack).empty();
        const uint16_t deviceBits = c.history ? 0 : bit(Lifetime::NoHistory);
        for (size_t i = 0; i < allocs.size(); ++i) {
            const Allocation& a = allocs[i];
            Features& f = m_features[i];
            const EventIndex freeEv = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
            f.freed = freeEv != kNoEvent;
            uint16_t lt = 0;
            if (a.preexisting()) {
                lt |= bit(Lifetime::Preexisting);
                if (!f.freed)
                    lt |= bit(Lifetime::AliveWholeTrace);
                // Its block's stack (from the final segments) still tells where it was born. An
                // allocation first seen at its free carries the free's stack instead: no birth evidence.
                const EventIndex firstFree = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
                const bool stackIsFree = firstFree != kNoEvent && a.stack == m_dev.events.stack[size_t(firstFree)];
                f.stack = stackIsFree ? StackId{} : a.stack;
                if (f.stack.valid()) {
                    f.birth = m_matcher.stackPhase(f.stack);
                    if (f.birth != Phase::Unknown)
                        lt |= bit(Lifetime::OwnPhase);
                }
            } else {
                f.stack = a.stack;
                lt |= bit(Lifetime::Recorded);
                f.birth = tl.phase[size_t(a.allocEvent)];
                const auto src = tl.source[size_t(a.allocEvent)];
                if (src == PhaseSource::Frames || src == PhaseSource::Annotation || src == PhaseSource::Structure)
                    lt |= bit(Lifetime::OwnPhase);
            }
            if (f.freed) {
                lt |= bit(Lifetime::Freed);
                f.freeStack = m_dev.events.stack[size_t(freeEv)];
                f.free = tl.phase[size_t(freeEv)];
                if (!a.preexisting()) {
                    const bool same = tl.sameRun(freeEv, a.allocEvent);
                    lt |= same ? bit(Lifetime::SamePhase) : bit(Lifetime::LaterPhase);
                    if (freeEv - a.allocEvent <= kQuickEvents)
                        lt |= bit(Lifetime::Quick);
                }
            } else {
                lt |= bit(Lifetime::AliveAtEnd);
            }
            if (!(lt & bit(Lifetime::SamePhase))) {
                if (f.birth == Phase::OptimizerStep)
                    lt |= bit(Lifetime::SurvivesStep);
                if (f.birth == Phase::Backward && !classify_detail::heldOnlyByTheOom(m_dev, a, tl, stateSizes))
                    lt |= bit(Lifetime::SurvivesBackward);
            }
            // (Only a block held to the end: the final segments know nothing of one let go of, and a
            // later block may hold its address: llama_autocast_adamw_oom's last fifth read gradients
            // zero_grad let go of at the size of the activations made there since.)
            int64_t size = a.size;
            if (a.preexisting() && classify_detail::freeEventOf(a) == kNoEvent)
                if (auto it = requested.find(a.address); it != requested.end())
                    size = it->second;
            f.mirrorSize = mirrorKey(size);
            f.size = size;
            f.emptyStack = (!f.stack.valid() || m_trace.frames.stack(f.stack).empty()) && m_trace.opName(a).empty();
            lt |= deviceBits;
            if (!a.preexisting() && c.facts.firstForward != kNoEvent && a.allocEvent >= c.facts.firstForward)
                lt |= bit(Lifetime::AfterFirstForward);
            if (a.preexisting() && recordedAny && (!a.stack.valid() || m_trace.frames.stack(a.stack).empty()) && m_trace.opName(a).empty())
                lt |= bit(Lifetime::Unrecorded);
            f.lifetime = lt;
            f.candidateSet = candidateSet(f);
            c.birthPhase[i] = f.birth;
            c.freePhase[i] = f.free;
            c.lifetime[i] = lt;
        }
    }

    // The conditions that depend on (birth phase, free phase, lifetime) only: see Features::candidateSet.
    static bool phasesAndLifetimeMatch(const Rule& r, Phase birth, bool freed, Phase free, uint16_t lifetime)
    {
        if (r.phaseMask && !(r.phaseMask & (1u << unsigned(birth))))
            return false;
        if (r.freePhaseMask) {
            const unsigned b = freed ? unsigned(free) : unsigned(kPhaseCount);
            if (!(r.freePhaseMask & (1u << b)))
                return false;
        }
        return (lifetime & r.lifetimeAll) == r.lifetimeAll && !(lifetime & r.lifetimeNone);
    }

    // Features::candidateSet, remembered per (birth, free phase, lifetime): a few dozen combinations
    // occur, so a small direct-mapped cache answers almost every allocation.
    uint16_t candidateSet(const Features& f)
    {
        const uint32_t key = uint32_t(f.birth) | uint32_t(f.freed ? unsigned(f.free) : unsigned(kPhaseCount)) << 3 | uint32_t(f.lifetime) << 6;
        auto& slot = m_candidateCache[(key * 2654435761u) >> (32 - kCandidateCacheBits)];
        if (slot.first == key + 1)
            return slot.second;
        uint16_t index = 0;
        if (auto known = m_candidateIndex.find(key); known != m_candidateIndex.end()) {
            index = known->second;
        } else if (m_candidateSets.size() / m_words < 0xFFFF) {
            index = uint16_t(m_candidateSets.size() / m_words);
            m_candidateSets.resize(m_candidateSets.size() + m_words, 0);
            uint64_t* mask = &m_candidateSets[size_t(index) * m_words];
            for (size_t k = 0; k < m_compiled.size(); ++k)
                if (phasesAndLifetimeMatch(*m_compiled[k].rule, f.birth, f.freed, f.free, f.lifetime))
                    mask[k >> 6] |= uint64_t(1) << (k & 63);
            m_candidateIndex.emplace(key, index);
        }
        slot = {key + 1, index};
        return index;
    }

    bool matches(const CompiledRule& cr, const Allocation& a, const Features& f, const Classification& c, bool withSizes)
    {
        const Rule& r = *cr.rule;
        if (r.mirrors != SizeMirror::None && !withSizes)
            return false;
        if (!phasesAndLifetimeMatch(r, f.birth, f.freed, f.free, f.lifetime))
            return false;
        return matchesBeyondPhases(cr, a, f, c);
    }

    // matches() once phasesAndLifetimeMatch holds (and the size-mirroring gate was checked).
    bool matchesBeyondPhases(const CompiledRule& cr, const Allocation& a, const Features& f, const Classification& c)
    {
        const Rule& r = *cr.rule;
        if (a.size < r.minBytes || a.size > r.maxBytes)
            return false;
        if (r.stack == StackCondition::Empty && !f.emptyStack)
            return false;
        if (r.stack == StackCondition::Present && f.emptyStack)
            return false;
        if (cr.hasFrameConditions && !framesOk(cr, a, f.stack))
            return false;
        if (cr.hasFreeFrameConditions && !freeFramesOk(cr, f.freeStack))
            return false;
        if (r.mirrors == SizeMirror::Parameter && !c.parameterSizes.count(f.mirrorSize))
            return false;
        if (r.mirrors == SizeMirror::Gradient && !c.gradientSizes.count(f.mirrorSize))
            return false;
        if (r.mirrors == SizeMirror::HalfParameter && !c.parameterSizes.count(mirrorKey(2 * f.size)))
            return false;
        return true;
    }

    // Frame conditions depend on the stack alone: answered once per stack for every rule at once
    // (bit k: rule k's frame conditions hold, or it has none). Thousands of allocations share a few
    // hundred stacks, and decide() drops every rule whose frames fail with one AND per word.
    const uint64_t* frameMask(const Allocation& a, StackId stack)
    {
        if (!stack.valid() || stack.value >= m_frameMaskDone.size())
            return nullptr;
        uint64_t* mask = &m_frameMasks[size_t(stack.value) * m_words];
        if (!m_frameMaskDone[stack.value]) {
            for (const CompiledRule& cr : m_compiled)
                if (!cr.hasFrameConditions || evaluateFrames(cr, a, stack))
                    mask[cr.index >> 6] |= uint64_t(1) << (cr.index & 63);
            m_frameMaskDone[stack.value] = 1;
        }
        return mask;
    }

    bool evaluateFrames(const CompiledRule& cr, const Allocation& a, StackId stack)
    {
        const Rule& r = *cr.rule;
        auto has = [&](int p) {
            if (stack.valid())
                return r.innermost > 0 ? m_matcher.stackMatchesInnermost(stack, p, r.innermost) : m_matcher.stackMatches(stack, p);
            return m_matcher.opMatches(m_trace.opName(a), p);
        };
        auto hasPositive = [&](int p) {
            if (r.innermostPython > 0 && stack.valid())
                return m_matcher.stackMatchesInnermostPython(stack, p, r.innermostPython);
            return has(p);
        };
        if (!cr.any.empty() && std::none_of(cr.any.begin(), cr.any.end(), hasPositive))
            return false;
        if (!cr.all.empty() && !std::all_of(cr.all.begin(), cr.all.end(), hasPositive))
            return false;
        return cr.none.empty() || !std::any_of(cr.none.begin(), cr.none.end(), has);
    }

    bool framesOk(const CompiledRule& cr, const Allocation& a, StackId stack)
    {
        if (const uint64_t* mask = frameMask(a, stack))
            return (mask[cr.index >> 6] >> (cr.index & 63)) & 1u;
        return evaluateFrames(cr, a, stack);
    }

    bool evaluateFreeFrames(const CompiledRule& cr, StackId stack)
    {
        auto has = [&](int p) { return m_matcher.stackMatches(stack, p); };
        if (!cr.freeAny.empty() && std::none_of(cr.freeAny.begin(), cr.freeAny.end(), has))
            return false;
        return cr.freeNone.empty() || !std::any_of(cr.freeNone.begin(), cr.freeNone.end(), has);
    }

    bool freeFramesOk(const CompiledRule& cr, StackId stack)
    {
        if (!stack.valid() || stack.value >= m_freeFrameMaskDone.size())
            return evaluateFreeFrames(cr, stack);
        uint64_t* mask = &m_freeFrameMasks[size_t(stack.value) * m_words];
        if (!m_freeFrameMaskDone[stack.value]) {
            for (const CompiledRule& k : m_compiled)
                if (!k.hasFreeFrameConditions || evaluateFreeFrames(k, stack))
                    mask[k.index >> 6] |= uint64_t(1) << (k.index & 63);
            m_freeFrameMaskDone[stack.value] = 1;
        }
        return (mask[cr.index >> 6] >> (cr.index & 63)) & 1u;
    }

    void decide(Classification& c, size_t i, bool withSizes, size_t fromRule = 0)
    {
        const Allocation& a = m_dev.allocations[i];
        const Features& f = m_features[i];
        const uint64_t* set = &m_candidateSets[size_t(f.candidateSet) * m_words];
        const uint64_t* frames = frameMask(a, f.stack);
        const Rule* hint = nullptr; // the first hint that matched before the deciding rule
        for (size_t w = fromRule >> 6; w < m_words; ++w) {
            uint64_t candidates = set[w];
            if (frames)
                candidates &= frames[w];
            if (w == (fromRule >> 6))
                candidates &= ~uint64_t(0) << (fromRule & 63);
            if (!withSizes) // size-mirroring rules wait for pass 2: masked here, not skipped one by one
                candidates &= ~m_mirrorMask[w];
            for (; candidates; candidates &= candidates - 1) {
                const size_t k = w * 64 + size_t(__builtin_ctzll(candidates));
                const CompiledRule& cr = m_compiled[k];
                // Set 0 (the fallback) holds every rule: its phase conditions are checked here.
                if (f.candidateSet == 0 && !phasesAndLifetimeMatch(*cr.rule, f.birth, f.freed, f.free, f.lifetime))
                    continue;
                if (matchesBeyondPhases(cr, a, f, c)) {
                    if (cr.rule->hint) {
                        if (!hint)
                            hint = cr.rule;
                        continue;
                    }
                    c.pool[i] = cr.rule->pool;
                    int conf = cr.rule->confidence;
                    // A name confirms what the structure says; it never decides on its own.
                    if (hint && hint->pool == cr.rule->pool && hint->confidence > conf)
                        conf = std::min<int>(hint->confidence, conf + 10);
                    c.confidence[i] = uint8_t(conf);
                    c.rule[i] = uint16_t(k);
                    return;
                }
            }
        }
        c.pool[i] = Pool::Unknown;
        c.confidence[i] = 0;
        c.rule[i] = c.noRule;
    }

    // Size mirroring confirms (gradients mirror parameters one to one; optimizer state comes in
    // buffers of parameter sizes); evidence borrowed from a neighbour's phase weakens.
    void adjustConfidence(Classification& c, size_t i)
    {
        if (c.rule[i] == c.noRule)
            return;
        const Features& f = m_features[i];
        const Rule& r = *m_compiled[c.rule[i]].rule;
        int conf = c.confidence[i];
        if (r.phaseMask && !(f.lifetime & bit(Lifetime::OwnPhase)) && !(f.lifetime & bit(Lifetime::Preexisting)))
            conf -= 10;
        // Without history every block is alive at the snapshot: a rule that reads "kept to the end"
        // as kept by something (the graph, the outputs) claims a lifetime nobody saw. Rules written
        // for such dumps ask for no_history themselves and keep their own figure.
        constexpr uint16_t kKept = bit(Lifetime::AliveAtEnd) | bit(Lifetime::AliveWholeTrace);
        if ((f.lifetime & bit(Lifetime::NoHistory)) && (r.lifetimeAll & kKept) && !(r.lifetimeAll & bit(Lifetime::NoHistory)))
            conf = std::min(conf, 65);
        if (r.mirrors == SizeMirror::None) {
            const bool paramSize = c.parameterSizes.count(f.mirrorSize) > 0;
            const bool gradSize = c.gradientSizes.count(f.mirrorSize) > 0;
            if ((c.pool[i] == Pool::Gradient || c.pool[i] == Pool::OptimizerState) && paramSize)
                conf += 5;
            if (c.pool[i] == Pool::Parameter && gradSize)
                conf += 5;
        }
        c.confidence[i] = uint8_t(std::clamp(conf, 1, 99));
    }

    void judgeUntracked(Classification& c)
    {
        c.untrackedRule = c.noRule;
        if (!m_dev.segments.empty())
            return;
        int64_t tracked = 0;
        for (const auto& a : m_dev.allocations)
            if (a.preexisting())
                tracked += a.size;
        c.untrackedBytes = m_dev.initialAllocated - tracked;
        if (c.untrackedBytes <= 0)
            return;
        Allocation pseudo;
        pseudo.size = c.untrackedBytes;
        pseudo.blockSize = c.untrackedBytes;
        Features f;
        f.lifetime = bit(Lifetime::Preexisting) | bit(Lifetime::AliveWholeTrace) | bit(Lifetime::AliveAtEnd);
        f.mirrorSize = mirrorKey(c.untrackedBytes);
        f.size = c.untrackedBytes;
        for (size_t k = 0; k < m_compiled.size(); ++k)
            if (matches(m_compiled[k], pseudo, f, c, true)) {
                c.untrackedPool = m_compiled[k].rule->pool;
                c.untrackedRule = uint16_t(k);
                // The profiler recorded only a total for these bytes: no block, size, address or
                // stack. What the rule reads into memory from before recording ("most of it is
                // weights") is a guess here, below the 50 % that gives a knob, however many bytes.
                c.untrackedConfidence = uint8_t(std::min<int>(m_compiled[k].rule->confidence, 40));
                return;
            }
    }

    void countSizes(Classification& c)
    {
        c.parameterSizes.clear();
        c.gradientSizes.clear();
        c.stateSizes.clear();
        for (size_t i = 0; i < c.pool.size(); ++i) {
            const int64_t key = m_features[i].mirrorSize;
            switch (c.pool[i]) {
            case Pool::Parameter:
                ++c.parameterSizes[key];
                break;
            case Pool::Gradient:
                ++c.gradientSizes[key];
                break;
            case Pool::OptimizerState:
                ++c.stateSizes[key];
                break;
            default:
                break;
            }
        }
    }

    const Trace& m_trace;
    const DeviceTrace& m_dev;
    const RuleSet& m_rules;
    FrameMatcher m_matcher;
    std::vector<CompiledRule> m_compiled;
    std::vector<Features> m_features;
    static constexpr unsigned kCandidateCacheBits = 10;
    std::array<std::pair<uint32_t, uint16_t>, size_t(1) << kCandidateCacheBits> m_candidateCache{}; // key + 1 (0: empty) -> set
    std::unordered_map<uint32_t, uint16_t> m_candidateIndex; // every key seen -> its set
    size_t m_words = 1;                    // 64-bit words per rule bitset
    std::vector<uint64_t> m_candidateSets; // candidate sets, m_words each; set 0: every rule
    std::vector<uint64_t> m_mirrorMask;    // bit k: rule k mirrors sizes
    std::vector<uint64_t> m_frameMasks;     // stack x m_words: see frameMask()
    std::vector<uint64_t> m_freeFrameMasks; // the same for the stack that freed it
    std::vector<uint8_t> m_frameMaskDone, m_freeFrameMaskDone;
};

} // namespace

Classification classify(const Trace& trace, const DeviceTrace& dev, const RuleSet& rules)
{
    if (dev.stacksFromFinalBlocks.empty())
        return Engine(trace, dev, rules).run();
    // A context="state" capture: only the blocks alive at the end carry stacks. The rules read a
    // stack beside its neighbours' (a call's allocations share one; a site made again each call), so
    // stacks on the survivors alone would read as calls and sites that differ from the freed blocks
    // around them (the truth runs so copied: 2.1 % of the named bytes wrong, 1.5 % frameless). The
    // classifier reads the history as recorded, without frames; the survivors' stacks are shown.
    DeviceTrace asRecorded = dev;
    for (const auto& [i, entryStack] : dev.stacksFromFinalBlocks)
        asRecorded.allocations[i].stack = entryStack;
    asRecorded.stacksFromFinalBlocks.clear();
    return Engine(trace, asRecorded, rules).run();
}

} // namespace poolscope
