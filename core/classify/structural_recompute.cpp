#include "core/classify/structural_recompute.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace poolscope::classify_detail {
namespace {

constexpr size_t kMinRun = 8;   // allocations a recomputed segment repeats at least (a layer makes more)
constexpr size_t kMinSizes = 3; // of this many sizes at least (an MLP's sizes read the same backwards)
constexpr size_t kCandidates = 512; // forward places kept per run of sizes (a layer each, in a deep model)

struct Birth {
    EventIndex event;
    uint32_t alloc;
    int64_t size;
    uint32_t releasesBefore; // blocks let go of since the pass's birth before this one
};

std::vector<Birth> birthsIn(const DeviceTrace& dev, const Pass& p)
{
    std::vector<Birth> out;
    uint32_t releases = 0;
    for (EventIndex e = p.first; e <= p.last && size_t(e) < dev.eventAlloc.size(); ++e) {
        if (const Allocation* a = bornAt(dev, e)) {
            out.push_back({e, dev.eventAlloc[size_t(e)].value, a->size, releases});
            releases = 0;
        } else
            releases += releasedAt(dev, e) != nullptr;
    }
    return out;
}

// Whether B[j + k] continues a recomputation of F[i + k]: the same size, and no more blocks let go of
// before it than before the forward's (the recomputation lets go of the scratch its forward let go
// of, and keeps what the graph saves; the backward after it lets go of what the segment saved).
bool continues(const std::vector<Birth>& F, size_t i, const std::vector<Birth>& B, size_t j, size_t k)
{
    return F[i + k].size == B[j + k].size && (k == 0 || B[j + k].releasesBefore <= F[i + k].releasesBefore);
}

// FNV-1a over kMinRun sizes from `from`.
uint64_t runKey(const std::vector<Birth>& v, size_t from)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t k = from; k < from + kMinRun; ++k) {
        h ^= uint64_t(v[k].size);
        h *= 1099511628211ull;
    }
    return h;
}

bool letGoOfIn(const Allocation& a, const Pass& p)
{
    const EventIndex gone = freeEventOf(a);
    return gone != kNoEvent && gone >= p.first && gone <= p.last;
}

// Share of the run's bytes let go of inside `p`, at least three quarters.
bool mostlyLetGoOfIn(const DeviceTrace& dev, const std::vector<Birth>& v, size_t from, size_t len, const Pass& p)
{
    int64_t all = 0, inside = 0;
    for (size_t k = from; k < from + len; ++k) {
        all += v[k].size;
        if (letGoOfIn(dev.allocations[v[k].alloc], p))
            inside += v[k].size;
    }
    return inside * 4 >= all * 3;
}

bool mayChange(const Classification& c, size_t i)
{
    if (c.rules[c.rule[i]].evidence & kEvidenceFrames)
        return false;
    return c.pool[i] == Pool::Temporary || c.pool[i] == Pool::Unknown;
}

} // namespace

void recomputedSegments(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::Yes)
        return;
    enum : int8_t { kNone, kRecomputed, kSegment };
    std::vector<int8_t> mark(c.size(), kNone);
    int forward = -1;
    for (size_t k = 0; k < f.passes.size(); ++k) {
        const Pass& p = f.passes[k];
        if (p.phase == Phase::Forward)
            forward = int(k);
        if (p.phase != Phase::Backward || forward < 0)
            continue;
        const Pass& fw = f.passes[size_t(forward)];
        const std::vector<Birth> F = birthsIn(dev, fw), B = birthsIn(dev, p);
        if (F.size() < kMinRun || B.size() < kMinRun)
            continue;
        std::unordered_map<uint64_t, std::vector<uint32_t>> at; // kMinRun sizes -> forward places
        for (size_t i = 0; i + kMinRun <= F.size(); ++i)
            if (auto& places = at[runKey(F, i)]; places.size() < kCandidates)
                places.push_back(uint32_t(i));
        std::vector<uint8_t> used(F.size(), 0); // forward places a recomputation was paired with
        for (size_t j = 0; j + kMinRun <= B.size();) {
            // The longest run decides where the recomputation ends; its forward copy is a place not
            // yet paired (each segment is recomputed once), which may be a little shorter (the
            // layer after it begins otherwise).
            size_t best = 0, bestAt = 0, copyLen = 0;
            if (auto it = at.find(runKey(B, j)); it != at.end())
                for (uint32_t i : it->second) {
                    size_t len = 0;
                    while (i + len < F.size() && j + len < B.size() && continues(F, i, B, j, len))
                        ++len;
                    best = std::max(best, len);
                    if (len >= kMinRun && (copyLen == 0 || (used[bestAt] && !used[i]) || (used[bestAt] == used[i] && len > copyLen)))
                        bestAt = i, copyLen = len;
                }
            if (best < kMinRun) {
                ++j;
                continue;
            }
            std::unordered_set<int64_t> sizes;
            for (size_t k2 = j; k2 < j + best; ++k2)
                sizes.insert(B[k2].size);
            // What is recomputed was not kept by the forward, and the recomputation is the backward's.
            if (sizes.size() >= kMinSizes && mostlyLetGoOfIn(dev, F, bestAt, copyLen, fw) && mostlyLetGoOfIn(dev, B, j, best, p)) {
                // The segment's backward begins with the first allocation after the recomputation;
                // what the recomputation let go of before then was its own scratch.
                const EventIndex segmentBackward = j + best < B.size() ? B[j + best].event : p.last;
                std::vector<uint32_t> kept; // let go of by the segment's backward
                for (size_t k2 = j; k2 < j + best; ++k2) {
                    const EventIndex gone = freeEventOf(dev.allocations[B[k2].alloc]);
                    if (gone != kNoEvent && gone >= segmentBackward && gone <= p.last)
                        kept.push_back(B[k2].alloc);
                }
                // A recomputation is for the segment's backward, which uses most of the tensors it
                // made; a layer's backward that repeats another's (a pass boundary misread) uses up
                // its own (counted, not weighed: a small model's cuBLAS workspaces outweigh it).
                if (kept.size() * 2 < best) {
                    j += best;
                    continue;
                }
                for (uint32_t i : kept)
                    mark[i] = kRecomputed;
                used[bestAt] = 1;
                for (size_t k2 = bestAt; k2 < bestAt + copyLen; ++k2) {
                    const Allocation& a = dev.allocations[F[k2].alloc];
                    if (letGoOfIn(a, fw) && freeEventOf(a) - a.allocEvent > kQuickEvents)
                        mark[F[k2].alloc] = kSegment;
                }
            }
            j += best;
        }
    }
    uint16_t recomputed = 0, segment = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (mark[i] == kNone || !mayChange(c, i))
            continue;
        if (mark[i] == kRecomputed) {
            if (!recomputed)
                recomputed = addRule(c, "recomputed-for-backward-by-structure",
                                     "made in backward by a run of allocations that repeats, size for size, a run of the "
                                     "forward's that the forward let go of (activation checkpointing recomputes the segment), "
                                     "and let go of by the segment's backward: a tensor recomputed for backward",
                                     Pool::Activation, kEvidenceLifetime | kEvidenceSize);
            decide(c, i, Pool::Activation, recomputed, 60);
        } else {
            if (!segment)
                segment = addRule(c, "checkpointed-segment-by-structure",
                                  "made in the forward by a run of allocations that the backward repeats, size for size "
                                  "(activation checkpointing recomputes it), and held until the segment ended: the "
                                  "segment's activation, dropped at its end and recomputed in backward",
                                  Pool::Activation, kEvidenceLifetime | kEvidenceSize);
            decide(c, i, Pool::Activation, segment, 60);
        }
    }
}

} // namespace poolscope::classify_detail
