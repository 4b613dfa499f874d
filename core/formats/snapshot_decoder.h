#pragma once
#include "core/formats/py_value.h"
#include "core/formats/seq_table.h"
#include "core/formats/snapshot_assembler.h"
#include "core/model/pairing_worker.h"

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope {

// Turns the snapshot dict (built by the pickle VM or the JSON reader into a ValueArena) into a Trace.
// As a ListSink it converts trace entries into columns while the file is still being parsed, so the
// entries never exist as dicts all at once. Field errors name the field and what was expected.
// Names a field for an error message, built only when an error happens (the hot path builds no strings).
class Where {
public:
    Where(const std::string& text) : m_text(&text) {} // NOLINT: implicit on purpose
    Where(const char* prefix, int64_t index, const char* field) : m_prefix(prefix), m_index(index), m_field(field) {}
    Where(const char* text) : m_prefix(text) {} // NOLINT: implicit on purpose
    Where(const Where& parent, int64_t index) : m_parent(&parent), m_index(index) {}
    std::string str() const;

private:
    const std::string* m_text = nullptr;
    const Where* m_parent = nullptr;
    const char* m_prefix = nullptr;
    int64_t m_index = -1;
    const char* m_field = nullptr;
};

class SnapshotDecoder : public ListSink {
public:
    SnapshotDecoder(ValueArena& arena, SnapshotAssembler& out, std::string name, bool framesListsAreUnique);

    bool onAppend(ValueArena& arena, uint32_t listRef, std::span<const PyValue> items) override;
    // Trace entries of a list already streaming, read straight from the pickle bytes when they have the
    // usual shape (snapshot_entry_reader.cpp); anything else is left to the general reader.
    bool streams(const ValueArena& arena, uint32_t listRef, const PyValue& first) override;
    size_t readItem(uint32_t listRef, std::span<const uint8_t> bytes, std::span<const MemoSlot> memo,
                    std::vector<MemoPut>& puts) override;
    void readEntriesDirectly(bool on) { m_readDirectly = on; }
    int64_t entriesReadDirectly() const { return m_directEntries; }
    // An estimate of the trace entries to come (from the file size): the first streamed list reserves
    // its columns for it, so a million entries do not regrow (copy and fault in) six columns ~20 times.
    // Reserved, untouched pages cost no resident memory when the estimate is high.
    void expectEntries(size_t n) { m_expectedEntries = n; }
    // Whether the first streamed trace is paired on a second thread while the parse goes on (see
    // PairingWorker); only where expectEntries promised at least kPairingWorkerMinEntries.
    void pairWhileParsing(bool on) { m_pairWhileParsing = on; }
    static constexpr size_t kPairingWorkerMinEntries = 50000;
    void decodeRoot(const PyValue& root);

    // Device indices (device_traces positions, segments' "device") above this are refused: each device
    // is a DeviceTrace, and a few bytes of file must not make thousands of them.
    static constexpr int kMaxDevices = 1024;

private:
    enum class EntryKey : int8_t { Unseen = -2, Unknown = -1, Action, Addr, Size, Stream, TimeUs, Frames, DeviceFree, Ignored };
    struct PendingTrace {
        EventColumns events;
        std::map<std::string, int64_t> unknownActions;
        size_t room = 0; // entries the columns hold without reallocating, as makeRoom last saw
        std::unique_ptr<PairingWorker> worker; // reads `events`: declared after it, so stopped first
    };
    struct Cached {
        uint32_t generation = 0;
        uint32_t id = UINT32_MAX;
    };

    struct EntryFields {
        Action action = Action::Unknown;
        std::string_view actionText;
        uint64_t addr = 0;
        int64_t size = 0, stream = 0, time = kNoTime, deviceFree = -1;
        StackId stack;
    };
    bool looksLikeEntry(const PyValue& v);
    void convertEntry(PendingTrace& pending, const PyValue& entry);
    void finishEntry(PendingTrace& pending, EntryFields& e);
    // Grows the columns for `entries` more, with the pairing worker between chunks when there is one.
    void makeRoom(PendingTrace& pending, size_t entries);
    Action actionOf(uint32_t strRef);
    PendingTrace* streaming(uint32_t listRef);
    // Asked per key of every entry: a key string seen before is one array read, here, inline.
    EntryKey entryKey(PyKind kind, uint32_t ref)
    {
        if (kind == PyKind::Str && ref < m_keyKind.size() && m_keyKind[ref] != int8_t(EntryKey::Unseen)) [[likely]]
            return EntryKey(m_keyKind[ref]);
        return classifyKey(kind, ref);
    }
    EntryKey classifyKey(PyKind kind, uint32_t ref);
    StackId stackOf(const PyValue& framesList, const Where& where);
    StackId internFrames(std::span<const PyValue> frameDicts, const Where& where);
    // The same for a list known to hold frame dicts only, given as their container refs.
    StackId internFrameDicts(std::span<const uint32_t> dicts, const Where& where);
    FrameId frameOf(const PyValue& frameDict, const Where& where);
    int64_t frameLine(const PyValue& frameDict);
    void decodeSegments(const PyValue& list, const std::string& where);
    Segment decodeSegment(const PyValue& seg, const std::string& where);
    void decodeDeviceTraces(const PyValue& list);
    void decodeSettings(const PyValue& dict);
    void decodeAnnotations(const PyValue& list);
    void decodeDeviceProperties(const PyValue& list);
    void moveTrace(int device, PendingTrace& pending);

    int64_t intField(const PyValue& dict, std::string_view key, const Where& where, int64_t fallback, bool required = false) const;
    uint64_t addrValue(const PyValue& v, const Where& where) const;
    int64_t intValue(const PyValue& v, const Where& where) const;
    std::string strField(const PyValue& dict, std::string_view key, const Where& where) const;
    [[noreturn]] void fail(const Where& where, const std::string& expected, const PyValue& found) const;
    std::string render(const PyValue& v) const;

    ValueArena& m_arena;
    SnapshotAssembler& m_out;
    std::string m_name;
    bool m_releaseFrameLists;
    std::unordered_map<uint32_t, PendingTrace> m_pending; // list container -> entries consumed so far
    std::vector<int8_t> m_keyKind;                        // string ref -> EntryKey
    std::vector<int8_t> m_actionKind;                     // string ref -> Action (+1; 0 = unseen)
    std::vector<Cached> m_stackOfList;                    // container ref -> StackId
    std::vector<Cached> m_frameOfDict;                    // container ref -> FrameId
    std::vector<FrameId> m_frameScratch;
    // Frames lists are new objects per traceback but repeat the same frame dicts: a list whose sequence
    // of frame-dict containers was seen before gets its StackId without decoding a single frame.
    SeqTable m_stackOfDicts;
    int64_t m_entriesSeen = 0;
    int64_t m_oddLines = 0;          // frames whose line was not a line number (kept as -1)
    std::string m_oddLineExample;
    size_t m_expectedEntries = 0;
    bool m_pairWhileParsing = true;
    bool m_workerStarted = false;
    bool m_readDirectly = true;
    int64_t m_directEntries = 0;
    std::vector<uint32_t> m_directFrames; // the frame dicts of the entry being read directly
    // The same frames lists keyed by their frame dicts' memo indices, valid while the arena's memo
    // epoch stays m_indexEpoch (see ValueArena::watchMemo).
    std::vector<uint32_t> m_directIndices;
    SeqTable m_stackOfIndices;
    uint64_t m_indexEpoch = 0;
    // Texts of new strings under ignored keys, read directly: one arena string per distinct text.
    uint32_t ignoredString(std::string_view text);
    static constexpr size_t kMaxIgnoredStrings = 4096;
    std::unordered_map<std::string, uint32_t> m_ignoredStrings;
    std::vector<uint32_t> m_frameRefs;    // internFrames' dict refs
    uint32_t m_streamingRef = UINT32_MAX;  // the list readItem saw last, and its entries (m_pending's)
    PendingTrace* m_streamingTrace = nullptr;
};

} // namespace poolscope
