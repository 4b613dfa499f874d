#pragma once
// Small helpers shared by the format tests: compress in-test with the real libraries, write files.
#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope::testutil {

using Bytes = std::vector<uint8_t>;

inline Bytes toBytes(std::string_view s) { return Bytes(s.begin(), s.end()); }

inline Bytes zstdCompress(const Bytes& in, int level = 3, bool checksum = true, bool declareSize = true)
{
    ZSTD_CCtx* ctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(ctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(ctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
    ZSTD_CCtx_setParameter(ctx, ZSTD_c_contentSizeFlag, declareSize ? 1 : 0);
    Bytes out(ZSTD_compressBound(in.size()));
    const size_t n = ZSTD_compress2(ctx, out.data(), out.size(), in.data(), in.size());
    ZSTD_freeCCtx(ctx);
    if (ZSTD_isError(n))
        throw std::runtime_error(ZSTD_getErrorName(n));
    out.resize(n);
    return out;
}

inline Bytes gzipCompress(const Bytes& in, int level = 6)
{
    z_stream zs{};
    if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("deflateInit2");
    Bytes out(deflateBound(&zs, uLong(in.size())) + 64);
    zs.next_in = const_cast<Bytef*>(in.data());
    zs.avail_in = uInt(in.size());
    zs.next_out = out.data();
    zs.avail_out = uInt(out.size());
    const int rc = deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    if (rc != Z_STREAM_END)
        throw std::runtime_error("deflate");
    return out;
}

inline void writeFile(const std::string& path, const Bytes& data)
{
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

// pickle.dumps(protocol=4) of a minimal snapshot: one segment (a 512-byte active block at 4096 and a
// free rest), device_traces [[alloc 500 at 4096, time_us 1000, frames [train.py:3 f]]].
inline Bytes snapshotPickle()
{
    static const char kPickle[] =
        "\x80\x04\x95\xc8\x01\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x08\x73\x65\x67\x6d\x65\x6e\x74\x73"
        "\x94\x5d\x94\x7d\x94\x28\x8c\x06\x64\x65\x76\x69\x63\x65\x94\x4b\x00\x8c\x07\x61\x64\x64\x72\x65"
        "\x73\x73\x94\x4d\x00\x10\x8c\x0a\x74\x6f\x74\x61\x6c\x5f\x73\x69\x7a\x65\x94\x4a\x00\x00\x20\x00"
        "\x8c\x0e\x61\x6c\x6c\x6f\x63\x61\x74\x65\x64\x5f\x73\x69\x7a\x65\x94\x4d\x00\x02\x8c\x0b\x61\x63"
        "\x74\x69\x76\x65\x5f\x73\x69\x7a\x65\x94\x4d\x00\x02\x8c\x0e\x72\x65\x71\x75\x65\x73\x74\x65\x64"
        "\x5f\x73\x69\x7a\x65\x94\x4d\xf4\x01\x8c\x06\x73\x74\x72\x65\x61\x6d\x94\x4b\x00\x8c\x0c\x73\x65"
        "\x67\x6d\x65\x6e\x74\x5f\x74\x79\x70\x65\x94\x8c\x05\x73\x6d\x61\x6c\x6c\x94\x8c\x0f\x73\x65\x67"
        "\x6d\x65\x6e\x74\x5f\x70\x6f\x6f\x6c\x5f\x69\x64\x94\x4b\x00\x4b\x00\x86\x94\x8c\x0d\x69\x73\x5f"
        "\x65\x78\x70\x61\x6e\x64\x61\x62\x6c\x65\x94\x89\x8c\x06\x66\x72\x61\x6d\x65\x73\x94\x5d\x94\x8c"
        "\x06\x62\x6c\x6f\x63\x6b\x73\x94\x5d\x94\x28\x7d\x94\x28\x68\x05\x4d\x00\x10\x8c\x04\x73\x69\x7a"
        "\x65\x94\x4d\x00\x02\x68\x09\x4d\xf4\x01\x8c\x05\x73\x74\x61\x74\x65\x94\x8c\x10\x61\x63\x74\x69"
        "\x76\x65\x5f\x61\x6c\x6c\x6f\x63\x61\x74\x65\x64\x94\x68\x10\x5d\x94\x7d\x94\x28\x8c\x08\x66\x69"
        "\x6c\x65\x6e\x61\x6d\x65\x94\x8c\x08\x74\x72\x61\x69\x6e\x2e\x70\x79\x94\x8c\x04\x6c\x69\x6e\x65"
        "\x94\x4b\x03\x8c\x04\x6e\x61\x6d\x65\x94\x8c\x01\x66\x94\x75\x61\x75\x7d\x94\x28\x68\x05\x4d\x00"
        "\x12\x68\x15\x4a\x00\xfe\x1f\x00\x68\x09\x4b\x00\x68\x16\x8c\x08\x69\x6e\x61\x63\x74\x69\x76\x65"
        "\x94\x68\x10\x5d\x94\x75\x65\x75\x61\x8c\x0d\x64\x65\x76\x69\x63\x65\x5f\x74\x72\x61\x63\x65\x73"
        "\x94\x5d\x94\x5d\x94\x7d\x94\x28\x8c\x06\x61\x63\x74\x69\x6f\x6e\x94\x8c\x05\x61\x6c\x6c\x6f\x63"
        "\x94\x8c\x04\x61\x64\x64\x72\x94\x4d\x00\x10\x68\x15\x4d\xf4\x01\x68\x0a\x4b\x00\x8c\x07\x74\x69"
        "\x6d\x65\x5f\x75\x73\x94\x4d\xe8\x03\x68\x10\x5d\x94\x7d\x94\x28\x68\x1a\x68\x1b\x68\x1c\x4b\x03"
        "\x68\x1d\x68\x1e\x75\x61\x75\x61\x61\x75\x2e"        ;
    return Bytes(reinterpret_cast<const uint8_t*>(kPickle), reinterpret_cast<const uint8_t*>(kPickle) + sizeof(kPickle) - 1);
}

// The page torch.cuda._memory_viz writes (template and padding as in _format_viz).
inline std::string memoryVizHtml(const Bytes& pickle)
{
    Bytes padded = pickle;
    padded.insert(padded.end(), 3 - pickle.size() % 3, 0);
    static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string b64;
    for (size_t i = 0; i < padded.size(); i += 3) {
        const uint32_t v = uint32_t(padded[i]) << 16 | uint32_t(i + 1 < padded.size() ? padded[i + 1] : 0) << 8 |
                           uint32_t(i + 2 < padded.size() ? padded[i + 2] : 0);
        b64 += kAlphabet[(v >> 18) & 63];
        b64 += kAlphabet[(v >> 12) & 63];
        b64 += i + 1 < padded.size() ? kAlphabet[(v >> 6) & 63] : '=';
        b64 += i + 2 < padded.size() ? kAlphabet[v & 63] : '=';
    }
    return "\n<!DOCTYPE html>\n<html>\n<head>\n</head>\n<body>\n<script type=\"module\">\n"
           "import {add_local_files} from \"https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js\"\n"
           "const local_files = [{\"name\": \"snapshot.pickle\", \"base64\": \"" +
           b64 + "\"}]\nadd_local_files(local_files, 'Active Memory Timeline')\n</script>\n</body>\n";
}

// A zip archive laid out as torch.save writes one (PyTorchStreamWriter: "<name>/data.pkl" and its
// companions, stored), built here with a minimal writer: `deflated` repacks each entry with deflate
// (as a zip tool might), `zip64` writes the zip64 end records and extra fields (as miniz does past
// 4 GiB), so that each path of the reader is exercised on a small file.
struct ZipEntry {
    std::string name;
    Bytes data;
};
inline Bytes zipArchive(const std::vector<ZipEntry>& entries, bool deflated = false, bool zip64 = false)
{
    Bytes out, central;
    auto put16 = [](Bytes& b, uint32_t v) { b.push_back(uint8_t(v)); b.push_back(uint8_t(v >> 8)); };
    auto put32 = [&](Bytes& b, uint32_t v) { put16(b, v & 0xFFFF); put16(b, v >> 16); };
    auto put64 = [&](Bytes& b, uint64_t v) { put32(b, uint32_t(v)); put32(b, uint32_t(v >> 32)); };
    for (const ZipEntry& e : entries) {
        Bytes data = e.data;
        if (deflated) {
            z_stream zs{};
            deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
            Bytes d(deflateBound(&zs, uLong(e.data.size())) + 64);
            zs.next_in = const_cast<Bytef*>(e.data.data());
            zs.avail_in = uInt(e.data.size());
            zs.next_out = d.data();
            zs.avail_out = uInt(d.size());
            deflate(&zs, Z_FINISH);
            d.resize(zs.total_out);
            deflateEnd(&zs);
            data = std::move(d);
        }
        const uint32_t crc = uint32_t(crc32(0, e.data.data(), uInt(e.data.size())));
        const uint32_t local = uint32_t(out.size());
        put32(out, 0x04034b50);
        put16(out, 20);
        put16(out, 0);
        put16(out, deflated ? 8 : 0);
        put32(out, 0);
        put32(out, crc);
        put32(out, uint32_t(data.size()));
        put32(out, uint32_t(e.data.size()));
        put16(out, uint16_t(e.name.size()));
        put16(out, 0);
        out.insert(out.end(), e.name.begin(), e.name.end());
        out.insert(out.end(), data.begin(), data.end());
        put32(central, 0x02014b50);
        put16(central, 45);
        put16(central, 20);
        put16(central, 0);
        put16(central, deflated ? 8 : 0);
        put32(central, 0);
        put32(central, crc);
        put32(central, zip64 ? 0xFFFFFFFF : uint32_t(data.size()));
        put32(central, zip64 ? 0xFFFFFFFF : uint32_t(e.data.size()));
        put16(central, uint16_t(e.name.size()));
        put16(central, zip64 ? 28 : 0);
        put16(central, 0);
        put16(central, 0);
        put16(central, 0);
        put32(central, 0);
        put32(central, zip64 ? 0xFFFFFFFF : local);
        central.insert(central.end(), e.name.begin(), e.name.end());
        if (zip64) { // uncompressed, compressed, local header offset: the order the fields come in
            put16(central, 0x0001);
            put16(central, 24);
            put64(central, e.data.size());
            put64(central, data.size());
            put64(central, local);
        }
    }
    const uint64_t cdOffset = out.size();
    out.insert(out.end(), central.begin(), central.end());
    if (zip64) {
        const uint64_t end64 = out.size();
        put32(out, 0x06064b50);
        put64(out, 44);
        put16(out, 45);
        put16(out, 45);
        put32(out, 0);
        put32(out, 0);
        put64(out, entries.size());
        put64(out, entries.size());
        put64(out, central.size());
        put64(out, cdOffset);
        put32(out, 0x07064b50);
        put32(out, 0);
        put64(out, end64);
        put32(out, 1);
    }
    put32(out, 0x06054b50);
    put16(out, 0);
    put16(out, 0);
    put16(out, zip64 ? 0xFFFF : uint16_t(entries.size()));
    put16(out, zip64 ? 0xFFFF : uint16_t(entries.size()));
    put32(out, uint32_t(central.size()));
    put32(out, zip64 ? 0xFFFFFFFF : uint32_t(cdOffset));
    put16(out, 0);
    return out;
}

} // namespace poolscope::testutil
