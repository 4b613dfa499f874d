#include "core/formats/pickle_writer.h"

#include <bit>
#include <cstring>
#include <stdexcept>

namespace poolscope {
namespace {

enum Op : uint8_t {
    kMark = '(',
    kStop = '.',
    kBinFloat = 'G',
    kBinInt = 'J',
    kBinInt1 = 'K',
    kBinInt2 = 'M',
    kNone = 'N',
    kBinUnicode = 'X',
    kAppend = 'a',
    kAppends = 'e',
    kBinGet = 'h',
    kLongBinGet = 'j',
    kEmptyList = ']',
    kBinPut = 'q',
    kLongBinPut = 'r',
    kSetItem = 's',
    kTuple = 't',
    kEmptyTuple = ')',
    kSetItems = 'u',
    kEmptyDict = '}',
    kProto = 0x80,
    kTuple1 = 0x85,
    kTuple2 = 0x86,
    kTuple3 = 0x87,
    kNewTrue = 0x88,
    kNewFalse = 0x89,
    kLong1 = 0x8a,
    kLong4 = 0x8b,
    kShortBinUnicode = 0x8c,
    kBinUnicode8 = 0x8d,
    kMemoize = 0x94,
    kFrame = 0x95,
};

constexpr size_t kBatchSize = 1000;
constexpr int64_t kFrameSizeTarget = 64 * 1024;
constexpr int64_t kFrameSizeMin = 4;
constexpr int64_t kFrameHeaderSize = 9;
constexpr size_t kFlushThreshold = 1 << 20;

} // namespace

PickleWriter::PickleWriter(std::ostream& out, int protocol) : m_out(out), m_protocol(protocol), m_framing(protocol >= 4)
{
    if (protocol < 2 || protocol > 5)
        throw std::invalid_argument("pickle protocol must be 2 to 5");
    m_buf.reserve(kFlushThreshold + kFrameSizeTarget * 2);
    // PROTO goes before the first frame, as the pickler writes it before it starts framing.
    put(kProto);
    put(uint8_t(protocol));
}

PickleWriter::~PickleWriter()
{
    if (!m_finished) {
        try {
            finish();
        } catch (...) {
        }
    }
}

void PickleWriter::putBytes(const void* data, size_t n)
{
    m_buf.append(static_cast<const char*>(data), n);
}

void PickleWriter::putLE(uint64_t v, int bytes)
{
    char b[8];
    for (int i = 0; i < bytes; ++i)
        b[i] = char((v >> (8 * i)) & 0xff);
    m_buf.append(b, size_t(bytes));
}

void PickleWriter::ensureFrame()
{
    if (m_framing && m_frameStart < 0) {
        m_frameStart = int64_t(m_buf.size());
        m_buf.append(size_t(kFrameHeaderSize), '\0');
    }
}

void PickleWriter::commitFrame()
{
    if (m_frameStart < 0)
        return;
    const int64_t len = int64_t(m_buf.size()) - m_frameStart - kFrameHeaderSize;
    char* header = m_buf.data() + m_frameStart;
    if (len >= kFrameSizeMin) {
        header[0] = char(kFrame);
        for (int i = 0; i < 8; ++i)
            header[1 + i] = char((uint64_t(len) >> (8 * i)) & 0xff);
    } else {
        std::memmove(header, header + kFrameHeaderSize, size_t(len));
        m_buf.resize(m_buf.size() - size_t(kFrameHeaderSize));
    }
    m_frameStart = -1;
    flushIfLarge();
}

void PickleWriter::flushIfLarge()
{
    // Only whole frames leave the buffer (their header is patched at commit).
    if (m_frameStart < 0 && m_buf.size() >= kFlushThreshold) {
        m_out.write(m_buf.data(), std::streamsize(m_buf.size()));
        m_written += int64_t(m_buf.size());
        m_buf.clear();
    }
}

void PickleWriter::boundary()
{
    if (m_frameStart >= 0 && int64_t(m_buf.size()) - m_frameStart - kFrameHeaderSize >= kFrameSizeTarget)
        commitFrame();
    else if (!m_framing)
        flushIfLarge();
}

void PickleWriter::beforeValue()
{
    ensureFrame();
    if (m_stack.empty())
        return;
    Open& o = m_stack.back();
    // Every batch of a list or dict with more than one item is MARK ... APPENDS/SETITEMS.
    if (o.kind != Kind::Tuple && o.parts == 0 && o.index % kBatchSize == 0 && o.count != 1)
        put(kMark);
}

void PickleWriter::afterValue()
{
    boundary();
    if (m_stack.empty())
        return;
    Open& o = m_stack.back();
    if (o.kind == Kind::Dict && ++o.parts < 2)
        return;
    o.parts = 0;
    ++o.index;
    if (o.kind == Kind::Tuple)
        return;
    ensureFrame();
    if (o.count == 1) {
        put(o.kind == Kind::List ? kAppend : kSetItem);
        return;
    }
    if (o.index % kBatchSize == 0 || o.index == o.count) {
        put(o.kind == Kind::List ? kAppends : kSetItems);
        // The C pickler's dict loop runs again after a full batch: a dict whose size is a multiple
        // of 1000 ends with an empty MARK SETITEMS.
        if (o.kind == Kind::Dict && o.index == o.count && o.index % kBatchSize == 0) {
            put(kMark);
            put(kSetItems);
        }
    }
}

void PickleWriter::memoize(std::optional<uint64_t> key)
{
    const uint32_t index = m_memoSize++;
    if (m_protocol >= 4) {
        put(kMemoize);
    } else if (index < 256) {
        put(kBinPut);
        put(uint8_t(index));
    } else {
        put(kLongBinPut);
        putLE(index, 4);
    }
    if (key)
        m_memo.emplace(*key, index);
}

void PickleWriter::writeGet(uint32_t index)
{
    beforeValue();
    if (index < 256) {
        put(kBinGet);
        put(uint8_t(index));
    } else {
        put(kLongBinGet);
        putLE(index, 4);
    }
    afterValue();
}

bool PickleWriter::get(uint64_t key)
{
    auto it = m_memo.find(key);
    if (it == m_memo.end())
        return false;
    writeGet(it->second);
    return true;
}

void PickleWriter::none()
{
    beforeValue();
    put(kNone);
    afterValue();
}

void PickleWriter::boolean(bool v)
{
    beforeValue();
    put(v ? kNewTrue : kNewFalse);
    afterValue();
}

void PickleWriter::integer(int64_t v)
{
    beforeValue();
    if (v >= INT32_MIN && v <= INT32_MAX) {
        const auto u = uint32_t(int32_t(v));
        if ((u >> 16) != 0) {
            put(kBinInt);
            putLE(u, 4);
        } else if ((u >> 8) != 0) {
            put(kBinInt2);
            putLE(u, 2);
        } else {
            put(kBinInt1);
            put(uint8_t(u));
        }
    } else {
        // encode_long: (bit_length >> 3) + 1 bytes of two's complement, minus one redundant sign byte.
        const uint64_t magnitude = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
        int nbytes = (std::bit_width(magnitude) >> 3) + 1;
        uint8_t b[9];
        for (int i = 0; i < 9; ++i)
            b[i] = i < 8 ? uint8_t((uint64_t(v) >> (8 * i)) & 0xff) : (v < 0 ? 0xff : 0x00);
        if (v < 0 && nbytes > 1 && b[nbytes - 1] == 0xff && (b[nbytes - 2] & 0x80) != 0)
            --nbytes;
        put(kLong1);
        put(uint8_t(nbytes));
        putBytes(b, size_t(nbytes));
    }
    afterValue();
}

void PickleWriter::unsignedInteger(uint64_t v)
{
    if (v <= uint64_t(INT64_MAX)) {
        integer(int64_t(v));
        return;
    }
    beforeValue();
    uint8_t b[9];
    for (int i = 0; i < 8; ++i)
        b[i] = uint8_t((v >> (8 * i)) & 0xff);
    b[8] = 0; // the sign byte that keeps it positive
    put(kLong1);
    put(9);
    putBytes(b, 9);
    afterValue();
}

void PickleWriter::floating(double v)
{
    beforeValue();
    put(kBinFloat);
    const auto bits = std::bit_cast<uint64_t>(v);
    for (int i = 7; i >= 0; --i)
        put(uint8_t((bits >> (8 * i)) & 0xff));
    afterValue();
}

void PickleWriter::rawString(std::string_view s)
{
    const uint64_t n = s.size();
    char header[9];
    size_t headerLen;
    if (n <= 0xff && m_protocol >= 4) {
        header[0] = char(kShortBinUnicode);
        header[1] = char(n);
        headerLen = 2;
    } else if (n <= 0xffffffffull) {
        header[0] = char(kBinUnicode);
        for (int i = 0; i < 4; ++i)
            header[1 + i] = char((n >> (8 * i)) & 0xff);
        headerLen = 5;
    } else if (m_protocol >= 4) {
        header[0] = char(kBinUnicode8);
        for (int i = 0; i < 8; ++i)
            header[1 + i] = char((n >> (8 * i)) & 0xff);
        headerLen = 9;
    } else {
        throw std::length_error("a string of 4 GiB or more needs pickle protocol 4");
    }
    if (int64_t(n) >= kFrameSizeTarget && m_framing) {
        // _Pickler_write_bytes: large payloads close the frame and are written outside any frame.
        commitFrame();
        putBytes(header, headerLen);
        putBytes(s.data(), s.size());
        flushIfLarge();
        return;
    }
    putBytes(header, headerLen);
    putBytes(s.data(), s.size());
}

void PickleWriter::string(std::string_view s)
{
    beforeValue();
    rawString(s);
    ensureFrame();
    memoize(std::nullopt);
    afterValue();
}

void PickleWriter::stringWithKey(std::string_view s, uint64_t key)
{
    if (get(key))
        return;
    beforeValue();
    rawString(s);
    ensureFrame();
    memoize(key);
    afterValue();
}

uint32_t PickleWriter::sharedString(std::string_view s)
{
    if (auto it = m_strings.find(std::string(s)); it != m_strings.end()) {
        writeGet(it->second);
        return it->second;
    }
    const uint32_t index = m_memoSize;
    m_strings.emplace(std::string(s), index);
    string(s);
    return index;
}

void PickleWriter::fetch(uint32_t memoIndex)
{
    writeGet(memoIndex);
}

uint32_t PickleWriter::beginList(size_t count, std::optional<uint64_t> key)
{
    beforeValue();
    put(kEmptyList);
    const uint32_t index = m_memoSize;
    memoize(key);
    m_stack.push_back(Open{Kind::List, count, 0, 0, key});
    return index;
}

void PickleWriter::endList()
{
    if (m_stack.empty() || m_stack.back().kind != Kind::List || m_stack.back().index != m_stack.back().count)
        throw std::logic_error("PickleWriter: list closed with a wrong item count");
    m_stack.pop_back();
    afterValue();
}

uint32_t PickleWriter::beginDict(size_t count, std::optional<uint64_t> key)
{
    beforeValue();
    put(kEmptyDict);
    const uint32_t index = m_memoSize;
    memoize(key);
    m_stack.push_back(Open{Kind::Dict, count, 0, 0, key});
    return index;
}

void PickleWriter::endDict()
{
    if (m_stack.empty() || m_stack.back().kind != Kind::Dict || m_stack.back().index != m_stack.back().count)
        throw std::logic_error("PickleWriter: dict closed with a wrong item count");
    m_stack.pop_back();
    afterValue();
}

void PickleWriter::beginTuple(size_t count, std::optional<uint64_t> key)
{
    beforeValue();
    if (count == 0) {
        // The empty tuple is a singleton the pickler never memoizes.
        put(kEmptyTuple);
        m_stack.push_back(Open{Kind::Tuple, 0, 0, 0, std::nullopt});
        return;
    }
    if (count > 3)
        put(kMark);
    m_stack.push_back(Open{Kind::Tuple, count, 0, 0, key});
}

void PickleWriter::endTuple()
{
    if (m_stack.empty() || m_stack.back().kind != Kind::Tuple || m_stack.back().index != m_stack.back().count)
        throw std::logic_error("PickleWriter: tuple closed with a wrong item count");
    const Open o = m_stack.back();
    m_stack.pop_back();
    if (o.count > 0) {
        ensureFrame();
        if (o.count <= 3)
            put(uint8_t(kTuple1 + (o.count - 1)));
        else
            put(kTuple);
        memoize(o.key);
    }
    afterValue();
}

void PickleWriter::finish()
{
    if (m_finished)
        return;
    if (!m_stack.empty())
        throw std::logic_error("PickleWriter: finished with open containers");
    m_finished = true;
    ensureFrame();
    put(kStop);
    commitFrame();
    m_out.write(m_buf.data(), std::streamsize(m_buf.size()));
    m_written += int64_t(m_buf.size());
    m_buf.clear();
    m_out.flush();
}

PyObjPtr PyObj::none() { return std::make_shared<const PyObj>(PyObj{None{}}); }
PyObjPtr PyObj::boolean(bool v) { return std::make_shared<const PyObj>(PyObj{v}); }
PyObjPtr PyObj::integer(int64_t v) { return std::make_shared<const PyObj>(PyObj{v}); }
PyObjPtr PyObj::unsignedInteger(uint64_t v) { return std::make_shared<const PyObj>(PyObj{UInt{v}}); }
PyObjPtr PyObj::floating(double v) { return std::make_shared<const PyObj>(PyObj{v}); }
PyObjPtr PyObj::str(std::string s) { return std::make_shared<const PyObj>(PyObj{std::move(s)}); }
PyObjPtr PyObj::list(std::vector<PyObjPtr> items) { return std::make_shared<const PyObj>(PyObj{List{std::move(items)}}); }
PyObjPtr PyObj::tuple(std::vector<PyObjPtr> items) { return std::make_shared<const PyObj>(PyObj{Tuple{std::move(items)}}); }
PyObjPtr PyObj::dict(std::vector<std::pair<PyObjPtr, PyObjPtr>> items)
{
    return std::make_shared<const PyObj>(PyObj{Dict{std::move(items)}});
}

void savePyObj(PickleWriter& w, const PyObjPtr& obj)
{
    if (!obj) {
        w.none();
        return;
    }
    // Identity is the object's address, like id() for CPython's memo.
    const auto key = uint64_t(reinterpret_cast<uintptr_t>(obj.get()));
    const auto& v = obj->value;
    if (std::holds_alternative<PyObj::None>(v)) {
        w.none();
    } else if (auto* b = std::get_if<bool>(&v)) {
        w.boolean(*b);
    } else if (auto* i = std::get_if<int64_t>(&v)) {
        w.integer(*i);
    } else if (auto* u = std::get_if<PyObj::UInt>(&v)) {
        w.unsignedInteger(u->value);
    } else if (auto* d = std::get_if<double>(&v)) {
        w.floating(*d);
    } else if (auto* s = std::get_if<std::string>(&v)) {
        w.stringWithKey(*s, key);
    } else if (w.get(key)) {
        return;
    } else if (auto* l = std::get_if<PyObj::List>(&v)) {
        w.beginList(l->items.size(), key);
        for (const auto& item : l->items)
            savePyObj(w, item);
        w.endList();
    } else if (auto* t = std::get_if<PyObj::Tuple>(&v)) {
        w.beginTuple(t->items.size(), key);
        for (const auto& item : t->items)
            savePyObj(w, item);
        w.endTuple();
    } else if (auto* m = std::get_if<PyObj::Dict>(&v)) {
        w.beginDict(m->items.size(), key);
        for (const auto& [k, val] : m->items) {
            savePyObj(w, k);
            savePyObj(w, val);
        }
        w.endDict();
    }
}

void writePickle(const PyObjPtr& root, std::ostream& out, int protocol)
{
    PickleWriter w(out, protocol);
    savePyObj(w, root);
    w.finish();
}

} // namespace poolscope
