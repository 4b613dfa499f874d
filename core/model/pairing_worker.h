#pragma once
#include "core/model/events.h"
#include "core/model/trace_builder.h"

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>

namespace poolscope {

// Runs an EventPairing on a second thread while a decoder still appends entries to `events`: the
// pairing of a million entries (~80 ms of finalizeDevice) then overlaps the parse instead of
// following it, on a core that is otherwise idle.
//
// The decoder's side of the protocol: append entries, then publish(count). Appends must not make the
// columns reallocate while the worker reads them: grow them first, inside whileIdle(), which waits
// until the worker is between chunks. finish() waits for the worker to reach the last published
// entry and hands the pairing over (for finalizeDevice); the destructor stops the worker without
// waiting for the rest (the parse failed).
class PairingWorker {
public:
    PairingWorker(EventColumns& events, size_t expectedEvents);
    ~PairingWorker();
    PairingWorker(const PairingWorker&) = delete;
    PairingWorker& operator=(const PairingWorker&) = delete;

    void publish(size_t count);
    template <typename F>
    void whileIdle(F&& f)
    {
        std::lock_guard<std::mutex> lock(m_reading);
        f();
    }
    // Rethrows what the worker threw (std::bad_alloc, say); the pairing's own findings (a byte count
    // beyond 8 PiB) travel inside the pairing and are reported by finalizeDevice.
    EventPairing finish();

private:
    void run();
    void stop(bool abandon);
    void populateAhead(size_t published);

    // Entries per locked chunk: short enough that a decoder waiting to grow the columns waits
    // microseconds, long enough that locking costs nothing.
    static constexpr size_t kChunk = 16384;
    // Entries of column storage kept faulted in ahead of the decoder (~10 MB), in steps of a quarter.
    static constexpr size_t kAhead = size_t(1) << 18;

    EventColumns& m_events;
    EventPairing m_pairing;
    std::mutex m_reading; // held by the worker while it reads a chunk of the columns
    std::mutex m_wake;    // guards the three fields below
    std::condition_variable m_cv;
    size_t m_published = 0;
    bool m_closing = false;
    bool m_abandon = false;
    std::exception_ptr m_error;
    size_t m_populatedTo = 0;            // worker-only: columns faulted in up to this entry
    const void* m_populatedBase = nullptr; // ... of the buffer at this address (regrowth moves it)
    std::thread m_thread;
};

} // namespace poolscope
