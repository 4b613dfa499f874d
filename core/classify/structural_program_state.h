#pragma once
// Private to core/classify: what a run that never trains keeps beside its model, made by the
// caller's code between the model's calls and kept across many of them (a calibration's per-layer
// statistics: GPTQ's Hessians, accumulated in place by forward hooks).
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// In a run with history and no training (no backward pass, no optimizer step, no gradient), a block
// that no frame rule decided, made outside every forward pass after the first one ended, and kept across at
// least three whole forward passes (each begun after its birth and ended before its release, or the
// recording's end), is the program's own state: other, at 55 %. Neither reading it had before holds:
// it is not a forward's product kept for the graph (no forward made it, and nothing trains), nor the
// model's weights (those exist before the first call; a model moved in layer by layer is named by its
// moves, or by the sizes its lineage repeats). One call is a batch's input; two are the classifier-
// free guidance of one diffusion step; three or more is state that outlives the calls. A block made
// there and followed at once by the release of a parameter of its size is that parameter's new value
// (weight.data = a quantised or pruned copy): a parameter, at 60 % ("parameter-value-replaced").
void stateKeptAcrossCalls(const DeviceTrace& dev, Classification& c);

// Outputs a caller collects on the device across calls of the model (an evaluation loop's logits,
// torch.cat per batch; Hugging Face Trainer's EvalLoopContainer without eval_accumulation_steps):
// a block made by the caller's code right after a forward pass, whose size is the sum of two blocks
// let go of within a few events of its birth: one the pass just made (its output) and one made
// before it (the collection so far). Two such concatenations in a chain (the one's result is the
// next one's collection) are a collection: every link, and the first call's output it began with,
// are other, at 60 %, whatever the run does besides (training steps between evaluations). More than
// two links after one call are a cache grown per layer by the caller (keys and values concatenated
// outside the model), not a collection; nor is a generate loop's growing input_ids (the token it
// appends was made by the caller, not by the call).
// Where no forward pass was read around the calls (frameless, the no-grad calls show no rise and
// fall), or fewer than three, a chain is still a collection ("outputs-collected-by-concatenation",
// other at 55 %) when its links are spaced by the same work: the births between a link's collection
// and its result, the chains' own blocks left out, at least four, repeat size for size from one link
// to the next (a model called again on a batch of the same shape); at most one other chain grows
// between two links of one (outputs and labels; a cache grows a chain per layer); and the piece is
// not smaller than the work's median block (a call's output, not the token a decode loop appends).
// A dense block's concatenations are spaced by work that grows with the map, and are left.
void outputsCollectedAcrossCalls(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
