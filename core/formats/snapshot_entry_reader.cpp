// Trace entries read straight from the pickle bytes. A snapshot is mostly a million entry dicts of one
// shape: {action, addr, size, stream, time_us, frames, ...}, the keys and frame dicts memo references,
// the frames list a new list of memo references (or a reference to an earlier one). The general reader
// builds each as arena containers and then converts them; this reads the same opcodes once, straight
// into the columns, and leaves anything of another shape to the general reader (returns 0 before any
// side effect), which then reports errors with its usual words.
#include "core/formats/snapshot_decoder.h"

#include <cstring>

namespace poolscope {
namespace {

namespace op {
constexpr int kFrame = 0x95, kMemoize = 0x94, kBinPut = 'q', kLongBinPut = 'r', kMark = '(', kSetItems = 'u',
              kBinGet = 'h', kLongBinGet = 'j', kEmptyDict = '}', kEmptyList = ']', kAppend = 'a', kAppends = 'e',
              kNone = 'N', kTrue = 0x88, kFalse = 0x89, kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J', kLong1 = 0x8a,
              kBinFloat = 'G', kShortBinUnicode = 0x8c, kBinUnicode = 'X';
}

// A cursor over one entry's bytes. Every read is bounds-checked; running out is a reason to leave the
// entry to the general reader (which reports the truncation with its offset), never an error here.
class EntryBytes {
public:
    EntryBytes(std::span<const uint8_t> bytes, std::span<const MemoSlot> memo)
        : m_begin(bytes.data()), m_p(bytes.data()), m_end(bytes.data() + bytes.size()), m_memo(memo)
    {
    }

    // The next opcode, FRAME length hints skipped (a frame boundary may fall inside an entry); -1 at the end.
    int next()
    {
        const int o = peek();
        if (o >= 0)
            ++m_p;
        return o;
    }
    int peek()
    {
        while (m_p < m_end && *m_p == op::kFrame) {
            if (m_end - m_p < 9)
                return -1;
            m_p += 9;
        }
        return m_p < m_end ? *m_p : -1;
    }
    const uint8_t* position() const { return m_p; }
    void rewind(const uint8_t* p) { m_p = p; }
    size_t consumed() const { return size_t(m_p - m_begin); }

    // BINGET/LONG_BINGET's slot; false when the slot is unset or consumed, or holds a number (no key,
    // action or frame is one). A slot, not a PyValue: it travels in one register, where a 16-byte
    // PyValue written piecewise and read whole stalled store forwarding once per frame.
    bool memoRef(int o, MemoSlot& slot)
    {
        uint32_t index = 0;
        if (o == op::kBinGet) {
            if (!has(1))
                return false;
            index = *m_p++;
        } else if (o == op::kLongBinGet) {
            if (!has(4))
                return false;
            index = uint32_t(m_p[0]) | uint32_t(m_p[1]) << 8 | uint32_t(m_p[2]) << 16 | uint32_t(m_p[3]) << 24;
            m_p += 4;
        } else {
            return false;
        }
        if (index >= m_memo.size())
            return false;
        slot = m_memo[index];
        return slot.kind != PyKind::Released && MemoSlot::holdsWhole(slot.kind);
    }

    // An integer opcode's value as the general reader reads it: Int and Bool as their value, None as
    // 0 with `none` set; false for others, including LONG1 wider than 8 bytes (2^63 and up: the
    // general reader makes those UInt).
    bool integer(int o, int64_t& x, bool& none)
    {
        none = false;
        switch (o) {
        case op::kNone: x = 0; none = true; return true;
        case op::kTrue: x = 1; return true;
        case op::kFalse: x = 0; return true;
        case op::kBinInt1:
            if (!has(1))
                return false;
            x = *m_p++;
            return true;
        case op::kBinInt2:
            if (!has(2))
                return false;
            x = int64_t(m_p[0]) | int64_t(m_p[1]) << 8;
            m_p += 2;
            return true;
        case op::kBinInt: {
            if (!has(4))
                return false;
            const uint32_t u = uint32_t(m_p[0]) | uint32_t(m_p[1]) << 8 | uint32_t(m_p[2]) << 16 | uint32_t(m_p[3]) << 24;
            m_p += 4;
            x = int32_t(u);
            return true;
        }
        case op::kLong1: {
            if (!has(1) || m_p[0] > 8 || !has(size_t(1) + m_p[0]))
                return false;
            const size_t n = *m_p++;
            uint64_t u = 0;
            for (size_t k = 0; k < n; ++k)
                u |= uint64_t(m_p[k]) << (8 * k);
            if (n > 0 && n < 8 && (m_p[n - 1] & 0x80)) // two's complement: extend the sign
                u |= ~uint64_t(0) << (8 * n);
            m_p += n;
            x = int64_t(u);
            return true;
        }
        default: return false;
        }
    }

    // A value whose key PoolScope ignores: references and numbers are stepped over; anything that
    // would create an object (a new string, a container) is left to the general reader.
    bool skipValue(int o)
    {
        if (o == op::kBinGet || o == op::kLongBinGet) {
            MemoSlot slot;
            return memoRef(o, slot);
        }
        if (o == op::kBinFloat) {
            if (!has(8))
                return false;
            m_p += 8;
            return true;
        }
        int64_t x;
        bool none;
        return integer(o, x, none);
    }

    // A new string (SHORT_BINUNICODE, BINUNICODE): its bytes. Recent PyTorch writes one per entry for
    // ignored keys such as compile_context ('N/A'), each a fresh object that the pickler memoizes.
    bool newString(int o, std::string_view& s)
    {
        size_t n = 0;
        if (o == op::kShortBinUnicode) {
            if (!has(1))
                return false;
            n = *m_p++;
        } else if (o == op::kBinUnicode) {
            if (!has(4))
                return false;
            n = size_t(m_p[0]) | size_t(m_p[1]) << 8 | size_t(m_p[2]) << 16 | size_t(m_p[3]) << 24;
            m_p += 4;
        } else {
            return false;
        }
        if (!has(n))
            return false;
        s = std::string_view(reinterpret_cast<const char*>(m_p), n);
        m_p += n;
        return true;
    }

    // The memo slot a just-created object takes (MEMOIZE, or BINPUT/LONG_BINPUT naming the next free
    // slot); none when no memo opcode follows. False for a put elsewhere: left to the general reader.
    bool memoSlot(uint64_t nextIndex, bool& memoized)
    {
        memoized = false;
        const int o = peek();
        if (o == op::kMemoize) {
            ++m_p;
            memoized = true;
            return true;
        }
        if (o != op::kBinPut && o != op::kLongBinPut)
            return true;
        const size_t width = o == op::kBinPut ? 1 : 4;
        if (!has(1 + width))
            return false;
        uint64_t index = 0;
        for (size_t k = 0; k < width; ++k)
            index |= uint64_t(m_p[1 + k]) << (8 * k);
        if (index != nextIndex)
            return false;
        m_p += 1 + width;
        memoized = true;
        return true;
    }

    // A new frames list's items, its MARK read: the memo indices of BINGET/LONG_BINGET up to APPENDS,
    // without looking into the memo (a frame dict's slot is a cache miss per frame in a memo of
    // millions). False, the position unchanged, when anything else comes first (a FRAME hint, a new
    // frame dict, the end of the bytes): the caller then reads the items one by one.
    bool memoIndexRun(std::vector<uint32_t>& out)
    {
        if (out.size() < 64)
            out.resize(64);
        uint32_t* w = out.data();
        size_t n = 0, room = out.size(); // kept in registers: out's own fields are not reread per frame
        for (const uint8_t* p = m_p; p < m_end;) {
            if (n == room) { // deeper than any traceback so far
                out.resize(2 * n);
                w = out.data();
                room = out.size();
            }
            if (*p == op::kBinGet) {
                if (m_end - p < 2)
                    break;
                w[n++] = p[1];
                p += 2;
            } else if (*p == op::kLongBinGet) {
                if (m_end - p < 5)
                    break;
                w[n++] = uint32_t(p[1]) | uint32_t(p[2]) << 8 | uint32_t(p[3]) << 16 | uint32_t(p[4]) << 24;
                p += 5;
            } else {
                if (*p != op::kAppends)
                    break;
                m_p = p + 1;
                m_indexRun = n;
                return true;
            }
        }
        return false;
    }
    size_t indexRunLength() const { return m_indexRun; }

private:
    bool has(size_t n) const { return size_t(m_end - m_p) >= n; }

    const uint8_t* m_begin;
    const uint8_t* m_p;
    const uint8_t* m_end;
    std::span<const MemoSlot> m_memo;
    size_t m_indexRun = 0;
};

} // namespace

uint32_t SnapshotDecoder::ignoredString(std::string_view text)
{
    if (auto it = m_ignoredStrings.find(std::string(text)); it != m_ignoredStrings.end())
        return it->second;
    const uint32_t ref = m_arena.addString(text);
    if (m_ignoredStrings.size() < kMaxIgnoredStrings) // distinct texts are few (compile contexts); stay bounded
        m_ignoredStrings.emplace(std::string(text), ref);
    return ref;
}

SnapshotDecoder::PendingTrace* SnapshotDecoder::streaming(uint32_t listRef)
{
    if (listRef == m_streamingRef)
        return m_streamingTrace;
    auto it = m_pending.find(listRef);
    if (it == m_pending.end())
        return nullptr;
    m_streamingRef = listRef;
    m_streamingTrace = &it->second;
    return m_streamingTrace;
}

bool SnapshotDecoder::streams(const ValueArena&, uint32_t listRef, const PyValue& first)
{
    // As onAppend decides: a list of entries is streamed from its first item on.
    return m_readDirectly &&
           (streaming(listRef) || (m_arena.container(listRef).items.empty() && looksLikeEntry(first)));
}

size_t SnapshotDecoder::readItem(uint32_t listRef, std::span<const uint8_t> bytes, std::span<const MemoSlot> memo,
                                 std::vector<MemoPut>& puts)
{
    if (!m_readDirectly)
        return 0;
    PendingTrace* pending = streaming(listRef);
    if (!pending)
        return 0;
    EntryBytes in(bytes, memo);
    if (in.next() != op::kEmptyDict)
        return 0;
    bool memoized = false;
    if (!in.memoSlot(memo.size() + puts.size(), memoized))
        return 0;
    if (memoized) // as a consumed entry's slot is: referring back to it is an error, not a wrong value
        puts.push_back(MemoPut{memo.size() + puts.size(), MemoSlot{}});
    if (in.next() != op::kMark)
        return 0;

    EntryFields e;
    bool sawAction = false, sawFrames = false;
    MemoSlot framesRef{0, PyKind::None};  // frames given as a reference to a list read before
    size_t framesPut = SIZE_MAX;          // frames given as a new list: its memo slot, filled below
    bool newFramesList = false;
    bool byIndex = false; // the new list's frames as memo indices (m_directIndices), not yet looked up
    size_t indexCount = 0;
    m_directFrames.clear();
    for (int o = in.next(); o != op::kSetItems; o = in.next()) {
        MemoSlot key, v;
        if (!in.memoRef(o, key))
            return 0; // a key seen for the first time (a new string), or not a key at all
        o = in.next();
        const EntryKey k = entryKey(key.kind, key.ref);
        switch (k) {
        case EntryKey::Action:
            if (!in.memoRef(o, v) || v.kind != PyKind::Str)
                return 0;
            e.action = actionOf(v.ref);
            e.actionText = m_arena.str(v.ref);
            sawAction = true;
            break;
        case EntryKey::Addr:
        case EntryKey::Stream:
        case EntryKey::Size:
        case EntryKey::DeviceFree:
        case EntryKey::TimeUs: {
            int64_t x; // None reads as 0, as intValue/addrValue read it
            bool none;
            if (!in.integer(o, x, none))
                return 0;
            if (k == EntryKey::Addr)
                e.addr = uint64_t(x);
            else if (k == EntryKey::Stream)
                e.stream = x;
            else if (k == EntryKey::Size)
                e.size = x;
            else if (k == EntryKey::DeviceFree)
                e.deviceFree = x;
            else if (!none)
                e.time = x;
            break;
        }
        case EntryKey::Frames:
            if (sawFrames)
                return 0;
            sawFrames = true;
            if (o == op::kNone)
                break;
            if (o != op::kEmptyList) {
                if (!in.memoRef(o, framesRef) || (framesRef.kind != PyKind::Stack && framesRef.kind != PyKind::List))
                    return 0;
                break;
            }
            newFramesList = true;
            if (!in.memoSlot(memo.size() + puts.size(), memoized))
                return 0;
            if (memoized) {
                framesPut = puts.size();
                puts.push_back(MemoPut{memo.size() + puts.size(), MemoSlot{}});
            }
            if (in.peek() == op::kMark) { // MARK frame... APPENDS
                in.next();
                if (in.memoIndexRun(m_directIndices)) {
                    byIndex = true;
                    indexCount = in.indexRunLength();
                    break;
                }
                for (o = in.next(); o != op::kAppends; o = in.next()) {
                    if (!in.memoRef(o, v) || v.kind != PyKind::Dict)
                        return 0;
                    m_directFrames.push_back(v.ref);
                }
            } else { // one frame: a reference and APPEND; or an empty list, the next key follows
                const uint8_t* at = in.position();
                o = in.next();
                if (in.memoRef(o, v) && in.peek() == op::kAppend) {
                    if (v.kind != PyKind::Dict)
                        return 0;
                    in.next();
                    m_directFrames.push_back(v.ref);
                } else {
                    in.rewind(at);
                }
            }
            break;
        case EntryKey::Ignored: {
            std::string_view text;
            if (in.newString(o, text)) {
                if (!in.memoSlot(memo.size() + puts.size(), memoized))
                    return 0;
                if (memoized) // shared: a later reference reads the same text, and a million 'N/A's cost one string
                    puts.push_back(MemoPut{memo.size() + puts.size(), MemoSlot{ignoredString(text), PyKind::Str}});
                break;
            }
            if (!in.skipValue(o))
                return 0;
            break;
        }
        default: return 0; // an unknown key: the general reader names it in a warning
        }
    }
    if (!sawAction)
        return 0;

    // A frames list known by its frame dicts' memo indices needs no memo load per frame. The table is
    // dropped when a slot it relies on was put again or its dict released (never, in a PyTorch dump).
    const std::span<const uint32_t> indices(m_directIndices.data(), indexCount);
    uint64_t indexHash = 0;
    StackId byIndexStack;
    if (byIndex) {
        if (m_arena.memoEpoch() != m_indexEpoch) {
            m_stackOfIndices.clear();
            m_indexEpoch = m_arena.memoEpoch();
        }
        indexHash = SeqTable::hash(indices);
        byIndexStack = m_stackOfIndices.find(indexHash, indices);
        if (!byIndexStack.valid()) {
            for (const uint32_t index : indices) {
                if (index >= memo.size() || memo[index].kind != PyKind::Dict)
                    return 0; // not a frame dict (or an unset slot): the general reader names it
                m_directFrames.push_back(memo[index].ref);
            }
        }
    }

    // Read whole: from here on the entry is committed, and its errors are its own.
    const Where framesWhere("trace entry #", m_entriesSeen, ".frames");
    if (byIndexStack.valid()) {
        e.stack = byIndexStack;
        if (framesPut != SIZE_MAX)
            puts[framesPut].slot = MemoSlot{e.stack.value, PyKind::Stack};
    } else if (newFramesList) {
        e.stack = internFrameDicts(m_directFrames, framesWhere);
        if (byIndex) {
            m_stackOfIndices.insert(indexHash, indices, e.stack);
            for (const uint32_t index : indices)
                m_arena.watchMemo(index, memo[index].ref);
        }
        if (framesPut != SIZE_MAX)
            puts[framesPut].slot = MemoSlot{e.stack.value, PyKind::Stack};
    } else if (framesRef.kind != PyKind::None) {
        e.stack = stackOf(framesRef.value(), framesWhere);
    }
    makeRoom(*pending, 1);
    finishEntry(*pending, e);
    ++m_entriesSeen;
    ++m_directEntries;
    return in.consumed();
}

} // namespace poolscope
