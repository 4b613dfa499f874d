#include "core/formats/zstd_output.h"

#include <stdexcept>
#include <string>
#include <zstd.h>

namespace poolscope {

struct ZstdOutputBuffer::Ctx {
    ZSTD_CCtx* cctx = nullptr;
    ~Ctx() { ZSTD_freeCCtx(cctx); }
};

ZstdOutputBuffer::ZstdOutputBuffer(std::ostream& sink, int level) : m_ctx(std::make_unique<Ctx>()), m_sink(sink)
{
    m_ctx->cctx = ZSTD_createCCtx();
    if (!m_ctx->cctx)
        throw std::runtime_error("zstd: cannot create a compression context");
    ZSTD_CCtx_setParameter(m_ctx->cctx, ZSTD_c_compressionLevel, level);
    // Uses a second core where libzstd was built with threads; ignored otherwise.
    ZSTD_CCtx_setParameter(m_ctx->cctx, ZSTD_c_nbWorkers, 2);
    m_in.resize(ZSTD_CStreamInSize() * 4);
    m_out.resize(ZSTD_CStreamOutSize());
    setp(m_in.data(), m_in.data() + m_in.size());
}

ZstdOutputBuffer::~ZstdOutputBuffer()
{
    try {
        close();
    } catch (...) {
    }
}

void ZstdOutputBuffer::compress(const char* data, size_t size, bool end)
{
    ZSTD_inBuffer in{data, size, 0};
    for (;;) {
        ZSTD_outBuffer out{m_out.data(), m_out.size(), 0};
        const size_t left = ZSTD_compressStream2(m_ctx->cctx, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(left))
            throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(left));
        m_sink.write(m_out.data(), std::streamsize(out.pos));
        if (end ? left == 0 : in.pos == in.size)
            break;
    }
}

ZstdOutputBuffer::int_type ZstdOutputBuffer::overflow(int_type ch)
{
    compress(pbase(), size_t(pptr() - pbase()), false);
    setp(m_in.data(), m_in.data() + m_in.size());
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
        *pptr() = traits_type::to_char_type(ch);
        pbump(1);
    }
    return traits_type::not_eof(ch);
}

std::streamsize ZstdOutputBuffer::xsputn(const char* s, std::streamsize n)
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

int ZstdOutputBuffer::sync()
{
    return 0; // nothing to push early: the frame is finished by close()
}

void ZstdOutputBuffer::close()
{
    if (m_closed)
        return;
    m_closed = true;
    compress(pbase(), size_t(pptr() - pbase()), true);
    setp(m_in.data(), m_in.data() + m_in.size());
    m_sink.flush();
}

} // namespace poolscope
