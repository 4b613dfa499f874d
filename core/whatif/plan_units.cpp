// Transforms that follow the model's layers: ZeRO / FSDP sharding (with the transient buffers of
// one unit) and activation checkpointing (segments that keep only their input and recompute).
#include "core/whatif/plan.h"

#include "core/util/units.h"

#include <algorithm>
#include <cmath>

namespace poolscope {
namespace {

int shardStage(ShardingKind k)
{
    switch (k) {
    case ShardingKind::None:
        return 0;
    case ShardingKind::Zero1:
        return 1;
    case ShardingKind::Zero2:
    case ShardingKind::FsdpGradOp:
        return 2;
    default:
        return 3;
    }
}

EventIndex before(EventIndex e)
{
    return e > 0 ? e - 1 : kNoEvent;
}

// Where a gradient born at `birth` is reduce-scattered: when its layer's backward ends (the next
// layer boundary), or at once when the trace shows no layers (an ideal bucketed reducer).
EventIndex reducePoint(const std::vector<EventIndex>& boundaries, EventIndex birth)
{
    auto it = std::lower_bound(boundaries.begin(), boundaries.end(), birth);
    return it == boundaries.end() ? birth : *it;
}

// All-gather buffers of ZeRO-3 / FSDP FULL_SHARD: a unit's unsharded parameters while it runs in
// forward and again in backward; FSDP also prefetches the next unit while the current one runs.
void gatherBuffers(const ForwardPass& pass, int64_t unit, int64_t stream, bool gradOp, bool prefetch, Plan& plan)
{
    const size_t L = pass.layers.size();
    for (size_t l = 0; l < L; ++l) {
        const LayerSpan& span = pass.layers[l];
        if (gradOp) {
            // SHARD_GRAD_OP: the unit stays unsharded from its forward until its backward is done.
            const EventIndex until = span.backwardEnd != kNoEvent ? span.backwardEnd : pass.end;
            plan.extras.push_back({before(span.forwardBegin), until, unit, stream, Pool::Parameter});
            continue;
        }
        const EventIndex fwdFrom = before(prefetch && l > 0 ? pass.layers[l - 1].forwardBegin : span.forwardBegin);
        plan.extras.push_back({fwdFrom, span.forwardEnd, unit, stream, Pool::Parameter});
        if (span.backwardBegin == kNoEvent)
            continue;
        const EventIndex bwdFrom = prefetch && l + 1 < L && pass.layers[l + 1].backwardBegin != kNoEvent
                                       ? pass.layers[l + 1].backwardBegin
                                       : span.backwardBegin;
        plan.extras.push_back({before(bwdFrom), span.backwardEnd, unit, stream, Pool::Parameter});
    }
}

// Bytes of weights beyond what the gradients hold, where the gradients are at their most: frozen
// weights, buffers, or a second model kept whole beside the trained one (an EMA copy, a reference or
// teacher model, a VAE). Sharding the wrapped model shards them only if that model holds them (and
// never its buffers); the dump cannot tell which module a block is in. By bytes at one moment, not
// size by size: DDP's buckets and ZeRO's partitions hold the gradients in blocks of no parameter's
// size, and a step that rebuilds its parameters holds two copies for a moment. Gradients wider than
// the weights (fp32 gradients of 16-bit weights) leave nothing to say; nor do a few buffers (under
// 1 MiB or a fiftieth of the weights).
int64_t weightsBeyondGradients(const std::vector<Allocation>& allocs, const TraceModel& m)
{
    struct Edge {
        EventIndex at;
        int64_t delta;
        bool gradient;
    };
    std::vector<Edge> edges;
    for (size_t a = 0; a < allocs.size() && a < m.pool.size(); ++a) {
        if (m.pool[a] != Pool::Parameter && m.pool[a] != Pool::Gradient)
            continue;
        const bool g = m.pool[a] == Pool::Gradient;
        edges.push_back({allocs[a].preexisting() ? EventIndex(-1) : allocs[a].allocEvent, allocs[a].size, g});
        if (allocs[a].freeCompletedEvent != kNoEvent)
            edges.push_back({allocs[a].freeCompletedEvent, -allocs[a].size, g});
    }
    std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return x.at != y.at ? x.at < y.at : x.delta < y.delta; });
    int64_t params = 0, grads = 0, mostGrads = 0, paramsThen = 0;
    for (size_t k = 0; k < edges.size(); ++k) {
        (edges[k].gradient ? grads : params) += edges[k].delta;
        if (k + 1 < edges.size() && edges[k + 1].at == edges[k].at)
            continue; // the moment after every change at this event
        if (grads > mostGrads) {
            mostGrads = grads;
            paramsThen = params;
        }
    }
    const int64_t beyond = mostGrads > 0 ? paramsThen - mostGrads : 0;
    return beyond >= (int64_t(1) << 20) && beyond * 50 >= paramsThen ? beyond : 0;
}

} // namespace

void applySharding(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, Plan& plan)
{
    const int stage = shardStage(sc.sharding);
    if (stage == 0)
        return;
    if (m.parametersGathered) {
        // The recorded run already gathers each layer's parameters for its use and keeps shards
        // (FSDP, ZeRO-3): its gradients and state are shards too. Dividing them again would model
        // sharding the shards; the knob that applies is the number of ranks they are sharded over,
        // which the dump does not record.
        plan.notes.push_back(std::string(shardingName(sc.sharding)) +
                             " not applied: the recorded run already shards its parameters (each layer's parameters are "
                             "gathered for its forward and backward and let go of after, the blocks kept between uses are "
                             "shards), so its gradients and optimizer state are shards already; the dump does not say over "
                             "how many ranks, so more ranks cannot be modelled from it");
        return;
    }
    const Ratio shard{1, sc.ranks};
    const auto& allocs = dev.allocations;
    int64_t stateBefore = 0, stateAfter = 0;
    for (size_t a = 0; a < plan.size.size(); ++a)
        if (m.pool[a] == Pool::OptimizerState || m.stepWorkspace[a]) {
            stateBefore += plan.size[a];
            plan.size[a] = shard.apply(plan.size[a]);
            stateAfter += plan.size[a];
        }
    for (auto& e : plan.extras)
        if (e.pool == Pool::OptimizerState)
            e.size = shard.apply(e.size);
    std::string note = std::string(shardingName(sc.sharding)) + " on " + std::to_string(sc.ranks) +
                       " ranks: optimizer state and step scratch / " + std::to_string(sc.ranks);

    if (stage >= 2) {
        // Gradients held across accumulation's micro-steps are this rank's shards.
        for (auto& e : plan.extras)
            if (e.pool == Pool::Gradient)
                e.size = shard.apply(e.size);
        std::vector<EventIndex> boundaries;
        for (const auto& pass : m.passes)
            for (const auto& span : pass.layers)
                if (span.backwardEnd != kNoEvent)
                    boundaries.push_back(span.backwardEnd);
        std::sort(boundaries.begin(), boundaries.end());
        for (size_t a = 0; a < plan.size.size(); ++a) {
            if (m.pool[a] != Pool::Gradient || plan.size[a] == 0)
                continue;
            const Allocation& al = allocs[a];
            if (al.preexisting()) {
                plan.size[a] = shard.apply(plan.size[a]);
                continue;
            }
            // Full-size while its unit's backward runs, then only this rank's shard survives.
            const EventIndex at = reducePoint(boundaries, al.allocEvent);
            if (al.freeCompletedEvent != kNoEvent && al.freeCompletedEvent <= at)
                continue;
            plan.earlyFree[a] = at;
            plan.extras.push_back({at, al.freeCompletedEvent, shard.apply(plan.size[a]), al.stream, Pool::Gradient});
        }
        note += boundaries.empty() ? "; gradients / " + std::to_string(sc.ranks) + " right after they are produced"
                                   : "; gradients / " + std::to_string(sc.ranks) + " once their layer's backward is done";
    }
    const bool gradOp = sc.sharding == ShardingKind::FsdpGradOp;
    if (stage >= 3 || gradOp) {
        int64_t params = 0, largest = 0, stream = 0;
        for (size_t a = 0; a < plan.size.size(); ++a)
            if (m.pool[a] == Pool::Parameter) {
                params += plan.size[a];
                if (plan.size[a] > largest) {
                    largest = plan.size[a];
                    stream = allocs[a].stream;
                }
                plan.size[a] = shard.apply(plan.size[a]);
            }
        const bool prefetch = sc.sharding == ShardingKind::FsdpFull || sc.sharding == ShardingKind::FsdpHybrid;
        const int64_t unit = m.layerParameterBytes > 0 ? m.layerParameterBytes : largest;
        for (const auto& pass : m.passes) {
            if (!pass.layers.empty()) {
                gatherBuffers(pass, unit, stream, gradOp, prefetch, plan);
                continue;
            }
            // No layers: gradOp keeps all parameters unsharded through forward and backward; full
            // sharding gathers the largest parameter and the prefetched next one throughout.
            if (gradOp) {
                const EventIndex until = pass.backwardEnd != kNoEvent ? pass.backwardEnd : pass.end;
                plan.extras.push_back({before(pass.begin), until, params, stream, Pool::Parameter});
                continue;
            }
            plan.extras.push_back({before(pass.begin), pass.end, 2 * largest, stream, Pool::Parameter});
            if (pass.backwardBegin != kNoEvent)
                plan.extras.push_back({before(pass.backwardBegin), pass.backwardEnd, 2 * largest, stream, Pool::Parameter});
        }
        note += "; parameters / " + std::to_string(sc.ranks) +
                (gradOp     ? " at rest, each unit unsharded from its forward to its backward ("
                 : prefetch ? ", plus all-gather buffers of one unit and the prefetched next ("
                            : ", plus the all-gather buffer of the running unit (") +
                formatBytes(unit) + " per unit" + (m.layersPerPass > 0 ? ")" : ", no layers found: the largest parameter)");
        if (m.passes.empty())
            note += "; no forward pass in this trace, so no all-gather buffers are added";
        if (const int64_t frozen = weightsBeyondGradients(allocs, m); frozen > 0)
            note += "; " + formatBytes(frozen) +
                    " of weights beyond what the gradients hold (frozen weights, buffers, or a second model beside the "
                    "trained one: an EMA copy, a reference or teacher model), sharded here as if the wrapped model held "
                    "them; buffers and a copy kept outside it stay whole: add " +
                    formatBytes(frozen - shard.apply(frozen));
    }
    if (sc.sharding == ShardingKind::FsdpHybrid)
        note += " (hybrid: --ranks is the size of one shard group, replicated across groups)";
    note += "; collective buckets are not modeled";
    plan.notes.push_back(note + " (state " + formatBytes(stateBefore) + " -> " + formatBytes(stateAfter) + " over the trace)");
}

void applyCheckpointing(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, Plan& plan)
{
    if (sc.checkpoint == CheckpointKind::None)
        return;
    const auto& allocs = dev.allocations;
    const bool selective = sc.checkpoint == CheckpointKind::Selective;
    int64_t released = 0, recomputed = 0;
    int segmentLayers = 1;
    bool anyBackward = false;
    auto segment = [&](const ForwardPass& pass) {
        return sc.checkpoint == CheckpointKind::Sqrt ? size_t(std::ceil(std::sqrt(double(pass.layers.size())))) : size_t(1);
    };
    for (const auto& pass : m.passes)
        if (!pass.layers.empty())
            segmentLayers = int(segment(pass));
    // One sweep: each saved allocation knows its pass and layer.
    for (size_t a = 0; a < allocs.size(); ++a) {
        if (m.pass[a] < 0 || m.layer[a] < 0 || !m.saved[a] || plan.size[a] == 0)
            continue;
        const ForwardPass& pass = m.passes[size_t(m.pass[a])];
        const size_t L = pass.layers.size();
        if (L == 0)
            continue;
        const size_t k = segment(pass);
        {
            if (selective && m.law[a] != SizeLaw::Quadratic)
                continue;
            const size_t layer = size_t(m.layer[a]);
            const size_t last = std::min(L, (layer / k + 1) * k) - 1; // last layer of the segment
            // Full checkpointing keeps each segment's output: the next segment's input.
            if (!selective && m.keptInput[a] && layer == last)
                continue;
            const EventIndex segEnd = pass.layers[last].forwardEnd;
            if (allocs[a].allocEvent > segEnd)
                continue;
            plan.earlyFree[a] = segEnd;
            released += plan.size[a];
            const EventIndex recomputeAt = pass.layers[last].backwardBegin;
            const EventIndex freed = allocs[a].freeCompletedEvent;
            if (recomputeAt != kNoEvent && freed != kNoEvent && recomputeAt <= freed) {
                plan.extras.push_back({before(recomputeAt), freed, plan.size[a], allocs[a].stream, m.pool[a]});
                recomputed += plan.size[a];
                anyBackward = true;
            }
        }
    }
    // Autocast's weight casts made inside a checkpointed segment are saved by nothing: the cast
    // cache holds them until the forward's autocast region ends, and the recompute in backward
    // makes them again for its segment.
    int64_t castsFreed = 0;
    std::vector<EventIndex> passBegin;
    for (const auto& pass : m.passes)
        passBegin.push_back(pass.begin);
    for (size_t a = 0; a < allocs.size() && !selective && !passBegin.empty(); ++a) {
        if (!m.weightCast[a] || plan.size[a] == 0 || allocs[a].preexisting())
            continue;
        const EventIndex born = allocs[a].allocEvent, freed = allocs[a].freeCompletedEvent;
        const auto it = std::upper_bound(passBegin.begin(), passBegin.end(), born);
        if (it == passBegin.begin())
            continue;
        const ForwardPass& pass = m.passes[size_t(it - passBegin.begin()) - 1];
        const size_t L = pass.layers.size();
        if (L == 0 || born < pass.layers.front().forwardBegin || born > pass.layers.back().forwardEnd ||
            (freed != kNoEvent && freed <= pass.end))
            continue;
        const size_t k = sc.checkpoint == CheckpointKind::Sqrt ? size_t(std::ceil(std::sqrt(double(L)))) : 1;
        size_t layer = 0;
        while (layer + 1 < L && pass.layers[layer + 1].forwardBegin <= born)
            ++layer;
        const size_t last = std::min(L, (layer / k + 1) * k) - 1;
        plan.earlyFree[a] = pass.end;
        castsFreed += plan.size[a];
        const EventIndex recomputeAt = pass.layers[last].backwardBegin;
        if (recomputeAt != kNoEvent && freed != kNoEvent && recomputeAt <= freed)
            plan.extras.push_back({before(recomputeAt), freed, plan.size[a], allocs[a].stream, m.pool[a]});
    }
    if (m.layersPerPass == 0) {
        plan.notes.push_back("checkpointing needs the forward pass's repeated units, and none were found: not applied. Record "
                             "with the capture helper's units= (resources/capture/poolscope_capture.py) to mark them");
        return;
    }
    if (castsFreed > 0)
        plan.notes.push_back("autocast's weight casts of the checkpointed segments (" + formatBytes(castsFreed) +
                             ") are dropped when the forward's autocast region ends and made again by the recompute");
    std::string what = selective ? "selective checkpointing: the attention-score tensors of each layer are not kept"
                                 : "checkpointing " + std::string(checkpointName(sc.checkpoint)) + " (segments of " +
                                       std::to_string(segmentLayers) + " layer" + (segmentLayers > 1 ? "s" : "") +
                                       "): each segment keeps only its input";
    plan.notes.push_back(what + "; " + formatBytes(released) + " of saved activations released after their segment" +
                         (anyBackward ? ", " + formatBytes(recomputed) + " recomputed one segment at a time in backward"
                                      : "; no backward in this trace, so nothing is recomputed"));
    int64_t forwardUs = 0, timed = 0;
    for (const auto& pass : m.passes)
        if (pass.durationUs > 0) {
            forwardUs += pass.durationUs;
            ++timed;
        }
    if (selective)
        plan.recompute = "recomputes the attention scores of each layer in backward (a few % more compute, Korthikanti et al.)";
    else
        plan.recompute = "one extra forward pass per step" +
                         (timed > 0 ? " (a recorded forward pass took " + formatDurationUs(forwardUs / timed) + ")" : std::string());
}

} // namespace poolscope
