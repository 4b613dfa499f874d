// The cascade's first steps: what the weights tell (their sizes, the model dimensions, the casts
// that mirror them) and the allocations that follow the weights rather than the tokens: by pool,
// by phase, by being made from a weight. They run before the layers and the dimensions are read,
// which look only at what may still follow the tokens.
#include "core/whatif/law_cascade.h"

namespace poolscope::law_detail {

bool isWeightPool(Pool p)
{
    return p == Pool::Parameter || p == Pool::CastCache || p == Pool::Gradient || p == Pool::OptimizerState ||
           p == Pool::Workspace || p == Pool::KvCache;
}

Phase birthPhase(const Classification& c, size_t a) { return a < c.birthPhase.size() ? c.birthPhase[a] : Phase::Unknown; }

std::string siteName(const Trace& trace, const Allocation& al, const StackOpFacts& f)
{
    if (f.userFrame) {
        const Frame& fr = trace.frames.frame(f.userFrame);
        if (!fr.filename.ends_with(".py")) {
            // A C++ frame (an autograd node in backward): its name without arguments or namespaces.
            std::string name = fr.name.substr(0, fr.name.find('('));
            if (name.ends_with("::apply"))
                name.resize(name.size() - 7);
            if (const size_t ns = name.rfind("::"); ns != std::string::npos)
                name = name.substr(ns + 2);
            return name.empty() ? fr.name.substr(0, 80) : name;
        }
        std::string file = fr.filename;
        if (const size_t slash = file.rfind('/'); slash != std::string::npos)
            file = file.substr(slash + 1);
        return file + ":" + std::to_string(fr.line) + " " + fr.name;
    }
    if (al.stack.valid())
        if (FrameId u = trace.frames.userFrame(al.stack))
            return trace.frames.frame(u).name.substr(0, 80);
    return "(no stack)";
}

namespace {

// The cache keeps a weight's cast until the autocast region (the forward at least) ends: a cast
// that dies inside its forward run is an activation's (the logits upcast for the loss).
bool cachedLifetime(const LawContext& x, const Allocation& al)
{
    const bool haveRuns = x.c.phases.run.size() == x.dev.eventCount();
    if (al.preexisting() || al.freeCompletedEvent == kNoEvent || !haveRuns)
        return true;
    const uint32_t r = x.c.phases.run[size_t(al.allocEvent)];
    return r >= x.c.phases.runs.size() || x.c.phases.runs[r].phase != Phase::Forward || al.freeCompletedEvent > x.c.phases.runs[r].last;
}

// Where a weight's cast may be made. (A batch moved to the device is a copy too, and no weight's.)
bool castPhase(const LawContext& x, size_t a)
{
    const Phase p = birthPhase(x.c, a);
    return x.m.pool[a] != Pool::Input && (p == Phase::Forward || p == Phase::Backward || p == Phase::Unknown);
}

// Weight casts where no frame names the cast (Python-only stacks: autocast's _to_copy runs below the
// user's line that calls the matmul): 16-bit twins of the weight matrices, as structure. In a forward
// run, an allocation of exactly half a matrix parameter's bytes that the cast cache keeps past its
// forward, no more of a size than weights of twice it. An activation that has such a size by
// coincidence comes in more copies per forward than there are weights (several tensors of each width
// per layer) and at one or two sizes: the twins must cover at least half the matrices of every size,
// and two sizes at least, in the first forward run that has any.
void structuralCasts(LawContext& x)
{
    for (size_t a = 0; a < x.n(); ++a)
        if (x.facts(a).precision == OpPrecision::Cast || x.facts(a).has(StackOpFacts::Autocast))
            return; // the frames speak: casts are known by their operator
    std::map<int64_t, int64_t> matrices; // bytes -> count, for matrix parameters only
    int64_t matrixCount = 0;
    for (auto& [bytes, count] : x.weights.paramCount)
        if (!x.weights.vectors.count(bytes) && bytes >= 4096 && bytes % 2 == 0) {
            matrices[bytes] = count;
            matrixCount += count;
        }
    if (matrices.size() < 2)
        return;
    std::map<std::pair<uint32_t, int64_t>, std::vector<size_t>> twins; // (forward run, size) -> allocations
    for (size_t a = 0; a < x.n(); ++a) {
        const Allocation& al = x.al(a);
        if (al.preexisting() || x.m.pool[a] == Pool::Input || isWeightPool(x.m.pool[a]) || birthPhase(x.c, a) != Phase::Forward ||
            !matrices.count(x.size(a) * 2) || !castPhase(x, a) || !cachedLifetime(x, al))
            continue;
        twins[{x.c.phases.runOf(al), x.size(a)}].push_back(a);
    }
    if (twins.empty())
        return;
    const uint32_t first = twins.begin()->first.first;
    int64_t covered = 0, sizes = 0;
    for (auto& [key, list] : twins) {
        if (key.first != first)
            continue;
        const int64_t weights = matrices[key.second * 2];
        if (int64_t(list.size()) > weights)
            continue; // more than the weights: activations of that size
        if (int64_t(list.size()) * 2 >= weights) {
            covered += int64_t(list.size());
            ++sizes;
        }
    }
    if (sizes < 2 || covered * 2 < matrixCount)
        return;
    for (auto& [key, list] : twins) {
        if (int64_t(list.size()) > matrices[key.second * 2])
            continue;
        for (size_t a : list) {
            x.casts.candidate[a] = 1;
            ++x.casts.perRun[key];
        }
    }
    x.m.autocastFromStructure = true;
}

// Decides every open allocation `rule` picks, with one law and evidence.
template <class Rule> void decideWhere(LawContext& x, SizeLaw law, LawEvidence why, Rule rule)
{
    for (size_t a = 0; a < x.n(); ++a)
        if (x.open(a) && rule(a))
            x.decide(a, law, why);
}

} // namespace

void findWeightShapes(LawContext& x)
{
    auto& paramCount = x.weights.paramCount;
    for (size_t a = 0; a < x.n(); ++a)
        if (x.m.pool[a] == Pool::Parameter)
            ++paramCount[x.size(a)];
    // Buffers that mirror the weights in whole multiples and sit in the parameter pool (a hand-written
    // optimizer's moments made in its constructor, before the first forward): the first step's
    // gradients say how many weights of each size there are, and the rest are no weights (no casts).
    std::unordered_map<int64_t, int64_t> gradCount;
    for (size_t a = 0; a < x.n(); ++a) {
        const Allocation& al = x.al(a);
        if (x.m.pool[a] == Pool::Gradient && !al.preexisting() && (!x.m.hasStep || al.allocEvent < x.m.firstStepEvent))
            ++gradCount[x.size(a)];
    }
    // Sizes no gradient has (a buffer, a frozen table, a block the classifier could not tell from a
    // weight without frames) keep their count; the sizes that have gradients must agree on k.
    if (!gradCount.empty()) {
        int64_t k = 0;
        for (const auto& [bytes, count] : paramCount) {
            const auto g = gradCount.find(bytes);
            if (g == gradCount.end())
                continue;
            if (count % g->second != 0 || (k != 0 && count / g->second != k)) {
                k = 0;
                break;
            }
            k = count / g->second;
        }
        if (k >= 2)
            for (auto& [bytes, count] : paramCount)
                if (gradCount.count(bytes))
                    count /= k;
    }
    x.weights.dims = modelDims(paramCount, x.weights.vectors);
}

// Autocast casts that mirror a weight: at most one per weight of that size per forward run.
void findWeightCasts(LawContext& x)
{
    x.casts.candidate.assign(x.n(), 0);
    for (size_t a = 0; a < x.n(); ++a)
        if (x.facts(a).precision == OpPrecision::Cast && x.weights.mirrors(x.size(a) * 2) > 0 && castPhase(x, a) &&
            cachedLifetime(x, x.al(a))) {
            x.casts.candidate[a] = 1;
            ++x.casts.perRun[{x.c.phases.runOf(x.al(a)), x.size(a)}];
        }
    structuralCasts(x);
}

// What the frames say of each allocation's operator, whatever its law: autocast's treatment of it,
// a bool mask, the optimizer step's scratch.
void findOperatorFacts(LawContext& x)
{
    for (size_t a = 0; a < x.n(); ++a) {
        const Allocation& al = x.al(a);
        const StackOpFacts& f = x.facts(a);
        const Pool p = x.m.pool[a];
        x.m.precision[a] = f.precision;
        x.m.autocastSeen |= f.has(StackOpFacts::Autocast);
        // Bool masks: a comparison's output, or dropout's mask (the smaller of the pair it makes).
        if (!f.has(StackOpFacts::Backward) && f.has(StackOpFacts::MaskOp))
            x.m.mask[a] = 1;
        if (!f.has(StackOpFacts::Backward) && f.has(StackOpFacts::Dropout) && a + 1 < x.n() && x.al(a + 1).stack == al.stack &&
            x.size(a + 1) >= 2 * x.size(a))
            x.m.mask[a] = 1;
        if ((p == Pool::Temporary || p == Pool::Other || p == Pool::Unknown) && birthPhase(x.c, a) == Phase::OptimizerStep)
            x.m.stepWorkspace[a] = 1;
    }
}

void decideWeightPools(LawContext& x)
{
    for (size_t a = 0; a < x.n(); ++a) {
        // Casts the classifier could not tell from inputs' casts (more than the weights) are
        // decided below like any cast, and reported as ambiguous.
        const Pool p = x.m.pool[a];
        const bool unsureCast = p == Pool::CastCache && a < x.c.rule.size() && x.c.rule[a] < x.c.rules.size() &&
                                x.c.rules[x.c.rule[a]].has(kRoleCastSurplus);
        if (x.open(a) && isWeightPool(p) && !unsureCast) {
            x.decide(a, SizeLaw::Fixed, LawEvidence::Pool);
            x.m.weightCast[a] = p == Pool::CastCache;
        }
    }
}

// The step's and zero_grad's own buffers follow the weights; the next batch, moved to the device
// while zero_grad's phase still holds, does not.
void decideStepBuffers(LawContext& x)
{
    decideWhere(x, SizeLaw::Fixed, LawEvidence::Phase, [&](size_t a) {
        const Phase birth = birthPhase(x.c, a);
        const Pool p = x.m.pool[a];
        return birth == Phase::OptimizerStep || x.facts(a).has(StackOpFacts::Optimizer) ||
               (birth == Phase::ZeroGrad && p != Pool::Input && p != Pool::Activation);
    });
}

void decideLibraryWorkspace(LawContext& x)
{
    decideWhere(x, SizeLaw::Fixed, LawEvidence::Pool, [&](size_t a) {
        return a < x.c.rule.size() && x.c.rule[a] < x.c.rules.size() && x.c.rules[x.c.rule[a]].has(kRoleLibraryWorkspace);
    });
}

// Before recording, anything but a batch or an activation: held. (Activations from before
// recording that the trace frees and rebuilds are decided again by "rebuilt in the trace".)
void decideKeptFromBefore(LawContext& x)
{
    decideWhere(x, SizeLaw::Fixed, LawEvidence::Pool, [&](size_t a) {
        return x.al(a).preexisting() && x.m.pool[a] != Pool::Input && x.m.pool[a] != Pool::Activation;
    });
}

// Made from a weight: a gradient stored by AccumulateGrad, an embedding table's gradient, a
// dequantised weight.
void decideMadeFromWeight(LawContext& x)
{
    decideWhere(x, SizeLaw::Fixed, LawEvidence::WeightOrigin, [&](size_t a) {
        const StackOpFacts& f = x.facts(a);
        const int64_t s = x.size(a);
        const WeightShapes& w = x.weights;
        return f.has(StackOpFacts::AccumulateGrad) || (f.has(StackOpFacts::Embedding) && f.has(StackOpFacts::Backward) && w.mirrors(s) > 0) ||
               (f.has(StackOpFacts::Dequantize) && (w.mirrors(s) || w.mirrors(s / 2) || w.mirrors(s / 4) || w.mirrors(s / 8)));
    });
}

// An autocast cast of a weight, once per weight per forward.
void decideWeightCasts(LawContext& x)
{
    for (size_t a = 0; a < x.n(); ++a) {
        if (!x.open(a) || !x.casts.candidate[a])
            continue;
        if (x.casts.perRun[{x.c.phases.runOf(x.al(a)), x.size(a)}] <= x.weights.mirrors(x.size(a) * 2)) {
            x.decide(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
            x.m.weightCast[a] = 1;
            continue;
        }
        // More casts of a weight's bytes than such weights: inputs' casts of the same bytes among
        // them, and nothing tells which is which. Taken by the sizes, and said ("ambiguous").
        x.castsUnsure.push_back(a);
    }
}

// A weight's gradient the engine could not steal: AccumulateGrad clones it into .grad and the
// source goes right after, first of the tensors of its size alive then. An activation's gradient
// of the same bytes lives on into the next node. By allocation index: the clone's source is made by
// the node just before it (the weight's gradient, perhaps with its input's gradient beside it).
// Where the frames name no autograd node (Python frames only: backward records no Python line), a
// .grad is what the classifier's structure says: made in backward and kept for the optimizer (the
// gradient pool); the source, a backward tensor freed right after the clone, is found the same way.
void decideCloneSources(LawContext& x)
{
    std::unordered_set<size_t> gradIndex;
    for (size_t a = 0; a < x.n(); ++a) {
        if (x.al(a).preexisting())
            continue;
        const StackOpFacts& f = x.facts(a);
        // A stolen gradient carries its node's frames: only a clone has a source.
        if (f.has(StackOpFacts::AccumulateGrad) ||
            (!f.has(StackOpFacts::Backward) && x.m.pool[a] == Pool::Gradient && birthPhase(x.c, a) == Phase::Backward))
            gradIndex.insert(a);
    }
    for (size_t gi : gradIndex) {
        const EventIndex g = x.al(gi).allocEvent;
        const int64_t bytes = x.size(gi);
        size_t best = SIZE_MAX;
        for (size_t a = gi >= kCloneSourceDistance ? gi - kCloneSourceDistance : 0; a < gi; ++a) {
            const Allocation& al = x.al(a);
            if (!x.open(a) || al.preexisting() || al.freeCompletedEvent == kNoEvent ||
                !(x.facts(a).has(StackOpFacts::Backward) || birthPhase(x.c, a) == Phase::Backward))
                continue;
            if (x.size(a) != bytes && x.size(a) * 2 != bytes) // the same bytes, or 16-bit cast into an fp32 .grad
                continue;
            if (al.freeCompletedEvent >= g && al.freeCompletedEvent <= g + kCloneFreeWindow &&
                (best == SIZE_MAX || al.freeCompletedEvent < x.al(best).freeCompletedEvent))
                best = a;
        }
        if (best != SIZE_MAX) {
            x.decide(best, SizeLaw::Fixed, LawEvidence::WeightOrigin);
            x.m.gradSource[gi] = int32_t(best);
        }
    }
}

// Stackless traces (Kineto without stacks, frames not recorded): a buffer that mirrors a
// parameter's bytes follows the model when there are no more of them per phase run than weights.
void decideStacklessMirrors(LawContext& x)
{
    std::map<std::pair<uint32_t, int64_t>, int64_t> perRun;
    auto mirror = [&](size_t a) { return x.open(a) && !x.al(a).stack.valid() && x.weights.mirrors(x.size(a)) > 0; };
    for (size_t a = 0; a < x.n(); ++a)
        if (mirror(a))
            ++perRun[{x.c.phases.runOf(x.al(a)), x.size(a)}];
    for (size_t a = 0; a < x.n(); ++a)
        if (mirror(a) && perRun[{x.c.phases.runOf(x.al(a)), x.size(a)}] <= x.weights.mirrors(x.size(a)))
            x.decide(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
}

} // namespace poolscope::law_detail
