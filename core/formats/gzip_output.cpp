#include "core/formats/gzip_output.h"

#include "core/util/atomic_file.h"

#include <algorithm>
#include <zlib.h>

namespace poolscope {
namespace {

class GzipCodec final : public OutputCodec {
public:
    GzipCodec(int level, const std::string& path)
    {
        // windowBits 15 + 16: a gzip header and trailer around the deflate stream.
        if (deflateInit2(&m_z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            throw WriteError((path.empty() ? std::string() : path + ": ") + "gzip: cannot create a compression stream");
        m_out.resize(1 << 18);
    }
    ~GzipCodec() override { deflateEnd(&m_z); }
    GzipCodec(const GzipCodec&) = delete;
    GzipCodec& operator=(const GzipCodec&) = delete;

    const char* name() const override { return "gzip"; }
    size_t inputBufferSize() const override { return 1 << 18; }

    std::string compress(const char* data, size_t size, bool end, std::ostream& emit) override
    {
        // zlib counts in uInt: feed a huge write in pieces.
        do {
            const size_t piece = std::min<size_t>(size, 1u << 30);
            m_z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
            m_z.avail_in = uInt(piece);
            data += piece;
            size -= piece;
            const int flush = end && size == 0 ? Z_FINISH : Z_NO_FLUSH;
            for (;;) {
                m_z.next_out = reinterpret_cast<Bytef*>(m_out.data());
                m_z.avail_out = uInt(m_out.size());
                const int rc = deflate(&m_z, flush);
                if (rc == Z_STREAM_ERROR)
                    return m_z.msg ? m_z.msg : "inconsistent deflate stream";
                emit.write(m_out.data(), std::streamsize(m_out.size() - m_z.avail_out));
                // Finishing: done at the stream's end. Otherwise: done once the input is taken and
                // deflate had room to spare (nothing pending).
                if (flush == Z_FINISH ? rc == Z_STREAM_END : (m_z.avail_in == 0 && m_z.avail_out != 0))
                    break;
            }
        } while (size > 0);
        return {};
    }

private:
    z_stream m_z{};
    std::vector<char> m_out;
};

} // namespace

GzipOutputBuffer::GzipOutputBuffer(std::ostream& sink, std::string path, int level)
    : CompressedOutputBuffer(sink, std::make_unique<GzipCodec>(level, path), path)
{
}

} // namespace poolscope
