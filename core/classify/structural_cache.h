#pragma once
// Private to core/classify: a cache kept from one call of a model to the next (a KV cache grown or
// replaced per token), from the passes where they tell the calls apart, else from the repetition of
// the model's layers (a generate loop whose prefill and decode steps differ in shape, read as one
// long pass). Either in a run without backward, or, in a training run, within a stretch of forwards
// with no backward and no optimizer step between them (generate() inside a training step: TRL's
// GRPO and PPO rollouts, a sample logged mid-training), where at least three calls chain: the call
// that lets go of one call's blocks has its own let go of by the next.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// A block a forward pass made that a later forward let go of, with no backward or optimizer step
// between, is a cache kept from one forward to the next, whatever the code is called; a block still
// held at the end is the cache's newest part only where it was made at such a block's site (outputs
// the caller kept look the same otherwise). Not where a later forward let go of an earlier graph
// (grad mode on without backward).
void forwardCache(const Trace& trace, const DeviceTrace& dev, Classification& c);

// In a run without backward (history, no backward pass, the forwards' products never released by
// the autograd engine), or in a training run between two of its backwards (as above), blocks made
// inside one stretch of repeating layers and let go of inside a later stretch are kept from one
// call of the model's layers into the next: a cache (a KV cache grown or replaced per token), at
// 60 %. At least three such blocks must cross between the two
// stretches (a cache keeps one or two per layer, and layers repeat three times or more to be seen);
// the residual stream crossing between two kinds of layers of one call is one block. The last
// stretch's own cache (held to the end, or let go of after it) is what replaced a cache block: made
// in that stretch and, within the few events of one cache update (torch.cat, then the old block
// let go of), followed by the release of a cache block no larger than it.
void cacheAcrossLayerRuns(const DeviceTrace& dev, Classification& c);

// In a run that never runs backward and calls its model several times: four or more blocks of one
// size made one after the other before the first call, after the weights existed (from before
// recording, or made and held before them), held across the calls, with no weight of their size (no
// other block made before the first call and kept, none from before recording, has it), are a cache
// preallocated for the calls (a static KV cache: a key and a value buffer per layer), at 60 %. A weak
// guess from a constructor's frame (a parameter at 65 % or less) gives way. A layer's four h x h
// projections are four blocks of one size made one after the other too, but every other layer has
// them as well. Where a ring buffer dropped their births, blocks from before recording made at one
// stack (a loop's line), four or more of one size and every block of that size, read the same.
void preallocatedCache(const Trace& trace, const DeviceTrace& dev, Classification& c);

// In a run without backward whose forwards keep most of what they made past the next forward
// (RunFacts::graphsKeptAcrossCalls), blocks the frames called a cache (a library's cache code)
// that every call makes again, never longer than the first call's, are saved for backward: the
// graph holds them, not a cache the next call reads (structural_graph_kept_cache.cpp), at 60 %.
// Blocks from before recording at such a site (earlier calls', a ring buffer's window) with them.
void cacheKeptWithItsGraph(const DeviceTrace& dev, Classification& c);

// In a run with backward, blocks the frames called a cache at a site where a training forward (a
// backward follows it) made them, none let go of inside a forward, and either another forward made
// them afresh, never longer than the first's, or the autograd engine let go of them in backward, are
// the attention's saved keys and values (use_cache on while training), at 65 %; the forward in
// flight at the dump is read with them (structural_graph_kept_cache.cpp). Blocks from before
// recording at the site are an earlier forward's. A site only the forward in flight after a backward
// made stays a cache at 55 %: the next call, which would show it carried on or not, is past the dump.
void cacheFramesInTrainingForwards(const Trace& trace, const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
