// Segment and block decoding for SnapshotDecoder (the allocator state at dump time).
#include "core/formats/snapshot_decoder.h"

#include "core/util/load_error.h"

namespace poolscope {
namespace {
constexpr std::string_view kSegmentKeys[] = {"device", "address", "total_size", "allocated_size", "active_size",
                                             "requested_size", "stream", "segment_type", "segment_pool_id",
                                             "is_expandable", "frames", "blocks"};
constexpr std::string_view kBlockKeys[] = {"address", "size", "requested_size", "state", "frames", "history"};

template <size_t N>
bool known(std::string_view key, const std::string_view (&keys)[N])
{
    for (auto k : keys)
        if (k == key)
            return true;
    return false;
}
} // namespace

void SnapshotDecoder::decodeSegments(const PyValue& list, const std::string& where)
{
    if (list.kind != PyKind::List)
        fail(where, "a list of segments", list);
    const auto segs = m_arena.items(list);
    for (size_t i = 0; i < segs.size(); ++i)
        m_out.addSegment(decodeSegment(segs[i], where + "[" + std::to_string(i) + "]"));
}

Segment SnapshotDecoder::decodeSegment(const PyValue& seg, const std::string& where)
{
    if (seg.kind != PyKind::Dict)
        fail(where, "a segment dict", seg);
    Segment s;
    const int64_t device = intField(seg, "device", where, 0);
    if (device < 0 || device >= kMaxDevices)
        throw LoadError(LoadErrorCode::Malformed, m_name, -1, "field " + where + ".device: expected a device index 0-" +
                                                                  std::to_string(kMaxDevices - 1) + ", found " + std::to_string(device));
    s.device = int(device);
    m_arena.charge(int64_t(sizeof(Segment))); // a memo-shared segment dict listed 100k times is 100k segments
    if (const PyValue* a = m_arena.get(seg, "address"))
        s.address = addrValue(*a, std::string(where + ".address"));
    s.totalSize = intField(seg, "total_size", where, 0, true);
    if (s.totalSize < 0)
        throw LoadError(LoadErrorCode::Malformed, m_name, -1, "field " + where + ".total_size: expected a non-negative byte count, found " + std::to_string(s.totalSize));
    s.allocatedSize = intField(seg, "allocated_size", where, 0);
    s.activeSize = intField(seg, "active_size", where, 0);
    s.requestedSize = intField(seg, "requested_size", where, 0);
    if (const PyValue* st = m_arena.get(seg, "stream"))
        s.stream = int64_t(addrValue(*st, std::string(where + ".stream")));
    s.isLarge = strField(seg, "segment_type", where) != "small";
    s.isExpandable = intField(seg, "is_expandable", where, 0) != 0;
    if (const PyValue* pool = m_arena.get(seg, "segment_pool_id"); pool && (pool->kind == PyKind::Tuple || pool->kind == PyKind::List)) {
        const auto p = m_arena.items(*pool);
        for (size_t k = 0; k < std::min<size_t>(2, p.size()); ++k)
            s.poolId[k] = intValue(p[k], std::string(where + ".segment_pool_id"));
    }
    if (const PyValue* f = m_arena.get(seg, "frames"))
        s.stack = stackOf(*f, std::string(where + ".frames"));
    const auto segKv = m_arena.items(seg);
    for (size_t k = 0; k + 1 < segKv.size(); k += 2)
        if (segKv[k].kind == PyKind::Str && !known(m_arena.str(segKv[k]), kSegmentKeys))
            m_out.unknownKey("segment", m_arena.str(segKv[k]));

    const PyValue* blocks = m_arena.get(seg, "blocks");
    if (!blocks)
        return s;
    if (blocks->kind != PyKind::List)
        fail(where + ".blocks", "a list of blocks", *blocks);
    // Legacy blocks (PyTorch <= 2.0) carry no address: they tile the segment in order.
    uint64_t cursor = s.address;
    const auto items = m_arena.items(*blocks);
    m_arena.charge(int64_t(items.size() * sizeof(Block)));
    s.blocks.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        const std::string bw = where + ".blocks[" + std::to_string(i) + "]";
        const PyValue& bv = items[i];
        if (bv.kind != PyKind::Dict)
            fail(bw, "a block dict", bv);
        Block b;
        b.size = intField(bv, "size", bw, 0, true);
        if (b.size < 0)
            throw LoadError(LoadErrorCode::Malformed, m_name, -1, "field " + bw + ".size: expected a non-negative byte count, found " + std::to_string(b.size));
        b.requestedSize = intField(bv, "requested_size", bw, b.size);
        const std::string state = strField(bv, "state", bw);
        if (state == "active_allocated")
            b.state = BlockState::ActiveAllocated;
        else if (state == "active_pending_free")
            b.state = BlockState::ActivePendingFree;
        else if (state == "inactive")
            b.state = BlockState::Inactive;
        else
            throw LoadError(LoadErrorCode::Malformed, m_name, -1, "field " + bw + ".state: expected 'active_allocated', 'active_pending_free' or 'inactive', found '" + state + "'");
        if (const PyValue* a = m_arena.get(bv, "address"))
            b.address = addrValue(*a, std::string(bw + ".address"));
        else
            b.address = cursor;
        if (const PyValue* f = m_arena.get(bv, "frames"))
            b.stack = stackOf(*f, std::string(bw + ".frames"));
        if (const PyValue* h = m_arena.get(bv, "history"); h && h->kind == PyKind::List && !m_arena.items(*h).empty()) {
            // The newest history record is the block's current allocation.
            const PyValue& last = m_arena.items(*h).back();
            if (last.kind == PyKind::Dict) {
                if (const PyValue* f = m_arena.get(last, "frames"); f && !b.stack.valid())
                    b.stack = stackOf(*f, std::string(bw + ".history[-1].frames"));
            }
        }
        const auto kv = m_arena.items(bv);
        for (size_t k = 0; k + 1 < kv.size(); k += 2)
            if (kv[k].kind == PyKind::Str && !known(m_arena.str(kv[k]), kBlockKeys))
                m_out.unknownKey("block", m_arena.str(kv[k]));
        cursor = b.address + uint64_t(b.size);
        s.blocks.push_back(b);
    }
    return s;
}

} // namespace poolscope
