#pragma once
#include "core/model/ids.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace poolscope {

// Sequences of 32-bit keys -> StackId: how the snapshot decoder recognises a frames list it has seen
// before without decoding a frame. The keys are the frame dicts' container refs (any reader) or their
// memo indices (the direct reader, which then needs no memo load per frame). Open addressing with
// linear probing, at most half full: one probe on a hit, where a node-based map chased a pointer to a
// cold node per entry.
class SeqTable {
public:
    // FNV-1a in four interleaved lanes: one serial multiply chain per frame made hashing latency-bound
    // on deep tracebacks; the lanes run in parallel. Equality is checked on lookup, so it only spreads.
    static uint64_t hash(std::span<const uint32_t> keys)
    {
        uint64_t lane[4] = {1469598103934665603ull, 1469598103934665603ull ^ 1, 1469598103934665603ull ^ 2,
                            1469598103934665603ull ^ 3};
        const size_t n4 = keys.size() & ~size_t(3);
        for (size_t i = 0; i < n4; i += 4)
            for (size_t l = 0; l < 4; ++l)
                lane[l] = (lane[l] ^ keys[i + l]) * 1099511628211ull;
        for (size_t i = n4; i < keys.size(); ++i)
            lane[0] = (lane[0] ^ keys[i]) * 1099511628211ull;
        return ((lane[0] * 31 + lane[1]) * 31 + lane[2]) * 31 + lane[3] + keys.size();
    }

    // The stack of an equal sequence inserted before; an invalid StackId when there is none.
    StackId find(uint64_t h, std::span<const uint32_t> keys) const
    {
        if (m_slots.empty())
            return {};
        const size_t mask = m_slots.size() - 1;
        for (size_t at = start(h, mask); m_slots[at] != kFree; at = (at + 1) & mask) {
            const Entry& e = m_entries[m_slots[at]];
            if (e.hash == h && e.length == keys.size() && std::equal(keys.begin(), keys.end(), m_keys.begin() + e.offset))
                return e.stack;
        }
        return {};
    }

    // For a sequence find() did not know.
    void insert(uint64_t h, std::span<const uint32_t> keys, StackId stack)
    {
        if (2 * (m_entries.size() + 1) > m_slots.size())
            grow();
        const size_t mask = m_slots.size() - 1;
        size_t at = start(h, mask);
        while (m_slots[at] != kFree)
            at = (at + 1) & mask;
        m_slots[at] = uint32_t(m_entries.size());
        m_entries.push_back(Entry{h, uint32_t(m_keys.size()), uint32_t(keys.size()), stack});
        m_keys.insert(m_keys.end(), keys.begin(), keys.end());
    }

    void clear()
    {
        m_slots.clear();
        m_entries.clear();
        m_keys.clear();
    }
    size_t size() const { return m_entries.size(); }

private:
    struct Entry {
        uint64_t hash;
        uint32_t offset, length;
        StackId stack;
    };
    static constexpr uint32_t kFree = UINT32_MAX;
    static size_t start(uint64_t h, size_t mask) { return size_t(h ^ (h >> 29)) & mask; }
    void grow()
    {
        m_slots.assign(std::max<size_t>(1024, 2 * m_slots.size()), kFree);
        const size_t mask = m_slots.size() - 1;
        for (uint32_t s = 0; s < m_entries.size(); ++s) {
            size_t a = start(m_entries[s].hash, mask);
            while (m_slots[a] != kFree)
                a = (a + 1) & mask;
            m_slots[a] = s;
        }
    }

    std::vector<uint32_t> m_slots; // index into m_entries, kFree when free
    std::vector<Entry> m_entries;
    std::vector<uint32_t> m_keys; // every entry's keys, back to back
};

} // namespace poolscope
