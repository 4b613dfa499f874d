#pragma once
// Helpers for the broken-input suites: a tiny Python-like value model that writes itself as a pickle
// (protocol 4, with memo sharing like real dumps) or as JSON, snapshot builders, and load() wrappers
// that turn "what happened" into data a test can assert on.
#include "core/load.h"
#include "fuzz/trace_invariants.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace poolscope::robust {

using Bytes = std::vector<uint8_t>;

inline Bytes toBytes(std::string_view s) { return Bytes(s.begin(), s.end()); }

// A Python value. Copies share containers, so a V used twice is written once and then fetched from
// the pickle memo (as PyTorch's pickler does for frames lists and frame dicts).
struct V {
    enum Kind { None, Bool, Int, UInt, Float, Str, List, Tuple, Dict } kind = None;
    int64_t i = 0;
    uint64_t u = 0;
    double d = 0;
    std::string s;
    std::shared_ptr<std::vector<V>> items;                        // List, Tuple
    std::shared_ptr<std::vector<std::pair<V, V>>> kv;             // Dict
    bool markList = false; // List written as MARK items LIST (built whole) instead of EMPTY_LIST + APPENDS

    V() = default;
    V(int v) : kind(Int), i(v) {}         // NOLINT: implicit on purpose, for terse test tables
    V(int64_t v) : kind(Int), i(v) {}     // NOLINT
    V(double v) : kind(Float), d(v) {}    // NOLINT
    V(const char* v) : kind(Str), s(v) {} // NOLINT
    V(std::string v) : kind(Str), s(std::move(v)) {} // NOLINT
    static V boolean(bool b) { V v; v.kind = Bool; v.i = b; return v; }
    static V uint(uint64_t x) { V v; v.kind = UInt; v.u = x; return v; }
    static V list(std::vector<V> xs = {}) { V v; v.kind = List; v.items = std::make_shared<std::vector<V>>(std::move(xs)); return v; }
    static V builtWhole(std::vector<V> xs) { V v = list(std::move(xs)); v.markList = true; return v; }
    static V tuple(std::vector<V> xs) { V v; v.kind = Tuple; v.items = std::make_shared<std::vector<V>>(std::move(xs)); return v; }
    static V dict(std::vector<std::pair<V, V>> xs = {}) { V v; v.kind = Dict; v.kv = std::make_shared<std::vector<std::pair<V, V>>>(std::move(xs)); return v; }

    // Dict helpers (string keys): set replaces or appends; erase removes.
    V& set(const std::string& key, V value)
    {
        for (auto& [k, x] : *kv)
            if (k.kind == Str && k.s == key) {
                x = std::move(value);
                return *this;
            }
        kv->emplace_back(V(key), std::move(value));
        return *this;
    }
    V* find(const std::string& key)
    {
        for (auto& [k, x] : *kv)
            if (k.kind == Str && k.s == key)
                return &x;
        return nullptr;
    }
    V& at(size_t index) { return (*items)[index]; }
    // A deep copy: changing it does not change the shared original.
    V clone() const
    {
        V c = *this;
        if (items) {
            c.items = std::make_shared<std::vector<V>>();
            for (const V& x : *items)
                c.items->push_back(x.clone());
        }
        if (kv) {
            c.kv = std::make_shared<std::vector<std::pair<V, V>>>();
            for (const auto& [k, x] : *kv)
                c.kv->emplace_back(k.clone(), x.clone());
        }
        return c;
    }
};

class PickleWriter {
public:
    static constexpr size_t kBatch = 1000; // items per MARK ... APPENDS/SETITEMS, as CPython's pickler writes
    Bytes write(const V& v, int protocol = 4)
    {
        m_out.clear();
        m_memo.clear();
        m_strings.clear();
        op(0x80).op(uint8_t(protocol));
        value(v);
        op('.');
        return m_out;
    }

private:
    PickleWriter& op(uint8_t b)
    {
        m_out.push_back(b);
        return *this;
    }
    void le(uint64_t v, int n)
    {
        for (int k = 0; k < n; ++k)
            op(uint8_t(v >> (8 * k)));
    }
    void memoize(const void* node)
    {
        m_memo.emplace(node, uint32_t(m_memo.size() + m_strings.size()));
        op(0x94);
    }
    bool fetch(const void* node)
    {
        auto it = m_memo.find(node);
        if (it == m_memo.end())
            return false;
        op('j');
        le(it->second, 4);
        return true;
    }
    void value(const V& v)
    {
        switch (v.kind) {
        case V::None: op('N'); break;
        case V::Bool: op(v.i ? 0x88 : 0x89); break;
        case V::Int:
            if (v.i >= 0 && v.i < 256) {
                op('K').op(uint8_t(v.i));
            } else if (v.i >= INT32_MIN && v.i <= INT32_MAX) {
                op('J');
                le(uint64_t(uint32_t(int32_t(v.i))), 4);
            } else {
                op(0x8a).op(8);
                le(uint64_t(v.i), 8);
            }
            break;
        case V::UInt:
            op(0x8a).op(9);
            le(v.u, 8);
            op(0);
            break;
        case V::Float: {
            op('G');
            const uint64_t bits = std::bit_cast<uint64_t>(v.d);
            for (int k = 7; k >= 0; --k)
                op(uint8_t(bits >> (8 * k)));
            break;
        }
        case V::Str:
            // Equal strings are written once and then fetched from the memo, as dict keys and action
            // names are in real dumps.
            if (auto it = m_strings.find(v.s); it != m_strings.end()) {
                op('j');
                le(it->second, 4);
                break;
            }
            if (v.s.size() < 256) {
                op(0x8c).op(uint8_t(v.s.size()));
            } else {
                op('X');
                le(v.s.size(), 4);
            }
            m_out.insert(m_out.end(), v.s.begin(), v.s.end());
            m_strings.emplace(v.s, uint32_t(m_memo.size() + m_strings.size()));
            op(0x94);
            break;
        case V::List:
            if (fetch(v.items.get()))
                break;
            if (v.markList) {
                op('(');
                for (const V& x : *v.items)
                    value(x);
                op('l');
                memoize(v.items.get());
                break;
            }
            op(']');
            memoize(v.items.get());
            for (size_t from = 0; from < v.items->size(); from += kBatch) { // as CPython batches APPENDS
                op('(');
                for (size_t k = from; k < std::min(v.items->size(), from + kBatch); ++k)
                    value((*v.items)[k]);
                op('e');
            }
            break;
        case V::Tuple:
            op('(');
            for (const V& x : *v.items)
                value(x);
            op('t');
            break;
        case V::Dict:
            if (fetch(v.kv.get()))
                break;
            op('}');
            memoize(v.kv.get());
            for (size_t from = 0; from < v.kv->size(); from += kBatch) {
                op('(');
                for (size_t k = from; k < std::min(v.kv->size(), from + kBatch); ++k) {
                    value((*v.kv)[k].first);
                    value((*v.kv)[k].second);
                }
                op('u');
            }
            break;
        }
    }

    Bytes m_out;
    std::map<const void*, uint32_t> m_memo;     // containers -> memo index
    std::map<std::string, uint32_t> m_strings; // strings -> memo index
};

inline Bytes toPickle(const V& v, int protocol = 4) { return PickleWriter().write(v, protocol); }

inline nlohmann::json toJsonValue(const V& v)
{
    switch (v.kind) {
    case V::None: return nullptr;
    case V::Bool: return bool(v.i);
    case V::Int: return v.i;
    case V::UInt: return v.u;
    case V::Float: return v.d;
    case V::Str: return v.s;
    case V::List:
    case V::Tuple: {
        auto a = nlohmann::json::array();
        for (const V& x : *v.items)
            a.push_back(toJsonValue(x));
        return a;
    }
    case V::Dict: {
        auto o = nlohmann::json::object();
        for (const auto& [k, x] : *v.kv)
            o[k.kind == V::Str ? k.s : std::to_string(k.i)] = toJsonValue(x);
        return o;
    }
    }
    return nullptr;
}

// nlohmann writes NaN/Infinity as null; a test that needs them in JSON writes text itself.
inline Bytes toJson(const V& v) { return toBytes(toJsonValue(v).dump()); }

// ---- snapshot builders (the dict of torch.cuda.memory._snapshot()) ----------------------------------

inline V frameV(const std::string& file, int line, const std::string& name)
{
    return V::dict({{"filename", file}, {"line", line}, {"name", name}});
}

inline V entryV(const std::string& action, int64_t addr, int64_t size, std::optional<int64_t> timeUs = std::nullopt,
                V frames = V())
{
    V e = V::dict({{"action", action}, {"addr", addr}, {"size", size}, {"stream", 0}});
    if (timeUs)
        e.set("time_us", *timeUs);
    if (frames.kind != V::None)
        e.set("frames", frames);
    return e;
}

inline V blockV(int64_t address, int64_t size, const std::string& state = "active_allocated")
{
    return V::dict({{"address", address}, {"size", size}, {"requested_size", size}, {"state", state}});
}

inline V segmentV(int64_t address, int64_t totalSize, std::vector<V> blocks, int device = 0)
{
    return V::dict({{"device", device}, {"address", address}, {"total_size", totalSize}, {"stream", 0},
                    {"segment_type", "large"}, {"blocks", V::list(std::move(blocks))}});
}

inline V snapshotV(std::vector<V> segments, std::vector<V> entries)
{
    return V::dict({{"segments", V::list(std::move(segments))}, {"device_traces", V::list({V::list(std::move(entries))})}});
}

// A small, valid snapshot: one segment with a live 1 KiB block, alloc/free pairs with shared frames.
inline V healthySnapshot()
{
    const V frames = V::list({frameV("train.py", 3, "step"), frameV("model.py", 7, "forward")});
    const int64_t base = int64_t(1) << 40;
    std::vector<V> entries;
    int64_t t = 1'700'000'000'000'000;
    entries.push_back(entryV("segment_alloc", base, 1 << 20, t += 10, frames));
    for (int k = 0; k < 4; ++k)
        entries.push_back(entryV("alloc", base + 1024 * k, 1000, t += 10, frames));
    for (int k = 1; k < 4; ++k) {
        entries.push_back(entryV("free_requested", base + 1024 * k, 1000, t += 10, frames));
        entries.push_back(entryV("free_completed", base + 1024 * k, 1000, t += 10, frames));
    }
    V seg = segmentV(base, 1 << 20, {blockV(base, 1024), blockV(base + 1024, (1 << 20) - 1024, "inactive")});
    return snapshotV({seg}, entries);
}

// A Kineto trace with operators, [memory] events (Addr, totals) and an OOM.
inline std::string kinetoJson()
{
    return R"({"schemaVersion":1,"traceEvents":[
{"ph":"X","name":"aten::linear","pid":1,"tid":7,"ts":100.5,"dur":50},
{"ph":"X","name":"aten::mm","pid":1,"tid":7,"ts":110,"dur":10.25},
{"ph":"i","name":"[memory]","pid":1,"tid":7,"ts":112.001,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":4096,"Total Allocated":10512,"Total Reserved":2097152}},
{"ph":"i","name":"[memory]","pid":1,"tid":7,"ts":115,"args":{"Device Type":1,"Device Id":0,"Bytes":1024,"Addr":8192,"Total Allocated":11536,"Total Reserved":2097152}},
{"ph":"i","name":"[memory]","pid":1,"tid":7,"ts":140,"args":{"Device Type":1,"Device Id":0,"Bytes":-512,"Addr":4096,"Total Allocated":11024,"Total Reserved":2097152}},
{"ph":"i","name":"[memory]","pid":1,"tid":7,"ts":120,"args":{"Device Type":0,"Device Id":-1,"Bytes":64,"Addr":77}},
{"ph":"i","name":"[OutOfMemory]","pid":1,"tid":7,"ts":400,"args":{"Device Type":1,"Device Id":0,"Bytes":8589934592,"Total Allocated":11024}}
]})";
}

// export_memory_timeline's .raw.json rows [t_ns, action, bytes, category].
inline std::string timelineJson()
{
    return "[[-1, 1, 100, 0], [-1, 1, 200, 1], [1000, 2, 50, 4], [2000, 3, -50, 4], [2000, 3, 50, 5], "
           "[3000, 4, -50, 5], [3500, 4, -999, 7], [4000, 2, 10, 2]]";
}

// ---- loading ---------------------------------------------------------------------------------------

struct Outcome {
    std::shared_ptr<const Trace> trace; // set when it loaded
    std::optional<LoadErrorCode> code;  // set when it failed with LoadError
    std::string what;                   // LoadError::what()

    bool loaded() const { return trace != nullptr; }
    bool hasWarning(std::string_view needle) const
    {
        if (!trace)
            return false;
        for (const auto& w : trace->warnings)
            if (w.find(needle) != std::string::npos)
                return true;
        return false;
    }
    std::string warnings() const
    {
        std::string s;
        if (trace)
            for (const auto& w : trace->warnings)
                s += w + "\n";
        return s;
    }
};

inline void writeFile(const std::string& path, const Bytes& data)
{
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

inline Bytes readFile(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// load() on `data` written to `path`. Only LoadError is caught: anything else escapes and fails the test.
inline Outcome loadBytes(const std::string& path, const Bytes& data, const LoadOptions& options = LoadOptions{})
{
    writeFile(path, data);
    Outcome o;
    Progress progress;
    try {
        o.trace = load(path, options, progress);
    } catch (const LoadError& e) {
        o.code = e.code();
        o.what = e.what();
    }
    return o;
}

// Empty when the outcome is acceptable for a broken input: a consistent trace, or a LoadError whose
// what() is one non-empty line.
inline std::string problemWith(const Outcome& o)
{
    if (o.loaded())
        return invariants::violation(*o.trace);
    if (!o.code)
        return "neither loaded nor failed";
    if (o.what.empty())
        return "LoadError with an empty message";
    for (char c : o.what)
        if (c == '\n' || c == '\r')
            return "LoadError message spans lines: " + o.what;
    return {};
}

inline const char* codeName(LoadErrorCode c)
{
    switch (c) {
    case LoadErrorCode::FileNotFound: return "FileNotFound";
    case LoadErrorCode::ReadFailed: return "ReadFailed";
    case LoadErrorCode::UnknownFormat: return "UnknownFormat";
    case LoadErrorCode::Truncated: return "Truncated";
    case LoadErrorCode::Malformed: return "Malformed";
    case LoadErrorCode::UnsupportedVersion: return "UnsupportedVersion";
    case LoadErrorCode::CodeExecution: return "CodeExecution";
    case LoadErrorCode::LimitExceeded: return "LimitExceeded";
    case LoadErrorCode::Cancelled: return "Cancelled";
    }
    return "?";
}

inline std::string describe(const Outcome& o)
{
    if (o.loaded())
        return "loaded with " + std::to_string(o.trace->warnings.size()) + " warning(s): " + o.warnings();
    return o.code ? std::string(codeName(*o.code)) + ": " + o.what : "nothing";
}

} // namespace poolscope::robust
