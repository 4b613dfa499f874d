#include "core/model/pairing_worker.h"

#include <algorithm>

namespace poolscope {

PairingWorker::PairingWorker(EventColumns& events, size_t expectedEvents) : m_events(events)
{
    m_pairing.reserve(expectedEvents);
    m_thread = std::thread([this] { run(); });
}

PairingWorker::~PairingWorker() { stop(/*abandon=*/true); }

void PairingWorker::publish(size_t count)
{
    {
        std::lock_guard<std::mutex> lock(m_wake);
        m_published = count;
    }
    m_cv.notify_one();
}

void PairingWorker::stop(bool abandon)
{
    if (!m_thread.joinable())
        return;
    {
        std::lock_guard<std::mutex> lock(m_wake);
        m_closing = true;
        m_abandon = abandon;
    }
    m_cv.notify_one();
    m_thread.join();
}

EventPairing PairingWorker::finish()
{
    stop(/*abandon=*/false);
    if (m_error)
        std::rethrow_exception(m_error);
    return std::move(m_pairing);
}

void PairingWorker::run()
{
    size_t done = 0;
    for (;;) {
        size_t available = 0;
        {
            std::unique_lock<std::mutex> lock(m_wake);
            m_cv.wait(lock, [&] { return m_published > done || m_closing; });
            if (m_abandon)
                return;
            available = m_published;
            if (available == done) // closing, and everything published is paired
                return;
        }
        while (done < available) {
            const size_t to = std::min(available, done + kChunk);
            std::lock_guard<std::mutex> lock(m_reading);
            try {
                m_pairing.consume(m_events, done, to);
            } catch (...) {
                m_error = std::current_exception();
                return;
            }
            done = to;
        }
        populateAhead(available);
    }
}

void PairingWorker::populateAhead(size_t published)
{
    // The decoder's first writes to fresh column storage had the kernel zero each page on its core
    // (a sixth of the parse at 6M entries); this core is otherwise waiting for the next batch.
    if (published + kAhead * 3 / 4 < m_populatedTo)
        return;
    std::lock_guard<std::mutex> lock(m_reading); // the columns cannot move meanwhile
    if (m_events.action.data() != m_populatedBase) { // regrown: the new storage is fresh again
        m_populatedBase = m_events.action.data();
        m_populatedTo = published;
    }
    const size_t from = std::max(m_populatedTo, published);
    const size_t to = std::min(published + kAhead, m_events.capacity());
    if (from < to) {
        m_events.populate(from, to);
        m_populatedTo = to;
    }
}

} // namespace poolscope
