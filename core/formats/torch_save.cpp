#include "core/formats/torch_save.h"

#include "core/formats/pickle_vm.h"
#include "core/util/load_error.h"

#include <zlib.h>

#include <algorithm>
#include <string_view>

namespace poolscope {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEnd = 0x06054b50, kEnd64 = 0x06064b50,
                   kEnd64Locator = 0x07064b50;
constexpr uint64_t kMaxInflated = uint64_t(16) << 30; // a snapshot pickle past 16 GiB is no snapshot

struct Reader {
    std::span<const uint8_t> bytes;
    const std::string& path;

    [[noreturn]] void fail(LoadErrorCode code, uint64_t at, const std::string& what) const
    {
        throw LoadError(code, path, int64_t(at), "torch.save zip archive: " + what);
    }
    void need(uint64_t at, uint64_t n, const char* what) const
    {
        if (at > bytes.size() || n > bytes.size() - at)
            fail(LoadErrorCode::Truncated, at, std::string(what) + " runs past the end of the file (" + std::to_string(bytes.size()) + " bytes)");
    }
    uint16_t u16(uint64_t at) const { return uint16_t(bytes[at] | bytes[at + 1] << 8); }
    uint32_t u32(uint64_t at) const { return uint32_t(u16(at)) | uint32_t(u16(at + 2)) << 16; }
    uint64_t u64(uint64_t at) const { return uint64_t(u32(at)) | uint64_t(u32(at + 4)) << 32; }
};

struct Entry {
    std::string name;
    uint16_t method = 0;
    uint64_t compressed = 0, size = 0, localHeader = 0;
    uint64_t at = 0; // of its central directory record
};

// The end of central directory record: the last signature within its 64 KiB comment's reach.
uint64_t findEnd(const Reader& r)
{
    const size_t n = r.bytes.size();
    if (n < 22)
        r.fail(LoadErrorCode::Truncated, n, "no end of central directory record (the archive is cut short)");
    const size_t lowest = n > 22 + 0xFFFF ? n - 22 - 0xFFFF : 0;
    for (size_t at = n - 22 + 1; at-- > lowest;)
        if (r.u32(at) == kEnd)
            return at;
    r.fail(LoadErrorCode::Truncated, n, "no end of central directory record (the archive is cut short)");
}

std::vector<Entry> centralDirectory(const Reader& r)
{
    const uint64_t end = findEnd(r);
    uint64_t count = r.u16(end + 10), offset = r.u32(end + 16);
    if (count == 0xFFFF || offset == 0xFFFFFFFF) { // zip64: the locator sits just before the record
        if (end < 20 || r.u32(end - 20) != kEnd64Locator)
            r.fail(LoadErrorCode::Malformed, end, "a zip64 archive without its zip64 end record locator");
        const uint64_t end64 = r.u64(end - 20 + 8);
        r.need(end64, 56, "the zip64 end of central directory record");
        if (r.u32(end64) != kEnd64)
            r.fail(LoadErrorCode::Malformed, end64, "expected the zip64 end of central directory record here");
        count = r.u64(end64 + 32);
        offset = r.u64(end64 + 48);
    }
    std::vector<Entry> out;
    uint64_t at = offset;
    for (uint64_t k = 0; k < count; ++k) {
        r.need(at, 46, "a central directory record");
        if (r.u32(at) != kCentralHeader)
            r.fail(LoadErrorCode::Malformed, at, "expected central directory record " + std::to_string(k + 1) + " of " + std::to_string(count) + " here");
        Entry e;
        e.at = at;
        e.method = r.u16(at + 10);
        e.compressed = r.u32(at + 20);
        e.size = r.u32(at + 24);
        const uint16_t nameLen = r.u16(at + 28), extraLen = r.u16(at + 30), commentLen = r.u16(at + 32);
        e.localHeader = r.u32(at + 42);
        r.need(at + 46, uint64_t(nameLen) + extraLen + commentLen, "a central directory record's name and extra fields");
        e.name.assign(reinterpret_cast<const char*>(r.bytes.data() + at + 46), nameLen);
        // zip64 extended information: the 64-bit values of the fields set to all ones, in order.
        for (uint64_t x = at + 46 + nameLen, xEnd = x + extraLen; x + 4 <= xEnd;) {
            const uint16_t id = r.u16(x), len = r.u16(x + 2);
            uint64_t v = x + 4;
            if (id == 0x0001) {
                for (uint64_t* field : {&e.size, &e.compressed, &e.localHeader})
                    if (*field == 0xFFFFFFFF && v + 8 <= x + 4 + len && v + 8 <= xEnd) {
                        *field = r.u64(v);
                        v += 8;
                    }
            }
            x += 4 + uint64_t(len);
        }
        out.push_back(std::move(e));
        at += 46 + uint64_t(nameLen) + extraLen + commentLen;
    }
    return out;
}

std::vector<uint8_t> inflateRaw(const Reader& r, uint64_t at, uint64_t compressed, uint64_t size)
{
    if (size > kMaxInflated)
        r.fail(LoadErrorCode::LimitExceeded, at, "data.pkl declares " + std::to_string(size) + " bytes inflated, past the 16 GiB limit");
    // Deflate cannot expand past about 1032:1: a larger declared size is a lie, and the buffer below
    // is allocated before inflating.
    if (size > compressed * 1032 + 1024)
        r.fail(LoadErrorCode::Malformed, at,
               "data.pkl declares " + std::to_string(size) + " bytes inflated from " + std::to_string(compressed) + " (past deflate's 1032:1)");
    std::vector<uint8_t> out(static_cast<size_t>(size));
    z_stream zs{};
    if (inflateInit2(&zs, -15) != Z_OK)
        r.fail(LoadErrorCode::ReadFailed, at, "cannot start a deflate stream");
    zs.next_in = const_cast<Bytef*>(r.bytes.data() + at);
    zs.avail_in = uInt(std::min<uint64_t>(compressed, UINT32_MAX));
    zs.next_out = out.data();
    zs.avail_out = uInt(std::min<uint64_t>(size, UINT32_MAX));
    const int rc = inflate(&zs, Z_FINISH);
    const uint64_t produced = zs.total_out, consumed = zs.total_in;
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || produced != size)
        r.fail(LoadErrorCode::Malformed, at + consumed,
               "data.pkl's deflate stream does not inflate to the " + std::to_string(size) + " bytes its directory declares (zlib " +
                   std::to_string(rc) + " after " + std::to_string(produced) + " bytes)");
    return out;
}

} // namespace

std::span<const uint8_t> torchSaveDataPickle(std::span<const uint8_t> zip, const std::string& nameForErrors, std::vector<uint8_t>& inflated,
                                             int64_t& dataOffset, size_t* storages)
{
    const Reader r{zip, nameForErrors};
    const std::vector<Entry> entries = centralDirectory(r);
    if (storages)
        *storages = size_t(std::count_if(entries.begin(), entries.end(), [](const Entry& e) {
            const size_t at = e.name.find("/data/");
            return e.name.starts_with("data/") || (at != std::string::npos && e.name.find('/') == at);
        }));
    // The archive's one pickle: "<name>/data.pkl" (torch.save) or "data.pkl" (a tool that flattened it).
    const auto it = std::find_if(entries.begin(), entries.end(), [](const Entry& e) {
        const std::string_view n(e.name);
        return n == "data.pkl" || n.ends_with("/data.pkl");
    });
    if (it == entries.end()) {
        std::string held;
        for (size_t k = 0; k < entries.size() && k < 8; ++k)
            held += (k ? ", " : "") + entries[k].name;
        if (entries.size() > 8)
            held += ", ...";
        r.fail(LoadErrorCode::UnknownFormat, 0,
               "no data.pkl in its " + std::to_string(entries.size()) + " entries (" + (held.empty() ? std::string("none") : held) +
                   "): not what torch.save writes");
    }
    const Entry& e = *it;
    r.need(e.localHeader, 30, "data.pkl's local header");
    if (r.u32(e.localHeader) != kLocalHeader)
        r.fail(LoadErrorCode::Malformed, e.localHeader, "expected data.pkl's local header here (its central directory record at byte " + std::to_string(e.at) + " points to it)");
    const uint64_t data = e.localHeader + 30 + r.u16(e.localHeader + 26) + r.u16(e.localHeader + 28);
    r.need(data, e.compressed, "data.pkl");
    switch (e.method) {
    case 0:
        if (e.compressed != e.size)
            r.fail(LoadErrorCode::Malformed, e.at, "data.pkl is stored, but its directory declares " + std::to_string(e.compressed) + " bytes stored and " + std::to_string(e.size) + " uncompressed");
        dataOffset = int64_t(data);
        return zip.subspan(size_t(data), size_t(e.size));
    case 8:
        dataOffset = -1;
        inflated = inflateRaw(r, data, e.compressed, e.size);
        return inflated;
    default:
        r.fail(LoadErrorCode::UnsupportedVersion, e.at, "data.pkl is compressed with zip method " + std::to_string(e.method) + " (only stored and deflate are read)");
    }
}

namespace {
// PROTO 2, LONG1 of 10 bytes (0x1950a86a20f9469cfc6c, little-endian), STOP.
constexpr uint8_t kLegacyMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};
} // namespace

bool isLegacyTorchSave(std::span<const uint8_t> bytes)
{
    return bytes.size() >= sizeof(kLegacyMagic) && std::equal(std::begin(kLegacyMagic), std::end(kLegacyMagic), bytes.begin());
}

size_t legacyTorchSaveObjectOffset(std::span<const uint8_t> bytes, const std::string& nameForErrors, const LoadOptions& options)
{
    size_t at = sizeof(kLegacyMagic);
    for (const char* what : {"the protocol version", "the writer's type sizes"}) {
        ValueArena arena(options.memoryBudgetBytes);
        try {
            at += size_t(runPickle(bytes.subspan(at), nameForErrors, arena, nullptr, options, nullptr).stopOffset);
        } catch (const LoadError& e) {
            throw LoadError(e.code(), nameForErrors, e.offset() < 0 ? int64_t(at) : int64_t(at) + e.offset(),
                            std::string("legacy torch.save file, ") + what + ": " + e.message());
        }
    }
    return at;
}

} // namespace poolscope
