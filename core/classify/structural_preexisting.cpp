#include "core/classify/structural_across.h"
#include "core/classify/structural_common.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

namespace poolscope::classify_detail {

// Below the 70 % that claims a pool: phase and lifetime say "kept across forwards", not what keeps it.
constexpr int kOutlivedConfidence = 60;

void forwardProductsFromBeforeRecording(const DeviceTrace& dev, Classification& c)
{
    if (!c.history)
        return;
    // A forward whose start the recording holds: a forward pass preceded by an event of another phase
    // (or by none: a dump that starts inside a forward holds that forward's own activations from
    // before recording, and they are activations).
    EventIndex forwardBegins = kNoEvent;
    for (const Pass& p : c.facts.passes)
        if (p.phase == Phase::Forward && p.first > 0 && c.phases.phase[size_t(p.first - 1)] != Phase::Forward) {
            forwardBegins = p.first;
            break;
        }
    // Requested bytes of blocks from before recording: the workspace's block can be a larger split.
    const auto requested = requestedBytesByAddress(dev);
    std::vector<uint32_t> kept;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || freeEventOf(a) != kNoEvent || c.pool[i] != Pool::Activation)
            continue;
        if (c.birthPhase[i] != Phase::Forward || (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue; // decided by a frame that names what it is, or born elsewhere
        kept.push_back(uint32_t(i));
    }
    if (kept.empty())
        return;
    auto requestedOf = [&](const Allocation& a) {
        auto it = requested.find(a.address);
        return it != requested.end() ? it->second : a.size;
    };
    std::map<std::pair<int64_t, int64_t>, int> perStream; // (stream, requested) -> blocks
    for (uint32_t i : kept)
        ++perStream[{dev.allocations[i].stream, requestedOf(dev.allocations[i])}];
    uint16_t workspaceRule = 0, keptRule = 0;
    for (uint32_t i : kept) {
        const Allocation& a = dev.allocations[i];
        const int64_t req = requestedOf(a);
        const bool workspaceSize = isCublasWorkspaceSize(req);
        if (workspaceSize && perStream[{a.stream, req}] <= 2) {
            if (!workspaceRule)
                workspaceRule = addRule(c, "library-workspace-from-before-recording",
                                        "made in a forward before recording began and alive to the end, of a default cuBLAS "
                                        "workspace size (8,519,680 B before Hopper, 32 MiB on "
                                        "Hopper and Blackwell, requested bytes) and at most one per handle on its stream: the "
                                        "workspace cuBLAS keeps per handle, whatever frames the dump recorded",
                                        Pool::Workspace, kEvidenceLifetime | kEvidenceSize, kRoleLibraryWorkspace);
            decide(c, i, Pool::Workspace, workspaceRule, 65);
            continue;
        }
        if (forwardBegins == kNoEvent || c.confidence[i] <= kOutlivedConfidence)
            continue; // the recording starts inside the forward that may have made it
        if (!keptRule)
            keptRule = addRule(c, "forward-product-outlived-forward",
                               "made in a forward before recording began and alive through a whole recorded forward to the "
                               "end: not an activation of the pass in flight; something the program or a library keeps "
                               "across forwards (an output it holds, a cache, a library's scratch), which its phase and "
                               "lifetime alone cannot name",
                               Pool::Activation, kEvidenceLifetime);
        decide(c, i, Pool::Activation, keptRule, kOutlivedConfidence);
    }
}

} // namespace poolscope::classify_detail
