#include "core/formats/zstd_output.h"

#include "core/util/atomic_file.h"

#include <zstd.h>

namespace poolscope {
namespace {

class ZstdCodec final : public OutputCodec {
public:
    ZstdCodec(int level, const std::string& path) : m_cctx(ZSTD_createCCtx())
    {
        if (!m_cctx)
            throw WriteError((path.empty() ? std::string() : path + ": ") + "zstd: cannot create a compression context");
        ZSTD_CCtx_setParameter(m_cctx, ZSTD_c_compressionLevel, level);
        // Uses a second core where libzstd was built with threads; ignored otherwise.
        ZSTD_CCtx_setParameter(m_cctx, ZSTD_c_nbWorkers, 2);
        m_out.resize(ZSTD_CStreamOutSize());
    }
    ~ZstdCodec() override { ZSTD_freeCCtx(m_cctx); }
    ZstdCodec(const ZstdCodec&) = delete;
    ZstdCodec& operator=(const ZstdCodec&) = delete;

    const char* name() const override { return "zstd"; }
    size_t inputBufferSize() const override { return ZSTD_CStreamInSize() * 4; }

    std::string compress(const char* data, size_t size, bool end, std::ostream& emit) override
    {
        ZSTD_inBuffer in{data, size, 0};
        for (;;) {
            ZSTD_outBuffer out{m_out.data(), m_out.size(), 0};
            const size_t left = ZSTD_compressStream2(m_cctx, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
            if (ZSTD_isError(left))
                return ZSTD_getErrorName(left);
            emit.write(m_out.data(), std::streamsize(out.pos));
            // Continuing: done once the input is taken. Ending: done once zstd has nothing left to flush.
            if (end ? left == 0 : in.pos == in.size)
                return {};
        }
    }

private:
    ZSTD_CCtx* m_cctx;
    std::vector<char> m_out;
};

} // namespace

ZstdOutputBuffer::ZstdOutputBuffer(std::ostream& sink, std::string path, int level)
    : CompressedOutputBuffer(sink, std::make_unique<ZstdCodec>(level, path), path)
{
}

} // namespace poolscope
