#pragma once
#include "core/load.h"

#include <span>
#include <string_view>
#include <string>

namespace poolscope {

class InputBuffer;

// The version hint of a dump that is torch.cuda.memory_snapshot()'s bare list of segments, no dict:
// writers that give a dump back in its own shape (redact) look for it.
constexpr std::string_view kBareSegmentListHint = "bare list of segments (torch.cuda.memory_snapshot(), any version)";

// Allocator snapshot readers (the same dict in two encodings). `name` is used in error messages.
// `source`: the buffer `bytes` lies in, told which bytes the reader is done with (see InputBuffer).
void readSnapshotPickle(std::span<const uint8_t> bytes, const std::string& name, Trace& out,
                        const LoadOptions& options, Progress& progress, const InputBuffer* source = nullptr);
void readSnapshotJson(std::span<const uint8_t> bytes, const std::string& name, Trace& out,
                      const LoadOptions& options, Progress& progress);

} // namespace poolscope
