#pragma once
#include "core/timeline/prepared_trace.h"

#include <QString>

namespace poolscope {

// One or two sentences about the cursor's moment for the breakdown panel and the review image:
// which pool is largest and how much is reserved but unallocated, and at an OOM what was asked for.
// Built only from core numbers (Breakdown, OomEvent).
// Whether the event is a `snapshot` trace entry: the moment the dump was taken.
bool isSnapshotMark(const DeviceTrace& d, EventIndex event);

QString verdictSentence(const PreparedTrace& doc, const PreparedDevice& device, EventIndex event, int64_t capacity);

} // namespace poolscope
