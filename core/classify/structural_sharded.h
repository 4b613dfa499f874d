#pragma once
// Private to core/classify: fully sharded data parallelism (FSDP, FSDP2, ZeRO-3) from the run's
// structure: parameters gathered per layer and let go of after use, their kept shards, and the
// buffer a backward copies its gradients into for the reduce-scatter.
#include "core/classify/classifier.h"

#include <unordered_set>

namespace poolscope::classify_detail {

struct ShardedLayout {
    std::unordered_set<int64_t> gathered; // size keys (mirrorKey) of the gathered parameters
    std::unordered_set<uint32_t> shards;  // kept blocks whose bytes times one factor are gathered sizes
};

// Decides the gathered parameters (parameters-gathered-per-layer) and finds the kept shards.
ShardedLayout parametersGatheredPerLayer(const DeviceTrace& dev, Classification& c);
// Decides the backward's flat gradient copies (gradients-copied-into-one-buffer); after the
// gradients handed on in backward are decided.
void gradientsCopiedIntoOneBuffer(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
