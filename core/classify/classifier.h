#pragma once
#include "core/classify/phases.h"
#include "core/classify/pool.h"
#include "core/classify/rules.h"
#include "core/facts/run_facts.h"
#include "core/model/trace.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope {

// The kinds of evidence a decision rests on (bits), so every face can say what a pool's bytes are
// known from: a frame of the allocation's own stack (or of its free), its phase and lifetime in the
// recorded history, or its size alone. None of them: nothing in the dump spoke.
enum EvidenceKind : uint8_t {
    kEvidenceFrames = 1,
    kEvidenceLifetime = 2,
    kEvidenceSize = 4,
};
constexpr uint8_t kEvidenceKinds = 3;
std::string evidenceText(uint8_t evidence); // "frames + lifetime", "sizes only", "no evidence"

// What decided a pool: a rule of the rule set, or one of the classifier's own fallbacks.
struct RuleInfo {
    std::string name;
    std::string reason;
    std::string origin; // rules file, or "built-in"
    Pool pool = Pool::Unknown;
    uint8_t evidence = 0; // EvidenceKind bits its conditions rest on
    uint16_t roles = 0;   // RuleRole bits: what code may ask of its decisions (never its name)
    bool has(RuleRole role) const { return (roles & role) != 0; }
};
uint8_t ruleEvidence(const Rule& r);

// A memory pool of the caching allocator other than the default one (Segment::poolId != (0, 0)):
// (N, 0) is a pool a CUDA graph made for itself when captured without one; (0, N) is a pool the
// program made (torch.cuda.graph_pool_handle() shared by graphs, or torch.cuda.MemPool()). Its
// memory serves that pool only: what is free in it is not free for anyone else.
struct PrivatePoolId {
    int64_t first = 0, second = 0;
    bool operator==(const PrivatePoolId&) const = default;
    bool isDefault() const { return first == 0 && second == 0; }
    bool madeByGraph() const { return first != 0 && second == 0; }
    std::string label() const; // "CUDA-graph private pool (3,0)", "private pool (0,1) (graph_pool_handle or MemPool)"
};

// One DeviceTrace's allocations, each with a pool, a confidence and the rule that decided it.
// Vectors are indexed like DeviceTrace::allocations.
struct Classification {
    int device = 0;
    DeviceKind kind = DeviceKind::Cuda;
    std::vector<Pool> pool;
    std::vector<uint8_t> confidence; // 0-100
    std::vector<uint16_t> rule;      // index into rules
    std::vector<RuleInfo> rules;     // the rule set's rules, kNoRuleName ("no rule matched"), then built-in evidence
                                     // such as the size ledger
    uint16_t noRule = 0;             // index of the "no rule matched" entry

    // The evidence the rules saw, kept so explanations quote it.
    std::vector<Phase> birthPhase;
    std::vector<Phase> freePhase; // Phase::Unknown with lifetime AliveAtEnd: never freed
    std::vector<uint16_t> lifetime;
    PhaseTimeline phases;
    // The run's structure (passes, steps, backward, grad mode, parameters, gradients): built once
    // here, read by the Document's users through DeviceDocument::facts().
    RunFacts facts;
    // Sources without final segments (Kineto) anchor DeviceTrace::initialAllocated on the profiler's
    // own total: the part no allocation accounts for predates profiling and is never touched. The
    // rules judge it like a pre-existing allocation alive throughout with no stack.
    int64_t untrackedBytes = 0;
    Pool untrackedPool = Pool::Unknown;
    uint16_t untrackedRule = 0;
    uint8_t untrackedConfidence = 0; // below 50: the profiler recorded only its total (judgeUntracked)

    // Counts of allocations per size (rounded up to 512 B, the allocator's granularity) in the
    // parameter, gradient and optimizer-state pools: the size-mirroring evidence.
    std::unordered_map<int64_t, uint32_t> parameterSizes, gradientSizes, stateSizes;

    // Whether the device's dump holds allocation history (alloc/free entries). Without it pools come
    // from frames and sizes only, and absence ("no activations are alive") cannot be concluded.
    bool history = true;

    // Where every weight size from before recording held more than once is held k times or a
    // multiple of k (k = 4 or 3; structural_copies.cpp), k; else 0. By count, 1/k of those bytes are
    // parameters, whichever blocks they are: the verdict says so (MomentEvidence::indistinctCopies).
    int preexistingCopies = 0;

    // Private pools (see PrivatePoolId): privatePools[0] is the default pool; privatePool[i] indexes
    // it for allocation i, from the final segment holding its address. Empty when every segment is
    // in the default pool. An allocation whose address no final segment holds counts as default.
    std::vector<PrivatePoolId> privatePools{PrivatePoolId{}};
    std::vector<uint16_t> privatePool;
    uint16_t privatePoolOf(size_t allocation) const { return allocation < privatePool.size() ? privatePool[allocation] : 0; }

    size_t size() const { return pool.size(); }
    uint8_t evidenceOf(size_t allocation) const { return rules[rule[allocation]].evidence; }
};

constexpr std::string_view kNoRuleName = "no-rule-matched";
constexpr int kQuickEvents = 32; // "freed within a few events": the Quick lifetime

// Two passes over the allocations: the first without size-mirroring rules, to learn which sizes
// the parameters and gradients have; the second with them. O(allocations x rules), no regex work
// per allocation (see FrameMatcher).
Classification classify(const Trace& trace, const DeviceTrace& dev, const RuleSet& rules);

struct Explanation {
    AllocId id;
    Pool pool = Pool::Unknown;
    uint8_t confidence = 0;
    std::string rule;
    std::string reason;
    std::vector<std::string> evidence; // one human-readable fact per line
};

Explanation explain(const Trace& trace, const DeviceTrace& dev, const Classification& c, AllocId id);

// The size allocations are compared by: pre-existing allocations carry their block's rounded size,
// traced ones the requested size; both round up to the allocator's 512-byte granularity.
constexpr int64_t mirrorKey(int64_t bytes) { return (bytes + 511) / 512 * 512; }

} // namespace poolscope
