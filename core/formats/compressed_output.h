#pragma once
#include <cstddef>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

namespace poolscope {

// One compression format's half of a CompressedOutputBuffer: turns input bytes into compressed
// bytes. The buffer does the streaming (batching small writes, passing large ones straight through,
// finishing once) and the error reporting; a codec only knows its library.
class OutputCodec {
public:
    virtual ~OutputCodec() = default;
    // "zstd", "gzip": the word errors use.
    virtual const char* name() const = 0;
    // Compresses [data, data + size), handing every produced chunk to `emit`; `end` finishes the
    // stream (frame, member) after the data. Returns an empty string, or the library's reason for a
    // failure (the buffer adds the file name).
    virtual std::string compress(const char* data, size_t size, bool end, std::ostream& emit) = 0;
    // How many input bytes to collect before compressing them.
    virtual size_t inputBufferSize() const = 0;
};

// A streambuf that compresses everything written through it into `sink`, so writers such as
// writeSnapshot produce `.zst` / `.gz` files without holding the output in memory. close() finishes
// the stream; the destructor calls it if needed (swallowing errors: call close() to see them).
// Errors name `path` (the file being written; empty when there is none) and are WriteError: a
// compression failure or a sink that stopped taking bytes (disk full) ends the write at once rather
// than compressing the rest into a broken stream. std::ostream turns an exception thrown by its
// streambuf into badbit, so the first failure is kept and close() throws it again: a writer that
// never looks at its stream's state still learns of it.
class CompressedOutputBuffer : public std::streambuf {
public:
    CompressedOutputBuffer(std::ostream& sink, std::unique_ptr<OutputCodec> codec, std::string path);
    ~CompressedOutputBuffer() override;
    CompressedOutputBuffer(const CompressedOutputBuffer&) = delete;
    CompressedOutputBuffer& operator=(const CompressedOutputBuffer&) = delete;
    void close();

protected:
    int_type overflow(int_type ch) override;
    int sync() override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;

private:
    void compress(const char* data, size_t size, bool end);
    void drain(bool end); // compresses what the put area holds and empties it
    std::unique_ptr<OutputCodec> m_codec;
    std::ostream& m_sink;
    std::string m_path;
    std::vector<char> m_in;
    std::string m_failure; // the first error, thrown again by every later call
    bool m_closed = false;
};

} // namespace poolscope
