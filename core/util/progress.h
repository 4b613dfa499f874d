#pragma once
#include <atomic>
#include <cstdint>

namespace poolscope {

enum class LoadStage : int { Reading, Decompressing, Parsing, Building, Done };

// Written by the loader thread, polled by a GUI timer (Tracy's LoadProgress): no callbacks, no locks.
struct Progress {
    std::atomic<int64_t> bytesDone{0};
    std::atomic<int64_t> bytesTotal{0};
    std::atomic<int> stage{int(LoadStage::Reading)};
    std::atomic<bool> cancel{false}; // set by the caller; the loader throws LoadError{Cancelled}
};

} // namespace poolscope
