#pragma once
#include "core/model/trace.h"
#include "core/util/load_error.h"
#include "core/util/progress.h"

#include <cstdint>
#include <memory>
#include <string>

namespace poolscope {

struct LoadOptions {
    int64_t memoryBudgetBytes = int64_t(8) << 30; // decoded data larger than this is refused
    int64_t maxDecompressionRatio = 200;          // zstd/gzip bombs
    int maxNesting = 64;
    // Pair a large snapshot's entries on a second thread while the pickle is still being read.
    bool pairWhileParsing = true;
    // Read trace entries of the usual shape straight from the pickle bytes (snapshot_entry_reader.cpp)
    // instead of building each as a dict first; off only to compare the two readers.
    bool readEntriesDirectly = true;
};

// Detects the format by content (magic bytes), decompresses, decodes and builds the model.
// Throws LoadError on bad input. Progress may be polled from another thread.
std::shared_ptr<const Trace> load(const std::string& path, const LoadOptions& options, Progress& progress);
std::shared_ptr<const Trace> load(const std::string& path);

} // namespace poolscope
