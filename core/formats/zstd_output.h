#pragma once
#include "core/formats/compressed_output.h"

namespace poolscope {

// Writes one zstd frame (`.zst`) into `sink`; see CompressedOutputBuffer for streaming and errors.
class ZstdOutputBuffer : public CompressedOutputBuffer {
public:
    explicit ZstdOutputBuffer(std::ostream& sink, std::string path = {}, int level = 3);
};

} // namespace poolscope
