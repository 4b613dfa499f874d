#pragma once
#include "core/classify/pool.h"
#include "core/engine/document.h"
#include "core/sites/site_key.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace poolscope {

// What changed between two moments A and B of one device: per pool and per call site, the bytes
// alive at A and at B, what was born (alive at B, not at A), what died (alive at A, not at B) and
// the net change. Allocations made and freed between the two are churn, counted apart.
struct BetweenRow {
    std::string name; // the pool's name, or the call site ("file:line function")
    int64_t atA = 0, atB = 0, born = 0, died = 0;
    int64_t bornCount = 0, diedCount = 0;
    int64_t net() const { return atB - atA; }
};

struct Between {
    EventIndex a = kNoEvent, b = kNoEvent;
    std::string labelA, labelB;
    int64_t allocatedA = 0, allocatedB = 0;
    int64_t churnBytes = 0, churnCount = 0; // made after A and freed by B
    bool classified = false;
    std::vector<BetweenRow> byPool;  // pools with anything at A, at B, born or died
    std::vector<BetweenRow> bySite;  // the `top` sites that changed most (born + died), largest first
    size_t sitesChanged = 0;         // sites with anything born or died, all of them
};

// A after B is fine: the two are swapped, so A is always the earlier moment.
Between betweenMoments(const DeviceDocument& dev, EventIndex a, const std::string& labelA, EventIndex b, const std::string& labelB,
                       int top = 15);

std::string betweenText(const std::string& deviceLabel, const Between& d);
nlohmann::json betweenJson(const Between& d);

} // namespace poolscope
