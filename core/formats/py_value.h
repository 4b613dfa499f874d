#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope {

// The value model both snapshot decoders (pickle and JSON) build into. Containers live in an arena and
// values refer to them by index, so memo sharing is sharing: a frame dict referenced 768k times exists once.
// Stack: a frames list a sink has already decoded (ref holds the StackId); it stands in the memo for
// the list, so later references to it cost nothing (see ListSink::readItem).
enum class PyKind : uint8_t { None, Bool, Int, UInt, Float, Str, Bytes, List, Tuple, Dict, Released, Stack };

std::string_view pyKindName(PyKind k);

struct PyValue {
    PyKind kind = PyKind::None;
    uint32_t ref = 0; // Str/Bytes: string index; List/Tuple/Dict: container index
    int64_t i = 0;    // Int/Bool value; UInt bit pattern (> INT64_MAX); Float bit pattern

    bool isContainer() const { return kind == PyKind::List || kind == PyKind::Tuple || kind == PyKind::Dict; }
    bool isInteger() const { return kind == PyKind::Int || kind == PyKind::UInt || kind == PyKind::Bool; }
    double asFloat() const;
    static PyValue makeInt(int64_t v) { return PyValue{PyKind::Int, 0, v}; }
    static PyValue makeFloat(double v);
};

// A pickle memo slot. A snapshot memoizes two objects per trace entry, millions of slots, so a slot
// is 8 bytes: strings, containers and decoded stacks are (kind, ref) whole; a memoized number (rare:
// only a PUT after it does that) keeps its value in the reader's side table, ref its index there.
struct MemoSlot {
    uint32_t ref = 0;
    PyKind kind = PyKind::Released;

    static bool holdsWhole(PyKind k) { return k != PyKind::Int && k != PyKind::UInt && k != PyKind::Float && k != PyKind::Bool; }
    PyValue value() const { return PyValue{kind, ref, 0}; } // for kinds held whole
};
static_assert(sizeof(MemoSlot) == 8);

class ValueArena {
public:
    struct Container {
        PyKind kind = PyKind::List;
        uint32_t generation = 0; // bumped on release, so stale references are detected
        uint32_t memoIndex = UINT32_MAX; // memo slot holding it, cleared on release
        std::vector<PyValue> items; // Dict: key, value, key, value, ...
    };

    explicit ValueArena(int64_t byteBudget) : m_budget(byteBudget) {}

    uint32_t newContainer(PyKind kind);
    // Reserves container slots for an expected count (a hint from the file size): regrowing a vector
    // of a million slots copies it and faults in fresh pages each time; unused reserve is never touched.
    void reserveContainers(size_t n);
    // Frees a container's items and recycles its slot (used for consumed trace entries). The memo slot
    // that held it (see attachMemo) is marked stale, so a later reference is an error, not a wrong value.
    void release(uint32_t ref);
    void attachMemo(std::vector<MemoSlot>* memo) { m_memo = memo; }
    // Memo slots a sink's cache relies on, with the container each held when watched (the direct
    // entry reader keys frames lists by their frame dicts' memo indices). When a watched slot is put
    // again (memoRewritten, called by the reader) or its container released, memoEpoch() moves on,
    // and the cache must be dropped. A PyTorch dump never does either; a crafted file may.
    void watchMemo(uint32_t index, uint32_t containerRef)
    {
        if (index >= m_watchedSlots.size())
            m_watchedSlots.resize(std::max<size_t>(size_t(index) + 1, 2 * m_watchedSlots.size()));
        if (containerRef >= m_watchedContainers.size())
            m_watchedContainers.resize(std::max<size_t>(size_t(containerRef) + 1, 2 * m_watchedContainers.size()));
        m_watchedSlots[index] = true;
        m_watchedContainers[containerRef] = true;
    }
    void memoRewritten(uint64_t index)
    {
        if (index < m_watchedSlots.size() && m_watchedSlots[index]) [[unlikely]]
            ++m_memoEpoch;
    }
    uint64_t memoEpoch() const { return m_memoEpoch; }
    // Empties a container that stays referenced (a memoized frames list whose StackId is cached) and
    // keeps its buffer for the next new container: one malloc/free pair per trace entry saved.
    void dropItems(uint32_t ref);
    uint32_t addString(std::string_view s, bool bytes = false);
    void append(uint32_t ref, const PyValue& v);
    void append(uint32_t ref, std::span<const PyValue> vs);

    Container& container(uint32_t ref) { return m_containers[ref]; }
    const Container& container(uint32_t ref) const { return m_containers[ref]; }
    std::span<const PyValue> items(const PyValue& v) const { return m_containers[v.ref].items; }
    std::string_view str(const PyValue& v) const { return m_strings[v.ref]; }
    std::string_view str(uint32_t stringRef) const { return m_strings[stringRef]; }
    size_t containerCount() const { return m_containers.size(); }

    // Dict lookup by key string; nullptr when absent or v is not a dict.
    const PyValue* get(const PyValue& dict, std::string_view key) const;
    bool isStr(const PyValue& v, std::string_view s) const { return v.kind == PyKind::Str && m_strings[v.ref] == s; }

    // Throws std::length_error when decoded data would exceed the budget; callers turn it into LoadError.
    // Inline: asked per trace entry and per memo slot; only the failure is out of line.
    void charge(int64_t bytes)
    {
        m_used += bytes;
        if (m_used > m_budget) [[unlikely]]
            overBudget();
    }
    int64_t bytesUsed() const { return m_used; }

private:
    [[noreturn, gnu::cold, gnu::noinline]] void overBudget() const;

    std::vector<Container> m_containers;
    std::vector<uint32_t> m_free;
    std::vector<std::vector<PyValue>> m_spareItems; // emptied buffers from dropItems, reused by newContainer
    std::vector<std::string> m_strings;
    int64_t m_budget;
    int64_t m_used = 0;
    std::vector<MemoSlot>* m_memo = nullptr;
    std::vector<bool> m_watchedSlots, m_watchedContainers;
    uint64_t m_memoEpoch = 0;
};

// Sees items as they are appended to a list, before they are stored. Returning true means the sink
// consumed them (the list keeps only a count), which is how million-entry traces stream into columns
// instead of becoming a million dicts.
class ListSink {
public:
    struct MemoPut {
        uint64_t index;
        MemoSlot slot; // of a kind held whole
    };
    virtual ~ListSink() = default;
    virtual bool onAppend(ValueArena& arena, uint32_t listRef, std::span<const PyValue> items) = 0;
    // The fast path. streams(): whether items of `listRef` (whose first pending item is `first`) go
    // to this sink one by one anyway, so the reader may hand over finished items early, before APPENDS.
    // readItem(): an item of `listRef` starts at bytes[0] (an EMPTY_DICT inside the list's MARK,
    // nothing pending). A sink that recognizes the item's shape may consume it straight from the
    // bytes, returning how many it read and the memo slots the item would have filled (in `puts`, in
    // order); 0 leaves the item to the general reader, which must then find no side effect: a sink
    // reads ahead, decides, and only then commits.
    virtual bool streams(const ValueArena& /*arena*/, uint32_t /*listRef*/, const PyValue& /*first*/) { return false; }
    virtual size_t readItem(uint32_t /*listRef*/, std::span<const uint8_t> /*bytes*/, std::span<const MemoSlot> /*memo*/,
                            std::vector<MemoPut>& /*puts*/)
    {
        return 0;
    }
};

} // namespace poolscope
