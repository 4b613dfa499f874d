#include "core/formats/gzip_output.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <zlib.h>

namespace poolscope {

struct GzipOutputBuffer::Ctx {
    z_stream z{};
    bool open = false;
    ~Ctx()
    {
        if (open)
            deflateEnd(&z);
    }
};

GzipOutputBuffer::GzipOutputBuffer(std::ostream& sink, int level) : m_ctx(std::make_unique<Ctx>()), m_sink(sink)
{
    // windowBits 15 + 16: a gzip header and trailer around the deflate stream.
    if (deflateInit2(&m_ctx->z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("gzip: cannot create a compression stream");
    m_ctx->open = true;
    m_in.resize(1 << 18);
    m_out.resize(1 << 18);
    setp(m_in.data(), m_in.data() + m_in.size());
}

GzipOutputBuffer::~GzipOutputBuffer()
{
    try {
        close();
    } catch (...) {
    }
}

void GzipOutputBuffer::compress(const char* data, size_t size, bool end)
{
    z_stream& z = m_ctx->z;
    // zlib counts in uInt: feed a huge write in pieces.
    do {
        const size_t piece = std::min<size_t>(size, 1u << 30);
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
        z.avail_in = uInt(piece);
        data += piece;
        size -= piece;
        const int flush = end && size == 0 ? Z_FINISH : Z_NO_FLUSH;
        for (;;) {
            z.next_out = reinterpret_cast<Bytef*>(m_out.data());
            z.avail_out = uInt(m_out.size());
            const int rc = deflate(&z, flush);
            if (rc == Z_STREAM_ERROR)
                throw std::runtime_error("gzip: compression failed");
            m_sink.write(m_out.data(), std::streamsize(m_out.size() - z.avail_out));
            if (flush == Z_FINISH ? rc == Z_STREAM_END : (z.avail_in == 0 && z.avail_out != 0))
                break;
        }
    } while (size > 0);
}

GzipOutputBuffer::int_type GzipOutputBuffer::overflow(int_type ch)
{
    compress(pbase(), size_t(pptr() - pbase()), false);
    setp(m_in.data(), m_in.data() + m_in.size());
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
        *pptr() = traits_type::to_char_type(ch);
        pbump(1);
    }
    return traits_type::not_eof(ch);
}

std::streamsize GzipOutputBuffer::xsputn(const char* s, std::streamsize n)
{
    if (n > epptr() - pptr()) {
        compress(pbase(), size_t(pptr() - pbase()), false);
        setp(m_in.data(), m_in.data() + m_in.size());
        if (n >= epptr() - pptr()) {
            compress(s, size_t(n), false);
            return n;
        }
    }
    traits_type::copy(pptr(), s, size_t(n));
    pbump(int(n));
    return n;
}

void GzipOutputBuffer::close()
{
    if (m_closed)
        return;
    m_closed = true;
    compress(pbase(), size_t(pptr() - pbase()), true);
    setp(m_in.data(), m_in.data() + m_in.size());
    m_sink.flush();
}

} // namespace poolscope
