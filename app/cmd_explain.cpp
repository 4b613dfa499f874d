#include "app/args.h"
#include "app/commands.h"

#include "core/classify/classifier.h"
#include "core/load.h"
#include "core/util/units.h"

#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace poolscope::app {
namespace {

uint64_t parseAddress(const std::string& text)
{
    try {
        size_t used = 0;
        const bool hex = text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0;
        const uint64_t v = std::stoull(hex ? text.substr(2) : text, &used, hex ? 16 : 10);
        if (used != text.size() - (hex ? 2 : 0) || text.empty())
            throw std::invalid_argument("");
        return v;
    } catch (const std::exception&) {
        throw UsageError("--addr expects an address such as 0x7f2a3c000000, got '" + text + "'");
    }
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

// Addresses are reused: the allocation that starts at `addr` (or contains it) and was alive at
// `index`; without an index the one alive at the peak, else the most recent one.
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

int runExplain(const std::vector<std::string>& argv)
{
    return guarded("explain", [&] {
        Args args(argv);
        const auto addrText = args.option("--addr");
        if (!addrText)
            throw UsageError("explain needs --addr ADDRESS");
        const uint64_t addr = parseAddress(*addrText);
        std::optional<EventIndex> index;
        if (auto v = args.option("--index"))
            index = Args({"--index", *v}).intOption("--index", 0);
        std::optional<int> deviceNumber;
        if (auto v = args.option("--device"))
            deviceNumber = Args({"--device", *v}).intOption("--device", 0);
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool asJson = args.flag("--json");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("explain expects one FILE");
        const RuleSet rules = RuleSet::load(rulesFile);
        const auto trace = load(files[0]);

        const DeviceTrace* dev = nullptr;
        AllocId id;
        size_t candidates = 0;
        for (const auto& d : trace->devices) {
            if (deviceNumber && d.device != *deviceNumber)
                continue;
            if (index && (*index < -1 || *index >= EventIndex(d.eventCount())))
                continue;
            size_t n = 0;
            const AllocId found = findAllocation(d, addr, index, n);
            if (!dev || (found.valid() && !id.valid())) {
                dev = &d;
                id = found;
                candidates = n;
            }
            if (found.valid() && d.kind == DeviceKind::Cuda)
                break;
        }
        if (!dev)
            throw std::invalid_argument(deviceNumber ? "the trace has no device " + std::to_string(*deviceNumber) +
                                                           (index ? " with event #" + std::to_string(*index) : "")
                                                     : "the trace has no device with that event index");
        if (!id.valid())
            throw std::invalid_argument("no allocation at " + formatAddress(addr) + " on " + dev->label() +
                                        (index ? " alive at event #" + std::to_string(*index) : "") +
                                        (candidates ? " (" + std::to_string(candidates) + " other allocation(s) used it; try another --index)" : ""));

        const Classification c = classify(*trace, *dev, rules);
        const Explanation x = explain(*trace, *dev, c, id);
        const Allocation& a = dev->allocations[id.value];
        std::vector<const Frame*> frames;
        if (a.stack.valid())
            for (FrameId f : trace->frames.stack(a.stack))
                frames.push_back(&trace->frames.frame(f));

        if (asJson) {
            nlohmann::json j;
            j["file"] = trace->path;
            j["device"] = dev->label();
            j["address"] = formatAddress(a.address);
            j["queried_address"] = formatAddress(addr);
            j["allocation"] = {{"id", id.value},
                               {"size", a.size},
                               {"block_size", a.blockSize},
                               {"stream", a.stream},
                               {"preexisting", a.preexisting()},
                               {"alloc_event", a.allocEvent},
                               {"free_requested_event", a.freeRequestedEvent},
                               {"free_completed_event", a.freeCompletedEvent},
                               {"alloc_time_us", a.allocTimeUs == kNoTime ? nlohmann::json() : nlohmann::json(a.allocTimeUs)},
                               {"free_time_us", a.freeTimeUs == kNoTime ? nlohmann::json() : nlohmann::json(a.freeTimeUs)}};
            if (!trace->opName(a).empty())
                j["allocation"]["operator"] = trace->opName(a);
            j["pool"] = std::string(poolName(x.pool));
            j["confidence"] = x.confidence;
            j["rule"] = x.rule;
            j["reason"] = x.reason;
            j["evidence"] = x.evidence;
            j["allocations_at_address"] = candidates;
            j["stack"] = nlohmann::json::array();
            for (const Frame* f : frames)
                j["stack"].push_back({{"name", f->name}, {"filename", f->filename}, {"line", f->line}});
            std::cout << j.dump(2) << "\n";
            return 0;
        }
        std::cout << formatAddress(a.address) << " on " << dev->label() << ": " << formatBytes(a.size) << " (" << a.size
                  << " B), " << lifeText(a) << "\n";
        if (a.address != addr)
            std::cout << "  (" << formatAddress(addr) << " lies inside this block, at offset " << (addr - a.address) << ")\n";
        if (candidates > 1)
            std::cout << "  (" << candidates << " allocations used this address; pick another with --index EVENT)\n";
        std::cout << "  pool        " << poolName(x.pool) << " (confidence " << int(x.confidence) << "%)\n"
                  << "  reason      " << x.reason << "\n"
                  << "  rule        " << x.rule << "\n"
                  << "  evidence\n";
        for (const auto& e : x.evidence)
            std::cout << "    - " << e << "\n";
        if (frames.empty()) {
            std::cout << "  stack       (none recorded)\n";
        } else {
            std::cout << "  stack (innermost first)\n";
            for (size_t k = 0; k < frames.size(); ++k) {
                std::cout << "    #" << k << " " << frames[k]->name;
                if (!frames[k]->filename.empty() && frames[k]->filename != "??")
                    std::cout << "  " << frames[k]->filename << (frames[k]->line > 0 ? ":" + std::to_string(frames[k]->line) : "");
                std::cout << "\n";
            }
        }
        return 0;
    });
}

const CommandRegistrar kRegister({"explain", "explain FILE --addr 0x... [--index N] [--device N] [--rules FILE] [--json]",
                                  "one allocation's pool, the rule and evidence that decided it, and its stack", runExplain});

} // namespace
} // namespace poolscope::app
