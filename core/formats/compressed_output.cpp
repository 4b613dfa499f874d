#include "core/formats/compressed_output.h"

#include "core/util/atomic_file.h"

#include <utility>

namespace poolscope {

CompressedOutputBuffer::CompressedOutputBuffer(std::ostream& sink, std::unique_ptr<OutputCodec> codec, std::string path)
    : m_codec(std::move(codec)), m_sink(sink), m_path(std::move(path))
{
    m_in.resize(m_codec->inputBufferSize());
    setp(m_in.data(), m_in.data() + m_in.size());
}

CompressedOutputBuffer::~CompressedOutputBuffer()
{
    try {
        close();
    } catch (...) {
    }
}

void CompressedOutputBuffer::compress(const char* data, size_t size, bool end)
{
    if (m_failure.empty()) {
        const std::string failure = m_sink ? m_codec->compress(data, size, end, m_sink) : std::string();
        const std::string what = (m_path.empty() ? std::string() : m_path + ": ") + m_codec->name();
        if (!failure.empty())
            m_failure = what + " compression failed: " + failure;
        else if (!m_sink)
            m_failure = what + " output could not be written (disk full, or the file was closed)";
    }
    if (!m_failure.empty())
        throw WriteError(m_failure);
}

void CompressedOutputBuffer::drain(bool end)
{
    compress(pbase(), size_t(pptr() - pbase()), end);
    setp(m_in.data(), m_in.data() + m_in.size());
}

CompressedOutputBuffer::int_type CompressedOutputBuffer::overflow(int_type ch)
{
    drain(false);
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
        *pptr() = traits_type::to_char_type(ch);
        pbump(1);
    }
    return traits_type::not_eof(ch);
}

std::streamsize CompressedOutputBuffer::xsputn(const char* s, std::streamsize n)
{
    if (n > epptr() - pptr()) {
        drain(false);
        // Larger than the whole buffer: compress it where it lies instead of copying it in pieces.
        if (n >= epptr() - pptr()) {
            compress(s, size_t(n), false);
            return n;
        }
    }
    traits_type::copy(pptr(), s, size_t(n));
    pbump(int(n));
    return n;
}

int CompressedOutputBuffer::sync()
{
    return 0; // nothing to push early: a flush mid-stream would only cost ratio; close() finishes it
}

void CompressedOutputBuffer::close()
{
    if (!m_closed) {
        m_closed = true;
        drain(true);
        m_sink.flush();
    }
    if (!m_failure.empty())
        throw WriteError(m_failure);
}

} // namespace poolscope
