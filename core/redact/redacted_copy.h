#pragma once
// Writing a redacted copy to a file: the same kind of file as the dump it came from (a pickle
// PyTorch's memory_viz and a torch-free pickle.load open, or JSON for a JSON snapshot), compressed
// by the output's name (.zst / .zstd, .gz).
#include "core/model/trace.h"
#include "core/redact/redact.h"
#include "core/util/progress.h"

#include <string>

namespace poolscope {

// Writes `redacted` (a snapshot read from a pickle, JSON or memory_viz HTML) to `outPath` through a
// temporary file beside it, renamed into place once complete. Throws std::invalid_argument when the
// trace is not an allocator snapshot (Kineto, export_memory_timeline), WriteError naming
// the file when it cannot be written.
void writeRedactedCopy(const Trace& redacted, const std::string& outPath);

// Loads `input`, redacts it and writes `output` (LoadError for a bad input; as above otherwise).
// Refuses to overwrite the input itself.
RedactStats redactFile(const std::string& input, const std::string& output, const RedactOptions& options, Progress& progress);

} // namespace poolscope
