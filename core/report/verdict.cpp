#include "core/report/verdict.h"

#include "core/report/allocator_advice.h"
#include "core/classify/pool_display.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace poolscope {
namespace {

// Verdicts are read side by side across devices and runs: always GiB, two decimals.
std::string gib(int64_t bytes)
{
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(int64_t(1) << 30));
    return buf;
}

constexpr int64_t kListedMinimum = (int64_t(1) << 30) / 200; // ~0.005 GiB: shows as at least 0.01

} // namespace

std::string_view poolPhrase(Pool pool)
{
    switch (pool) {
    case Pool::Parameter:
        return "parameters";
    case Pool::CastCache:
        return "autocast's weight casts";
    case Pool::KvCache:
        return "the KV cache";
    case Pool::Workspace:
        return "library workspaces";
    case Pool::Gradient:
        return "gradients";
    case Pool::OptimizerState:
        return "optimizer state";
    case Pool::Activation:
        return "activations";
    case Pool::Temporary:
        return "temporary buffers";
    case Pool::Input:
        return "input batches";
    case Pool::Other:
        return "other memory";
    case Pool::Unknown:
        return "unclassified memory";
    case Pool::CachedFree:
        return "cached free memory (reserved - allocated)"; // the one explanation: kCachedFreeExplained
    }
    return "memory";
}

std::string_view poolAdvice(Pool pool)
{
    switch (pool) {
    case Pool::Parameter:
        return "shard them (ZeRO-3/FSDP), offload them, or hold them in lower precision (bf16, 8-bit, 4-bit)";
    case Pool::CastCache:
        return "autocast keeps a low-precision copy of every weight the forward used until autocast exits; hold the weights "
               "in bf16 themselves (fp32 master copies in the optimizer), or pass cache_enabled=False to torch.autocast; the "
               "micro-batch does not change it";
    case Pool::KvCache:
        return "lower the engine's cache budget (vLLM gpu_memory_utilization, max_model_len or max_num_seqs; SGLang "
               "mem_fraction_static; Hugging Face generate: fewer new tokens or a quantized or offloaded cache); sharding the "
               "weights does not shrink it";
    case Pool::Workspace:
        return "the libraries size these themselves (cuBLAS: CUBLAS_WORKSPACE_CONFIG, cuDNN: torch.backends.cudnn.benchmark, "
               "NCCL: NCCL_BUFFSIZE); they are rarely the wall, so look at the next largest pool";
    case Pool::Gradient:
        return "shard them (ZeRO-2/FSDP) or keep them in lower precision; gradient accumulation does not shrink them";
    case Pool::OptimizerState:
        return "shard it (ZeRO/FSDP), offload it, or pick a lower-state optimizer";
    case Pool::Activation:
        return "checkpoint them (torch.utils.checkpoint), cut the micro-batch or the sequence length, or use FlashAttention";
    case Pool::Temporary:
        return "find the largest short-lived buffers at this moment (poolscope explain) and chunk the operation that makes them";
    case Pool::Input:
        return "cut the batch, or keep it on the host until it is needed";
    case Pool::Other:
    case Pool::Unknown:
        return "run poolscope explain on its largest allocations, or add a rule that names them";
    case Pool::CachedFree:
        // No rule of thumb: at an OOM the report replays the trace under other allocator settings and
        // names one only when it fits (core/report/allocator_advice.cpp); elsewhere the user asks.
        return "the allocator holds memory it could not hand out; whether an allocator setting would help is answered by "
               "replay (poolscope whatif FILE --alloc-conf expandable_segments:True)";
    }
    return "";
}

namespace {

// Why the gradients exist although no backward made them, as far as the dump can say.
std::string staleGradientsWhy(const MomentEvidence& ev)
{
    return ev.backward == Known::No ? "no backward in this recording made them" : "the dump shows no backward that made them";
}

// What outputs gathered on the device across calls are, and their knob, named where the rules saw them.
std::string collectedOutputsAdvice(int64_t bytes)
{
    return gib(bytes) + " are outputs the program gathers on the device across calls of the model, concatenated per "
                        "call, so each call copies all of them again and leaves the older copy in the cache: move each "
                        "call's outputs to the host as they come (Hugging Face Trainer: eval_accumulation_steps; a loop of "
                        "your own: .cpu() on each output), or keep them in a list and concatenate once at the end";
}

constexpr std::string_view kDropGradients =
    "drop them before moving or evaluating the model (optimizer.zero_grad(set_to_none=True) or "
    "model.zero_grad(set_to_none=True), or requires_grad_(False))";

} // namespace

std::string poolAdviceFor(Pool pool, const MomentEvidence& ev)
{
    if (ev.parametersSharded && ev.training == Known::Yes) {
        // FSDP / ZeRO-3: the state is sharded already; the knobs are what is gathered at once, the
        // number of ranks, offloading and precision.
        switch (pool) {
        case Pool::Parameter:
            return "they are sharded already (each layer's parameters are gathered for its use and let go of after it, "
                   "FSDP/ZeRO-3 style): gather fewer layers at once (FSDP: no extra prefetch, reshard_after_forward=True; "
                   "ZeRO-3: smaller stage3_prefetch_bucket_size, stage3_max_live_parameters and stage3_max_reuse_distance), "
                   "shard over more ranks, offload them, or hold them in lower precision";
        case Pool::Gradient:
            return "they are reduce-scattered into shards already (FSDP/ZeRO-3): smaller reduction buckets "
                   "(ZeRO-3 reduce_bucket_size), more ranks, or a lower reduce precision shrink them; gradient "
                   "accumulation does not";
        case Pool::OptimizerState:
            return "it is sharded already with the parameters (FSDP/ZeRO-3): offload it (FSDP2 CPUOffloadPolicy, ZeRO "
                   "offload_optimizer), shard over more ranks, or pick a lower-state optimizer";
        default:
            break;
        }
    }
    switch (pool) {
    case Pool::Parameter:
        if (ev.training != Known::Yes) {
            std::string advice = "hold them in lower precision (bf16, 8-bit or 4-bit weights), offload part of them to the host, or split "
                                 "the model across GPUs (tensor or pipeline parallel)";
            // Stale gradients beside the weights (a model moved or evaluated while its parameters held
            // .grad) are the cheapest knob: they go with one call.
            if (ev.backward != Known::Yes && ev.gradientBytes > 0) {
                char gib[48];
                std::snprintf(gib, sizeof gib, "%.2f GiB", double(ev.gradientBytes) / double(int64_t(1) << 30));
                advice = "first, " + std::string(gib) + " beside them are gradients the parameters still hold (.grad; " +
                         staleGradientsWhy(ev) + "): " + std::string(kDropGradients) + "; then, if it still does not fit, " + advice;
            }
            return advice;
        }
        break;
    case Pool::Gradient:
        if (ev.backward != Known::Yes)
            return staleGradientsWhy(ev) + ": they are gradients the parameters still hold (.grad); " + std::string(kDropGradients);
        break;
    case Pool::Activation:
        // Only from calls that kept their tensors: a forward's products let go of after an OOM are
        // the exception unwinding, under inference_mode as much as with grad on.
        if (ev.graphsKeptAcrossCalls && ev.training != Known::Yes)
            return "no backward ran, yet each call of the model left its tensors alive after the next call had run, as an "
                   "autograd graph does while the program holds an output of the call (grad mode on): run evaluation and "
                   "inference under torch.no_grad() or torch.inference_mode(), and keep outputs .detach()ed or .cpu(); only if "
                   "this run trains: " + std::string(poolAdvice(pool));
        // A graph built and deleted with no backward: the forward ran with grad on and trained nothing,
        // so what it kept for a backward was kept for nothing.
        if (ev.graphsDroppedWithoutBackward && ev.training != Known::Yes)
            return "a forward ran with grad mode on and its graph was deleted without a backward: run such forwards under "
                   "torch.no_grad(), which keeps none of these activations; only if this run trains: " +
                   std::string(poolAdvice(pool));
        // Forwards that no backward followed and no graph seen: a run that does not train, so
        // checkpointing has nothing to give back; what is alive is the calls' outputs and the forward's
        // working set. One forward and nothing after it that trains is not that: a training step's
        // first forward (Adam makes its state at the first step, so no state yet either) and an
        // inference call leave the same dump, so both knobs, each with the case it is for.
        if (ev.backward == Known::No && ev.training != Known::Yes && ev.gradMode != Known::Yes) {
            if (ev.forwardPasses >= 2)
                return "no backward followed any of the " + std::to_string(ev.forwardPasses) +
                       " forwards, so checkpointing gives nothing back: cut the batch, the resolution or the sequence length, "
                       "or run the largest operation in chunks (attention slicing, tiled VAE decoding, chunked prefill); where "
                       "grad mode was on, run such calls under torch.no_grad()";
            if (ev.forwardPasses == 1)
                return "whether this forward trains the dump cannot tell (one forward, no backward, no optimizer state): cut "
                       "the micro-batch or the sequence length; if it trains, checkpoint them (torch.utils.checkpoint); if not, "
                       "run it under torch.no_grad()";
        }
        break;
    case Pool::CachedFree:
        return allocatorAdvice(ev);
    case Pool::Other: {
        int64_t other = 0;
        for (int64_t b : ev.bytesByEvidence[size_t(Pool::Other)])
            other += b;
        if (ev.collectedBytes > 0 && ev.collectedBytes * 2 >= other)
            return collectedOutputsAdvice(ev.collectedBytes);
        break;
    }
    default:
        break;
    }
    return std::string(poolAdvice(pool));
}

PoolConfidence aliveConfidence(const Classification& c, const std::vector<Allocation>& allocations, std::span<const AllocId> alive)
{
    std::array<double, kPoolCount> weighted{}, bytes{};
    for (AllocId id : alive) {
        if (!id.valid() || id.value >= c.size() || id.value >= allocations.size())
            continue;
        const size_t p = size_t(c.pool[id.value]);
        const double b = double(std::max<int64_t>(allocations[id.value].size, 0));
        weighted[p] += b * c.confidence[id.value];
        bytes[p] += b;
    }
    // Memory a profiler trace shows only as its opening total is alive at every moment.
    if (c.untrackedBytes > 0 && c.untrackedPool != Pool::Unknown) {
        weighted[size_t(c.untrackedPool)] += double(c.untrackedBytes) * c.untrackedConfidence;
        bytes[size_t(c.untrackedPool)] += double(c.untrackedBytes);
    }
    PoolConfidence out;
    out.fill(-1);
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (bytes[p] > 0)
            out[p] = int(std::lround(weighted[p] / bytes[p]));
    return out;
}

uint8_t MomentEvidence::mainEvidence(Pool p) const
{
    const auto& row = bytesByEvidence[size_t(p)];
    size_t best = 0;
    for (size_t e = 1; e < row.size(); ++e)
        if (row[e] > row[best])
            best = e;
    return uint8_t(best);
}

void addStateSinceFirstStep(MomentEvidence& ev, const Classification& c, const DeviceTrace& dev, std::span<const AllocId> alive,
                            EventIndex at)
{
    const RunFacts& f = c.facts;
    if (!ev.atOom || at < 0 || size_t(at) >= c.phases.phase.size() || f.firstOptimizerStep == kNoEvent || f.firstOptimizerStep >= at)
        return;
    // The OOM's own entry may carry no phase (no frames): the last event that has one says where it was.
    const Phase phase = phaseAtOrBefore(c.phases, at);
    if (phase != Phase::Forward && phase != Phase::Backward)
        return;
    int64_t state = 0;
    for (AllocId id : alive) {
        if (!id.valid() || id.value >= c.size())
            continue;
        const Allocation& a = dev.allocations[id.value];
        if (c.pool[id.value] == Pool::OptimizerState && !a.preexisting() && a.allocEvent >= f.firstOptimizerStep &&
            c.phases.phase[size_t(a.allocEvent)] == Phase::OptimizerStep)
            state += a.size;
    }
    if (state == 0)
        return; // nothing to say: skip the walk for the peak
    int64_t peak = dev.initialAllocated;
    for (EventIndex e = 0; e < f.firstOptimizerStep; ++e)
        peak = std::max(peak, dev.allocatedAt(e));
    // Only where the run before the state fit what this moment needed: otherwise the state is not what
    // changed.
    int64_t request = 0;
    for (const OomEvent& o : dev.ooms)
        if (o.index == at)
            request = o.requestedBytes;
    if (peak >= dev.allocatedAt(at) + request)
        return;
    ev.stateMadeByFirstStep = state;
    ev.peakBeforeState = peak;
}

MomentEvidence momentEvidence(const Classification& c, const std::vector<Allocation>& allocations, std::span<const AllocId> alive)
{
    MomentEvidence m;
    m.history = c.history;
    m.indistinctCopies = c.preexistingCopies;
    m.backward = c.facts.backward;
    m.forwardPasses = c.facts.forwardPasses;
    m.gradMode = c.facts.gradMode;
    m.graphsKeptAcrossCalls = c.facts.backward == Known::No && c.facts.graphsKeptAcrossCalls;
    m.graphsDroppedWithoutBackward = c.facts.backward == Known::No && c.facts.graphsDroppedWithoutBackward;
    m.parametersSharded = c.facts.parametersGathered;
    // Gradients alone are no training: a model moved while it held stale .grad has them too.
    if (c.facts.backward == Known::Yes || !c.facts.optimizerState.empty() || c.facts.optimizerSteps > 0)
        m.training = Known::Yes;
    else if (c.history)
        m.training = Known::No;
    m.confidence = aliveConfidence(c, allocations, alive);
    int64_t temporary = 0, temporaryScaled = 0;
    std::vector<int64_t> perPool(c.privatePools.size(), 0);
    for (AllocId id : alive) {
        if (!id.valid() || id.value >= c.size() || id.value >= allocations.size())
            continue;
        const size_t i = id.value;
        const int64_t b = std::max<int64_t>(allocations[i].size, 0);
        const Pool p = c.pool[i];
        m.bytesByEvidence[size_t(p)][c.evidenceOf(i) & ((1u << kEvidenceKinds) - 1)] += b;
        if (c.confidence[i] < kGuessConfidence)
            m.guessedBytes[size_t(p)] += b;
        if (const uint16_t pp = c.privatePoolOf(i); pp != 0 && pp < perPool.size())
            perPool[pp] += b;
        const Phase birth = i < c.birthPhase.size() ? c.birthPhase[i] : Phase::Unknown;
        if (p == Pool::Gradient)
            m.gradientBytes += b;
        if (c.rules[c.rule[i]].has(kRoleIndistinctCopies))
            m.indistinctBytes += b;
        if (c.rules[c.rule[i]].has(kRoleCollectedOutputs))
            m.collectedBytes += b;
        if (p == Pool::Temporary) {
            temporary += b;
            if (birth != Phase::OptimizerStep && birth != Phase::ZeroGrad)
                temporaryScaled += b;
            else if (birth == Phase::OptimizerStep)
                m.stepScratchBytes += b;
        }
    }
    if (temporary > 0)
        m.temporaryBatchShare = double(temporaryScaled) / double(temporary);
    for (size_t k = 1; k < perPool.size(); ++k)
        if (perPool[k] > 0)
            m.privatePools.emplace_back(c.privatePools[k], perPool[k]);
    std::stable_sort(m.privatePools.begin(), m.privatePools.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return m;
}

namespace {

// What the capture cannot tell about copies from before recording, and what counting still tells:
// with every weight size held k times, 1/k of the bytes are the parameters, whichever blocks they
// are. Which block is which the segment layout does not say either (docs/classifier.md, "Copies from
// before recording: what the segment layout shows"): a model's own weights sit in same-size pairs
// as Adam's moments do, and every copy can sit behind memory a pass let go of.
std::string indistinctCopiesCaveat(int64_t bytes, int copies)
{
    std::string s = "This capture cannot tell parameters from gradients or optimizer state made before recording: " + gib(bytes) +
                    " from before recording hold ";
    if (copies == 4)
        s += "every weight size 4 times (or a multiple of 4): by count a quarter, " + gib(bytes / 4) +
             ", are the parameters, and the other three copies are most likely the gradients (" + gib(bytes / 4) +
             ") and Adam's two moments (" + gib(bytes / 2) + " of optimizer state).";
    else if (copies == 3)
        s += "every weight size 3 times (or a multiple of 3): by count a third, " + gib(bytes / 3) +
             ", are the parameters, and the other two copies are a gradient and a momentum (SGD) or two moments (Adam "
             "after zero_grad(set_to_none=True)).";
    else
        s += "each weight's size several times over (a parameter with its gradient and optimizer moments).";
    return s + " Which block is which no stack, recorded step or segment layout says, so all are shown as parameters, a guess.";
}

Verdict buildVerdict(std::string_view moment, const PoolBytes& pools, const PoolConfidence* confidence, const MomentEvidence* ev)
{
    Verdict v;
    if (ev && !ev->history) {
        v.history = false;
        v.caveat = std::string(kNoHistoryCaveat);
    }
    if (ev && ev->indistinctBytes >= kListedMinimum)
        v.caveat += std::string(v.caveat.empty() ? "" : " ") + indistinctCopiesCaveat(ev->indistinctBytes, ev->indistinctCopies);
    auto finish = [&] {
        v.sentence = v.caveat.empty() ? v.breakdown : v.caveat + " " + v.breakdown;
        if (!v.advice.empty())
            v.sentence += " " + v.advice;
        return v;
    };
    const int64_t allocated = allocatedBytes(pools);
    const int64_t cached = pools[size_t(Pool::CachedFree)];
    std::vector<Pool> order;
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (pools[p] > 0)
            order.push_back(Pool(p));
    std::stable_sort(order.begin(), order.end(), [&](Pool a, Pool b) { return pools[size_t(a)] > pools[size_t(b)]; });

    v.breakdown = std::string(moment) + ":";
    if (order.empty() && cached <= 0) {
        v.caveat.clear(); // nothing to infer
        v.breakdown += " nothing is allocated.";
        return finish();
    }
    v.dominant = order.empty() ? Pool::CachedFree : order.front();
    if (cached > 0 && (order.empty() || cached > pools[size_t(order.front())]) && !(ev && ev->overCapacityAlive && !order.empty()))
        v.dominant = Pool::CachedFree;

    bool first = true;
    for (Pool p : order) {
        const int64_t b = pools[size_t(p)];
        if (!first && b < kListedMinimum)
            continue;
        v.breakdown += std::string(first ? " " : ", ") + std::string(poolDisplayName(p)) + " " + gib(b);
        if (first && allocated > 0)
            v.breakdown += " (" + std::to_string(int(std::lround(100.0 * double(b) / double(allocated)))) + "% of allocated)";
        first = false;
    }
    if (cached > 0 && (v.dominant == Pool::CachedFree || cached * 10 >= allocated))
        v.breakdown += std::string(first ? " " : "; ") + std::string(kCachedFreeLabel) + " " + gib(cached);
    if (ev)
        for (const auto& [id, bytes] : ev->privatePools)
            if (bytes >= kListedMinimum)
                v.breakdown += "; " + gib(bytes) + " in " + id.label();
    v.breakdown += ".";

    if (confidence && v.dominant != Pool::CachedFree)
        v.confidence = (*confidence)[size_t(v.dominant)];
    const std::string phrase(poolPhrase(v.dominant));
    const std::string advice = ev ? poolAdviceFor(v.dominant, *ev) : std::string(poolAdvice(v.dominant));
    // A wall only where there is one: at an OOM, or near a known capacity. Elsewhere the verdict
    // describes the largest pool (the legacy overload, without evidence, keeps calling it the wall).
    const bool wall = !ev || ev->wall();
    const std::string isWall = wall ? "The wall is " : "The largest pool is ";
    const std::string wallIs = wall ? "the wall is " : "the largest pool is ";
    bool nothingSays = v.dominant == Pool::Unknown;
    if (ev && v.dominant != Pool::CachedFree) {
        v.evidence = ev->mainEvidence(v.dominant);
        nothingSays = nothingSays || v.evidence == 0;
    }
    bool guess = false; // below kGuessConfidence: no wall named, no knob given
    if (nothingSays && ev && !ev->history) {
        v.advice = std::string(wall ? "The dump cannot name the wall: " : "The dump cannot name the largest pool: ") +
                   gib(pools[size_t(v.dominant)]) +
                   " have no allocation history and no frame of PyTorch or a library that says what they are (the program's own "
                   "function names are not evidence); record torch.cuda.memory._record_memory_history() before the OOM to name them";
    } else if (nothingSays) {
        v.advice = isWall + phrase + " (no frame, phase or lifetime names it): " + std::string(poolAdvice(Pool::Unknown));
    } else if (ev && v.dominant == Pool::CachedFree && !wall) {
        v.advice = "The largest share is cached free memory (reserved - allocated), which the allocator keeps for reuse; with "
                   "no OOM and no capacity near, it costs nothing";
        guess = true; // no knob: nothing to fix
    } else if (ev && v.confidence >= 0 && v.confidence < kGuessConfidence) {
        v.advice = std::string(wall ? "The dump cannot name the wall" : "The dump cannot name the largest pool") + ": it is " +
                   (v.evidence == kEvidenceSize ? "by sizes alone " : "") + "perhaps " + phrase + ", at " +
                   std::to_string(v.confidence) + "% confidence (a guess; poolscope explain shows the evidence), so no advice is given";
        guess = true;
    } else if (ev && v.confidence >= 0 && ev->guessedBytes[size_t(v.dominant)] * 2 > pools[size_t(v.dominant)]) {
        v.advice = std::string(wall ? "The dump cannot name the wall" : "The dump cannot name the largest pool") + ": it is perhaps " +
                   phrase + ", but " + gib(ev->guessedBytes[size_t(v.dominant)]) + " of its " + gib(pools[size_t(v.dominant)]) +
                   " are a guess below " + std::to_string(kGuessConfidence) +
                   "% confidence (poolscope explain shows the evidence), so no advice is given";
        guess = true;
    } else if (ev && v.evidence == kEvidenceSize) {
        v.advice = "Sizes alone suggest " + wallIs + phrase + " (a suggestion, not evidence" +
                   (v.confidence >= 0 ? ": " + std::to_string(v.confidence) + "% confidence" : std::string()) + "): " + advice;
    } else if (v.confidence >= 0 && v.confidence < kSureConfidence) {
        v.advice = isWall + "probably " + phrase + " (classified with " + std::to_string(v.confidence) +
                   "% confidence; poolscope explain shows the evidence): " + advice;
    } else {
        v.advice = isWall + phrase + ": " + advice;
    }
    if (guess) {
        v.advice += ".";
        return finish();
    }
    // What a smaller micro-batch could give back at most: the memory that scales with it. Absence is
    // concluded only from evidence: with history and nothing unclassified.
    const double share = ev ? ev->temporaryBatchShare : 1.0;
    const int64_t perBatch = pools[size_t(Pool::Activation)] + pools[size_t(Pool::Input)] +
                             int64_t(std::llround(share * double(pools[size_t(Pool::Temporary)])));
    if (v.dominant != Pool::Activation && v.dominant != Pool::Input) {
        const int64_t unknown = pools[size_t(Pool::Unknown)];
        if (perBatch > 0)
            v.advice += "; cutting the micro-batch frees at most " + (perBatch < kListedMinimum ? std::string("0.01 GiB") : gib(perBatch)) +
                        (ev && !ev->history ? std::string(" of what the frames name") : std::string());
        else if (ev && !ev->history)
            v.advice += "; without history it cannot show what cutting the micro-batch would free";
        else if (unknown * 100 >= std::max<int64_t>(allocated, 1))
            v.advice += "; cutting the micro-batch frees nothing that is classified (" + gib(unknown) + " are not)";
        else
            v.advice += "; cutting the micro-batch frees nothing here (no activations, inputs or batch-sized temporaries are alive)";
    }
    v.advice += ".";
    // Outputs gathered across calls that are not the largest pool are still the first knob where the
    // memory they leave behind is: they grow with every batch, and so does the cache they fragment.
    if (ev && v.dominant != Pool::Other && ev->collectedBytes >= kListedMinimum && ev->collectedBytes * 10 >= allocated)
        v.advice += " " + collectedOutputsAdvice(ev->collectedBytes) + ".";
    // Said where the advice above is the batch's (the pools that grow with it are the wall): there the
    // state is the knob the user would otherwise miss.
    const bool batchWall = v.dominant == Pool::Activation || v.dominant == Pool::Input || v.dominant == Pool::Temporary;
    if (ev && ev->atOom && batchWall && ev->peakBeforeState >= 0 && ev->stateMadeByFirstStep >= kListedMinimum &&
        ev->stateMadeByFirstStep * 10 >= allocated)
        v.advice += " Before the first optimizer step made the optimizer's state the run peaked at " + gib(ev->peakBeforeState) +
                    "; " + gib(ev->stateMadeByFirstStep) +
                    " of that state is alive here, which the first forward and backward did not hold: shrinking it (8-bit "
                    "or sharded optimizer state, offloading it) makes room without touching the batch.";
    if (ev && ev->atOom && v.dominant != Pool::Other && ev->stepScratchBytes >= kListedMinimum && ev->stepScratchBytes * 10 >= allocated)
        v.advice += " " + gib(ev->stepScratchBytes) +
                    " are the optimizer step's scratch, held when it ran out of memory (a foreach update makes one block per "
                    "parameter at once): fused=True (torch.optim Adam, AdamW, SGD) or foreach=False updates without that list.";
    return finish();
}

} // namespace

Verdict makeVerdict(std::string_view moment, const PoolBytes& pools, const PoolConfidence* confidence)
{
    return buildVerdict(moment, pools, confidence, nullptr);
}

Verdict makeVerdict(std::string_view moment, const PoolBytes& pools, const MomentEvidence& evidence)
{
    return buildVerdict(moment, pools, &evidence.confidence, &evidence);
}

} // namespace poolscope
