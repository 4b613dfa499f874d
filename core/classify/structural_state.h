#pragma once
// Private to core/classify: the optimizer's per-parameter buffers told from the parameters by the
// order the program had to make them in, where no frame says which is which (a frameless capture).
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// In a run that trains (a backward or an optimizer step), blocks made before the first forward and
// kept, that only their lifetime placed (no frame of theirs spoke): an optimizer is built from the
// model's parameters, so its per-parameter buffers (Adam's two moments, made in its constructor)
// come after them. Where those blocks, in the order they were made, split into K + 1 runs of equal
// length (K >= 2) whose sizes match the first run's one to one, the first run is the parameters and
// the K later runs optimizer state, at 60 %: the order holds for a reason, but a model and K copies
// of it made the same way (a frozen teacher, an EMA) would look the same. K = 1 (SGD momentum, or one
// copy of the model) is not decided: the two readings are equally common.
void perParameterStateByOrder(const DeviceTrace& dev, Classification& c);

// State an optimizer rewrites out of place between passes (m = b * m + ..., made anew and the old
// block let go of), where no frame or annotation named its step (a hand-written or zeroth-order
// optimizer whose file names are the user's own): blocks that nothing else claimed, of a parameter's
// size, made outside the passes and alive across at least one, let go of between two passes while
// a block of the same size made in that same stretch takes over and again lives across a pass. Only
// where one stretch replaces blocks of at least two parameter sizes and a tenth of the parameters'
// bytes: a data batch replaced per step is one or two blocks, the per-parameter state of an
// optimizer covers the model. Optimizer state at 60 %.
void stateRewrittenBetweenPasses(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail

namespace poolscope::classify_detail {

// A model moved to the device (.to(), .cuda()) while its parameters held .grad: nn.Module._apply
// moves each parameter and then, right after it, its gradient, so the blocks made before the first
// forward and kept come in adjacent pairs of equal size. Where no frame said what they are (or only
// a lifetime rule did), in a run with no backward and no optimizer step that could have made
// gradients, and where such pairs hold at least 90 % of those blocks' bytes (at least four pairs,
// of two sizes or more: a model's shapes, not one buffer size), the first of each pair is the
// parameter and the second its gradient, at 55 %. A model whose weights themselves come in adjacent
// equal pairs with no bias or norm between them would read the same; the confidence says so.
void gradientsMovedInPairs(const DeviceTrace& dev, Classification& c);

// Where the stream shows no pass at all (no forward, no backward found by frames, annotations or
// structure), blocks made before the first block the trace let go of, and kept to the end, are the
// model's state built before any computation ran: a parameter at 50 %, a guess the verdict does not
// act on as certain (buffers and optimizer state made that early look the same). Only where a
// computation ran (eight blocks let go of or more) and the state is two blocks or more.
void keptBeforeAnyRelease(const DeviceTrace& dev, Classification& c);

// A recording that never let go of anything and shows no pass: no computation ran, every block was
// made and kept (a model being loaded, the usual OOM before any step). A computation lets go of its
// scratch; a load keeps what it makes. Where the births' sizes repeat with one period of two sizes
// or more, at least three times over, and that stretch holds half the bytes or more, it is the
// model's layers loaded one after another: parameters at 55 %; the blocks before and after it (the
// embeddings, the output layer) at 50 %. Without that repetition they stay unclassified: a cache, a
// dataset or a preallocated pool is built the same way.
void builtLayerByLayerWithoutRelease(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
