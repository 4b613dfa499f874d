#pragma once
// Structural deciders that read what one pass or one device cannot show alone: a block that outlived
// a whole recorded forward, and host memory that a GPU device copies. Private to core/classify: the
// classifier runs them after the other structural deciders (structural_evidence.h).
#include "core/classify/classifier.h"

#include <unordered_map>

namespace poolscope::classify_detail {

// Blocks from before recording whose own stack places them in a forward, alive to the end, that only
// their phase and lifetime called activation. A default cuBLAS workspace size (requested bytes) at
// most twice per stream is that library's per-handle workspace (what workspaceBySize reads for
// blocks the trace made). Where the recording holds the start of a forward, the others outlived that
// whole forward, so they are no activation of the pass in flight: they keep their pool below 70 %
// (a kept output, a cache or a library's scratch: the frames that would say which are not the ones a
// Python-only dump records).
void forwardProductsFromBeforeRecording(const DeviceTrace& dev, Classification& c);

// A recording without frames that opens inside a forward (a ring buffer) holds that forward's
// earlier layers' outputs from before it: stackless, alive throughout, as weights are, and read as
// weights. The layers the recording sees make and keep blocks of the same sizes. Blocks from before
// recording of such a size, that no gradient has and that only their lifetime placed, are the open
// forward's activations (55 %); those of other sizes (an earlier stage's) are weights or
// activations, and stay weights below 50 %.
void earlierLayersOfTheOpenForward(const Trace& trace, const DeviceTrace& dev, Classification& c);

// Calls that each keep what they made (an evaluation under grad mode that holds its outputs and
// their graphs, a collection of per-call results): where the recording opened after some calls,
// their products are stackless blocks from before recording, alive throughout, as weights are, and
// read as weights. Every recorded call keeps n blocks of a size; the blocks from before recording of
// the sizes the calls keep come in exactly m times each call's count, the same m at every size: m
// earlier calls' products, in the pool the recorded calls' blocks of that size have (55 %). A weight
// of a kept size breaks the multiple, and then nothing moves.
void earlierCallsKeptAlike(const DeviceTrace& dev, Classification& c);

// In a training run: a block made in a forward, decided activation from its lifetime alone, and still
// held when the next step's forward began although its own step's backward ran, is no activation the
// graph saved (the engine lets go of those by the end of the backward): a kept output (a leak) or
// state made at a forward's start (DDP's rebuilt buckets). It keeps its pool at 45 %: the dump cannot
// say which. (A pipeline schedule's forward can be released by a later step's backward: only the
// confidence moves.)
void heldPastTheirStep(const DeviceTrace& dev, Classification& c);

// In a training run with an optimizer step: a block no rule decided, made after the last step and
// held where the dump ends (inside the next step), is what that step made so far, mostly its
// forward's products: activation at 50 %, a guess (a reentrant-checkpointed or FSDP forward keeps no
// rise the stream reading takes for a pass).
void madeInTheStepInFlight(const DeviceTrace& dev, Classification& c);

// On the host of a profiler trace that also records a GPU device: a host block whose exact bytes a
// GPU device allocates after it was made and before the host makes the next of that size (the
// .to()/.cuda() copy of what the host built), sooner than the device made one before it (a copy
// follows its source; the other way round it is an output copied to the host each step),
// is the batch that feeds the device (input); the same-size host blocks let go of in one burst right
// after it was made, whose bytes add up to it, are the samples it was stacked from (collate).
void hostBatchesCopiedToDevice(const Trace& trace, const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail

namespace poolscope::classify_detail {

// The model's tensors brought back: where the trace opens with a run of births followed at once by
// a run of the same sizes in the same order (a per-parameter buffer built from each parameter, or a
// copy), the first run is the parameters (what is built from them comes after them). A later run of
// that sequence made after every block of the parameters' current run was let go of is the same
// tensors moved away and back (.to('cpu') then .to('cuda'), as a federated client does); one made
// while they live is something built from them (state, a copy). Only runs whose every block outlives a
// whole forward count (the repeat that names the first run too): a loop's scratch repeats its sizes. Decides only what phase and lifetime
// alone guessed (unknown, activation, temporary, other), never what a frame named.
void parametersMovedBack(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail

namespace poolscope::classify_detail {

// Blocks from before recording, alive throughout and without a stack, where every weight size held
// more than once is held 4 (or 3) times or a multiple of that: a parameter with its gradient and
// optimizer state (a model alone holds some shapes once). Which block is which nothing recorded
// says, so they stay parameters below the verdict's 50 % and carry kRoleIndistinctCopies, by which
// the verdict says so. Decides only the timing-alone guess (a parameter at 60 % at most).
// Sets Classification::preexistingCopies (k) where it finds such copies.
void preexistingCopiesIndistinct(const Trace& trace, const DeviceTrace& dev, Classification& c);

// Where blocks from before recording are such copies (every size held k times), the blocks of each
// size (mirror key) now in the parameter pool beyond one in k: by count the rest of them are the
// gradient and optimizer state, whichever blocks they are. What counts one per weight (autocast's
// casts) counts against the parameters, not against every copy. Empty where there are no copies.
std::unordered_map<int64_t, int64_t> parameterCopiesBeyondOne(const DeviceTrace& dev, const Classification& c);

} // namespace poolscope::classify_detail
