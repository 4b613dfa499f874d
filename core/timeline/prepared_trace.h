#pragma once
#include "core/classify/classifier.h"
#include "core/timeline/device_timeline.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace poolscope {

struct PreparedDevice {
    std::shared_ptr<const DeviceTimeline> timeline;
    std::shared_ptr<const Classification> classification; // null when the rules could not be loaded
};

// A loaded trace with every device classified and prepared for a timeline: what the GUI holds as
// its document and what `poolscope render` draws. Immutable once built.
struct PreparedTrace {
    std::shared_ptr<const Trace> trace;
    std::vector<PreparedDevice> devices; // parallel to trace->devices
    std::vector<std::string> notes;      // e.g. why the pools are unclassified

    // The device a viewer opens first: one with an OOM, else the one with the most events (CUDA first).
    size_t defaultDevice() const;
    // Index into devices of (device number, CUDA); npos when absent.
    size_t findDevice(int device) const;
};

// Classifies with `rules` (RuleSet::load() when null; failures leave the pools unclassified and say
// why in notes). Polls `cancel` between devices and returns null when it is set.
std::shared_ptr<const PreparedTrace> prepareTrace(std::shared_ptr<const Trace> trace, const RuleSet* rules = nullptr,
                                                  const std::atomic<bool>* cancel = nullptr);

PoolAssignment poolAssignment(const Trace& trace, const DeviceTrace& dev, const Classification& c);

} // namespace poolscope
