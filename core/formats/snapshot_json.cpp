// The snapshot dict as JSON (users json.dump the same dict). nlohmann's SAX interface feeds the same
// ValueArena and streaming SnapshotDecoder as the pickle reader, so a 1 GB JSON file never becomes a DOM.
#include "core/formats/snapshot_decoder.h"
#include "core/formats/snapshot_readers.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>
#include <unordered_map>

namespace poolscope {
namespace {

class JsonToArena : public nlohmann::json_sax<nlohmann::json> {
public:
    JsonToArena(ValueArena& arena, ListSink& sink, const LoadOptions& options, Progress& progress)
        : m_arena(arena), m_sink(sink), m_options(options), m_progress(progress)
    {
    }

    PyValue root;
    std::string error;
    size_t errorOffset = 0;

    bool null() override { return add(PyValue{}); }
    bool boolean(bool v) override { return add(PyValue{PyKind::Bool, 0, v}); }
    bool number_integer(number_integer_t v) override { return add(PyValue::makeInt(v)); }
    bool number_unsigned(number_unsigned_t v) override
    {
        return add(v > uint64_t(INT64_MAX) ? PyValue{PyKind::UInt, 0, int64_t(v)} : PyValue::makeInt(int64_t(v)));
    }
    bool number_float(number_float_t v, const string_t&) override { return add(PyValue::makeFloat(v)); }
    bool string(string_t& s) override { return add(PyValue{PyKind::Str, intern(s), 0}); }
    bool binary(binary_t&) override { return add(PyValue{}); }
    bool start_object(std::size_t) override { return open(PyKind::Dict); }
    bool key(string_t& s) override
    {
        m_arena.append(m_open.back().ref, PyValue{PyKind::Str, intern(s), 0});
        return true;
    }
    bool end_object() override { return close(); }
    bool start_array(std::size_t) override { return open(PyKind::List); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override
    {
        error = ex.what();
        errorOffset = position;
        return false;
    }

private:
    uint32_t intern(const std::string& s)
    {
        // JSON repeats every filename and key; the pickle memo shares them. Interning restores that.
        auto it = m_strings.find(s);
        if (it != m_strings.end())
            return it->second;
        const uint32_t ref = m_arena.addString(s);
        m_strings.emplace(s, ref);
        return ref;
    }
    bool open(PyKind kind)
    {
        if (int(m_open.size()) >= m_options.maxNesting) // a limit, not a syntax error: LimitExceeded
            throw std::length_error("JSON nested deeper than " + std::to_string(m_options.maxNesting) +
                                    " levels (LoadOptions::maxNesting)");
        m_open.push_back(PyValue{kind, m_arena.newContainer(kind), 0});
        return true;
    }
    bool close()
    {
        PyValue v = m_open.back();
        m_open.pop_back();
        if (v.kind == PyKind::Dict)
            v = shareFrame(v);
        return add(v);
    }
    // Identical frame dicts become one container, as the pickle memo would have it, so the decoder's
    // per-container frame cache works for JSON too.
    PyValue shareFrame(const PyValue& dict)
    {
        const auto kv = m_arena.items(dict);
        if (kv.size() != 6 || !m_arena.get(dict, "filename") || !m_arena.get(dict, "name"))
            return dict;
        std::string key;
        for (const PyValue& x : kv)
            key += std::to_string(int(x.kind)) + ":" + std::to_string(x.ref) + ":" + std::to_string(x.i) + ";";
        auto [it, inserted] = m_frames.try_emplace(std::move(key), dict);
        if (!inserted) {
            m_arena.release(dict.ref);
            return it->second;
        }
        return dict;
    }
    bool add(const PyValue& v)
    {
        if (m_open.empty()) {
            root = v;
            return true;
        }
        const PyValue& parent = m_open.back();
        if (parent.kind == PyKind::List) {
            if (++m_items % 4096 == 0 && m_progress.cancel.load(std::memory_order_relaxed)) {
                error = "loading was cancelled";
                return false;
            }
            if (m_sink.onAppend(m_arena, parent.ref, std::span<const PyValue>(&v, 1)))
                return true;
        }
        m_arena.append(parent.ref, v);
        return true;
    }

    ValueArena& m_arena;
    ListSink& m_sink;
    const LoadOptions& m_options;
    Progress& m_progress;
    std::vector<PyValue> m_open;
    std::unordered_map<std::string, uint32_t> m_strings;
    std::unordered_map<std::string, PyValue> m_frames;
    uint64_t m_items = 0;
};

int hexValue(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

// The code unit of a \uXXXX escape starting at p (the backslash), or -1.
int escapeUnit(std::span<const uint8_t> bytes, size_t p)
{
    if (p + 6 > bytes.size() || bytes[p] != '\\' || bytes[p + 1] != 'u')
        return -1;
    int v = 0;
    for (size_t k = 2; k < 6; ++k) {
        const int h = hexValue(bytes[p + k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

// Python's json.dump writes a string holding a lone surrogate (a file name decoded with
// surrogateescape, a truncated name) as a lone \udcff escape, which strict JSON parsers refuse. Such
// a string feeds no figure: each lone surrogate escape becomes \ufffd, of the same length, so every
// byte offset an error names stays right. Returns the fixed copy, or nothing when there is none.
// A scan for "\u" followed by d/D is cheap beside the parse; files without surrogates are not copied.
std::optional<std::vector<uint8_t>> replaceLoneSurrogates(std::span<const uint8_t> bytes, int64_t& replaced)
{
    std::optional<std::vector<uint8_t>> fixed;
    replaced = 0;
    const uint8_t* base = bytes.data();
    size_t p = 0;
    while (p + 6 <= bytes.size()) {
        const void* hit = std::memchr(base + p, '\\', bytes.size() - p);
        if (!hit)
            break;
        p = size_t(static_cast<const uint8_t*>(hit) - base);
        if (p + 1 < bytes.size() && bytes[p + 1] == '\\') { // an escaped backslash: not the start of an escape
            p += 2;
            continue;
        }
        const int unit = escapeUnit(bytes, p);
        if (unit < 0xd800 || unit > 0xdfff) {
            p += 1;
            continue;
        }
        const bool high = unit < 0xdc00;
        const int next = high ? escapeUnit(bytes, p + 6) : -1;
        if (high && next >= 0xdc00 && next <= 0xdfff) { // a valid pair
            p += 12;
            continue;
        }
        if (!fixed)
            fixed.emplace(bytes.begin(), bytes.end());
        std::memcpy(fixed->data() + p, "\\ufffd", 6);
        ++replaced;
        p += 6;
    }
    return fixed;
}

} // namespace

void readSnapshotJson(std::span<const uint8_t> bytes, const std::string& name, Trace& out, const LoadOptions& options,
                      Progress& progress)
{
    ValueArena arena(options.memoryBudgetBytes);
    SnapshotAssembler assembler(out);
    // Frames lists are never shared in JSON, so the decoder may recycle them once interned.
    SnapshotDecoder decoder(arena, assembler, name, /*framesListsAreUnique=*/true);
    JsonToArena sax(arena, decoder, options, progress);
    progress.stage = int(LoadStage::Parsing);
    progress.bytesTotal = int64_t(bytes.size());
    int64_t lone = 0;
    const auto fixed = replaceLoneSurrogates(bytes, lone);
    if (fixed)
        bytes = std::span<const uint8_t>(*fixed);
    bool ok = false;
    try {
        ok = nlohmann::json::sax_parse(bytes.begin(), bytes.end(), &sax);
    } catch (const std::length_error& e) {
        throw LoadError(LoadErrorCode::LimitExceeded, name, -1, e.what());
    }
    if (!ok) {
        if (progress.cancel.load())
            throw LoadError(LoadErrorCode::Cancelled, name, -1, "loading was cancelled");
        throw LoadError(LoadErrorCode::Malformed, name, int64_t(sax.errorOffset),
                        "invalid JSON: " + (sax.error.empty() ? std::string("parse error") : sax.error));
    }
    progress.bytesDone = int64_t(bytes.size());
    progress.stage = int(LoadStage::Building);
    decoder.decodeRoot(sax.root);
    assembler.finish();
    out.formatDetail = "JSON" + (out.formatDetail.empty() ? "" : ", " + out.formatDetail);
    if (lone > 0)
        out.warnings.push_back(std::to_string(lone) + " lone surrogate escape(s) in JSON strings (e.g. a file name Python decoded with "
                                                      "surrogateescape) were read as U+FFFD");
}

} // namespace poolscope
