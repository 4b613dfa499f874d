#include "core/classify/structural_workspace_preexisting.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <map>
#include <unordered_set>
#include <vector>

namespace poolscope::classify_detail {

namespace {

// The guess it replaces (a weight from its lifetime alone) is at most this sure.
constexpr int kLifetimeGuess = 60;

} // namespace

void workspaceFromBeforeRecording(const DeviceTrace& dev, Classification& c)
{
    if (!c.history)
        return;
    const auto requested = requestedBytesByAddress(dev);
    // A gradient of the size says a weight of it is trained here: then the block may be that weight.
    const std::unordered_set<int64_t> gradientSizes = gradientSizesSoFar(dev, c);
    std::map<std::pair<int64_t, int64_t>, int> perStream; // (stream, bytes) -> workspace-sized blocks kept
    std::map<std::pair<int64_t, int64_t>, bool> framesNamed; // a frame named one of them a weight
    std::map<std::pair<int64_t, int64_t>, bool> madeInRecording; // a workspace the recording saw made
    std::vector<uint32_t> candidates;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (freeEventOf(a) != kNoEvent)
            continue;
        const int64_t req = a.preexisting() ? requestedBytesOf(a, requested) : a.size;
        if (!isCublasWorkspaceSize(req))
            continue;
        // What the recording made counts only where it was read as a handle's workspace (an OOM's
        // activations of that size are alive at the end too).
        if (!a.preexisting() && c.pool[i] != Pool::Workspace)
            continue;
        const std::pair<int64_t, int64_t> key{a.stream, req};
        // Every block from before recording of the size counts against "one per handle", whatever it
        // was read as: a family of weights of that size (a layer's projection) is no handle's workspace.
        ++perStream[key];
        madeInRecording[key] = madeInRecording[key] || !a.preexisting();
        if (c.rules[c.rule[i]].evidence & kEvidenceFrames)
            framesNamed[key] = framesNamed[key] || c.pool[i] == Pool::Parameter;
        if (!a.preexisting() || c.confidence[i] > kLifetimeGuess || (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue;
        if (c.pool[i] != Pool::Parameter && c.pool[i] != Pool::Unknown && c.pool[i] != Pool::Activation)
            continue;
        if (c.rules[c.rule[i]].has(kRoleIndistinctCopies) || gradientSizes.count(mirrorKey(req)))
            continue;
        candidates.push_back(uint32_t(i));
    }
    // One handle per thread that runs matmuls on the stream: the program's, and in a run that trains
    // the autograd engine's. Where the recording saw a workspace made on the stream in a run that
    // shows no training (no backward or step, no gradient or state, no weights held with copies of
    // their size), that was the program's one handle: a block of the size from before recording is
    // something else. Where all predate recording, two handles may have made theirs before it (a
    // window can miss the training that shows the engine's).
    const bool trains = c.preexistingCopies >= 3 ||
                        std::any_of(c.facts.passes.begin(), c.facts.passes.end(),
                                    [](const Pass& p) { return p.phase == Phase::Backward || p.phase == Phase::OptimizerStep; }) ||
                        std::any_of(c.pool.begin(), c.pool.end(), [](Pool p) { return p == Pool::Gradient || p == Pool::OptimizerState; });
    uint16_t rule = 0;
    for (uint32_t i : candidates) {
        const Allocation& a = dev.allocations[i];
        const std::pair<int64_t, int64_t> key{a.stream, requestedBytesOf(a, requested)};
        const int handles = trains || !madeInRecording[key] ? 2 : 1;
        if (perStream[key] > handles || framesNamed[key])
            continue;
        if (!rule)
            rule = addRule(c, "library-workspace-kept-from-before-recording",
                           "made before recording began and alive to the end, of a default cuBLAS workspace size "
                           "(8,519,680 B before Hopper, 32 MiB on Hopper and Blackwell, requested bytes), at most one such "
                           "block on its stream per handle (the program's, and in a run that trains the autograd "
                           "engine's), no gradient of its size and no frame that names it: the workspace a cuBLAS "
                           "handle made at its first "
                           "matmul before recording was switched on. A weight of exactly that size, alone, would look "
                           "the same: a guess",
                           Pool::Workspace, kEvidenceLifetime | kEvidenceSize, kRoleLibraryWorkspace);
        decide(c, i, Pool::Workspace, rule, kLifetimeGuess);
    }
}

} // namespace poolscope::classify_detail
