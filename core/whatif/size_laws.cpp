// Per-allocation size laws decided from the structure of the whole trace. First what follows the
// weights (by pool, phase, and by origin: a weight's cast, its gradient on the way into .grad, an
// embedding table's gradient), then the run's dimensions (tokens T = b*s from the sizes the model's
// own dimensions explain, s from the causal mask or the position ids, the attention-score width
// from softmax or from a width no dimension explains), then each remaining allocation by the laws
// its size admits: one law is decided by the size alone; two by the code that made it (attention
// frames, score operators and their autograd nodes, a projection), by the law its call site
// follows elsewhere, or by the tensors its life overlaps. What stays open is reported.
#include "core/whatif/size_laws.h"
#include "core/whatif/law_decider.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace poolscope {
namespace law_detail {

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

void LawDecider::decideFixed()
{
    const size_t n = m_m.allocationCount;
    m_undecided.assign(n, 0);
    m_m.gradSource.assign(n, -1);
    for (size_t a = 0; a < n; ++a)
        if (m_m.pool[a] == Pool::Parameter)
            ++m_paramCount[size(a)];
    // Buffers that mirror the weights in whole multiples and sit in the parameter pool (a hand-written
    // optimizer's moments made in its constructor, before the first forward): the first step's
    // gradients say how many weights of each size there are, and the rest are no weights (no casts).
    std::unordered_map<int64_t, int64_t> gradCount;
    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = m_dev.allocations[a];
        if (m_m.pool[a] == Pool::Gradient && !al.preexisting() && (!m_m.hasStep || al.allocEvent < m_m.firstStepEvent))
            ++gradCount[size(a)];
    }
    if (!gradCount.empty() && gradCount.size() == m_paramCount.size()) {
        int64_t k = 0;
        for (const auto& [bytes, count] : m_paramCount) {
            const auto g = gradCount.find(bytes);
            if (g == gradCount.end() || count % g->second != 0 || (k != 0 && count / g->second != k)) {
                k = 0;
                break;
            }
            k = count / g->second;
        }
        if (k >= 2)
            for (auto& [bytes, count] : m_paramCount)
                count /= k;
    }
    m_dims = modelDims(m_paramCount, m_vectors);
    const bool haveRuns = m_c.phases.run.size() == m_dev.eventCount();
    // Autocast casts that mirror a weight: at most one per weight of that size per forward run.
    std::map<std::pair<uint32_t, int64_t>, int64_t> castsPerRun;
    auto mirrors = [&](int64_t bytes) {
        auto it = m_paramCount.find(bytes);
        return it == m_paramCount.end() ? int64_t(0) : it->second;
    };
    // The cache keeps a weight's cast until the autocast region (the forward at least) ends: a cast
    // that dies inside its forward run is an activation's (the logits upcast for the loss).
    auto cachedLifetime = [&](const Allocation& al) {
        if (al.preexisting() || al.freeCompletedEvent == kNoEvent || !haveRuns)
            return true;
        const uint32_t r = m_c.phases.run[size_t(al.allocEvent)];
        return r >= m_c.phases.runs.size() || m_c.phases.runs[r].phase != Phase::Forward ||
               al.freeCompletedEvent > m_c.phases.runs[r].last;
    };
    std::vector<uint8_t> castCandidate(n, 0);
    // (A batch moved to the device is a copy too, and no weight's.)
    auto castPhase = [&](size_t a) {
        const Phase p = birthPhase(m_c, a);
        return m_m.pool[a] != Pool::Input && (p == Phase::Forward || p == Phase::Backward || p == Phase::Unknown);
    };
    for (size_t a = 0; a < n; ++a)
        if (facts(a).precision == OpPrecision::Cast && mirrors(size(a) * 2) > 0 && castPhase(a) &&
            cachedLifetime(m_dev.allocations[a])) {
            castCandidate[a] = 1;
            ++castsPerRun[{m_c.phases.runOf(m_dev.allocations[a]), size(a)}];
        }
    structuralCasts(castCandidate, castsPerRun, castPhase, cachedLifetime);

    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = m_dev.allocations[a];
        const StackOpFacts& f = facts(a);
        const Pool p = m_m.pool[a];
        const Phase birth = birthPhase(m_c, a);
        m_m.precision[a] = f.precision;
        m_m.autocastSeen |= f.has(StackOpFacts::Autocast);
        // Bool masks: a comparison's output, or dropout's mask (the smaller of the pair it makes).
        if (!f.has(StackOpFacts::Backward) && f.has(StackOpFacts::MaskOp))
            m_m.mask[a] = 1;
        if (!f.has(StackOpFacts::Backward) && f.has(StackOpFacts::Dropout) && a + 1 < n &&
            m_dev.allocations[a + 1].stack == al.stack && size(a + 1) >= 2 * size(a))
            m_m.mask[a] = 1;
        if ((p == Pool::Temporary || p == Pool::Other || p == Pool::Unknown) && birth == Phase::OptimizerStep)
            m_m.stepWorkspace[a] = 1;
        // Casts the classifier could not tell from inputs' casts (more than the weights) are
        // decided below like any cast, and reported as ambiguous.
        const bool unsureCast = p == Pool::CastCache && a < m_c.rule.size() && m_c.rule[a] < m_c.rules.size() &&
                                m_c.rules[m_c.rule[a]].has(kRoleCastSurplus);
        if (isWeightPool(p) && !unsureCast) {
            set(a, SizeLaw::Fixed, LawEvidence::Pool);
            m_m.weightCast[a] = p == Pool::CastCache;
            continue;
        }
        // The step's and zero_grad's own buffers follow the weights; the next batch, moved to the
        // device while zero_grad's phase still holds, does not.
        if (birth == Phase::OptimizerStep || f.has(StackOpFacts::Optimizer) ||
            (birth == Phase::ZeroGrad && p != Pool::Input && p != Pool::Activation)) {
            set(a, SizeLaw::Fixed, LawEvidence::Phase);
            continue;
        }
        if (a < m_c.rule.size() && m_c.rule[a] < m_c.rules.size()) {
            if (m_c.rules[m_c.rule[a]].has(kRoleLibraryWorkspace)) {
                set(a, SizeLaw::Fixed, LawEvidence::Pool);
                continue;
            }
        }
        if (al.preexisting() && p != Pool::Input && p != Pool::Activation) {
            set(a, SizeLaw::Fixed, LawEvidence::Pool);
            continue;
        }
        // Made from a weight: a gradient stored by AccumulateGrad, an embedding table's gradient,
        // a dequantised weight, an autocast cast of a weight (once per weight per forward).
        if (f.has(StackOpFacts::AccumulateGrad) || (f.has(StackOpFacts::Embedding) && f.has(StackOpFacts::Backward) && mirrors(size(a)) > 0) ||
            (f.has(StackOpFacts::Dequantize) && (mirrors(size(a)) || mirrors(size(a) / 2) || mirrors(size(a) / 4) || mirrors(size(a) / 8)))) {
            set(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
            continue;
        }
        if (castCandidate[a]) {
            if (castsPerRun[{m_c.phases.runOf(al), size(a)}] <= mirrors(size(a) * 2)) {
                set(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
                m_m.weightCast[a] = 1;
                continue;
            }
            // More casts of a weight's bytes than such weights: inputs' casts of the same bytes
            // among them, and nothing tells which is which. Taken by the sizes, and said.
            m_castsUnsure.push_back(a);
        }
        m_m.law[a] = SizeLaw::Linear;
        m_m.lawEvidence[a] = LawEvidence::Default;
        m_undecided[a] = 1;
    }
    // A weight's gradient the engine could not steal: AccumulateGrad clones it into .grad and the
    // source goes right after, first of the tensors of its size alive then. An activation's
    // gradient of the same bytes lives on into the next node.
    // By allocation index: the clone's source is made by the node just before it (the weight's
    // gradient, perhaps with its input's gradient beside it).
    std::unordered_set<size_t> gradIndex;
    for (size_t a = 0; a < n; ++a)
        if (!m_dev.allocations[a].preexisting() && facts(a).has(StackOpFacts::AccumulateGrad))
            gradIndex.insert(a); // a stolen gradient carries its node's frames: only a clone has a source
    for (size_t gi : gradIndex) {
        const EventIndex g = m_dev.allocations[gi].allocEvent;
        const int64_t bytes = size(gi);
        size_t best = SIZE_MAX;
        for (size_t a = gi >= kCloneSourceDistance ? gi - kCloneSourceDistance : 0; a < gi; ++a) {
            const Allocation& al = m_dev.allocations[a];
            if (!open(a) || al.preexisting() || al.freeCompletedEvent == kNoEvent || !facts(a).has(StackOpFacts::Backward))
                continue;
            if (size(a) != bytes && size(a) * 2 != bytes) // the same bytes, or 16-bit cast into an fp32 .grad
                continue;
            if (al.freeCompletedEvent >= g && al.freeCompletedEvent <= g + kCloneFreeWindow &&
                (best == SIZE_MAX || al.freeCompletedEvent < m_dev.allocations[best].freeCompletedEvent))
                best = a;
        }
        if (best != SIZE_MAX) {
            set(best, SizeLaw::Fixed, LawEvidence::WeightOrigin);
            m_m.gradSource[gi] = int32_t(best);
        }
    }
    // Stackless traces (Kineto without stacks, frames not recorded): a buffer that mirrors a
    // parameter's bytes follows the model when there are no more of them per phase run than weights.
    std::map<std::pair<uint32_t, int64_t>, int64_t> perRun;
    for (size_t a = 0; a < n; ++a)
        if (open(a) && !m_dev.allocations[a].stack.valid() && mirrors(size(a)) > 0)
            ++perRun[{m_c.phases.runOf(m_dev.allocations[a]), size(a)}];
    for (size_t a = 0; a < n; ++a)
        if (open(a) && !m_dev.allocations[a].stack.valid() && mirrors(size(a)) > 0 &&
            perRun[{m_c.phases.runOf(m_dev.allocations[a]), size(a)}] <= mirrors(size(a)))
            set(a, SizeLaw::Fixed, LawEvidence::WeightOrigin);
}

// Weight casts where no frame names the cast (Python-only stacks: autocast's _to_copy runs below the
// user's line that calls the matmul): 16-bit twins of the weight matrices, as structure. In a forward
// run, an allocation of exactly half a matrix parameter's bytes that the cast cache keeps past its
// forward, no more of a size than weights of twice it. An activation that has such a size by
// coincidence comes in more copies per forward than there are weights (several tensors of each width
// per layer) and at one or two sizes: the twins must cover at least half the matrices of every size,
// and two sizes at least, in the first forward run that has any.
void LawDecider::structuralCasts(std::vector<uint8_t>& candidate, std::map<std::pair<uint32_t, int64_t>, int64_t>& perRun,
                                 const std::function<bool(size_t)>& castPhase, const std::function<bool(const Allocation&)>& cachedLifetime)
{
    const size_t n = m_m.allocationCount;
    for (size_t a = 0; a < n; ++a)
        if (facts(a).precision == OpPrecision::Cast || facts(a).has(StackOpFacts::Autocast))
            return; // the frames speak: casts are known by their operator
    std::map<int64_t, int64_t> matrices; // bytes -> count, for matrix parameters only
    int64_t matrixCount = 0;
    for (auto& [bytes, count] : m_paramCount)
        if (!m_vectors.count(bytes) && bytes >= 4096 && bytes % 2 == 0) {
            matrices[bytes] = count;
            matrixCount += count;
        }
    if (matrices.size() < 2)
        return;
    std::map<std::pair<uint32_t, int64_t>, std::vector<size_t>> twins; // (forward run, size) -> allocations
    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = m_dev.allocations[a];
        if (al.preexisting() || m_m.pool[a] == Pool::Input || isWeightPool(m_m.pool[a]) || birthPhase(m_c, a) != Phase::Forward ||
            !matrices.count(size(a) * 2) || !castPhase(a) || !cachedLifetime(al))
            continue;
        twins[{m_c.phases.runOf(al), size(a)}].push_back(a);
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
            candidate[a] = 1;
            ++perRun[key];
        }
    }
    m_m.autocastFromStructure = true;
}

void LawDecider::decideTokens()
{
    findTokens();
    findSeq();
    findScoreWidth();
    const int64_t T = m_m.dims.tokens, s = m_m.dims.seq;
    // a*s = h: the scores' bytes per token equal a layer input's (the residual stream, the context's
    // shape). Equal bytes only: with the residual in fp32 and the scores in 16 bits (or the reverse)
    // a factor of two is as often a*s = 2h as a collision, and the element sizes are not known here.
    if (const int64_t U = m_m.passes.empty() ? 0 : m_m.passes.front().inputBytes; T > 0 && U > 0 && U % T == 0)
        m_contextCollides = m_m.dims.scoreWidth > 0 && m_m.dims.scoreWidth == U / T;
    // Or seen directly, whatever the element sizes (autocast: fp32 residual, 16-bit products): a
    // product made before its function's softmax and one made from it with the same bytes. The
    // forward products' order is worked out once: it also tells, under the collision, which is which.
    std::vector<int8_t> order(m_m.allocationCount, 0);
    std::set<int64_t> before, after;
    for (size_t a = 0; m_m.dims.scoreWidth > 0 && a < m_m.allocationCount; ++a)
        if (open(a) && isProduct(a) && !facts(a).has(StackOpFacts::Backward) && !facts(a).has(StackOpFacts::LinearOp)) {
            order[a] = int8_t(productOrder(a));
            if (order[a] > 0)
                before.insert(size(a));
            else if (order[a] < 0)
                after.insert(size(a));
        }
    for (int64_t bytes : before)
        m_contextCollides |= after.count(bytes) > 0;
    m_collidingProduct.assign(m_m.allocationCount, 0);
    std::vector<size_t> pending; // both the tokens and the scores explain them
    size_t scoreTensors = 0;
    for (size_t a = 0; a < m_m.allocationCount; ++a) {
        if (!open(a))
            continue;
        const int64_t bytes = size(a);
        const StackOpFacts& f = facts(a);
        // A causal mask: s*s elements, from a comparison or a triangle (or on such a line).
        if (s > 0 && !f.has(StackOpFacts::Backward)) {
            bool square = false;
            for (int64_t e : {1, 2, 4, 8})
                square |= bytes == e * s * s;
            if (square && maskLine(a)) {
                set(a, SizeLaw::SeqSquared, LawEvidence::Dimensions);
                continue;
            }
            if (f.has(StackOpFacts::Arange) && (bytes == 8 * s || bytes == 4 * s)) {
                set(a, SizeLaw::Seq, LawEvidence::Dimensions);
                continue;
            }
        }
        const bool scores = inScoreFamily(a);
        const bool tokens = tokensExplained(bytes);
        if (scores && (!tokens || (T == 0 && scoreEvidence(a)))) {
            set(a, SizeLaw::Quadratic, T > 0 ? LawEvidence::Dimensions : LawEvidence::Frames);
            ++scoreTensors;
        } else if (scores && tokens) {
            if (m_contextCollides && isProduct(a) && !f.has(StackOpFacts::LinearOp)) {
                if (order[a] != 0) {
                    set(a, order[a] > 0 ? SizeLaw::Quadratic : SizeLaw::Linear, LawEvidence::Frames);
                    scoreTensors += order[a] > 0;
                } else {
                    m_collidingProduct[a] = 1;
                    pending.push_back(a);
                }
            } else if (scoreEvidence(a)) {
                set(a, SizeLaw::Quadratic, LawEvidence::Frames);
                ++scoreTensors;
            } else if (f.has(StackOpFacts::LinearOp) || f.has(StackOpFacts::Embedding) || f.has(StackOpFacts::LogSoftmax) ||
                       outsideAttention(a)) {
                set(a, SizeLaw::Linear, LawEvidence::Frames);
            } else {
                pending.push_back(a);
            }
        } else if (tokens) {
            set(a, SizeLaw::Linear, LawEvidence::Dimensions);
        } else if (T > 0 && bytes < T) {
            // Smaller than one element per token: it cannot follow the tokens.
            set(a, SizeLaw::Fixed, LawEvidence::Dimensions);
        } else {
            m_m.law[a] = SizeLaw::Linear; // nothing explains it: taken as tokens, the usual case
            m_undecided[a] = 0;
        }
    }
    // A score family seen less often than the layers is something else (logits, a one-off buffer).
    if (scoreTensors < kMinScoreTensors && !(m_m.dims.scoresFrom.starts_with("softmax") && scoreTensors > 0)) {
        for (size_t a = 0; a < m_m.allocationCount; ++a)
            if (m_m.law[a] == SizeLaw::Quadratic) {
                m_m.law[a] = SizeLaw::Linear;
                m_m.lawEvidence[a] = LawEvidence::Default;
            }
        for (size_t a : pending)
            set(a, SizeLaw::Linear, LawEvidence::Dimensions);
        pending.clear();
        m_m.dims.scoreWidth = 0;
        m_m.dims.scoresFrom.clear();
    }
    callSiteVotes(pending);
    mirrorVotes(pending);
    // Inputs first, to a fixed point (each decided tensor may decide the next op's output), then
    // the weaker evidence of what is made next.
    for (int round = 0; round < 4 && !pending.empty(); ++round) {
        const size_t before = pending.size();
        for (size_t left = pending.size() + 1; pending.size() < left;) {
            left = pending.size();
            inputVotes(pending);
        }
        neighbourVotes(pending);
        if (pending.size() == before)
            break;
    }
    // What no evidence decided: taken as tokens (or as the sizes said), and said, by call site.
    std::map<std::string, AmbiguousSite> sites;
    auto report = [&](size_t a, const char* what, SizeLaw other) {
        m_m.lawEvidence[a] = LawEvidence::Default;
        AmbiguousSite& site = sites[siteName(m_trace, m_dev.allocations[a], facts(a)) + what];
        site.chosen = m_m.law[a];
        site.other = other;
        ++site.count;
        site.bytes += size(a);
        m_m.ambiguousBytes += size(a);
    };
    for (size_t a : pending) {
        set(a, SizeLaw::Linear, LawEvidence::Default);
        report(a, "", SizeLaw::Quadratic);
    }
    for (size_t a : m_castsUnsure)
        report(a, " (a weight's cast or an input's)", SizeLaw::Fixed);
    for (size_t a : m_embeddingsUnsure)
        report(a, " (the tokens' embedding or the positions', at b = 1)", SizeLaw::Seq);
    for (auto& [name, site] : sites) {
        site.site = name;
        m_m.ambiguous.push_back(site);
    }
    std::sort(m_m.ambiguous.begin(), m_m.ambiguous.end(), [](auto& x, auto& y) { return x.bytes > y.bytes; });
}

// Memory from before recording that the trace frees: a forward-only recording that starts while the
// previous step's graph (or batch) still lives sees it freed and the same structure built again, the
// same sizes from the same call sites. It is that structure, so it follows the law of what replaces
// it: with a longer context the previous step's graph was longer too. What replaces a graph is the
// next graph, alive when the old one goes (`out = model(x)` drops the old graph once the new output
// exists): each such block (in the order they go) takes the law of the first allocation of its size
// made in the trace outside the weights and alive when it is freed, else of the first of its size
// at all. Transients of the same bytes (a score matrix only softmax keeps, next to the MLP's
// activations of a*s = 4h) are made too but are not the graph. A size the trace never makes again is
// left as it was (held constant, as before).
void LawDecider::decideReplaced()
{
    const size_t n = m_m.allocationCount;
    std::vector<size_t> gone;
    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = m_dev.allocations[a];
        if (al.preexisting() && al.freeCompletedEvent != kNoEvent && !isWeightPool(m_m.pool[a]) &&
            m_m.lawEvidence[a] != LawEvidence::Phase)
            gone.push_back(a);
    }
    if (gone.empty())
        return;
    std::unordered_map<int64_t, std::vector<size_t>> made; // size -> in-trace allocations outside the weights, in order
    for (size_t a = 0; a < n; ++a)
        if (!m_dev.allocations[a].preexisting() && !isWeightPool(m_m.pool[a]) && m_m.lawEvidence[a] != LawEvidence::Phase &&
            !m_m.stepWorkspace[a])
            made[size(a)].push_back(a);
    std::stable_sort(gone.begin(), gone.end(), [&](size_t x, size_t y) {
        return m_dev.allocations[x].freeCompletedEvent < m_dev.allocations[y].freeCompletedEvent;
    });
    // Two cursors per size, each only moving forward (the blocks go in time order): the first not yet
    // used, and the first not used nor freed before the current block goes.
    std::vector<uint8_t> used(n, 0);
    std::unordered_map<int64_t, std::pair<size_t, size_t>> cursor;
    for (size_t a : gone) {
        const auto it = made.find(size(a));
        if (it == made.end())
            continue;
        const std::vector<size_t>& list = it->second;
        const EventIndex freed = m_dev.allocations[a].freeCompletedEvent;
        auto& [any, alive] = cursor[size(a)];
        while (any < list.size() && used[list[any]])
            ++any;
        if (any >= list.size())
            continue;
        while (alive < list.size() && (used[list[alive]] || (m_dev.allocations[list[alive]].freeCompletedEvent != kNoEvent &&
                                                              m_dev.allocations[list[alive]].freeCompletedEvent <= freed)))
            ++alive;
        const size_t by = alive < list.size() && m_dev.allocations[list[alive]].allocEvent < freed ? list[alive] : list[any];
        used[by] = 1;
        m_m.law[a] = m_m.law[by];
        m_m.lawEvidence[a] = LawEvidence::Replaced;
        m_m.precision[a] = m_m.precision[by];
        m_m.mask[a] = m_m.mask[by];
        ++m_m.replacedCount;
        m_m.replacedBytes += size(a);
    }
}

} // namespace law_detail

using namespace law_detail;


int batchExponent(SizeLaw law)
{
    return law == SizeLaw::Linear || law == SizeLaw::Quadratic || law == SizeLaw::Batch ? 1 : 0;
}

int seqExponent(SizeLaw law)
{
    switch (law) {
    case SizeLaw::Linear:
    case SizeLaw::Seq:
        return 1;
    case SizeLaw::Quadratic:
    case SizeLaw::SeqSquared:
        return 2;
    default:
        return 0;
    }
}

std::string_view lawEvidenceName(LawEvidence e)
{
    switch (e) {
    case LawEvidence::Pool: return "pool";
    case LawEvidence::Phase: return "phase";
    case LawEvidence::WeightOrigin: return "made from a weight";
    case LawEvidence::Dimensions: return "dimensions";
    case LawEvidence::Frames: return "frames";
    case LawEvidence::CallSite: return "call site";
    case LawEvidence::Neighbours: return "neighbours";
    case LawEvidence::Default: return "default";
    case LawEvidence::Replaced: return "rebuilt in the trace";
    }
    return "?";
}

void decideSizeLaws(const Trace& trace, const DeviceTrace& dev, const Classification& c, const std::vector<StackOpFacts>& facts,
                    TraceModel& m, const std::function<void()>& findLayers)
{
    LawDecider d(trace, dev, c, facts, m);
    d.decideFixed();
    if (findLayers)
        findLayers();
    d.decideTokens();
    d.decideReplaced();
    d.findMatrices();
}

} // namespace poolscope
