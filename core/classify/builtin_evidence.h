#pragma once
// Private to core/classify: decisions the rules file cannot express, made after the rules ran.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Classification::privatePools / privatePool from the final segments' pool ids.
void assignPrivatePools(const DeviceTrace& dev, Classification& c);

// Megatron's _ParamAndGradBuffer.__init__ makes two flat buffers of the same length, param_data (only
// with the distributed optimizer: the model's parameters moved into one buffer) and then grad_data
// (the main gradients). The rule "megatron-grad-buffer" names both gradient; where the stacks show
// the constructor allocating at two lines, the allocations at the earlier line are param_data and
// become parameters (rule "megatron-param-buffer").
void splitMegatronBuffers(const Trace& trace, const DeviceTrace& dev, Classification& c);

// Blocks pending free at the dump (Allocation::pendingFreeAtEnd) belong to no pool the program holds:
// other, by the rule "pending-free-block".
void pendingFreeBlocks(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
