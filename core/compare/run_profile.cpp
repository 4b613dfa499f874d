#include "core/compare/run_profile.h"
#include "core/model/torch_paths.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_set>

namespace poolscope {
namespace {

bool isPythonSource(const Frame& f)
{
    const std::string& file = f.filename;
    return !file.empty() && (file.front() == '<' || (file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0));
}

std::string_view baseName(std::string_view path)
{
    const size_t slash = path.find_last_of('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

uint64_t mix(uint64_t h, std::string_view s)
{
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 1099511628211ull;
    }
    h ^= 0xff;
    return h * 1099511628211ull;
}

bool contains(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

// What the frames of one stack say, computed once per stack.
struct StackFacts {
    uint64_t site = 0;          // hash of the Python frames (file name, function), innermost first
    uint64_t userSite = 0;      // the same without PyTorch's own frames
    std::string siteName;       // innermost Python frame outside torch, "model.py:forward"
    bool autocast = false;      // autocast's dispatch or cast cache made it
    bool collective = false;    // a collective (all_gather, reduce_scatter) or a sharding framework
    bool checkpoint = false;    // torch.utils.checkpoint (or another checkpoint wrapper) on the stack
};

StackFacts factsOf(const FrameTable& frames, StackId id)
{
    StackFacts f;
    uint64_t h = 1469598103934665603ull, user = h;
    std::string fallbackName;
    for (FrameId fid : frames.stack(id)) {
        const Frame& fr = frames.frame(fid);
        const std::string slashed = forwardSlashes(fr.filename); // Windows records backslashes
        const std::string_view name = fr.name, file = slashed;
        // PyTorch's own autocast (at::autocast's dispatch and cast cache, torch/amp/autocast_mode.py):
        // a user's function that merely has "autocast" in its name says nothing.
        if (contains(name, "at::autocast::") || contains(file, "autocast_mode"))
            f.autocast = true;
        if (contains(name, "allgather") || contains(name, "all_gather") || contains(name, "reduce_scatter") ||
            contains(name, "_reduce_scatter") || contains(file, "deepspeed") || contains(file, "fully_sharded") ||
            contains(file, "/fsdp/") || contains(name, "ProcessGroupNCCL"))
            f.collective = true;
        if (contains(file, "utils/checkpoint.py") || contains(name, "CheckpointFunction") || contains(file, "activation_checkpointing"))
            f.checkpoint = true;
        if (!isPythonSource(fr))
            continue;
        h = mix(mix(h, baseName(file)), name);
        // PyTorch's own frames are left out of the user key: wrappers such as torch.utils.checkpoint
        // or torch.compile add them around the same user code.
        if (!isTorchSource(file))
            user = mix(mix(user, baseName(file)), name);
        if (fallbackName.empty())
            fallbackName = std::string(baseName(file)) + ":" + fr.name;
        if (f.siteName.empty() && !isTorchSource(file))
            f.siteName = std::string(baseName(file)) + ":" + fr.name;
    }
    f.site = h;
    f.userSite = user;
    // The user key leaves out the entry script's own frames (the outermost Python file): the same model
    // run from another script (profile_memory.py, profile_mixprecision_memory.py) still pairs by the
    // model's code. Where the model lives in the script itself, nothing is left out.
    std::string_view outer;
    for (FrameId fid : frames.stack(id))
        if (isPythonSource(frames.frame(fid)))
            outer = frames.frame(fid).filename;
    uint64_t inner = 1469598103934665603ull;
    bool any = false;
    for (FrameId fid : frames.stack(id)) {
        const Frame& fr = frames.frame(fid);
        if (!isPythonSource(fr) || isTorchSource(fr.filename) || fr.filename == outer)
            continue;
        inner = mix(mix(inner, baseName(fr.filename)), fr.name);
        any = true;
    }
    if (any)
        f.userSite = inner;
    if (f.siteName.empty())
        f.siteName = fallbackName.empty() ? "(no Python frames)" : fallbackName;
    return f;
}

std::vector<PhaseBlock> phaseBlocks(const Classification& c)
{
    std::vector<PhaseBlock> blocks;
    std::array<int, kPhaseCount> seen{};
    for (const auto& run : c.phases.runs) {
        if (run.phase == Phase::Unknown)
            continue;
        if (!blocks.empty() && blocks.back().phase == run.phase) {
            blocks.back().last = run.last;
            continue;
        }
        blocks.push_back(PhaseBlock{run.phase, run.first, run.last, seen[size_t(run.phase)]++});
    }
    return blocks;
}

// The block an event belongs to: index into blocks, or -(blocks before it) - 1 for a stretch of
// unknown phase between blocks.
int64_t blockOf(const std::vector<PhaseBlock>& blocks, EventIndex e)
{
    const auto it = std::upper_bound(blocks.begin(), blocks.end(), e, [](EventIndex x, const PhaseBlock& b) { return x < b.first; });
    const int64_t before = it - blocks.begin();
    if (before > 0 && blocks[size_t(before - 1)].last >= e)
        return before - 1;
    return -before - 1;
}

} // namespace

std::string blockSequence(const std::vector<PhaseBlock>& blocks)
{
    std::vector<std::string> names;
    for (const PhaseBlock& b : blocks)
        if (b.phase != Phase::ZeroGrad) // zero_grad frees; it is part of a step, not a window of its own
            names.push_back(b.phase == Phase::OptimizerStep ? "optimizer step" : std::string(phaseName(b.phase)));
    if (names.empty())
        return "no phases named";
    auto join = [&](size_t n) {
        std::string out;
        for (size_t i = 0; i < n; ++i)
            out += (i ? ", " : "") + names[i];
        return out;
    };
    // A repeated step said once: "forward, backward, optimizer step (x2)".
    for (size_t period = 1; period * 2 <= names.size(); ++period) {
        if (names.size() % period != 0)
            continue;
        bool repeats = true;
        for (size_t i = period; i < names.size() && repeats; ++i)
            repeats = names[i] == names[i - period];
        if (repeats)
            return join(period) + " (x" + std::to_string(names.size() / period) + ")";
    }
    if (names.size() <= 6)
        return join(names.size());
    std::map<std::string, int> counts;
    for (const auto& n : names)
        ++counts[n];
    std::string out = std::to_string(names.size()) + " phases:";
    for (const auto& [n, k] : counts)
        out += " " + std::to_string(k) + " " + n + ",";
    out.pop_back();
    return out + " (from " + names.front() + " to " + names.back() + ")";
}

RunProfile profileRun(const RunInput& run, const TraceModel& m)
{
    const DeviceTrace& dev = run.device;
    const Classification& c = run.classification;
    const FrameTable& frames = run.trace.frames;
    RunProfile p;
    p.label = std::filesystem::path(run.trace.path).filename().string() + " " + dev.label();
    p.blocks = phaseBlocks(c);
    // A step that allocates nothing (plain SGD, a later step of momentum SGD) has no events to make a
    // block of; its record_function window still says it ran.
    const int stepBlocks = int(std::count_if(p.blocks.begin(), p.blocks.end(), [](const PhaseBlock& b) { return b.phase == Phase::OptimizerStep; }));
    const int stepWindows = int(std::count_if(c.phases.windows.begin(), c.phases.windows.end(), [](const PhaseWindow& w) { return w.phase == Phase::OptimizerStep; }));
    p.steps = std::max(stepBlocks, stepWindows);
    p.passes = int(std::count_if(p.blocks.begin(), p.blocks.end(), [](const PhaseBlock& b) { return b.phase == Phase::Forward; }));
    p.endsInOom = !dev.ooms.empty();
    p.oomIndex = p.endsInOom ? dev.ooms.back().index : kNoEvent;
    if (p.endsInOom) {
        const int64_t block = blockOf(p.blocks, p.oomIndex);
        p.oomWhere = block >= 0 ? siteWhere(p.blocks[size_t(block)].phase, p.blocks[size_t(block)].ordinal) : siteWhere(Phase::Unknown, -block - 1);
    }
    p.initialAllocated = dev.initialAllocated;

    const size_t n = std::min({dev.allocations.size(), c.pool.size(), m.allocationCount});
    std::vector<int8_t> known(frames.stackCount(), 0);
    std::vector<StackFacts> facts(frames.stackCount());
    auto factsFor = [&](StackId id) -> const StackFacts* {
        if (!id.valid() || id.value >= facts.size())
            return nullptr;
        if (!known[id.value]) {
            facts[id.value] = factsOf(frames, id);
            known[id.value] = 1;
        }
        return &facts[id.value];
    };

    // Weights, gradients and state as tensors.
    EventIndex forwardBegins = kNoEvent, forwardEnds = kNoEvent;
    for (const PhaseBlock& b : p.blocks)
        if (b.phase == Phase::Forward) {
            forwardBegins = b.first;
            forwardEnds = b.last;
            break;
        }
    EventIndex stepBegins = kNoEvent;
    for (const PhaseBlock& b : p.blocks)
        if (b.phase == Phase::OptimizerStep) {
            stepBegins = b.first;
            break;
        }
    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = dev.allocations[a];
        const int64_t size = m.requestedSize[a];
        switch (c.pool[a]) {
        case Pool::Parameter:
            // The weights the first forward reads: alive when it begins and not freed inside it (a
            // ZeRO-3 gather is). A hand-written optimizer that rebuilds each parameter in its step
            // (`p.data = ...`) frees the originals: those are still the model's weights, and the
            // rebuilt ones are the same tensors again. Without a forward: alive at the end.
            if (forwardBegins != kNoEvent ? al.aliveAfter(forwardBegins) && !(al.freeCompletedEvent != kNoEvent && al.freeCompletedEvent <= forwardEnds)
                                          : (al.preexisting() || al.aliveAtEnd()))
                p.parameterSizes.push_back(size);
            else if (!(forwardBegins != kNoEvent && al.allocEvent > forwardEnds && (al.aliveAtEnd() || al.preexisting())))
                p.transientParameterBytes += size;
            break;
        case Pool::Gradient:
            if (stepBegins != kNoEvent ? al.aliveAfter(stepBegins - 1) : al.aliveAtEnd())
                p.gradientSizes.push_back(size);
            break;
        case Pool::OptimizerState:
            if (al.aliveAtEnd()) {
                p.stateSizes.push_back(size);
                (al.preexisting() ? p.statePreexisting : p.stateCreatedInTrace) = true;
            }
            break;
        default:
            break;
        }
    }
    // Buffers made before the first forward that mirror the weights in whole multiples (a hand-written
    // optimizer's moments, made in its constructor, zeros of each parameter's size): the gradients say
    // how many tensors of each size the model has; of the parameter-pool tensors of a size, the first
    // made are the weights, and the rest, two or more per gradient, the optimizer's.
    if (!p.gradientSizes.empty() && !p.parameterSizes.empty()) {
        std::map<int64_t, int64_t> grads, params;
        for (int64_t x : p.gradientSizes)
            ++grads[x];
        for (int64_t x : p.parameterSizes)
            ++params[x];
        bool multiples = params.size() == grads.size();
        int64_t k = 0;
        for (const auto& [size, count] : params) {
            const auto g = grads.find(size);
            if (!multiples || g == grads.end() || count % g->second != 0 || (k != 0 && count / g->second != k)) {
                multiples = false;
                break;
            }
            k = count / g->second;
        }
        if (multiples && k >= 2) {
            p.parameterSizes = p.gradientSizes;
            p.stateShapedParameters = int(k - 1);
        }
    }
    for (auto* v : {&p.parameterSizes, &p.gradientSizes, &p.stateSizes})
        std::sort(v->begin(), v->end());
    auto sum = [](const std::vector<int64_t>& v) {
        int64_t s = 0;
        for (int64_t x : v)
            s += x;
        return s;
    };
    p.parameterBytes = sum(p.parameterSizes);
    p.gradientBytes = sum(p.gradientSizes);
    p.stateBytes = sum(p.stateSizes);
    if (m.optimizerEvidence.rfind("annotation", 0) == 0 || m.optimizerEvidence.rfind("frames", 0) == 0) {
        p.optimizer = m.recordedOptimizer;
        p.optimizerEvidence = m.optimizerEvidence;
    }
    p.castCacheBytes = run.series.peak()[size_t(Pool::CastCache)];

    // Per allocation: frames, casts, recompute, call sites.
    // The run ran under autocast: the run facts (the classifier's casts, with any frames), confirmed by
    // at::autocast's frames or the weights' 16-bit twins the size laws found.
    p.autocastFact = c.facts.autocast;
    const bool autocastRun = c.facts.autocast == Known::Yes || m.autocastSeen || m.autocastFromStructure;
    const std::unordered_set<int64_t> paramSizes(p.parameterSizes.begin(), p.parameterSizes.end());
    std::unordered_set<uint32_t> forwardUserFrames;
    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = dev.allocations[a];
        if (al.preexisting() || a >= c.birthPhase.size() || c.birthPhase[a] != Phase::Forward)
            continue;
        const FrameId f = frames.userFrame(al.stack);
        if (f && isPythonSource(frames.frame(f)))
            forwardUserFrames.insert(f.value);
    }
    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = dev.allocations[a];
        if (al.preexisting())
            continue;
        const StackFacts* sf = factsFor(al.stack);
        const Phase birth = a < c.birthPhase.size() ? c.birthPhase[a] : Phase::Unknown;
        const Pool pool = c.pool[a];
        if (sf && sf->autocast)
            ++p.autocastFrameAllocations;
        if (sf && sf->collective)
            ++p.collectiveAllocations;
        if (sf && sf->checkpoint)
            ++p.checkpointFrameAllocations;
        if (birth == Phase::Backward) {
            const FrameId f = frames.userFrame(al.stack);
            if ((sf && sf->checkpoint) || (f && forwardUserFrames.count(f.value))) {
                ++p.recomputeAllocations;
                p.recomputeBytes += al.size;
            }
        }
        if (pool == Pool::Gradient || pool == Pool::OptimizerState || (pool == Pool::Parameter && al.aliveAtEnd()))
            continue;
        const int64_t block = blockOf(p.blocks, al.allocEvent);
        const Phase phase = block >= 0 ? p.blocks[size_t(block)].phase : Phase::Unknown;
        const int64_t ordinal = block >= 0 ? p.blocks[size_t(block)].ordinal : -block - 1;
        const uint64_t where = siteWhere(phase, ordinal);
        // Autocast's casts are extra allocations at the very call sites whose outputs pair: kept apart
        // (their own key) so that the outputs still pair one for one between a run with autocast and one
        // without, and the casts, unpaired, are the evidence of autocast (site_pairs.h).
        const bool cast = (a < m.precision.size() && m.precision[a] == OpPrecision::Cast) || pool == Pool::CastCache ||
                          (a < m.weightCast.size() && m.weightCast[a]);
        const uint64_t salt = cast ? 0x9e3779b97f4a7c15ull : 0;
        const uint64_t key = where | (((sf ? sf->site : 0x5bd1e995ull) ^ salt) & kSiteHashMask);
        const bool castShaped = phase == Phase::Forward && ordinal == 0 && m.requestedSize[a] > 0 && paramSizes.count(m.requestedSize[a] * 2);
        const bool fp32List = a < m.precision.size() && m.precision[a] == OpPrecision::Fp32;
        p.sites[key].push_back(
            SiteAllocation{al.size, m.law[a], pool == Pool::Input, castShaped, fp32List, autocastRun, al.allocEvent});
        p.userSiteOf.emplace(key, where | (((sf ? sf->userSite : 0x5bd1e995ull) ^ salt) & kSiteHashMask));
        if (!p.siteNames.count(key))
            p.siteNames[key] = sf ? sf->siteName : "(no frames)";
    }

    const GradModeFinding grad = findGradMode(run.trace, dev, c, m);
    p.gradMode = grad.mode;
    p.gradModeEvidence = grad.evidence;

    p.layers = m.layersPerPass;
    if (!m.passes.empty() && !m.passes.front().layers.empty()) {
        const auto& layers = m.passes.front().layers;
        int64_t saved = 0;
        for (const LayerSpan& l : layers)
            saved += l.savedBytes;
        p.savedPerLayer = saved / int64_t(layers.size());
        p.layerInputBytes = m.passes.front().inputBytes;
    }
    return p;
}

} // namespace poolscope
