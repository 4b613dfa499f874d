#pragma once
#include "core/model/ids.h"
#include "core/model/trace.h"

#include <cstdint>
#include <vector>

namespace poolscope {

// Which allocations are alive after event i, in O(log m + k) for k answers: a static centred
// interval tree over [allocEvent, freeCompletedEvent) (pre-existing allocations start at -1,
// allocations alive at the end never stop). Built once per device; scrubbing queries it per step.
class AliveIndex {
public:
    AliveIndex() = default;
    explicit AliveIndex(const std::vector<Allocation>& allocations);

    // Appends the ids alive after event i (kNoEvent: the initial state) to `out`, in no order.
    void aliveAfter(EventIndex i, std::vector<AllocId>& out) const;
    std::vector<AllocId> aliveAfter(EventIndex i) const;
    size_t size() const { return m_start.size(); }

private:
    struct Node {
        int64_t center;
        uint32_t begin; // into m_byStart / m_byEnd
        uint32_t count;
        int32_t left;
        int32_t right;
    };
    int32_t build(std::vector<uint32_t>& items, size_t lo, size_t hi);

    std::vector<int64_t> m_start; // per allocation
    std::vector<int64_t> m_end;   // exclusive; INT64_MAX when alive at the end
    std::vector<Node> m_nodes;
    std::vector<uint32_t> m_byStart; // per node slice, ascending start
    std::vector<uint32_t> m_byEnd;   // per node slice, descending end
    int32_t m_root = -1;
};

} // namespace poolscope
