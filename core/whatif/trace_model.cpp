#include "core/whatif/trace_model.h"

#include "core/util/units.h"
#include "core/whatif/size_laws.h"

#include <algorithm>
#include <unordered_map>

namespace poolscope {

std::string_view sizeLawName(SizeLaw law)
{
    switch (law) {
    case SizeLaw::Fixed:
        return "fixed";
    case SizeLaw::Linear:
        return "x b*s";
    case SizeLaw::Quadratic:
        return "x b*s^2";
    case SizeLaw::Batch:
        return "x b";
    case SizeLaw::Seq:
        return "x s";
    case SizeLaw::SeqSquared:
        return "x s^2";
    }
    return "?";
}

std::string sizeLawList(uint8_t laws)
{
    std::string out;
    for (unsigned l = 0; l < 6; ++l)
        if (laws & (1u << l))
            out += (out.empty() ? "" : " or ") + std::string(sizeLawName(SizeLaw(l)));
    return out;
}

namespace {

// Pre-existing allocations carry their block's rounded size; the final segments still know what
// was requested, which is what a parameter's copies and mirrors are sized after.
std::vector<int64_t> requestedSizes(const DeviceTrace& dev)
{
    std::unordered_map<uint64_t, int64_t> blockRequested;
    for (const auto& seg : dev.segments)
        for (const auto& b : seg.blocks)
            if (b.state != BlockState::Inactive && b.requestedSize > 0)
                blockRequested.emplace(b.address, b.requestedSize);
    std::vector<int64_t> requested(dev.allocations.size());
    for (size_t a = 0; a < requested.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        // Only what is still alive at the end is the final block at its address: a pre-existing
        // allocation the trace frees has its free's size, and its address may hold another by then.
        auto it = al.preexisting() && al.freeCompletedEvent == kNoEvent ? blockRequested.find(al.address) : blockRequested.end();
        requested[a] = it != blockRequested.end() ? it->second : al.size;
    }
    return requested;
}

std::string lawNotes(const TraceModel& m)
{
    std::string out;
    const RunDims& d = m.dims;
    if (d.tokens > 0) {
        out = "dimensions: tokens T = " + std::to_string(d.tokens) + " (" + d.tokensFrom + ")";
        if (d.seq > 0)
            out += ", s = " + std::to_string(d.seq) + " (" + d.seqFrom + ")" +
                   (d.batch > 0 ? ", b = " + std::to_string(d.batch) : std::string());
    } else {
        out = "dimensions: no token count found (no parameters to explain the activations' sizes)";
    }
    return out;
}

} // namespace

Phase TraceRunFacts::phaseAt(EventIndex e) const
{
    auto it = std::upper_bound(phaseRuns.begin(), phaseRuns.end(), e,
                               [](EventIndex x, const PhaseTimeline::Run& r) { return x < r.first; });
    if (it == phaseRuns.begin())
        return Phase::Unknown;
    --it;
    return e <= it->last ? it->phase : Phase::Unknown;
}

TraceAllocations readAllocations(const DeviceTrace& dev, const Classification& c)
{
    TraceAllocations p;
    const size_t n = dev.allocations.size();
    p.allocationCount = n;
    p.pool.assign(n, Pool::Unknown);
    if (c.pool.size() == n)
        p.pool = c.pool;
    p.requestedSize = requestedSizes(dev);
    p.stream.resize(n);
    for (size_t a = 0; a < n; ++a)
        p.stream[a] = dev.allocations[a].stream;
    return p;
}

TraceRunFacts readRunFacts(const Classification& c)
{
    TraceRunFacts r;
    r.phaseRuns = c.phases.runs;
    r.autocastFact = c.facts.autocast;
    r.parametersGathered = c.facts.parametersGathered;
    for (const auto& run : c.phases.runs) {
        r.hasBackward |= run.phase == Phase::Backward;
        if (run.phase == Phase::OptimizerStep && !r.hasStep) {
            r.hasStep = true;
            r.firstStepEvent = run.first;
        }
    }
    return r;
}

// The parts in order: each reads the ones before it (see trace_model.h).
TraceModel buildTraceModel(const Trace& trace, const DeviceTrace& dev, const Classification& c)
{
    TraceModel m;
    static_cast<TraceAllocations&>(m) = readAllocations(dev, c);
    if (c.pool.size() != m.allocationCount)
        m.notes.push_back("no classification: every allocation is in the unknown pool");
    static_cast<TraceRunFacts&>(m) = readRunFacts(c);
    // Parts 3 to 5: the cascade decides the laws, finding the operators' facts and (its "layers"
    // step, after the weights' laws and before the tokens') the forward passes on the way.
    decideSizeLaws(trace, dev, c, stackFacts(trace.frames), m);
    static_cast<TraceOptimizer&>(m) = findOptimizer(trace, dev, c);
    static_cast<TraceReplayInputs&>(m) = findReplayInputs(trace, dev);

    // What the laws found, said once for the report.
    m.notes.push_back(lawNotes(m));
    if (m.autocastFromStructure)
        m.notes.push_back("autocast: no frame names a cast, but each forward keeps a 16-bit twin (half the bytes) of most weight "
                          "matrices until its backward: the trace ran under autocast, its casts are the weight-cast cache");
    if (m.replacedCount > 0)
        m.notes.push_back("memory from before recording that the trace frees and builds again (" + std::to_string(m.replacedCount) +
                          " blocks, " + formatBytes(m.replacedBytes) +
                          ": the previous step's graph or batch) follows the law of what replaces it, size for size");
    if (m.quadraticBytes > 0) {
        const int64_t savedTotal = m.linearSavedBytes + m.quadraticSavedBytes;
        m.notes.push_back("attention scores: " + formatBytes(m.quadraticBytes) + " allocated over the trace (" +
                          formatBytes(m.quadraticSavedBytes) + " of " + formatBytes(savedTotal) +
                          " saved activations) are b*a*s*s tensors, found by " + m.dims.scoresFrom +
                          " and the operators and attention code that make them; they scale with b*s^2, the rest with b*s");
    } else {
        m.notes.push_back("no attention-score matrices found (no softmax, no width outside tokens x a model dimension): "
                          "all taken as linear in the sequence length, as with FlashAttention");
    }
    if (m.ambiguousBytes > 0) {
        std::string sites;
        for (size_t i = 0; i < m.ambiguous.size() && i < 3; ++i)
            sites += (i ? "; " : "") + m.ambiguous[i].site + " (" + std::to_string(m.ambiguous[i].count) + "x, " +
                     formatBytes(m.ambiguous[i].bytes) + ": taken as " + std::string(sizeLawName(m.ambiguous[i].chosen)) +
                     ", could be " + sizeLawList(m.ambiguous[i].others) + ")";
        m.notes.push_back("ambiguous: " + formatBytes(m.ambiguousBytes) +
                          " allocated over the trace fit two laws and nothing in the trace decided. Largest: " + sites);
    }
    return m;
}

} // namespace poolscope
