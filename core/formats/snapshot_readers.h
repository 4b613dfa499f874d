#pragma once
#include "core/load.h"

#include <span>
#include <string>

namespace poolscope {

class InputBuffer;

// Allocator snapshot readers (the same dict in two encodings). `name` is used in error messages.
// `source`: the buffer `bytes` lies in, told which bytes the reader is done with (see InputBuffer).
void readSnapshotPickle(std::span<const uint8_t> bytes, const std::string& name, Trace& out,
                        const LoadOptions& options, Progress& progress, const InputBuffer* source = nullptr);
void readSnapshotJson(std::span<const uint8_t> bytes, const std::string& name, Trace& out,
                      const LoadOptions& options, Progress& progress);

} // namespace poolscope
