#pragma once
#include "core/classify/phase.h"
#include "core/classify/pool.h"
#include "core/classify/text_pattern.h"

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope {

// Lifetime facts about one allocation that a rule can require ("lifetime") or forbid ("not_lifetime").
enum class Lifetime : uint16_t {
    Preexisting = 1 << 0,      // allocated before recording began
    Recorded = 1 << 1,         // its alloc event is in the trace
    AliveAtEnd = 1 << 2,       // never freed by the program within the trace
    Freed = 1 << 3,            // freed within the trace
    AliveWholeTrace = 1 << 4,  // pre-existing and alive at the end
    SamePhase = 1 << 5,        // freed within the same phase run it was born in
    LaterPhase = 1 << 6,       // freed in a later phase run
    SurvivesStep = 1 << 7,     // born in an optimizer step and kept after that step
    SurvivesBackward = 1 << 8, // born in backward and kept after that backward
    Quick = 1 << 9,            // freed within a few events of its birth
    OwnPhase = 1 << 10,        // its own stack (or an annotation) named its birth phase, not a neighbour
    // The device's dump holds no allocation history (segments only, or one snapshot entry): every
    // lifetime fact above is vacuous for it, and only frames and sizes can speak.
    NoHistory = 1 << 11,
    // Nothing recorded its birth (no alloc event, no stack) while the dump recorded others': it
    // predates recording. Not set where nothing at all was recorded (a segments-only dump).
    Unrecorded = 1 << 12,
    // Made at or after the run's first forward pass began (where the history shows one): a model
    // is built before its first forward, so what a constructor makes later is not known to be one.
    AfterFirstForward = 1 << 13,
};
constexpr size_t kLifetimeCount = 14;
std::string_view lifetimeName(Lifetime l);
constexpr uint16_t bit(Lifetime l) { return uint16_t(l); }

// A frame pattern: ECMAScript regexes searched in the frame's filename and function name; a frame
// matches when every given part matches. Ids index RuleSet::regexes().
struct FramePattern {
    std::string file; // empty: any
    std::string function;
    int fileRegex = -1;
    int functionRegex = -1;
    bool operator==(const FramePattern& o) const { return file == o.file && function == o.function; }
};

// Parameter / Gradient: an allocation of that pool has the same size (rounded to 512 B).
// HalfParameter: a parameter has twice this size (an fp32 weight cast to 16 bits).
enum class SizeMirror : uint8_t { None, Parameter, Gradient, HalfParameter };
enum class StackCondition : uint8_t { Any, Empty, Present };

// What code may ask of a rule: a rule declares its roles in the rules file ("roles": [...]), and
// code asks for a role, never for a rule's name, so a user's rules file that renames or replaces a
// rule keeps (or, by declaring the role, takes over) what code does with its decisions.
enum RuleRole : uint16_t {
    kRoleWeightCast = 1 << 0,       // a low-precision cached copy of a weight (autocast's cached_cast)
    kRoleCastSurplus = 1 << 1,      // a cast the classifier cannot tell from an input's cast (built-in)
    kRoleFlatGradBuffer = 1 << 2,   // a constructor that allocates a flat parameter buffer and a flat gradient buffer
    kRoleLibraryWorkspace = 1 << 3, // a library's own scratch kept per handle (cuBLAS, cuDNN, cuFFT, NCCL): fixed size
    kRoleMovesParameters = 1 << 4,  // nn.Module moving or converting its tensors (.to, .cuda, _apply): parameters and any .grad
    kRoleIndistinctCopies = 1 << 5, // a parameter, its gradient or its optimizer state from before recording: the capture cannot say which
    kRoleCollectedOutputs = 1 << 6, // outputs the caller gathers on the device across calls of the model (a growing concatenation)
};
constexpr size_t kRuleRoleCount = 7;
std::string_view ruleRoleName(uint16_t role); // "weight_cast", ...

// One ordered rule: the first rule whose every condition holds decides an allocation's pool.
// A hint ("hint": true) decides nothing: where it matches and the rules that do decide name the same
// pool, it raises that decision's confidence (to at most its own). Names of a user's own files and
// functions are hints: a renamed copy of the dump must land in the same pool.
struct Rule {
    std::string name;
    std::string reason;
    Pool pool = Pool::Unknown;
    uint8_t confidence = 70;
    std::vector<FramePattern> framesAny;  // some frame matches one of these (empty: no condition)
    std::vector<FramePattern> framesAll;  // each pattern matches some frame
    std::vector<FramePattern> framesNone; // no frame matches any of these
    std::vector<FramePattern> freeFramesAny;  // the stack that freed it: some frame matches one of these
    std::vector<FramePattern> freeFramesNone; // ... no frame matches any of these (true when never freed)
    int innermost = 0;                    // > 0: frame conditions look at the N innermost frames only
    int innermostPython = 0;              // > 0: framesAny/framesAll look at the N innermost Python frames only
                                          // (framesNone still at the whole stack)
    StackCondition stack = StackCondition::Any;
    uint8_t phaseMask = 0;     // birth phase in this set (bit per Phase); 0: any
    uint8_t freePhaseMask = 0; // free phase in this set; bit kPhaseCount = never freed; 0: any
    uint16_t lifetimeAll = 0;  // all of these hold
    uint16_t lifetimeNone = 0; // none of these hold
    SizeMirror mirrors = SizeMirror::None;
    int64_t minBytes = 0;
    int64_t maxBytes = std::numeric_limits<int64_t>::max();
    uint16_t roles = 0; // RuleRole bits
    bool hint = false;
    std::string origin; // file it came from, for explanations
};

// Frame evidence of a phase; the innermost frame that matches any phase pattern decides.
struct PhasePattern {
    std::string name;
    Phase phase = Phase::Unknown;
    FramePattern pattern;
};

// record_function / external_annotations names that open a phase window. A window decides the phase
// of the events inside it whose own frames name none (frames win: Lightning runs forward and backward
// inside optimizer.step's closure, and the frames say so).
struct AnnotationPattern {
    std::string name;
    std::string match; // regex over the annotation name
    int regex = -1;
    Phase phase = Phase::Unknown;
};


// The ordered rules plus the phase evidence they rely on. Built from the default rules file and
// any user rules file; immutable once loaded.
class RuleSet {
public:
    // Parses one rules document (JSON text). Throws LoadError naming the rule (index and name) and field.
    static RuleSet parse(std::string_view jsonText, const std::string& origin);
    static RuleSet fromFile(const std::string& path);

    // Extends this set with `user`: a rule (or phase/annotation pattern) with an existing name replaces
    // it in place; "disabled": true removes it; new rules go before the built-in ones unless they say
    // "before"/"after" another rule, so that a user rule wins over a generic built-in one.
    void merge(const RuleSet& user);

    // The rules.json compiled into the binary at build time. Which files extend it (a per-user file,
    // --rules) is the application's choice, never read here: core reads no configuration on its own.
    static RuleSet builtin();

    const std::vector<Rule>& rules() const { return m_rules; }
    const std::vector<PhasePattern>& phasePatterns() const { return m_phases; }
    const std::vector<AnnotationPattern>& annotationPatterns() const { return m_annotations; }
    const std::vector<TextPattern>& regexes() const { return m_regexes; }
    const std::vector<std::string>& sources() const { return m_sources; }

private:
    struct Placement {
        std::string before, after;
    };
    void internAll();
    int internRegex(const std::string& source);

    std::vector<Rule> m_rules;
    std::vector<Placement> m_placement; // parallel to m_rules: how merge() places them into another set
    std::vector<std::string> m_deletedRules, m_deletedPhases, m_deletedAnnotations; // "disabled": true
    std::vector<PhasePattern> m_phases;
    std::vector<AnnotationPattern> m_annotations;
    std::vector<TextPattern> m_regexes;
    std::vector<std::string> m_sources;
};

} // namespace poolscope
