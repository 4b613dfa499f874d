#pragma once
#include "core/model/ids.h"
#include "core/model/trace.h"

#include <cstdint>
#include <vector>

namespace poolscope {

// Which allocations are alive after event i: those that started at or before i and end after it.
// Allocations come in allocation order (pre-existing ones first), so the started ones are a prefix,
// found by binary search; among them, the live ones are found through the largest end per block of
// 32 and per superblock of 1024, skipping every block that ended before i. Building is one linear
// pass (a centred interval tree took 140 ms at 500k allocations, this a few ms); a query costs the
// superblocks of the prefix plus ~64 steps per answer. Inputs out of start order (possible from
// hand-made traces) are sorted once through a permutation. Built once per device; scrubbing queries
// it per step.
class AliveIndex {
public:
    AliveIndex() = default;
    explicit AliveIndex(const std::vector<Allocation>& allocations);

    // Appends the ids alive after event i (kNoEvent: the initial state) to `out`, in no order.
    void aliveAfter(EventIndex i, std::vector<AllocId>& out) const;
    std::vector<AllocId> aliveAfter(EventIndex i) const;
    size_t size() const { return m_start.size(); }

private:
    static constexpr size_t kBlock = 32;
    static constexpr size_t kSuper = 32 * kBlock;

    std::vector<int64_t> m_start;    // ascending
    std::vector<int64_t> m_end;      // exclusive; INT64_MAX when alive at the end
    std::vector<int64_t> m_blockMax; // largest m_end per kBlock entries
    std::vector<int64_t> m_superMax; // largest m_end per kSuper entries
    std::vector<uint32_t> m_id;      // entry -> allocation id; empty when the allocations were in order
};

} // namespace poolscope
