#pragma once
// Forward passes of a run without backward, found from the stream's repetition where no frame or
// annotation names them and the bytes alive show no pass's rise and fall (a no-grad forward lets go
// of each layer's scratch as it goes: its bytes rise and fall per layer, not per pass). Nothing here
// reads a name.
//
// What holds and why: a model's layers are made alike, so one call of the model makes the same
// sequence of block sizes once per layer (the layer's operators, in the same order, on tensors of the
// same shapes). A stretch where the sizes repeat with one period at least three times over, and that
// lets go of most of what it makes, is the layers of one forward. Loading a model layer by layer
// repeats too, but keeps what it makes: no forward. What comes before the first layer (embedding,
// masks) repeats before the next call's layers: two stretches separated by a repeat of the first
// stretch's prologue are two calls (decode steps of a generate loop, whose sizes change per token, or
// calls on a new batch); two stretches without one are one call whose layers differ (every k-th
// layer of another kind).
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <cstddef>
#include <vector>

namespace poolscope {

struct EventSpan {
    EventIndex first = kNoEvent, last = kNoEvent;
};

struct RepeatedForwards {
    // The calls of the model, in order, prologue and epilogue included; separated by at least one
    // event (the caller's code between them), so that each is a pass.
    std::vector<EventSpan> calls;
    // The stretches of repeating layers inside them (a call holds one or more).
    std::vector<EventSpan> layerRuns;
};

// The calls found this way; empty where no stretch repeats.
RepeatedForwards forwardsByRepetition(const DeviceTrace& dev);

// forwardsByRepetition, found on first use and kept: a frameless reading asks more than once (the
// swings, then the calls left unplaced), and may read the stream twice (structural_closure.h).
class RepeatedForwardsOnce {
public:
    explicit RepeatedForwardsOnce(const DeviceTrace& dev) : m_dev(dev) {}
    const RepeatedForwards& get()
    {
        if (!m_found) {
            m_value = forwardsByRepetition(m_dev);
            m_found = true;
        }
        return m_value;
    }

private:
    const DeviceTrace& m_dev;
    RepeatedForwards m_value;
    bool m_found = false;
};

// Places the calls as forwards on the events nothing placed, but not a call that lets go of more than
// it makes (a backward the recording opens inside); returns how many events it placed.
size_t placeRepeatedForwards(const DeviceTrace& dev, const RepeatedForwards& calls, PhaseTimeline& tl);

} // namespace poolscope
