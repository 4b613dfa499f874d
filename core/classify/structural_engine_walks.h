#pragma once
// Backwards read from the autograd engine's walk over a graph, for a device whose frames and
// annotations name no pass, where a step is not one forward then one backward (what the swings of
// structural_phases.cpp assume): a pipeline schedule's micro-batches (1F1B: the forward of micro-batch
// k+1 runs while micro-batch k's saved tensors wait for its backward), a GAN's passes (two models,
// several backwards and two optimizer steps per iteration), several forwards before one backward.
// Nothing here reads a name.
//
// Why the walk shows in the stream: a backward releases what its graph saved node by node from the
// loss back (torch/csrc/autograd/engine.cpp evaluate_function calls fn.release_variables() after
// each node ran), so the blocks it lets go of come last made first, each held since its forward made
// it, and between them the nodes allocate their outputs (input and weight gradients). A graph
// dropped without backward (no_grad has none; a graph whose output the caller drops) is released in
// one burst without allocations: no walk. A forward is where the blocks a walk releases were made.
// Interleaved graphs do not merge: a walk's releases run back through one forward's births; a
// release of a block younger than the walk's youngest starts another walk (another graph).
#include "core/classify/phases.h"
#include "core/classify/structural_state_bursts.h"
#include "core/model/trace.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace poolscope {

struct EngineWalk {
    EventIndex first = kNoEvent, last = kNoEvent;         // its first and last release of a saved block
    EventIndex bornFirst = kNoEvent, bornLast = kNoEvent; // births of the oldest and youngest it released
    size_t releases = 0;                                  // saved blocks released, last made first
};

// Where the forward of a backward the dump cuts began (an OOM inside it, a dump from a backward
// hook). The engine has let go of the later layers' saved blocks only, so the oldest block it let go
// of (born at forwardFrom; released in [releaseFrom, releaseTo]) is a middle layer's. The earlier
// layers' blocks, of the sizes it let go of (a model repeats its layers), are still held: back from
// forwardFrom over the events nothing placed (not into a state burst), to the oldest such block that
// outlives the releases; the batch and anything else of another size stay outside. forwardFrom
// where none.
EventIndex heldEarlierLayers(const DeviceTrace& dev, const PhaseTimeline& tl, const StateBursts& bursts,
                             EventIndex forwardFrom, EventIndex releaseFrom, EventIndex releaseTo);

// The walks that read as a backward, in the order they ran. See the definition for the tests.
std::vector<EngineWalk> engineWalks(const DeviceTrace& dev, const StateBursts& bursts);
inline std::vector<EngineWalk> engineWalks(const DeviceTrace& dev) { return engineWalks(dev, stateBursts(dev)); }

// A device's walks and state bursts, found on first use and kept: the swings' reading and the walks'
// reading each need them, and a frameless dump with step windows is read twice (structural_closure.h).
class EngineWalksOnce {
public:
    explicit EngineWalksOnce(const DeviceTrace& dev) : m_dev(dev) {}
    const std::vector<EngineWalk>& get()
    {
        if (!m_found) {
            m_walks = engineWalks(m_dev, bursts());
            m_found = true;
        }
        return m_walks;
    }
    const StateBursts& bursts()
    {
        if (!m_burstsFound) {
            m_bursts = stateBursts(m_dev);
            m_burstsFound = true;
        }
        return m_bursts;
    }

private:
    const DeviceTrace& m_dev;
    std::vector<EngineWalk> m_walks;
    StateBursts m_bursts;
    bool m_found = false, m_burstsFound = false;
};

// Where loss.backward() began: the last event after `from` and before `before` where the autograd
// engine seeds its walk with the loss's gradient, ones_like(loss), a scalar of the loss's own size
// made while the loss (made by the forward 16 events before at most) is alive, and where within 32
// events the loss's backward lets go of a block made before the seed (the logits, or what the loss
// function saved of them; a pre-backward hook's gathers, FSDP2 unsharding the last layer, can come
// between). That release comes too soon after its birth to read as a saved block, and a checkpointed
// model's recomputation can come between it and the walk's first saved release: from the seed on,
// the events are the backward's. kNoEvent where no such pair is there (a loss of more than a scalar,
// a backward from grad_tensors).
EventIndex lossBackwardSeed(const DeviceTrace& dev, EventIndex from, EventIndex before);

// Called by inferStructuralPhases after the swings placed their phases (`tl`, from `phaseBefore` /
// `sourceBefore`, what frames and annotations placed): where a walk lies outside every backward the
// swings found, the swings misread the run; then the phases are placed from the walks instead
// (each walk a backward, the births it releases a forward, the optimizer step after a backward
// where blocks of a gradient's size are made) and the swings' reading is kept only after the last
// walk (a forward the dump ends inside). Returns the number of events placed by structure.
size_t phasesFromEngineWalks(const DeviceTrace& dev, PhaseTimeline& tl, const std::vector<Phase>& phaseBefore,
                             const std::vector<PhaseSource>& sourceBefore, size_t placedBySwings, EngineWalksOnce& walks);

} // namespace poolscope
