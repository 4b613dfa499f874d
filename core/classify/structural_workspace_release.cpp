#include "core/classify/structural_workspace_release.h"

#include "core/classify/rules.h"
#include "core/classify/structural_common.h"

#include <map>

namespace poolscope::classify_detail {

void workspaceReleasedAtEnd(const DeviceTrace& dev, Classification& c)
{
    if (!c.history)
        return;
    EventIndex lastBirth = kNoEvent;
    for (const Allocation& a : dev.allocations)
        lastBirth = std::max(lastBirth, a.allocEvent);
    if (lastBirth == kNoEvent)
        return;
    std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> byStream; // (stream, size) -> blocks
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || !isCublasWorkspaceSize(a.size))
            continue;
        const EventIndex freed = freeEventOf(a);
        if (freed == kNoEvent || freed <= lastBirth)
            continue; // never freed: workspaceBySize's; freed with allocations to come: not released at the end
        const Phase birth = i < c.birthPhase.size() ? c.birthPhase[i] : Phase::Unknown;
        if (birth != Phase::Forward && birth != Phase::Backward)
            continue; // a workspace is made by a pass's first matmul on its handle
        const Pool p = c.pool[i];
        if (p != Pool::Activation && p != Pool::Temporary && p != Pool::Unknown && p != Pool::Other)
            continue; // frames (or a stronger structure) decided it as something else
        byStream[{a.stream, a.size}].push_back(uint32_t(i));
    }
    uint16_t rule = 0;
    for (const auto& [key, ids] : byStream) {
        if (ids.size() > 2)
            continue; // more than one per handle: not a workspace
        if (!rule)
            rule = addRule(c, "library-workspace-released-at-end",
                           "a block of a default cuBLAS workspace size (8,519,680 B before Hopper, 32 MiB on Hopper and "
                           "Blackwell), made inside a forward or backward pass and kept until the program's end, freed only "
                           "after its last allocation (torch._C._cuda_clearCublasWorkspaces() at teardown): the workspace "
                           "cuBLAS keeps per handle and stream, whatever frames the dump recorded",
                           Pool::Workspace, kEvidenceLifetime | kEvidenceSize, kRoleLibraryWorkspace);
        for (uint32_t i : ids)
            decide(c, i, Pool::Workspace, rule, 70);
    }
}

} // namespace poolscope::classify_detail
