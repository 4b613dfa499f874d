#pragma once
#include "core/model/trace.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace poolscope {

// Writes pickles the way CPython's C pickler (_pickle.c) does, byte for byte: PROTO, FRAME after
// every value once a frame reaches 64 KiB (no header below 4 bytes, strings of 64 KiB or more
// outside frames), MEMOIZE (protocol >= 4) or BINPUT/LONG_BINPUT for every str, list, dict and
// non-empty tuple, BINGET/LONG_BINGET for objects saved again, batches of 1000 in APPENDS/SETITEMS
// (APPEND/SETITEM for a batch of one), BININT1/BININT2/BININT/LONG1/LONG4, SHORT_BINUNICODE (>= 4),
// BINUNICODE, BINUNICODE8, TUPLE1..3/TUPLE, NONE, NEWTRUE/NEWFALSE, BINFLOAT.
//
// A streaming interface: containers announce their size, the writer inserts MARK and the batch
// opcodes itself. Sharing is by caller-chosen identity keys (what id() is to CPython).
class PickleWriter {
public:
    PickleWriter(std::ostream& out, int protocol); // protocol 2..5
    ~PickleWriter();
    PickleWriter(const PickleWriter&) = delete;
    PickleWriter& operator=(const PickleWriter&) = delete;

    int protocol() const { return m_protocol; }

    void none();
    void boolean(bool v);
    void integer(int64_t v);
    void unsignedInteger(uint64_t v);
    void floating(double v);
    // A fresh str object (memoized, never reused).
    void string(std::string_view s);
    // A str shared by content: the first time it is written and memoized, afterwards fetched.
    // Returns its memo index.
    uint32_t sharedString(std::string_view s);

    // Objects with identity: if `key` was memoized, writes the fetch and returns true.
    bool get(uint64_t key);
    void stringWithKey(std::string_view s, uint64_t key);
    // Fetches a memo index the caller kept (cheaper than a keyed lookup for hot paths).
    void fetch(uint32_t memoIndex);

    // Containers; every item is one value (lists, tuples) or a key and a value (dicts).
    // beginList/beginDict return the container's memo index.
    uint32_t beginList(size_t count, std::optional<uint64_t> key = std::nullopt);
    void endList();
    uint32_t beginDict(size_t count, std::optional<uint64_t> key = std::nullopt);
    void endDict();
    void beginTuple(size_t count, std::optional<uint64_t> key = std::nullopt);
    void endTuple();

    // Writes STOP and the last frame; called by the destructor if not called before.
    void finish();
    int64_t bytesWritten() const { return m_written + int64_t(m_buf.size()); }

private:
    enum class Kind : uint8_t { List, Dict, Tuple };
    struct Open {
        Kind kind;
        size_t count;
        size_t index = 0;  // items completed
        int parts = 0;     // dict: 0 before the key, 1 before the value
        std::optional<uint64_t> key;
    };

    void put(uint8_t op) { m_buf.push_back(char(op)); }
    void putBytes(const void* data, size_t n);
    void putLE(uint64_t v, int bytes);
    void beforeValue();
    void afterValue();
    void memoize(std::optional<uint64_t> key);
    void writeGet(uint32_t index);
    void ensureFrame();
    void commitFrame();
    void boundary();
    void flushIfLarge();
    void rawString(std::string_view s);

    std::ostream& m_out;
    int m_protocol;
    bool m_framing;
    bool m_finished = false;
    std::string m_buf;
    int64_t m_frameStart = -1; // offset of the reserved FRAME header in m_buf, -1: no frame open
    int64_t m_written = 0;
    uint32_t m_memoSize = 0;
    std::unordered_map<uint64_t, uint32_t> m_memo;
    std::unordered_map<std::string, uint32_t> m_strings;
    std::vector<Open> m_stack;
};

// A small value model for building pickles by hand (tests, fixtures). Sharing is by pointer: the
// same PyObj saved twice is written once and fetched from the memo afterwards, as in CPython.
struct PyObj;
using PyObjPtr = std::shared_ptr<const PyObj>;

struct PyObj {
    struct None {};
    struct UInt {
        uint64_t value;
    };
    struct List {
        std::vector<PyObjPtr> items;
    };
    struct Tuple {
        std::vector<PyObjPtr> items;
    };
    struct Dict {
        std::vector<std::pair<PyObjPtr, PyObjPtr>> items;
    };
    std::variant<None, bool, int64_t, UInt, double, std::string, List, Tuple, Dict> value;

    static PyObjPtr none();
    static PyObjPtr boolean(bool v);
    static PyObjPtr integer(int64_t v);
    static PyObjPtr unsignedInteger(uint64_t v);
    static PyObjPtr floating(double v);
    static PyObjPtr str(std::string s);
    static PyObjPtr list(std::vector<PyObjPtr> items);
    static PyObjPtr tuple(std::vector<PyObjPtr> items);
    static PyObjPtr dict(std::vector<std::pair<PyObjPtr, PyObjPtr>> items);
};

void savePyObj(PickleWriter& writer, const PyObjPtr& obj);
void writePickle(const PyObjPtr& root, std::ostream& out, int protocol);

// A Trace written back as the dict torch.cuda.memory._snapshot() returns: segments (blocks and
// frames), device_traces (action/addr/size/stream/time_us/frames; oom entries carry device_free),
// allocator_settings and external_annotations. Frame dicts are written once and fetched after, key
// and value strings are shared, as in PyTorch's own dumps.
void writeSnapshot(const Trace& trace, std::ostream& out, int protocol = 4);
void writeSnapshotJson(const Trace& trace, std::ostream& out);
// The oldest shape, torch.cuda.memory_snapshot()'s bare list of segments (no trace, no annotations).
void writeSnapshotSegmentList(const Trace& trace, std::ostream& out, int protocol = 4);

} // namespace poolscope
