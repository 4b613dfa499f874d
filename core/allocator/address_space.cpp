#include "core/allocator/address_space.h"

#include <iterator>

namespace poolscope {

VirtualAddressSpace::VirtualAddressSpace(uint64_t base, uint64_t span) : m_base(base), m_end(base + span) {}

uint64_t VirtualAddressSpace::acquire(int64_t bytes, bool /*expandable*/)
{
    const uint64_t need = uint64_t(bytes);
    uint64_t cursor = m_base;
    auto it = m_taken.lower_bound(m_base);
    if (it != m_taken.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second > cursor)
            cursor = prev->first + prev->second;
    }
    for (;; ++it) {
        cursor = (cursor + kAlignment - 1) & ~(kAlignment - 1);
        const uint64_t limit = it == m_taken.end() ? m_end : it->first;
        if (limit >= cursor && limit - cursor >= need)
            break;
        if (it == m_taken.end())
            return 0; // address space exhausted: the caller treats it as a failed cudaMalloc
        cursor = it->first + it->second;
    }
    m_taken.emplace(cursor, need);
    return cursor;
}

void VirtualAddressSpace::release(uint64_t addr, int64_t /*bytes*/)
{
    m_taken.erase(addr);
}

bool VirtualAddressSpace::isFree(uint64_t addr, int64_t bytes) const
{
    const uint64_t end = addr + uint64_t(bytes);
    auto it = m_taken.lower_bound(addr);
    if (it != m_taken.end() && it->first < end)
        return false;
    if (it != m_taken.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second > addr)
            return false;
    }
    return true;
}

bool VirtualAddressSpace::claim(uint64_t addr, int64_t bytes)
{
    if (bytes <= 0 || !isFree(addr, bytes))
        return false;
    m_taken.emplace(addr, uint64_t(bytes));
    return true;
}

} // namespace poolscope
