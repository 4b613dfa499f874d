#pragma once
#include <memory>
#include <ostream>
#include <streambuf>
#include <vector>

namespace poolscope {

// A streambuf that zstd-compresses everything written through it into `sink` (one zstd frame),
// so writers such as writeSnapshot produce `.zst` files without holding the output in memory.
// close() finishes the frame; the destructor calls it if needed. Throws std::runtime_error on a
// compression error.
class ZstdOutputBuffer : public std::streambuf {
public:
    explicit ZstdOutputBuffer(std::ostream& sink, int level = 3);
    ~ZstdOutputBuffer() override;
    ZstdOutputBuffer(const ZstdOutputBuffer&) = delete;
    ZstdOutputBuffer& operator=(const ZstdOutputBuffer&) = delete;
    void close();

protected:
    int_type overflow(int_type ch) override;
    int sync() override;
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
