#pragma once
#include "core/formats/compressed_output.h"

namespace poolscope {

// Writes one gzip member (`.gz`) into `sink`; see CompressedOutputBuffer for streaming and errors.
class GzipOutputBuffer : public CompressedOutputBuffer {
public:
    explicit GzipOutputBuffer(std::ostream& sink, std::string path = {}, int level = 6);
};

} // namespace poolscope
