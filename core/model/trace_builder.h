#pragma once
#include "core/model/trace.h"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace poolscope {

// Every format reader fills DeviceTrace::events (and segments, where the dump has them) and then
// calls finalizeDevice, so pairing and the reconstruction of absolute numbers exist exactly once.
//
// Definitions (they match ../shared/corpus/expected.json):
// - allocations are paired alloc -> free_requested -> free_completed by address;
// - initialAllocated = bytes of active blocks in the final segments (active_allocated, and
//   active_pending_free: freed by the program, still held for a stream's use) minus the net bytes the
//   trace allocated (alloc sizes minus free_completed sizes of allocations seen in the trace); a
//   pending block the trace did not see freed becomes a pre-existing allocation marked
//   pendingFreeAtEnd (the corpus has none; expected.json counts active_allocated blocks);
// - allocated(i) = initialAllocated + running (alloc - free_completed) up to and including event i;
// - reserved(i) from segment_alloc/free/map/unmap, anchored so the end equals the final segments.
// Oddities (frees of unknown addresses, double allocs) are counted into `warnings`, never fatal.
void finalizeDevice(DeviceTrace& device, std::vector<std::string>& warnings);

// The part of finalizeDevice that walks the events in order: impossible times dropped, allocs paired
// with their frees by address, the running sums. It reads events [from, to) of the columns and nothing
// past them, so a decoder can run it on a second thread while it still appends entries (see
// PairingWorker); finalizeDevice(device, pairing, ...) then does the rest once the segments are known.
class EventPairing {
public:
    // Reserves for about `events` entries and `allocations` allocations (estimates; only address space
    // when they err high; allocations defaults to about one per two entries).
    void reserve(size_t events, size_t allocations = SIZE_MAX);
    // Events [from, to) in order, following the ones consumed before. Rewrites impossible times in
    // place to kNoTime. After an error (a byte count beyond 8 PiB) it consumes nothing more; the
    // error is thrown by finalizeDevice, which knows the device's name.
    void consume(EventColumns& events, size_t from, size_t to);
    size_t consumed() const { return m_consumed; }

private:
    friend void finalizeDevice(DeviceTrace&, EventPairing&&, std::vector<std::string>&);
    bool checkBytes(int64_t v, const char* what);

    size_t m_consumed = 0;
    std::optional<std::string> m_error; // without the device label
    std::vector<Allocation> m_allocs;
    std::vector<AllocId> m_eventAlloc;
    std::vector<OomEvent> m_ooms;
    std::vector<int64_t> m_runningAlloc, m_runningReserved;
    std::unordered_map<uint64_t, uint32_t> m_open; // address -> allocation index (| kFreed once freed)
    std::unordered_set<uint32_t> m_refreed;        // reconstructed allocations of an already freed address
    int64_t m_running = 0, m_deltaPeak = 0, m_netSeen = 0, m_segmentNet = 0, m_orphanFreeBytes = 0;
    EventIndex m_peakIndex = kNoEvent;
    int64_t m_lastTime = kNoTime;
    bool m_anyTime = false;
    int64_t m_orphanFrees = 0, m_doubleFrees = 0, m_reusedAddresses = 0, m_completedWithoutRequest = 0,
            m_impossibleTimes = 0, m_timeBackwards = 0;
};

// finalizeDevice for events a pairing has already walked (all of them: pairing.consumed() must equal
// device.eventCount()).
void finalizeDevice(DeviceTrace& device, EventPairing&& pairing, std::vector<std::string>& warnings);

} // namespace poolscope
