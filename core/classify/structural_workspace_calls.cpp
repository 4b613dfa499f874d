#include "core/classify/structural_workspace_calls.h"

#include "core/classify/rules.h"
#include "core/classify/structural_common.h"

#include <vector>

namespace poolscope::classify_detail {

namespace {

constexpr int64_t kCublasLtWorkspaceDefault = int64_t(1) << 20; // CUBLASLT_WORKSPACE_SIZE=1024 (KiB)
constexpr size_t kMinCalls = 4;

// Let go of right after it was made: nothing else made or let go of in between, but the segment it
// needed and the cuBLAS handle's own workspace (the first call on a handle makes it; kept, or let go
// of at the program's end).
bool releasedRightAfter(const DeviceTrace& dev, const Classification& c, const Allocation& a, EventIndex freed)
{
    for (EventIndex e = a.allocEvent + 1; e < freed; ++e) {
        const Action act = dev.events.action[size_t(e)];
        if (act == Action::FreeRequested || act == Action::FreeCompleted)
            return false;
        if (act != Action::Alloc)
            continue;
        const Allocation* other = bornAt(dev, e);
        if (!other || !isCublasWorkspaceSize(other->size))
            return false;
        if (freeEventOf(*other) != kNoEvent && c.pool[size_t(other - dev.allocations.data())] != Pool::Workspace)
            return false;
    }
    return true;
}

} // namespace

void perCallMatmulWorkspace(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    if (!c.history || recordedCppFrames(trace, dev))
        return; // with C++ frames, cublas-workspace named every one of them
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::Parameter && mirrorKey(dev.allocations[i].size) == mirrorKey(kCublasLtWorkspaceDefault))
            return; // an update's temporary of a weight's size is made and let go of just so
    std::vector<uint32_t> calls;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.size != kCublasLtWorkspaceDefault)
            continue;
        const Pool p = c.pool[i];
        if (p != Pool::Temporary && p != Pool::Unknown && p != Pool::Activation)
            continue;
        if (c.pool[i] != Pool::Unknown && (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue; // a frame named what it is
        const Phase birth = c.birthPhase[i];
        const EventIndex freed = freeEventOf(a);
        if ((birth != Phase::Forward && birth != Phase::Backward) || freed == kNoEvent || !releasedRightAfter(dev, c, a, freed))
            continue;
        calls.push_back(uint32_t(i));
    }
    if (calls.size() < kMinCalls)
        return;
    const uint16_t rule = addRule(c, "cublaslt-workspace-per-call",
                                  "a block of cuBLASLt's default workspace size (1 MiB), made inside a forward or backward pass "
                                  "and let go of right after, nothing else made or let go of meanwhile (but the cuBLAS handle's "
                                  "own workspace), as are four or more others in the run, in a dump with no C++ frame to name it "
                                  "and no weight of that size: the workspace PyTorch 2.0 to 2.4 allocate for each cuBLASLt call "
                                  "(a linear layer with a bias); an operator's output lives until the next one is made",
                                  Pool::Workspace, kEvidenceLifetime | kEvidenceSize, kRoleLibraryWorkspace);
    for (uint32_t i : calls)
        decide(c, i, Pool::Workspace, rule, 60);
}

} // namespace poolscope::classify_detail
