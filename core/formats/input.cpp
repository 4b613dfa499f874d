#include "core/formats/input.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace poolscope {
namespace {

// A tiny compressed file may legitimately expand past ratio x size (a 200-byte gzip of a 60 KB
// JSON fixture); bombs are about gigabytes, so allow at least this much before the ratio applies.
constexpr int64_t kMinDecodeAllowance = int64_t(1) << 20;
constexpr size_t kInitialCapacity = size_t(1) << 16;
constexpr size_t kInputChunk = size_t(1) << 20; // progress/cancel granularity in compressed bytes

// Plain files: the kernel pages them in on demand, nothing is copied.
class MappedBuffer final : public InputBuffer {
public:
    MappedBuffer(void* base, size_t size) : m_base(base), m_size(size) {}
    ~MappedBuffer() override
    {
        if (m_base)
            ::munmap(m_base, m_size);
    }
    MappedBuffer(const MappedBuffer&) = delete;
    MappedBuffer& operator=(const MappedBuffer&) = delete;
    std::span<const uint8_t> bytes() const override { return {static_cast<const uint8_t*>(m_base), m_size}; }
    void releaseBefore(size_t offset) const override
    {
        populateAhead(offset);
        // Whole pages only, and a margin behind the reader: a value being parsed may start just before.
        const auto page = size_t(::sysconf(_SC_PAGESIZE));
        const size_t keep = size_t(1) << 20;
        if (offset <= keep)
            return;
        const size_t end = std::min(offset - keep, m_size) / page * page;
        if (end <= m_released)
            return;
        ::madvise(static_cast<uint8_t*>(m_base) + m_released, end - m_released, MADV_DONTNEED);
        m_released = end;
    }

    // Maps the cached pages of the next stretch in one call: a page fault per 64 KiB (the kernel's
    // fault-around) cost an exception and a page-table walk each, ~8 % of a 1M-entry parse.
    void populateAhead(size_t offset) const
    {
#ifdef MADV_POPULATE_READ
        const auto page = size_t(::sysconf(_SC_PAGESIZE));
        const size_t from = std::max(offset, m_populated) / page * page;
        const size_t to = std::min(m_size, offset + kPopulateAhead);
        if (from >= to || !m_populateWorks)
            return;
        if (::madvise(static_cast<uint8_t*>(m_base) + from, to - from, MADV_POPULATE_READ) != 0)
            m_populateWorks = false; // an old kernel: faults as before
        m_populated = to;
#else
        (void)offset;
#endif
    }
    static constexpr size_t kPopulateAhead = size_t(8) << 20; // the reader calls every 4 MiB

private:
    void* m_base;
    size_t m_size;
    mutable size_t m_released = 0; // [0, m_released) has been given back
    mutable size_t m_populated = 0;
    mutable bool m_populateWorks = true;
};

// Decoded bytes in a malloc'd block: realloc lets glibc grow big blocks with mremap, so growing a
// 1 GB buffer does not need 2 GB at the moment of the copy.
class OwnedBuffer final : public InputBuffer {
public:
    OwnedBuffer() = default;
    ~OwnedBuffer() override { std::free(m_data); }
    OwnedBuffer(const OwnedBuffer&) = delete;
    OwnedBuffer& operator=(const OwnedBuffer&) = delete;
    std::span<const uint8_t> bytes() const override { return {m_data, m_size}; }

    uint8_t* data() { return m_data; }
    size_t size() const { return m_size; }
    size_t capacity() const { return m_capacity; }
    void setSize(size_t n) { m_size = n; }
    void reserve(size_t n)
    {
        if (n <= m_capacity)
            return;
        auto* p = static_cast<uint8_t*>(std::realloc(m_data, std::max<size_t>(n, 1)));
        if (!p)
            throw std::bad_alloc();
        m_data = p;
        m_capacity = n;
    }
    void shrinkToFit()
    {
        if (m_size == 0 || m_size == m_capacity)
            return;
        if (auto* p = static_cast<uint8_t*>(std::realloc(m_data, m_size))) {
            m_data = p;
            m_capacity = m_size;
        }
    }

private:
    uint8_t* m_data = nullptr;
    size_t m_size = 0;
    size_t m_capacity = 0;
};

std::string humanBytes(int64_t n)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(n);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

// Grows the output buffer of a streaming decoder and enforces the decode limit.
class OutputSink {
public:
    OutputSink(OwnedBuffer& out, const std::string& name, int64_t inputSize, const LoadOptions& options)
        : m_out(out), m_name(name)
    {
        const int64_t byRatio = std::max(kMinDecodeAllowance, inputSize * std::max<int64_t>(1, options.maxDecompressionRatio));
        m_limit = std::min(byRatio, options.memoryBudgetBytes);
        m_limitIsBudget = options.memoryBudgetBytes <= byRatio;
        m_ratio = options.maxDecompressionRatio;
        m_budget = options.memoryBudgetBytes;
    }

    void reserveHint(int64_t expected)
    {
        if (expected > m_limit)
            fail(expected, true);
        if (expected > 0)
            m_out.reserve(size_t(expected));
    }

    // Reserves up to `expected` bytes without judging it (gzip's ISIZE can lie or wrap).
    void reserveSoft(int64_t expected)
    {
        if (expected > 0)
            m_out.reserve(size_t(std::min(expected, m_limit)));
    }

    // A writable window of at least one byte after the current end. Capacity stops at limit + 1, so a
    // stream of exactly `limit` bytes fits and one byte more is caught in commit().
    std::span<uint8_t> window()
    {
        if (m_out.size() == m_out.capacity()) {
            const size_t grown = std::max(kInitialCapacity, m_out.capacity() + m_out.capacity() / 2);
            m_out.reserve(size_t(std::min<int64_t>(int64_t(grown), m_limit + 1)));
        }
        return {m_out.data() + m_out.size(), m_out.capacity() - m_out.size()};
    }
    void commit(size_t n)
    {
        m_out.setSize(m_out.size() + n);
        if (int64_t(m_out.size()) > m_limit)
            fail(int64_t(m_out.size()), false);
    }

private:
    [[noreturn]] void fail(int64_t atLeast, bool declared) const
    {
        std::string msg = declared ? "the compressed stream declares " + humanBytes(atLeast) + " of data, "
                                   : "decompressed data exceeds ";
        if (m_limitIsBudget)
            msg += (declared ? "more than " : "") + std::string("the memory budget of ") + humanBytes(m_budget) +
                   " (LoadOptions::memoryBudgetBytes)";
        else
            msg += (declared ? "more than " : "") + std::to_string(m_ratio) +
                   " x the compressed size, " + humanBytes(m_limit) +
                   " (LoadOptions::maxDecompressionRatio); refusing a possible decompression bomb";
        throw LoadError(LoadErrorCode::LimitExceeded, m_name, -1, msg);
    }

    OwnedBuffer& m_out;
    const std::string& m_name;
    int64_t m_limit = 0;
    bool m_limitIsBudget = false;
    int64_t m_ratio = 0;
    int64_t m_budget = 0;
};

void checkCancel(Progress& progress, const std::string& name, int64_t offset)
{
    if (progress.cancel.load(std::memory_order_relaxed))
        throw LoadError(LoadErrorCode::Cancelled, name, offset, "loading was cancelled");
}

void decodeZstd(std::span<const uint8_t> in, const std::string& name, OutputSink& sink, Progress& progress)
{
    const unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != ZSTD_CONTENTSIZE_ERROR && declared < (1ull << 62))
        sink.reserveHint(int64_t(declared));

    struct DCtxFree {
        void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
    };
    std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx(ZSTD_createDCtx());
    if (!ctx)
        throw std::bad_alloc();

    size_t pending = 1; // ZSTD's hint: 0 once a frame is complete and fully flushed
    size_t pos = 0;
    while (pos < in.size() || pending != 0) {
        checkCancel(progress, name, int64_t(pos));
        const size_t chunkEnd = std::min(in.size(), pos + kInputChunk);
        ZSTD_inBuffer input{in.data(), chunkEnd, pos};
        const size_t before = input.pos;
        auto win = sink.window();
        ZSTD_outBuffer output{win.data(), win.size(), 0};
        pending = ZSTD_decompressStream(ctx.get(), &output, &input);
        if (ZSTD_isError(pending))
            throw LoadError(LoadErrorCode::Malformed, name, int64_t(input.pos),
                            std::string("corrupt zstd stream: ") + ZSTD_getErrorName(pending));
        sink.commit(output.pos);
        pos = input.pos;
        progress.bytesDone.store(int64_t(pos), std::memory_order_relaxed);
        // No input consumed and no output produced with input exhausted: the frame is cut short.
        if (pos == in.size() && pending != 0 && input.pos == before && output.pos == 0)
            throw LoadError(LoadErrorCode::Truncated, name, int64_t(in.size()),
                            "zstd stream ends in the middle of a frame (file truncated?)");
    }
}

bool allZero(std::span<const uint8_t> s)
{
    return std::all_of(s.begin(), s.end(), [](uint8_t b) { return b == 0; });
}

void decodeGzip(std::span<const uint8_t> in, const std::string& name, OutputSink& sink, Progress& progress)
{
    // ISIZE of the last member: the size mod 2^32 for single-member files; only a reservation hint.
    if (in.size() >= 18) {
        const uint8_t* t = in.data() + in.size() - 4;
        const uint32_t isize = uint32_t(t[0]) | uint32_t(t[1]) << 8 | uint32_t(t[2]) << 16 | uint32_t(t[3]) << 24;
        sink.reserveSoft(int64_t(isize));
    }

    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) // 16: gzip wrapper only
        throw std::bad_alloc();
    struct Guard {
        z_stream* z;
        ~Guard() { inflateEnd(z); }
    } guard{&zs};

    const uint8_t* const base = in.data();
    const uint8_t* const end = base + in.size();
    const uint8_t* next = base;
    bool inMember = true;
    while (true) {
        checkCancel(progress, name, next - base);
        const size_t avail = size_t(end - next);
        const size_t chunk = std::min(avail, kInputChunk);
        zs.next_in = const_cast<Bytef*>(next);
        zs.avail_in = uInt(chunk);
        auto win = sink.window();
        const size_t outSize = std::min<size_t>(win.size(), size_t(1) << 30);
        zs.next_out = win.data();
        zs.avail_out = uInt(outSize);
        const int rc = inflate(&zs, Z_NO_FLUSH);
        sink.commit(outSize - zs.avail_out);
        next = zs.next_in;
        progress.bytesDone.store(int64_t(next - base), std::memory_order_relaxed);
        if (rc == Z_STREAM_END) {
            inMember = false;
            const std::span<const uint8_t> rest(next, size_t(end - next));
            if (rest.empty())
                break;
            if (rest.size() >= 2 && rest[0] == 0x1f && rest[1] == 0x8b) {
                inflateReset(&zs); // another member (concatenated .gz files, pigz, bgzip)
                inMember = true;
                continue;
            }
            if (allZero(rest))
                break; // zero padding after the last member (tape/blocked output): gzip ignores it too
            throw LoadError(LoadErrorCode::Malformed, name, next - base,
                            "unexpected data after the end of the gzip stream");
        }
        if (rc == Z_DATA_ERROR || rc == Z_STREAM_ERROR || rc == Z_NEED_DICT)
            throw LoadError(LoadErrorCode::Malformed, name, next - base,
                            std::string("corrupt gzip stream: ") + (zs.msg ? zs.msg : "invalid data"));
        if (rc == Z_MEM_ERROR)
            throw std::bad_alloc();
        // Z_OK or Z_BUF_ERROR: progress was made, or more input/output is needed.
        if (next == end && zs.avail_out != 0)
            break; // all input consumed, output not full, stream not ended: truncated
    }
    if (inMember)
        throw LoadError(LoadErrorCode::Truncated, name, int64_t(in.size()),
                        "gzip stream ends before its end marker (file truncated?)");
}

std::unique_ptr<InputBuffer> decode(std::span<const uint8_t> data, Compression kind, const std::string& name,
                                    const LoadOptions& options, Progress& progress)
{
    auto out = std::make_unique<OwnedBuffer>();
    out->compression = kind;
    out->fileSize = int64_t(data.size());
    progress.stage.store(int(LoadStage::Decompressing), std::memory_order_relaxed);
    progress.bytesTotal.store(int64_t(data.size()), std::memory_order_relaxed);
    progress.bytesDone.store(0, std::memory_order_relaxed);
    OutputSink sink(*out, name, int64_t(data.size()), options);
    if (kind == Compression::Zstd)
        decodeZstd(data, name, sink, progress);
    else
        decodeGzip(data, name, sink, progress);
    out->shrinkToFit();
    return out;
}

std::unique_ptr<InputBuffer> copyPlain(std::span<const uint8_t> data, const std::string& name, const LoadOptions& options)
{
    if (int64_t(data.size()) > options.memoryBudgetBytes)
        throw LoadError(LoadErrorCode::LimitExceeded, name, -1,
                        "input of " + humanBytes(int64_t(data.size())) + " exceeds the memory budget of " +
                            humanBytes(options.memoryBudgetBytes) + " (LoadOptions::memoryBudgetBytes)");
    auto out = std::make_unique<OwnedBuffer>();
    out->reserve(data.size());
    if (!data.empty())
        std::memcpy(out->data(), data.data(), data.size());
    out->setSize(data.size());
    out->fileSize = int64_t(data.size());
    return out;
}

} // namespace

Compression sniffCompression(std::span<const uint8_t> head)
{
    if (head.size() >= 4 && head[0] == 0x28 && head[1] == 0xB5 && head[2] == 0x2F && head[3] == 0xFD)
        return Compression::Zstd;
    if (head.size() >= 2 && head[0] == 0x1F && head[1] == 0x8B)
        return Compression::Gzip;
    return Compression::None;
}

std::unique_ptr<InputBuffer> decodeBuffer(std::span<const uint8_t> data, const std::string& nameForErrors,
                                          const LoadOptions& options, Progress& progress)
{
    const Compression kind = sniffCompression(data);
    if (kind == Compression::None) {
        auto out = copyPlain(data, nameForErrors, options);
        progress.bytesTotal.store(int64_t(data.size()), std::memory_order_relaxed);
        progress.bytesDone.store(int64_t(data.size()), std::memory_order_relaxed);
        return out;
    }
    return decode(data, kind, nameForErrors, options, progress);
}

std::unique_ptr<InputBuffer> openInput(const std::string& path, const LoadOptions& options, Progress& progress)
{
    progress.stage.store(int(LoadStage::Reading), std::memory_order_relaxed);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        throw LoadError(err == ENOENT ? LoadErrorCode::FileNotFound : LoadErrorCode::ReadFailed, path, -1,
                        std::string("cannot open: ") + std::strerror(err));
    }
    struct FdGuard {
        int fd;
        ~FdGuard() { ::close(fd); }
    } fdGuard{fd};

    struct stat st{};
    if (::fstat(fd, &st) != 0)
        throw LoadError(LoadErrorCode::ReadFailed, path, -1, std::string("cannot stat: ") + std::strerror(errno));
    if (S_ISDIR(st.st_mode))
        throw LoadError(LoadErrorCode::ReadFailed, path, -1, "is a directory, expected a dump file");
    if (!S_ISREG(st.st_mode))
        throw LoadError(LoadErrorCode::ReadFailed, path, -1, "is not a regular file");

    const auto size = size_t(st.st_size);
    progress.bytesTotal.store(int64_t(size), std::memory_order_relaxed);
    if (size == 0) {
        auto empty = std::make_unique<OwnedBuffer>();
        return empty;
    }
    void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED)
        throw LoadError(LoadErrorCode::ReadFailed, path, -1, std::string("cannot map: ") + std::strerror(errno));
    auto mapped = std::make_unique<MappedBuffer>(base, size);
    mapped->fileSize = int64_t(size);
    const auto bytes = mapped->bytes();
    const Compression kind = sniffCompression(bytes);
    if (kind == Compression::None) {
        if (int64_t(size) > options.memoryBudgetBytes)
            throw LoadError(LoadErrorCode::LimitExceeded, path, -1,
                            "file of " + humanBytes(int64_t(size)) + " exceeds the memory budget of " +
                                humanBytes(options.memoryBudgetBytes) + " (LoadOptions::memoryBudgetBytes)");
        ::madvise(base, size, MADV_SEQUENTIAL);
        mapped->populateAhead(0);
        progress.bytesDone.store(int64_t(size), std::memory_order_relaxed);
        return mapped;
    }
    ::madvise(base, size, MADV_SEQUENTIAL);
    return decode(bytes, kind, path, options, progress); // the mapping is released when `mapped` goes
}

} // namespace poolscope
