#pragma once
#include "core/engine/document.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope {

// Bytes by call stack as a tree: the root is everything, its children the outermost user frames
// (the program's own Python code; PyTorch's and other libraries' frames are folded), down to the
// innermost user frame, whose children are the library calls it made (one folded node each, naming
// the library frame it called and how many frames are folded under it). Stacks without a user frame
// hang from the root by the site `report` names (the autograd node, the operator, or the size).
struct SiteNode {
    std::string label;
    std::string file; // the frame's file (empty for folded and synthetic nodes)
    int64_t line = 0;
    double weight = 0; // bytes at the moment, or bytes x time over the run
    int64_t bytes = 0;  // bytes alive at the moment (over the run: the bytes of the allocations summed)
    int64_t count = 0;  // allocations
    int folded = 0;     // library frames folded into this node
    uint32_t parent = 0;
    std::vector<uint32_t> children; // heaviest first
};

struct SiteTree {
    std::vector<SiteNode> nodes; // [0]: the root
    EventIndex at = kNoEvent;    // the moment (overRun: kNoEvent)
    bool overRun = false;
    std::string weightUnit; // "bytes", "byte-seconds" or "byte-events"
    // The leaf node of each stack that carries weight (for highlighting an allocation's node).
    std::unordered_map<uint32_t, uint32_t> leafOfStack;
    std::unordered_map<uint64_t, uint32_t> leafOfSize; // frameless allocations, by size

    // The node an allocation falls under (a leaf); 0 (the root) when none.
    uint32_t leafOf(const Allocation& a) const;
    bool contains(uint32_t node, const Allocation& a) const; // `a` is under `node`
};

// The bytes alive after `event`, by stack.
SiteTree siteTreeAt(const DeviceDocument& dev, EventIndex event);
// Every allocation of the recording weighted by bytes x lifetime (µs when the dump has times, else
// events; an allocation alive at the end lives to the last event).
SiteTree siteTreeOverRun(const DeviceDocument& dev);

// Indented text, the `top` heaviest children of each node down to `depth` levels.
std::string siteTreeText(const SiteTree& tree, int top = 8, int depth = 12);
// {"weight_unit", "total", "root": {"label", "weight", "bytes", "count", "children": [...]}} with
// nodes lighter than `minShare` of the root cut (their weight stays in their parent's).
nlohmann::json siteTreeJson(const SiteTree& tree, double minShare = 0.001);

} // namespace poolscope
