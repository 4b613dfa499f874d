#pragma once
#include <memory>
#include <ostream>
#include <streambuf>
#include <vector>

namespace poolscope {

// A streambuf that gzip-compresses everything written through it into `sink` (one gzip member),
// the `.gz` sibling of ZstdOutputBuffer. close() finishes the member; the destructor calls it if
// needed. Throws std::runtime_error on a compression error.
class GzipOutputBuffer : public std::streambuf {
public:
    explicit GzipOutputBuffer(std::ostream& sink, int level = 6);
    ~GzipOutputBuffer() override;
    GzipOutputBuffer(const GzipOutputBuffer&) = delete;
    GzipOutputBuffer& operator=(const GzipOutputBuffer&) = delete;
    void close();

protected:
    int_type overflow(int_type ch) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;

private:
    void compress(const char* data, size_t size, bool end);
    struct Ctx;
    std::unique_ptr<Ctx> m_ctx;
    std::ostream& m_sink;
    std::vector<char> m_in;
    std::vector<char> m_out;
    bool m_closed = false;
};

} // namespace poolscope
