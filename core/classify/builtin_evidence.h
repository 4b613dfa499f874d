#pragma once
// Private to core/classify: decisions the rules file cannot express, made after the rules ran.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Classification::privatePools / privatePool from the final segments' pool ids.
void assignPrivatePools(const DeviceTrace& dev, Classification& c);

// Megatron's _ParamAndGradBuffer.__init__ makes two flat buffers of the same length, param_data (only
// with the distributed optimizer: the model's parameters moved into one buffer) and then grad_data
// (the main gradients). The rule with role flat_grad_buffer names both gradient; where the stacks show
// the constructor allocating at two lines, the allocations at the earlier line are param_data and
// become parameters (rule "megatron-param-buffer").
void splitMegatronBuffers(const Trace& trace, const DeviceTrace& dev, Classification& c);

// Autocast's cached_cast makes both the cached 16-bit copy of an fp32 weight and the uncached cast of
// an operator's fp32 input; the rule with role weight_cast tells them by size (half a parameter),
// which an input of T x (a weight's element count) matches too (T = h for an h x h projection,
// T = 4h for an MLP weight). Where one forward run holds more such casts of a size than there are
// weights of twice it, at least the surplus are inputs' casts, and nothing in the dump says which
// (the same stack, the same lifetime; the order of an operator's argument casts is the compiler's).
// A model has one set of weight casts: per forward run and size, at most as many casts as weights of
// twice that size stay cast_cache (those kept longest: weight casts live until autocast exits); the
// surplus become activations under "autocast-cast-surplus" (role cast_surplus), all at 45 %.
void flagAutocastSurplus(const DeviceTrace& dev, Classification& c);

// Blocks pending free at the dump (Allocation::pendingFreeAtEnd) belong to no pool the program holds:
// other, by the rule "pending-free-block".
void pendingFreeBlocks(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
