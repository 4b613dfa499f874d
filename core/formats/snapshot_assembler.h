#pragma once
#include "core/model/trace.h"
#include "core/model/trace_builder.h"

#include <map>
#include <string>
#include <string_view>

namespace poolscope {

// Collects what a snapshot decoder (pickle or JSON: the same dict) finds, and finishes the Trace.
// Decoders intern frames/stacks through trace.frames directly and push entries column-wise.
class SnapshotAssembler {
public:
    explicit SnapshotAssembler(Trace& trace) : m_trace(trace) {}

    // The device_traces list at position `device` (creates it, and any below it, on demand).
    DeviceTrace& device(int device);
    void addEntry(int device, std::string_view action, uint64_t addr, int64_t size, int64_t stream, int64_t timeUs,
                  StackId stack);
    void addSegment(Segment segment); // placed on segment.device
    void addAnnotation(Annotation a) { m_trace.annotations.push_back(std::move(a)); }
    void setSetting(std::string key, std::string value) { m_trace.allocatorSettings[std::move(key)] = std::move(value); }
    void unknownKey(std::string_view where, std::string_view key);
    // The events of CUDA device `device`, already walked by a PairingWorker during the parse: finish()
    // completes them with finalizeDevice(device, pairing) instead of pairing them again.
    void setPairing(int device, EventPairing pairing) { m_pairings.insert_or_assign(device, std::move(pairing)); }
    Trace& trace() { return m_trace; }

    // Pairs and reconstructs every device (finalizeDevice), adds version hints and warnings.
    void finish();

private:
    void stacksFromBlocks(DeviceTrace& device) const;

    Trace& m_trace;
    std::map<int, EventPairing> m_pairings;
};

} // namespace poolscope
