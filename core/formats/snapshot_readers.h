#pragma once
#include "core/load.h"

#include <span>
#include <string>

namespace poolscope {

// Allocator snapshot readers (the same dict in two encodings). `name` is used in error messages.
void readSnapshotPickle(std::span<const uint8_t> bytes, const std::string& name, Trace& out,
                        const LoadOptions& options, Progress& progress);
void readSnapshotJson(std::span<const uint8_t> bytes, const std::string& name, Trace& out,
                      const LoadOptions& options, Progress& progress);

} // namespace poolscope
