#include "core/load.h"

#include "core/formats/html_embed.h"
#include "core/formats/input.h"
#include "core/formats/kineto.h"
#include "core/formats/memory_timeline.h"
#include "core/formats/snapshot_readers.h"
#include "core/formats/torch_save.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace poolscope {
namespace {

enum class Kind { Pickle, LegacyTorchSave, Html, TorchSave, Kineto, SnapshotJson, TimelineRaw };

constexpr std::string_view kSupported =
    "supported: PyTorch allocator snapshots (pickle from torch.cuda.memory._dump_snapshot, the same dict as JSON "
    "or written with torch.save, or the HTML page of `python -m torch.cuda._memory_viz trace_plot`), Kineto/Chrome traces with [memory] "
    "events (torch.profiler with profile_memory=True), and export_memory_timeline's .raw.json; each may be "
    "zstd- or gzip-compressed";

// A small forward-only JSON skimmer: enough to read the first keys and shapes without parsing the file.
class Skim {
public:
    explicit Skim(std::string_view s, size_t pos = 0) : m_s(s), m_p(pos) {}
    bool atEnd() { return ws() >= m_s.size(); }
    char peek() { return ws() < m_s.size() ? m_s[m_p] : '\0'; }
    bool eat(char c)
    {
        if (peek() != c)
            return false;
        ++m_p;
        return true;
    }
    // Reads a string (the caller saw '"'); keeps at most 64 characters of it.
    bool string(std::string& out)
    {
        out.clear();
        if (!eat('"'))
            return false;
        while (m_p < m_s.size()) {
            const char c = m_s[m_p++];
            if (c == '"')
                return true;
            if (c == '\\') {
                if (m_p >= m_s.size())
                    return false;
                ++m_p;
            }
            if (out.size() < 64)
                out.push_back(c);
        }
        return false;
    }
    bool skipValue()
    {
        const char c = peek();
        if (c == '"') {
            std::string ignored;
            return string(ignored);
        }
        if (c == '{' || c == '[') {
            int depth = 0;
            while (m_p < m_s.size()) {
                const char d = m_s[m_p];
                if (d == '"') {
                    std::string ignored;
                    if (!string(ignored))
                        return false;
                    continue;
                }
                ++m_p;
                if (d == '{' || d == '[')
                    ++depth;
                else if ((d == '}' || d == ']') && --depth == 0)
                    return true;
            }
            return false;
        }
        const size_t start = m_p;
        while (m_p < m_s.size() && std::string_view(",]} \t\r\n").find(m_s[m_p]) == std::string_view::npos)
            ++m_p;
        return m_p > start;
    }
    // Object keys until `decide` returns true for one (then positioned at its value) or the object ends.
    template <typename F>
    bool keys(std::vector<std::string>& seen, F decide)
    {
        if (!eat('{'))
            return false;
        std::string key;
        while (peek() == '"') {
            if (!string(key) || !eat(':'))
                return false;
            seen.push_back(key);
            if (decide(key))
                return true;
            if (!skipValue())
                return false;
            if (!eat(','))
                break;
        }
        return false;
    }
    bool isNumberStart()
    {
        const char c = peek();
        return c == '-' || (c >= '0' && c <= '9');
    }

private:
    size_t ws()
    {
        while (m_p < m_s.size() && (m_s[m_p] == ' ' || m_s[m_p] == '\t' || m_s[m_p] == '\r' || m_s[m_p] == '\n'))
            ++m_p;
        return m_p;
    }
    std::string_view m_s;
    size_t m_p;
};

std::string joinKeys(const std::vector<std::string>& keys)
{
    std::string s;
    for (size_t i = 0; i < keys.size() && i < 8; ++i)
        s += (i ? ", \"" : "\"") + keys[i] + "\"";
    if (keys.size() > 8)
        s += ", ...";
    return s.empty() ? "no keys" : "keys " + s;
}

[[noreturn]] void unknown(const std::string& path, const std::string& seen)
{
    throw LoadError(LoadErrorCode::UnknownFormat, path, -1, "unrecognised content: " + seen + "; " + std::string(kSupported));
}

Kind sniffJsonObject(std::string_view text, size_t pos, const std::string& path)
{
    Skim skim(text, pos);
    std::vector<std::string> seen;
    Kind kind = Kind::Kineto;
    bool decided = skim.keys(seen, [&](const std::string& k) {
        if (k == "traceEvents")
            return kind = Kind::Kineto, true;
        if (k == "segments" || k == "device_traces")
            return kind = Kind::SnapshotJson, true;
        return false;
    });
    if (decided)
        return kind;
    if (skim.atEnd())
        throw LoadError(LoadErrorCode::Truncated, path, int64_t(text.size()),
                        "JSON ends before its keys say what it is (" + joinKeys(seen) + " so far; file truncated?)");
    // Nothing decisive among the keys: go by the weaker ones, so the reader can say what is missing.
    for (const auto& k : seen) {
        if (k == "schemaVersion" || k == "deviceProperties" || k == "displayTimeUnit" || k == "traceName")
            return Kind::Kineto;
        if (k == "allocator_settings" || k == "external_annotations")
            return Kind::SnapshotJson;
    }
    unknown(path, "a JSON object with " + joinKeys(seen) +
                      " (a snapshot has \"segments\"/\"device_traces\", a Kineto trace \"traceEvents\")");
}

Kind sniffJsonArray(std::string_view text, size_t pos, const std::string& path)
{
    Skim skim(text, pos);
    skim.eat('[');
    const auto cutShort = [&](const std::string& seen) {
        if (skim.atEnd())
            throw LoadError(LoadErrorCode::Truncated, path, int64_t(text.size()),
                            "JSON ends before its first element says what it is (" + seen + "; file truncated?)");
    };
    cutShort("an array");
    const char first = skim.peek();
    if (first == ']')
        return Kind::TimelineRaw; // an empty export (also an empty list of segments): nothing to show either way
    if (first == '{') {
        std::vector<std::string> seen;
        Kind kind = Kind::Kineto;
        const bool decided = skim.keys(seen, [&](const std::string& k) {
            if (k == "ph")
                return kind = Kind::Kineto, true;
            if (k == "address" || k == "total_size" || k == "blocks" || k == "segment_type")
                return kind = Kind::SnapshotJson, true;
            return false;
        });
        if (decided)
            return kind;
        cutShort("an array of objects with " + joinKeys(seen));
        unknown(path, "a JSON array of objects with " + joinKeys(seen) +
                          " (a list of segments has \"address\"/\"total_size\"/\"blocks\", Chrome trace events \"ph\")");
    }
    if (first == '[') {
        skim.eat('[');
        if (skim.peek() == '[')
            unknown(path, "a JSON array of arrays of arrays");
        int numbers = 0;
        while (skim.isNumberStart() && numbers < 5) {
            skim.skipValue();
            ++numbers;
            if (!skim.eat(','))
                break;
        }
        if (numbers == 4 && skim.peek() == ']')
            return Kind::TimelineRaw;
        cutShort("an array of arrays of " + std::to_string(numbers) + " numbers");
        unknown(path, numbers >= 5 ? "a JSON array of long number lists, like export_memory_timeline's [times, sizes] "
                                     "form (PoolScope reads the .raw.json export, rows of [t_ns, action, bytes, category])"
                                   : "a JSON array of arrays that are not [t_ns, action, bytes, category] rows");
    }
    unknown(path, "a JSON array whose first element is neither an object nor an array");
}

std::string describeHead(std::span<const uint8_t> bytes)
{
    static constexpr char kDigits[] = "0123456789ABCDEF";
    std::string hex, text;
    for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
        if (i)
            hex.push_back(' ');
        hex.push_back(kDigits[bytes[i] >> 4]);
        hex.push_back(kDigits[bytes[i] & 0xF]);
        text.push_back(bytes[i] >= 0x20 && bytes[i] < 0x7F ? char(bytes[i]) : '.');
    }
    return "first bytes " + hex + " (\"" + text + "\")";
}

Kind sniff(std::span<const uint8_t> bytes, const std::string& path, size_t& textStart)
{
    if (bytes.empty())
        throw LoadError(LoadErrorCode::UnknownFormat, path, 0, "the file is empty (" + std::string(kSupported) + ")");
    if (isLegacyTorchSave(bytes))
        return Kind::LegacyTorchSave;
    // Protocol 2 and later begin with PROTO; protocols 0 and 1 (pickle.dump(..., protocol=0), Python 2)
    // with MARK, EMPTY_DICT or EMPTY_LIST, which no JSON, HTML or text dump begins with.
    if (bytes[0] == 0x80 || bytes[0] == '(' || bytes[0] == '}' || bytes[0] == ']')
        return Kind::Pickle;
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    size_t p = text.starts_with("\xEF\xBB\xBF") ? 3 : 0; // UTF-8 byte order mark
    while (p < text.size() && (text[p] == ' ' || text[p] == '\t' || text[p] == '\r' || text[p] == '\n'))
        ++p;
    textStart = p;
    if (p == text.size())
        throw LoadError(LoadErrorCode::UnknownFormat, path, 0, "the file holds only whitespace (" + std::string(kSupported) + ")");
    switch (text[p]) {
    case '<':
        return Kind::Html;
    case '{':
        return sniffJsonObject(text, p, path);
    case '[':
        return sniffJsonArray(text, p, path);
    default:
        break;
    }
    if (text.starts_with("PK\x03\x04"))
        return Kind::TorchSave;
    std::string seen = describeHead(bytes);
    if (bytes.size() >= 6 && bytes[0] == 0xFD && text.substr(1, 4) == "7zXZ")
        seen += ", xz-compressed data (decompress it first, or recompress with zstd or gzip)";
    else if (text.starts_with("BZh"))
        seen += ", bzip2-compressed data (decompress it first, or recompress with zstd or gzip)";
    unknown(path, seen);
}

std::string compressionSuffix(Compression c)
{
    switch (c) {
    case Compression::Zstd:
        return ", zstd-compressed";
    case Compression::Gzip:
        return ", gzip-compressed";
    case Compression::None:
        break;
    }
    return {};
}

// Reads a snapshot pickle that sits inside a container (an HTML page, a torch.save file or archive).
// Its reader counts offsets from the pickle's first byte: where those bytes lie in the file at `at`,
// an error's offset is shifted to be the file's; where they do not (inflated, decoded), `where` says
// what the offset counts in.
template <class Read>
void readInside(Read&& read, int64_t at, const char* where)
{
    try {
        read();
    } catch (const LoadError& e) {
        if (e.offset() < 0 || e.code() == LoadErrorCode::Cancelled)
            throw;
        if (at >= 0)
            throw LoadError(e.code(), e.file(), at + e.offset(), e.message());
        throw LoadError(e.code(), e.file(), e.offset(), std::string(where) + e.message());
    }
}

} // namespace

std::shared_ptr<const Trace> load(const std::string& path, const LoadOptions& options, Progress& progress)
{
    auto input = openInput(path, options, progress);
    const auto bytes = input->bytes();
    const bool compressed = input->compression != Compression::None;
    auto trace = std::make_shared<Trace>();
    trace->path = path;
    trace->inputBytes = int64_t(bytes.size());

    size_t textStart = 0;
    const Kind kind = sniff(bytes, path, textStart);
    if (progress.cancel.load(std::memory_order_relaxed))
        throw LoadError(LoadErrorCode::Cancelled, path, -1, "loading was cancelled");
    progress.stage.store(int(LoadStage::Parsing), std::memory_order_relaxed);

    try {
        switch (kind) {
        case Kind::Pickle:
            try {
                readSnapshotPickle(bytes, path, *trace, options, progress, input.get());
            } catch (const LoadError& e) {
                // Without PROTO the first byte was only a guess: say what it was read as.
                if (bytes[0] == 0x80 || e.code() == LoadErrorCode::Cancelled)
                    throw;
                throw LoadError(e.code(), e.file(), e.offset(),
                                std::string("read as a pickle of protocol 0 or 1 (its first byte is '") + char(bytes[0]) + "'): " + e.message());
            }
            trace->format = SourceFormat::SnapshotPickle;
            if (trace->formatDetail.empty())
                trace->formatDetail = "pickle";
            break;
        case Kind::Html: {
            const auto pickle = extractHtmlPickle(bytes, path);
            readInside([&] { readSnapshotPickle(pickle, path, *trace, options, progress); }, -1,
                       "(offset in the pickle embedded in the HTML) ");
            trace->format = SourceFormat::SnapshotHtml;
            trace->formatDetail = "memory_viz HTML, embedded " + (trace->formatDetail.empty() ? std::string("pickle") : trace->formatDetail);
            break;
        }
        case Kind::LegacyTorchSave: {
            const size_t at = legacyTorchSaveObjectOffset(bytes, path, options);
            readInside([&] { readSnapshotPickle(bytes.subspan(at), path, *trace, options, progress); }, int64_t(at), "");
            trace->format = SourceFormat::SnapshotPickle;
            trace->formatDetail = "legacy torch.save, " + (trace->formatDetail.empty() ? std::string("pickle") : trace->formatDetail);
            break;
        }
        case Kind::TorchSave: {
            std::vector<uint8_t> inflated;
            int64_t at = -1;
            size_t storages = 0;
            const auto pickle = torchSaveDataPickle(bytes, path, inflated, at, &storages);
            // Stored (at >= 0): an offset in data.pkl is one in the archive, shifted.
            readInside(
                [&] {
                    try {
                        readSnapshotPickle(pickle, path, *trace, options, progress);
                    } catch (const LoadError& e) {
                        // A model or a checkpoint saved the same way: its pickle rebuilds objects, its
                        // archive holds their tensors. Say what it is before what the reader refused.
                        if (e.code() != LoadErrorCode::CodeExecution)
                            throw;
                        throw LoadError(LoadErrorCode::UnknownFormat, e.file(), e.offset(),
                                        "a torch.save archive of objects (" + std::to_string(storages) +
                                            " tensor storages: a model or a checkpoint?), not an allocator snapshot: " + e.message());
                    }
                },
                at, "(offset in the inflated data.pkl of the torch.save archive) ");
            trace->format = SourceFormat::SnapshotPickle;
            trace->formatDetail = "torch.save zip archive, " + (trace->formatDetail.empty() ? std::string("pickle") : trace->formatDetail);
            break;
        }
        case Kind::SnapshotJson:
            readSnapshotJson(bytes, path, *trace, options, progress);
            trace->format = SourceFormat::SnapshotJson;
            if (trace->formatDetail.empty())
                trace->formatDetail = "JSON";
            break;
        case Kind::Kineto:
            readKinetoTrace(bytes, path, *trace, options, progress);
            trace->format = SourceFormat::KinetoTrace;
            trace->formatDetail = bytes[textStart] == '[' ? "Chrome trace JSON (bare event array)" : "Chrome trace JSON";
            break;
        case Kind::TimelineRaw:
            readMemoryTimelineRaw(bytes, path, *trace, options, progress);
            trace->format = SourceFormat::MemoryTimelineRaw;
            trace->formatDetail = "export_memory_timeline raw JSON";
            break;
        }
    } catch (const LoadError& e) {
        // The model build (finalizeDevice) knows no file name: name the file here.
        if (e.file().empty())
            throw LoadError(e.code(), path, e.offset(), e.message());
        // Readers see decompressed bytes: say so, or the offset would be read as one in the file.
        if (!compressed || e.offset() < 0 || e.code() == LoadErrorCode::Cancelled || e.message().starts_with("(offset"))
            throw;
        throw LoadError(e.code(), e.file(), e.offset(), "(offset in the decompressed data) " + e.message());
    }
    trace->formatDetail += compressionSuffix(input->compression);
    progress.stage.store(int(LoadStage::Done), std::memory_order_relaxed);
    return trace;
}

std::shared_ptr<const Trace> load(const std::string& path)
{
    Progress progress;
    return load(path, LoadOptions{}, progress);
}

} // namespace poolscope
