#pragma once
// Phases from the allocation stream's shape, for a device whose frames and annotations name no
// forward or backward (a record_context=False capture with history kept, a frameless redacted copy,
// a dump whose user files are renamed beyond recognition). Nothing here reads a name.
//
// What the history shows of a step, and why each holds:
// - A forward accumulates: its outputs stay alive (saved for backward, or held by the graph) until
//   it ends, so the bytes alive rise to a peak. Model set-up before it (weights built or loaded)
//   rises too but makes no short-lived temporaries; a forward's operators do, so the forward starts
//   at the first block of the rise that is let go of again.
// - After the peak the bytes fall. In a backward the autograd engine frees what the forward saved,
//   last made first freed, while its operators allocate gradients and scratch (allocations
//   interleaved with the frees); a graph dropped without backward is released in one burst with
//   hardly an allocation (teardown). A fall that releases little of the forward's bytes, or not in
//   reverse order, is no backward: the forward freeing its own scratch.
// - After a backward, blocks of a gradient's size (a block the backward made and kept) that outlive
//   the stretch, or many such made and freed there, are the optimizer step (state made at the first
//   step, out-of-place updates, foreach temporaries). Only where nothing (annotation or frame) named
//   an optimizer step anywhere on the device: a named step decides.
// - A rise that never falls (a forward whose graph is kept to the end of the dump, or an OOM inside
//   the forward) is a forward from its first temporary to the end.
// What the stream cannot tell stays Unknown: events before the first forward, between passes.
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <cstddef>

namespace poolscope {

// Assigns phases (source Structure) to the events of `tl` that no frame or annotation placed, when
// none placed a forward or a backward on this device and the device has allocation history. Where
// frames do name the passes but nothing names an optimizer step, only the optimizer step after each
// named backward is placed (its events otherwise inherit the backward's phase). Returns the number
// of events it placed.
size_t inferStructuralPhases(const DeviceTrace& dev, PhaseTimeline& tl);

// Whether an allocation's phases rest on the stream's shape alone: its birth or free event was
// placed by inferStructuralPhases. Decisions that rest on such phases without frames are capped
// below what the verdict acts on as certain (kStructuralConfidenceCap).
bool phasesFromStructure(const PhaseTimeline& tl, const Allocation& a);
constexpr int kStructuralConfidenceCap = 65;

struct Classification;
// Caps every decision without frames evidence whose phases came from the stream's shape alone.
void capStructuralConfidence(const DeviceTrace& dev, Classification& c);

} // namespace poolscope
