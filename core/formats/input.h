#pragma once
#include "core/load.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace poolscope {

enum class Compression : uint8_t { None, Zstd, Gzip };

// The whole (decompressed) input. Plain files are memory-mapped; compressed ones are decoded into
// a buffer bounded by LoadOptions (ratio and memory budget), so a zstd/gzip bomb fails cleanly.
class InputBuffer {
public:
    virtual ~InputBuffer() = default;
    virtual std::span<const uint8_t> bytes() const = 0;
    // A streaming reader is done with bytes()[0, offset): a memory-mapped file drops those pages from
    // the resident set (they come back from the file if read again), so peak RSS is the model being
    // built, not model plus file. A decoded buffer keeps its bytes: nothing could bring them back.
    virtual void releaseBefore(size_t /*offset*/) const {}
    Compression compression = Compression::None;
    int64_t fileSize = 0;
};

Compression sniffCompression(std::span<const uint8_t> head);
std::unique_ptr<InputBuffer> openInput(const std::string& path, const LoadOptions& options, Progress& progress);
// For tests and fuzzing: decompress an in-memory buffer (copied when not compressed).
std::unique_ptr<InputBuffer> decodeBuffer(std::span<const uint8_t> data, const std::string& nameForErrors,
                                          const LoadOptions& options, Progress& progress);

} // namespace poolscope
