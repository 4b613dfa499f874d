#pragma once
#include "core/classify/classifier.h"
#include "core/classify/pool.h"
#include "core/classify/pool_series.h"

#include <array>
#include <span>
#include <string>
#include <string_view>

namespace poolscope {

// The verdict in words at one moment, e.g.
// "At the OOM: optimizer_state 25.38 GiB (49%), gradient 12.72 GiB, parameter 12.95 GiB, activation
//  0.05 GiB. The wall is optimizer state: shard it (ZeRO/FSDP), offload it, or pick a lower-state
//  optimizer; cutting the micro-batch frees at most 0.05 GiB."
struct Verdict {
    Pool dominant = Pool::Unknown; // CachedFree when reserved-but-free memory outweighs every pool
    std::string caveat;            // what the dump cannot show, said first: "No allocation history: ..."; may be empty
    std::string breakdown;         // "At the OOM: optimizer_state 25.38 GiB (49%), ..."
    std::string advice;            // "The wall is optimizer state: ..."
    std::string sentence;          // caveat + " " + breakdown + " " + advice (no caveat: breakdown + " " + advice)
    int confidence = -1;           // the classifier's confidence in the dominant pool's bytes; -1: not given
    bool history = true;           // the dump holds allocation history
    uint8_t evidence = 0;          // EvidenceKind bits behind most of the wall's bytes; 0 when not given or none
};

// How sure the classifier is of the bytes alive at one moment, per pool: the byte-weighted mean of the
// alive allocations' confidences (0-100); -1 where the pool holds none of them (and for CachedFree,
// which is measured, not classified).
using PoolConfidence = std::array<int, kPoolCount>;
PoolConfidence aliveConfidence(const Classification& c, const std::vector<Allocation>& allocations, std::span<const AllocId> alive);

// Below this the verdict says "probably" and how sure it is.
constexpr int kSureConfidence = 70;
// Below this the verdict names no wall and gives no advice: a guess is not a reason to act.
constexpr int kGuessConfidence = 50;

// What the dump could show about the bytes alive at one moment: the verdict's evidence. Every face
// (report text and JSON, the window's breakdown, the review image) reads the same figures.
struct MomentEvidence {
    bool history = true;       // Classification::history
    PoolConfidence confidence; // as aliveConfidence
    // Per pool, bytes by the EvidenceKind bits of the rule that decided them (index 0: no evidence).
    std::array<std::array<int64_t, 1u << kEvidenceKinds>, kPoolCount> bytesByEvidence{};
    // Per pool, bytes alive that the classifier placed below kGuessConfidence. A pool whose mean
    // confidence passes 50 % while most of its bytes are guesses (a few sure weights beside gigabytes
    // of "a weight or an earlier call's graph") is no wall to act on either.
    std::array<int64_t, kPoolCount> guessedBytes{};
    // Allocated bytes alive in each private pool, largest first (the default pool not listed).
    std::vector<std::pair<PrivatePoolId, int64_t>> privatePools;
    // The share of the temporary pool's bytes that scale with the micro-batch: temporaries born in a
    // forward or backward pass (or in no known phase), not the optimizer step's or zero_grad's scratch.
    // With activations and inputs they bound what cutting the micro-batch frees (weight casts,
    // workspaces and the KV cache, an engine's budget, do not count).
    double temporaryBatchShare = 1.0;

    // The moment in its run, so the verdict names a wall only where there is one: at an OOM, or
    // where reserved memory comes near a known capacity (an OOM's reserved + free, or one the user
    // gave). Elsewhere it describes the largest pool. Filled by momentReport (atOom, capacity,
    // reserved) and momentEvidence (from RunFacts: training, backward).
    bool atOom = false;
    int64_t capacity = -1; // bytes; -1: unknown
    int64_t reserved = -1; // bytes reserved at the moment; -1: unknown
    // The run shows a backward, optimizer state or an optimizer step (Yes), none with history (No),
    // or cannot say (Unknown: no history). Sharding advice needs Yes.
    Known training = Known::Unknown;
    Known backward = Known::Unknown; // a training backward ran (RunFacts::backward)
    // Forward passes the history shows (RunFacts::forwardPasses), and whether the autograd engine
    // was seen letting go of a forward's products (RunFacts::gradMode Yes: graphs built). Several
    // forwards that no backward followed, with no graph seen, are a run that does not train; one
    // forward that ran out of memory may be a training step's first.
    size_t forwardPasses = 0;
    Known gradMode = Known::Unknown;
    // No backward ran, yet each call's tensors outlived it (RunFacts::graphsKeptAcrossCalls): the
    // activations are graphs the program keeps, and no_grad / inference_mode is the knob before
    // checkpointing.
    bool graphsKeptAcrossCalls = false;
    // No backward ran, and a forward's autograd graph was deleted without one before any OOM
    // (RunFacts::graphsDroppedWithoutBackward): grad mode on for a forward that trains nothing.
    bool graphsDroppedWithoutBackward = false;
    // The run already shards its parameters (RunFacts::parametersGathered): no advice to shard.
    bool parametersSharded = false;
    // Gradient bytes alive at the moment: where no backward made them (backward not Yes) they are
    // stale .grad the parameters still hold, and dropping them is the first knob.
    int64_t gradientBytes = 0;
    // Bytes from before recording that are a parameter, its gradient or its optimizer state with
    // nothing recorded to say which (rules with kRoleIndistinctCopies): the verdict says so first.
    int64_t indistinctBytes = 0;
    // How many times each of their weight sizes is held (Classification::preexistingCopies: 4 or 3).
    int indistinctCopies = 0;
    // Outputs the caller gathers on the device across calls of the model (rules with
    // kRoleCollectedOutputs): each concatenation copies them all again and leaves the older copy to
    // the cache, so they grow per batch and fragment; moving them to the host as they come is the knob.
    int64_t collectedBytes = 0;
    // Temporaries the optimizer's step made and still holds (at an OOM inside the step: the update's
    // list of outputs, torch._foreach_sqrt's one block per parameter). The fused and the per-tensor
    // paths do without that list: the knob where it is a tenth of the memory at an OOM.
    int64_t stepScratchBytes = 0;
    // At an OOM in a forward or backward after the run's first optimizer step: the optimizer state
    // alive that the recording saw made (lazily, by that step), and the run's peak before the step
    // began (-1: not such a moment). Where the run peaked below what the OOM needed before the state
    // existed, the state is what changed: the verdict says so, so that the batch is not the only knob.
    int64_t stateMadeByFirstStep = 0;
    int64_t peakBeforeState = -1;
    // The allocator's replay at this OOM found what is alive plus the request over what PyTorch could
    // use (AllocatorAdvice::nothingHelps): no placement would have fit it, so the cache, however
    // large, is not the wall; the largest allocated pool is (applyAllocatorAdvice sets it).
    bool overCapacityAlive = false;
    bool wall() const { return atOom || (capacity > 0 && reserved >= 0 && reserved * 10 >= capacity * 9); }

    MomentEvidence() { confidence.fill(-1); }
    // The evidence bits behind most of the pool's bytes (0: none, or nothing alive).
    uint8_t mainEvidence(Pool p) const;
    int64_t bytesWith(Pool p, uint8_t evidence) const { return bytesByEvidence[size_t(p)][evidence]; }
};
MomentEvidence momentEvidence(const Classification& c, const std::vector<Allocation>& allocations, std::span<const AllocId> alive);
// Fills stateMadeByFirstStep and peakBeforeState for an OOM at event `at` (a no-op elsewhere).
void addStateSinceFirstStep(MomentEvidence& ev, const Classification& c, const DeviceTrace& dev, std::span<const AllocId> alive,
                            EventIndex at);

// What a dump without allocation history says first.
constexpr std::string_view kNoHistoryCaveat = "No allocation history: pools are inferred from sizes and frames only.";

// `moment` names the moment: "At the OOM", "At the peak", "At event #1234".
// Pools by their display names; the largest one's share says "of allocated". Cached free is named when it is the wall or at least a tenth
// of what is allocated. Empty pools and pools under 0.005 GiB are left out of the list. With
// `confidence`, a wall the classifier is less than kSureConfidence sure of is named as probable.
Verdict makeVerdict(std::string_view moment, const PoolBytes& pools, const PoolConfidence* confidence = nullptr);
// The same, honest about what the dump could show: without history it says so first and never
// concludes absence ("no activations are alive") from missing evidence; a wall that sizes alone
// suggest, or that nothing names, is said to be that; CUDA-graph and MemPool memory is named.
Verdict makeVerdict(std::string_view moment, const PoolBytes& pools, const MomentEvidence& evidence);

// What to do when `pool` is the wall, as one clause ("shard it (ZeRO/FSDP), ...").
std::string_view poolAdvice(Pool pool);
// The same, for what the run shows: no sharding where it shows no training (no gradients, no
// optimizer), stale gradients where no backward made them, allocator settings (allocatorAdvice)
// for cached-free memory.
std::string poolAdviceFor(Pool pool, const MomentEvidence& evidence);
// "optimizer state", "cached free memory (reserved - allocated)"
std::string_view poolPhrase(Pool pool);

} // namespace poolscope
