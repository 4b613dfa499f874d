#include "core/report/explain_report.h"

#include "core/classify/pool_display.h"
#include "core/report/json_text.h"
#include "core/util/units.h"

#include <algorithm>
#include <stdexcept>

namespace poolscope {
namespace {

AllocId findAllocation(const DeviceTrace& dev, uint64_t addr, std::optional<EventIndex> index, size_t& candidates)
{
    std::vector<AllocId> exact, containing;
    for (size_t i = 0; i < dev.allocations.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        const int64_t extent = std::max(a.size, a.blockSize);
        if (a.address == addr)
            exact.push_back(AllocId(uint32_t(i)));
        else if (addr > a.address && addr < a.address + uint64_t(std::max<int64_t>(extent, 1)))
            containing.push_back(AllocId(uint32_t(i)));
    }
    const auto& pool = exact.empty() ? containing : exact;
    candidates = pool.size();
    if (pool.empty())
        return AllocId{};
    auto aliveAt = [&](EventIndex i) -> AllocId {
        for (AllocId id : pool) {
            const Allocation& a = dev.allocations[id.value];
            if (a.aliveAfter(i) || a.allocEvent == i || a.freeRequestedEvent == i || a.freeCompletedEvent == i)
                return id;
        }
        return AllocId{};
    };
    if (index)
        return aliveAt(*index);
    if (pool.size() == 1)
        return pool.front();
    if (AllocId id = aliveAt(dev.peakIndex); id.valid())
        return id;
    return pool.back();
}

std::string lifeText(const Allocation& a)
{
    std::string s = a.preexisting() ? "allocated before recording began" : "allocated at event #" + std::to_string(a.allocEvent);
    if (a.freeCompletedEvent != kNoEvent)
        s += ", freed at event #" + std::to_string(a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent);
    else
        s += ", still allocated at the end";
    return s;
}

} // namespace

ExplainReport explainAllocation(const Document& doc, const ExplainQuery& q)
{
    const DeviceDocument* dev = nullptr;
    AllocId id;
    size_t candidates = 0;
    for (size_t i = 0; i < doc.deviceCount(); ++i) {
        const DeviceDocument& d = doc.device(i);
        if (q.device && d.device().device != *q.device)
            continue;
        if (q.index && (*q.index < -1 || *q.index >= EventIndex(d.device().eventCount())))
            continue;
        size_t n = 0;
        const AllocId found = findAllocation(d.device(), q.address, q.index, n);
        if (!dev || (found.valid() && !id.valid())) {
            dev = &d;
            id = found;
            candidates = n;
        }
        if (found.valid() && d.device().kind == DeviceKind::Cuda)
            break;
    }
    if (!dev)
        throw std::invalid_argument(q.device ? "the trace has no device " + std::to_string(*q.device) +
                                                   (q.index ? " with event #" + std::to_string(*q.index) : "")
                                             : "the trace has no device with that event index");
    if (!id.valid())
        throw std::invalid_argument("no allocation at " + formatAddress(q.address) + " on " + dev->label() +
                                    (q.index ? " alive at event #" + std::to_string(*q.index) : "") +
                                    (candidates ? " (" + std::to_string(candidates) + " other allocation(s) used it; try another --index)" : ""));
    ExplainReport r;
    r.file = doc.path();
    r.device = dev->label();
    r.queriedAddress = q.address;
    r.id = id;
    r.allocation = dev->device().allocations[id.value];
    r.operatorName = doc.trace().opName(r.allocation);
    r.allocationsAtAddress = candidates;
    if (const Classification* c = dev->classification()) {
        r.classified = true;
        r.explanation = explain(doc.trace(), dev->device(), *c, id);
    }
    if (r.allocation.stack.valid())
        for (FrameId f : doc.trace().frames.stack(r.allocation.stack))
            r.stack.push_back(doc.trace().frames.frame(f));
    return r;
}

std::string explainText(const ExplainReport& r)
{
    const Allocation& a = r.allocation;
    std::string out = formatAddress(a.address) + " on " + r.device + ": " + formatBytes(a.size) + " (" + std::to_string(a.size) + " B), " +
                      lifeText(a) + "\n";
    if (a.address != r.queriedAddress)
        out += "  (" + formatAddress(r.queriedAddress) + " lies inside this block, at offset " + std::to_string(r.queriedAddress - a.address) + ")\n";
    if (r.allocationsAtAddress > 1)
        out += "  (" + std::to_string(r.allocationsAtAddress) + " allocations used this address; pick another with --index EVENT)\n";
    if (r.classified) {
        const Explanation& x = r.explanation;
        out += "  pool        " + std::string(poolDisplayName(x.pool)) + " (confidence " + std::to_string(int(x.confidence)) + "%)\n";
        out += "  reason      " + x.reason + "\n";
        out += "  rule        " + x.rule + "\n";
        out += "  evidence\n";
        for (const auto& e : x.evidence)
            out += "    - " + e + "\n";
    } else {
        out += "  pool        unclassified (no classifier rules)\n";
    }
    if (r.stack.empty()) {
        out += "  stack       (none recorded)\n";
        return out;
    }
    out += "  stack (innermost first)\n";
    for (size_t k = 0; k < r.stack.size(); ++k) {
        const Frame& f = r.stack[k];
        out += "    #" + std::to_string(k) + " " + f.name;
        if (!f.filename.empty() && f.filename != "??")
            out += "  " + f.filename + (f.line > 0 ? ":" + std::to_string(f.line) : "");
        out += "\n";
    }
    return out;
}

std::string explainJsonText(const ExplainReport& r)
{
    using nlohmann::json;
    const Allocation& a = r.allocation;
    json j;
    j["file"] = r.file;
    j["device"] = r.device;
    j["address"] = formatAddress(a.address);
    j["queried_address"] = formatAddress(r.queriedAddress);
    j["allocation"] = {{"id", r.id.value},
                       {"size", a.size},
                       {"block_size", a.blockSize},
                       {"stream", a.stream},
                       {"preexisting", a.preexisting()},
                       {"alloc_event", a.allocEvent},
                       {"free_requested_event", a.freeRequestedEvent},
                       {"free_completed_event", a.freeCompletedEvent},
                       {"alloc_time_us", a.allocTimeUs == kNoTime ? json() : json(a.allocTimeUs)},
                       {"free_time_us", a.freeTimeUs == kNoTime ? json() : json(a.freeTimeUs)}};
    if (!r.operatorName.empty())
        j["allocation"]["operator"] = r.operatorName;
    if (r.classified) {
        j["pool"] = std::string(poolName(r.explanation.pool));
        j["confidence"] = r.explanation.confidence;
        j["rule"] = r.explanation.rule;
        j["reason"] = r.explanation.reason;
        j["evidence"] = r.explanation.evidence;
    } else {
        j["pool"] = nullptr;
    }
    j["allocations_at_address"] = r.allocationsAtAddress;
    j["stack"] = json::array();
    for (const Frame& f : r.stack)
        j["stack"].push_back({{"name", f.name}, {"filename", f.filename}, {"line", f.line}});
    return jsonText(j) + "\n";
}

} // namespace poolscope
