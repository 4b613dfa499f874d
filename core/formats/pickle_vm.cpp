#include "core/formats/pickle_vm.h"

#include "core/formats/input.h"
#include "core/formats/pickle_code_opcodes.h"
#include "core/util/huge_pages.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <stdexcept>

namespace poolscope {
namespace {

class Vm {
public:
    Vm(std::span<const uint8_t> bytes, const std::string& name, ValueArena& arena, ListSink* sink,
       const LoadOptions& options, Progress* progress, const InputBuffer* source)
        : m_data(bytes.data()), m_size(bytes.size()), m_name(name), m_arena(arena), m_sink(sink), m_options(options),
          m_progress(progress), m_source(source)
    {
        m_arena.attachMemo(&m_memo);
        m_stack.reserve(4096);
        // A snapshot memoizes about one object per 90 bytes: reserving from the size avoids regrowing
        // (copying, faulting in) a memo of millions of slots; pages of an unused reserve stay untouched.
        reserveHuge(m_memo, bytes.size() / 64);
    }
    ~Vm() { m_arena.attachMemo(nullptr); }

    PickleResult run();
    int64_t offset() const { return int64_t(m_opStart); }

private:
    [[noreturn, gnu::cold, gnu::noinline]] void fail(LoadErrorCode code, const std::string& msg, int64_t at = -1) const
    {
        throw LoadError(code, m_name, at >= 0 ? at : int64_t(m_opStart), msg);
    }
    // The hot checks below only test and branch; their messages are built in cold, out-of-line
    // functions, so need/push/memoGet stay small enough to inline into the opcode loop.
    void need(size_t n)
    {
        if (m_size - m_pos < n) [[unlikely]]
            failTruncated(n);
    }
    [[noreturn, gnu::cold, gnu::noinline]] void failTruncated(size_t n) const
    {
        fail(LoadErrorCode::Truncated, "truncated: opcode 0x" + hex(m_op) + " needs " + std::to_string(n) +
                                           " more bytes, " + std::to_string(m_size - m_pos) + " left");
    }
    [[noreturn, gnu::cold, gnu::noinline]] void failUnderflow() const
    {
        fail(LoadErrorCode::Malformed, "stack underflow: opcode 0x" + hex(m_op) + " needs a value");
    }
    [[noreturn, gnu::cold, gnu::noinline]] void failStackDepth() const
    {
        fail(LoadErrorCode::LimitExceeded, "pickle stack deeper than " + std::to_string(kMaxStack) + " values");
    }
    [[noreturn, gnu::cold, gnu::noinline]] void failMemoGet(uint64_t index) const
    {
        fail(LoadErrorCode::Malformed, "memo key " + std::to_string(index) +
                                           (index < m_memo.size() ? " refers back to a trace entry after it was consumed (unsupported sharing)"
                                                                  : " was never stored"));
    }
    static std::string hex(uint8_t v)
    {
        const char* d = "0123456789abcdef";
        return std::string{d[v >> 4], d[v & 15]};
    }
    uint64_t readLE(size_t n)
    {
        need(n);
        uint64_t v = 0;
        for (size_t k = 0; k < n; ++k)
            v |= uint64_t(m_data[m_pos + k]) << (8 * k);
        m_pos += n;
        return v;
    }
    // BINGET/LONG_BINGET arguments, the most frequent opcodes of a snapshot: a fixed-width load.
    uint32_t readU32()
    {
        need(4);
        uint32_t v;
        std::memcpy(&v, m_data + m_pos, 4);
        m_pos += 4;
        if constexpr (std::endian::native == std::endian::big)
            v = __builtin_bswap32(v);
        return v;
    }
    std::string_view readBytes(size_t n)
    {
        need(n);
        std::string_view s(reinterpret_cast<const char*>(m_data + m_pos), n);
        m_pos += n;
        return s;
    }
    std::string_view readLine()
    {
        const size_t start = m_pos;
        while (m_pos < m_size && m_data[m_pos] != '\n')
            ++m_pos;
        if (m_pos >= m_size)
            fail(LoadErrorCode::Truncated, "truncated: text opcode without its newline");
        std::string_view s(reinterpret_cast<const char*>(m_data + start), m_pos - start);
        ++m_pos;
        return s;
    }

    // Called from most opcodes; GCC left it out of line, a call per pushed value.
    [[gnu::always_inline]] void push(const PyValue& v)
    {
        if (m_stack.size() >= kMaxStack) [[unlikely]]
            failStackDepth();
        m_stack.push_back(v);
    }
    PyValue pop()
    {
        if (m_stack.size() <= base()) [[unlikely]]
            failUnderflow();
        PyValue v = m_stack.back();
        m_stack.pop_back();
        return v;
    }
    PyValue& top()
    {
        if (m_stack.size() <= base()) [[unlikely]]
            failUnderflow();
        return m_stack.back();
    }
    size_t base() const { return m_marks.empty() ? 0 : m_marks.back(); }
    size_t popMark()
    {
        if (m_marks.empty())
            fail(LoadErrorCode::Malformed, "opcode 0x" + hex(m_op) + " without a MARK");
        if (m_marks.size() == m_directMarkDepth) {
            // Items read directly went into the list below this MARK; only APPENDS may close it.
            if (m_op != 'e')
                fail(LoadErrorCode::Malformed, "opcode 0x" + hex(m_op) + " closes a MARK over list items (expected APPENDS)");
            m_directMarkDepth = 0;
        }
        const size_t m = m_marks.back();
        m_marks.pop_back();
        return m;
    }
    void pushString(std::string_view s, PyKind kind)
    {
        PyValue v{kind, m_arena.addString(s), 0};
        push(v);
    }
    void pushContainer(PyKind kind, size_t from)
    {
        const uint32_t ref = m_arena.newContainer(kind);
        m_arena.append(ref, std::span<const PyValue>(m_stack.data() + from, m_stack.size() - from));
        m_stack.resize(from);
        push(PyValue{kind, ref, 0});
    }
    // Unset memo slots hold PyKind::Released; the arena marks a slot so when it recycles the container.
    void memoPut(uint64_t index)
    {
        const bool again = index < m_memo.size();
        reserveMemo(index);
        store(index, top());
        if (again)
            m_arena.memoRewritten(index);
    }
    void store(uint64_t index, const PyValue& v)
    {
        if (MemoSlot::holdsWhole(v.kind)) {
            m_memo[index] = MemoSlot{v.ref, v.kind};
        } else {
            if (m_boxed.size() >= UINT32_MAX)
                fail(LoadErrorCode::LimitExceeded, "more than 4 billion memoized numbers");
            m_memo[index] = MemoSlot{uint32_t(m_boxed.size()), v.kind};
            m_boxed.push_back(v);
        }
        if (v.isContainer())
            m_arena.container(v.ref).memoIndex = uint32_t(index);
    }
    void reserveMemo(uint64_t index)
    {
        if (index > m_memo.size() + (1u << 20) || index >= kMaxMemo)
            fail(LoadErrorCode::LimitExceeded, "memo index " + std::to_string(index) + " is implausibly large");
        if (index >= m_memo.size()) {
            m_arena.charge(int64_t(index + 1 - m_memo.size()) * int64_t(sizeof(MemoSlot)));
            if (index == m_memo.size()) // the usual next slot (two per trace entry): push_back's inline path
                m_memo.emplace_back();
            else
                m_memo.resize(index + 1, MemoSlot{});
        }
    }
    // EMPTY_DICT directly inside the MARK of a list: the sink may read the whole item from the bytes
    // (ListSink::readItem). Items read generally before it, still on the stack, must reach the list
    // first: for a list the sink streams they are handed over now, as a shorter APPENDS would. Only
    // finished dicts are: anything else above the MARK may be half an item, and stays.
    bool readItemFast()
    {
        if (!m_sink || m_marks.empty())
            return false;
        const size_t mark = m_marks.back();
        if (mark == 0 || m_stack[mark - 1].kind != PyKind::List)
            return false;
        if (m_stack.size() > mark) {
            if (!m_sink->streams(m_arena, m_stack[mark - 1].ref, m_stack[mark]))
                return false;
            for (size_t k = mark; k < m_stack.size(); ++k)
                if (m_stack[k].kind != PyKind::Dict)
                    return false;
            const uint32_t list = m_stack[mark - 1].ref;
            const std::span<const PyValue> items(m_stack.data() + mark, m_stack.size() - mark);
            if (!m_sink->onAppend(m_arena, list, items))
                m_arena.append(list, items);
            m_stack.resize(mark);
            m_directMarkDepth = m_marks.size();
        }
        m_puts.clear();
        const size_t used = m_sink->readItem(m_stack[mark - 1].ref, {m_data + m_opStart, m_size - m_opStart}, m_memo, m_puts);
        if (used == 0)
            return false;
        for (const ListSink::MemoPut& put : m_puts) {
            const bool again = put.index < m_memo.size();
            reserveMemo(put.index);
            m_memo[put.index] = put.slot;
            if (again)
                m_arena.memoRewritten(put.index);
        }
        m_pos = m_opStart + used;
        m_directMarkDepth = m_marks.size();
        return true;
    }
    [[gnu::always_inline]] void memoGet(uint64_t index)
    {
        if (index >= m_memo.size() || m_memo[index].kind == PyKind::Released) [[unlikely]]
            failMemoGet(index);
        const MemoSlot slot = m_memo[index];
        push(MemoSlot::holdsWhole(slot.kind) ? slot.value() : m_boxed[slot.ref]);
    }
    void pushLong(std::string_view bytes);
    void appendTo(size_t listPos, size_t from);
    void setItems(size_t dictPos, size_t from);
    void pushTextInt(std::string_view line);

    static constexpr size_t kMaxStack = size_t(1) << 26;
    static constexpr uint64_t kMaxMemo = uint64_t(1) << 31;

    const uint8_t* m_data;
    size_t m_size;
    size_t m_pos = 0;
    size_t m_opStart = 0;
    uint8_t m_op = 0;
    const std::string& m_name;
    ValueArena& m_arena;
    ListSink* m_sink;
    const LoadOptions& m_options;
    Progress* m_progress;
    const InputBuffer* m_source;
    std::vector<PyValue> m_stack;
    std::vector<size_t> m_marks;
    std::vector<MemoSlot> m_memo;
    std::vector<PyValue> m_boxed; // memoized numbers (see MemoSlot)
    std::vector<ListSink::MemoPut> m_puts;
    size_t m_directMarkDepth = 0; // MARK depth under which readItemFast consumed items; 0: none
    int m_protocol = 0;
};

void Vm::pushLong(std::string_view b)
{
    // Little-endian two's complement of any width; it must fit int64 (or uint64 when positive).
    const size_t n = b.size();
    if (n == 0) {
        push(PyValue::makeInt(0));
        return;
    }
    const bool negative = (uint8_t(b[n - 1]) & 0x80) != 0;
    const uint8_t ext = negative ? 0xFF : 0x00;
    size_t significant = n;
    while (significant > 1 && uint8_t(b[significant - 1]) == ext)
        --significant;
    uint64_t v = 0;
    for (size_t k = 0; k < std::min<size_t>(significant, 8); ++k)
        v |= uint64_t(uint8_t(b[k])) << (8 * k);
    if (significant > 8)
        fail(LoadErrorCode::LimitExceeded, "integer of " + std::to_string(n) + " bytes does not fit in 64 bits");
    if (negative) {
        for (size_t k = significant; k < 8; ++k)
            v |= uint64_t(0xFF) << (8 * k);
        if (significant == 8 && (uint8_t(b[7]) & 0x80) == 0)
            fail(LoadErrorCode::LimitExceeded, "negative integer does not fit in 64 bits");
        push(PyValue::makeInt(int64_t(v)));
        return;
    }
    if (v > uint64_t(INT64_MAX))
        push(PyValue{PyKind::UInt, 0, int64_t(v)});
    else
        push(PyValue::makeInt(int64_t(v)));
}

void Vm::pushTextInt(std::string_view line)
{
    if (line == "00" || line == "01") { // protocol 0 booleans
        push(PyValue{PyKind::Bool, 0, line == "01"});
        return;
    }
    if (!line.empty() && line.back() == 'L')
        line.remove_suffix(1);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
    if (ec != std::errc() || p != line.data() + line.size())
        fail(LoadErrorCode::Malformed, "expected a decimal integer, found '" + std::string(line.substr(0, 40)) + "'");
    push(PyValue::makeInt(v));
}

void Vm::appendTo(size_t listPos, size_t from)
{
    if (listPos >= m_stack.size() || listPos < (m_marks.empty() ? 0 : m_marks.back()))
        fail(LoadErrorCode::Malformed, "APPEND(S) without a list below its items");
    const PyValue target = m_stack[listPos];
    if (target.kind != PyKind::List)
        fail(LoadErrorCode::Malformed, std::string("APPEND(S) into a ") + std::string(pyKindName(target.kind)) +
                                           ", expected a list");
    std::span<const PyValue> items(m_stack.data() + from, m_stack.size() - from);
    if (!(m_sink && m_sink->onAppend(m_arena, target.ref, items)))
        m_arena.append(target.ref, items);
    m_stack.resize(from);
}

void Vm::setItems(size_t dictPos, size_t from)
{
    if (dictPos >= m_stack.size() || dictPos < (m_marks.empty() ? 0 : m_marks.back()))
        fail(LoadErrorCode::Malformed, "SETITEM(S) without a dict below its items");
    const PyValue target = m_stack[dictPos];
    if (target.kind != PyKind::Dict)
        fail(LoadErrorCode::Malformed, std::string("SETITEM(S) into a ") + std::string(pyKindName(target.kind)) +
                                           ", expected a dict");
    if ((m_stack.size() - from) % 2 != 0)
        fail(LoadErrorCode::Malformed, "SETITEMS with an odd number of keys and values");
    m_arena.append(target.ref, std::span<const PyValue>(m_stack.data() + from, m_stack.size() - from));
    m_stack.resize(from);
}

PickleResult Vm::run()
{
    size_t nextProgress = size_t(1) << 22;
    if (m_progress)
        m_progress->bytesTotal = int64_t(m_size);
    while (true) {
        if (m_pos >= nextProgress) {
            if (m_progress) {
                m_progress->bytesDone = int64_t(m_pos);
                if (m_progress->cancel.load(std::memory_order_relaxed))
                    fail(LoadErrorCode::Cancelled, "loading was cancelled");
            }
            if (m_source)
                m_source->releaseBefore(m_pos);
            nextProgress = m_pos + (size_t(1) << 22);
        }
        m_opStart = m_pos;
        if (m_pos >= m_size)
            fail(LoadErrorCode::Truncated, "truncated: the pickle ends without STOP");
        m_op = m_data[m_pos++];
        switch (m_op) {
        case 0x80: // PROTO
            m_protocol = int(readLE(1));
            if (m_protocol > 5)
                fail(LoadErrorCode::UnsupportedVersion, "pickle protocol " + std::to_string(m_protocol) + " (expected 0-5)");
            break;
        case 0x95: // FRAME: only a length hint for buffered readers
            readLE(8);
            break;
        case '.': { // STOP
            if (m_stack.size() != 1 || !m_marks.empty())
                fail(LoadErrorCode::Malformed, "STOP with " + std::to_string(m_stack.size()) + " values on the stack, expected 1");
            if (m_progress)
                m_progress->bytesDone = int64_t(m_size);
            return PickleResult{m_stack.back(), m_protocol, int64_t(m_pos)};
        }
        case '(': // MARK
            if (m_marks.size() >= size_t(std::max(m_options.maxNesting, 1)))
                fail(LoadErrorCode::LimitExceeded, "MARKs nested deeper than " + std::to_string(m_options.maxNesting));
            m_marks.push_back(m_stack.size());
            break;
        case '}':
            if (!readItemFast())
                push(PyValue{PyKind::Dict, m_arena.newContainer(PyKind::Dict), 0});
            break;
        case ']': push(PyValue{PyKind::List, m_arena.newContainer(PyKind::List), 0}); break;
        case 0x8f: push(PyValue{PyKind::List, m_arena.newContainer(PyKind::List), 0}); break; // EMPTY_SET
        case ')': push(PyValue{PyKind::Tuple, m_arena.newContainer(PyKind::Tuple), 0}); break;
        case 0x85:
        case 0x86:
        case 0x87: {
            const size_t n = m_op - 0x84;
            if (m_stack.size() - base() < n)
                fail(LoadErrorCode::Malformed, "TUPLE" + std::to_string(n) + " needs " + std::to_string(n) + " values");
            pushContainer(PyKind::Tuple, m_stack.size() - n);
            break;
        }
        case 't': pushContainer(PyKind::Tuple, popMark()); break;
        case 'l': pushContainer(PyKind::List, popMark()); break;
        case 0x91: pushContainer(PyKind::List, popMark()); break; // FROZENSET
        case 'd': {
            const size_t from = popMark();
            if ((m_stack.size() - from) % 2)
                fail(LoadErrorCode::Malformed, "DICT with an odd number of keys and values");
            pushContainer(PyKind::Dict, from);
            break;
        }
        case 'a': { // APPEND
            if (m_stack.size() < base() + 2)
                fail(LoadErrorCode::Malformed, "APPEND needs a list and a value");
            appendTo(m_stack.size() - 2, m_stack.size() - 1);
            break;
        }
        case 'e': { // APPENDS
            const size_t from = popMark();
            if (from == 0)
                fail(LoadErrorCode::Malformed, "APPENDS without a list below its MARK");
            appendTo(from - 1, from);
            break;
        }
        case 0x90: { // ADDITEMS (sets are read as lists)
            const size_t from = popMark();
            if (from == 0)
                fail(LoadErrorCode::Malformed, "ADDITEMS without a set below its MARK");
            appendTo(from - 1, from);
            break;
        }
        case 's': // SETITEM
            if (m_stack.size() < base() + 3)
                fail(LoadErrorCode::Malformed, "SETITEM needs a dict, a key and a value");
            setItems(m_stack.size() - 3, m_stack.size() - 2);
            break;
        case 'u': { // SETITEMS
            const size_t from = popMark();
            if (from == 0)
                fail(LoadErrorCode::Malformed, "SETITEMS without a dict below its MARK");
            setItems(from - 1, from);
            break;
        }
        case 0x94: memoPut(m_memo.size()); break; // MEMOIZE
        case 'q': memoPut(readLE(1)); break;      // BINPUT
        case 'r': memoPut(readLE(4)); break;      // LONG_BINPUT
        case 'p': {                               // PUT
            std::string_view line = readLine();
            uint64_t idx = 0;
            auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), idx);
            if (ec != std::errc() || p != line.data() + line.size())
                fail(LoadErrorCode::Malformed, "PUT with a bad memo key");
            memoPut(idx);
            break;
        }
        case 'h':   // BINGET
        case 'j': { // LONG_BINGET
            // Most of a snapshot is runs of memo references (a frames list's frame dicts, an entry's
            // keys): a run is read here without a trip through the dispatch per opcode. Bounded, so
            // progress and cancel are still polled on a file of nothing but references.
            for (int run = 0;; ++run) {
                memoGet(m_op == 'h' ? readLE(1) : readU32());
                if (run == 255 || m_pos >= m_size || (m_data[m_pos] != 'h' && m_data[m_pos] != 'j'))
                    break;
                m_opStart = m_pos;
                m_op = m_data[m_pos++];
            }
            break;
        }
        case 'g': {                          // GET
            std::string_view line = readLine();
            uint64_t idx = 0;
            auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), idx);
            if (ec != std::errc() || p != line.data() + line.size())
                fail(LoadErrorCode::Malformed, "GET with a bad memo key");
            memoGet(idx);
            break;
        }
        case 0x8c: pushString(readBytes(readLE(1)), PyKind::Str); break; // SHORT_BINUNICODE
        case 'X': pushString(readBytes(readLE(4)), PyKind::Str); break;  // BINUNICODE
        case 0x8d: {                                                     // BINUNICODE8
            const uint64_t n = readLE(8);
            need(n);
            pushString(readBytes(n), PyKind::Str);
            break;
        }
        case 'U': pushString(readBytes(readLE(1)), PyKind::Str); break; // SHORT_BINSTRING
        case 'T': pushString(readBytes(readLE(4)), PyKind::Str); break; // BINSTRING
        case 'C': pushString(readBytes(readLE(1)), PyKind::Bytes); break;
        case 'B': pushString(readBytes(readLE(4)), PyKind::Bytes); break;
        case 0x8e:
        case 0x96: { // BINBYTES8, BYTEARRAY8
            const uint64_t n = readLE(8);
            need(n);
            pushString(readBytes(n), PyKind::Bytes);
            break;
        }
        case 'V': pushString(readLine(), PyKind::Str); break; // UNICODE (raw-unicode-escape, kept verbatim)
        case 'S': {                                           // STRING: quoted repr
            std::string_view line = readLine();
            if (line.size() >= 2 && (line.front() == '\'' || line.front() == '"'))
                line = line.substr(1, line.size() - 2);
            pushString(line, PyKind::Str);
            break;
        }
        case 'K': push(PyValue::makeInt(int64_t(readLE(1)))); break;
        case 'M': push(PyValue::makeInt(int64_t(readLE(2)))); break;
        case 'J': push(PyValue::makeInt(int64_t(int32_t(uint32_t(readLE(4)))))); break;
        case 'I':
        case 'L': pushTextInt(readLine()); break;
        case 0x8a: pushLong(readBytes(readLE(1))); break; // LONG1
        case 0x8b: {                                      // LONG4
            const uint64_t n = readLE(4);
            if (n > 0x7FFFFFFF)
                fail(LoadErrorCode::Malformed, "LONG4 with a negative length");
            need(n);
            pushLong(readBytes(n));
            break;
        }
        case 0x88: push(PyValue{PyKind::Bool, 0, 1}); break;
        case 0x89: push(PyValue{PyKind::Bool, 0, 0}); break;
        case 'N': push(PyValue{}); break;
        case 'G': { // BINFLOAT: big-endian double
            need(8);
            uint64_t v = 0;
            for (int k = 0; k < 8; ++k)
                v = (v << 8) | m_data[m_pos + size_t(k)];
            m_pos += 8;
            push(PyValue{PyKind::Float, 0, int64_t(v)});
            break;
        }
        case 'F': {
            std::string_view line = readLine();
            double d = 0;
            auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), d);
            if (ec != std::errc())
                fail(LoadErrorCode::Malformed, "FLOAT with a bad literal");
            (void)p;
            push(PyValue::makeFloat(d));
            break;
        }
        case '0': pop(); break; // POP
        case '1': {             // POP_MARK
            m_stack.resize(popMark());
            break;
        }
        case '2': push(top()); break; // DUP
        case 0x97:
        case 0x98:
            fail(LoadErrorCode::Malformed, "out-of-band pickle buffers (NEXT_BUFFER/READONLY_BUFFER) are not part of a snapshot");
        default: {
            if (const char* codeOp = codeOpcodeName(m_op)) {
                std::string what;
                if (m_op == 'c') { // GLOBAL module\nname\n: name it, it helps the user see the attack
                    const size_t save = m_pos;
                    auto nl1 = std::memchr(m_data + m_pos, '\n', m_size - m_pos);
                    if (nl1) {
                        const size_t e1 = size_t(static_cast<const uint8_t*>(nl1) - m_data);
                        auto nl2 = std::memchr(m_data + e1 + 1, '\n', m_size - e1 - 1);
                        if (nl2) {
                            const size_t e2 = size_t(static_cast<const uint8_t*>(nl2) - m_data);
                            what = " (" + std::string(reinterpret_cast<const char*>(m_data + save), e1 - save) + "." +
                                   std::string(reinterpret_cast<const char*>(m_data + e1 + 1), std::min<size_t>(e2 - e1 - 1, 80)) + ")";
                        }
                    }
                }
                fail(LoadErrorCode::CodeExecution, std::string("the file tried to run code: opcode ") + codeOp + what +
                                                       "; PoolScope never executes pickled code, and a PyTorch snapshot "
                                                       "contains only dicts, lists, strings and numbers");
            }
            fail(LoadErrorCode::Malformed, "unknown pickle opcode 0x" + hex(m_op));
        }
        }
    }
}

} // namespace

PickleResult runPickle(std::span<const uint8_t> bytes, const std::string& name, ValueArena& arena, ListSink* sink,
                       const LoadOptions& options, Progress* progress, const InputBuffer* source)
{
    Vm vm(bytes, name, arena, sink, options, progress, source);
    try {
        return vm.run();
    } catch (const std::length_error& e) {
        throw LoadError(LoadErrorCode::LimitExceeded, name, vm.offset(), e.what());
    } catch (const std::bad_alloc&) {
        throw LoadError(LoadErrorCode::LimitExceeded, name, vm.offset(), "out of memory while decoding");
    }
}

} // namespace poolscope
