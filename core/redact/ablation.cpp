#include "core/redact/ablation.h"

#include "core/classify/rules.h"
#include "core/engine/document.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace poolscope {
namespace {

bool stackEmpty(const Trace& trace, StackId id) { return trace.frames.stack(id).empty(); }

// An allocation's own stack and the stack that freed it: the frames a rule may have read.
bool framesAbsent(const Trace& trace, const DeviceTrace& dev, const Allocation& a)
{
    if (!stackEmpty(trace, a.stack))
        return false;
    const EventIndex free = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
    return free == kNoEvent || size_t(free) >= dev.events.count() || stackEmpty(trace, dev.events.stack[size_t(free)]);
}

AblationMoment measure(EventIndex at, const DeviceDocument& original, const DeviceDocument& redacted)
{
    AblationMoment m;
    m.index = at;
    const DeviceTrace& dev = original.device();
    const Classification& a = *original.classification();
    const Classification& b = *redacted.classification();
    for (size_t i = 0; i < dev.allocations.size(); ++i) {
        const Allocation& al = dev.allocations[i];
        if (!al.aliveAfter(at))
            continue;
        m.bytes += al.size;
        const bool moved = a.pool[i] != b.pool[i];
        if (moved)
            m.moved += al.size;
        if (b.confidence[i] < kConfidentPercent)
            continue;
        const bool originalFromFrames = (a.evidenceOf(i) & kEvidenceFrames) != 0;
        const bool claimsAbsentFrames = (b.evidenceOf(i) & kEvidenceFrames) != 0 &&
                                        framesAbsent(redacted.trace(), redacted.device(), redacted.device().allocations[i]);
        if ((moved && originalFromFrames) || claimsAbsentFrames)
            m.confidentWithoutFrames += al.size;
    }
    return m;
}

EventIndex defaultIndex(const DeviceTrace& dev) { return dev.ooms.empty() ? dev.peakIndex : dev.ooms.back().index; }

std::string percent(double f)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * f);
    return buf;
}

std::string mib(int64_t bytes)
{
    if (bytes == 0)
        return "0";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
    return buf;
}

} // namespace

std::vector<AblationVariant> standardAblations()
{
    std::vector<AblationVariant> v(3);
    v[0].name = "renamed";
    v[0].options.renameCode = true;
    v[1].name = "python";
    v[1].options.frames = FrameKeep::Python;
    v[2].name = "none";
    v[2].options.frames = FrameKeep::None;
    return v;
}

AblationResult ablate(const std::shared_ptr<const Trace>& trace, const std::shared_ptr<const RuleSet>& rules,
                      const std::vector<AblationVariant>& variants)
{
    DocumentOptions docOptions;
    docOptions.rules = rules;
    docOptions.eagerTimelines = false;
    docOptions.poolSeries = false;
    const auto original = Document::fromTrace(trace, docOptions);

    AblationResult result;
    result.file = trace->path;
    std::vector<size_t> classified; // device index per row
    for (size_t d = 0; d < original->deviceCount(); ++d) {
        const DeviceDocument& dev = original->device(d);
        if (!dev.classified())
            continue;
        AblationDevice row;
        row.label = dev.label();
        row.defaultMoment = dev.device().ooms.empty() ? "peak" : "oom";
        row.history = dev.classification()->history;
        for (const Allocation& a : dev.device().allocations)
            if (!stackEmpty(*trace, a.stack)) {
                row.hadFrames = true;
                break;
            }
        result.devices.push_back(std::move(row));
        classified.push_back(d);
    }
    // One redacted copy at a time: a big dump is held twice, not four times.
    for (const auto& v : variants) {
        RedactOptions options = v.options;
        if (!options.markers)
            options.markers = rules.get();
        const auto redacted = Document::fromTrace(redact(*trace, options), docOptions);
        for (size_t r = 0; r < classified.size(); ++r) {
            const DeviceDocument& dev = original->device(classified[r]);
            const DeviceDocument& other = redacted->device(classified[r]);
            AblationCell cell;
            cell.variant = v.name;
            cell.atDefault = measure(defaultIndex(dev.device()), dev, other);
            cell.atPeak = measure(dev.device().peakIndex, dev, other);
            cell.wholeRun = worstMomentOfRun(dev, other);
            std::map<std::string, int64_t> flows, ruleFlows;
            const auto& a = *dev.classification();
            const auto& b = *other.classification();
            for (size_t i = 0; i < a.size(); ++i)
                if (a.pool[i] != b.pool[i] && dev.device().allocations[i].aliveAfter(cell.atDefault.index)) {
                    const int64_t size = dev.device().allocations[i].size;
                    flows[std::string(poolName(a.pool[i])) + " -> " + std::string(poolName(b.pool[i]))] += size;
                    ruleFlows[std::string(poolName(a.pool[i])) + " (" + a.rules[a.rule[i]].name + ") -> " +
                              std::string(poolName(b.pool[i])) + " (" + b.rules[b.rule[i]].name + ")"] += size;
                }
            auto bySize = [](const auto& x, const auto& y) { return x.second > y.second; };
            cell.flows.assign(flows.begin(), flows.end());
            std::sort(cell.flows.begin(), cell.flows.end(), bySize);
            cell.ruleFlows.assign(ruleFlows.begin(), ruleFlows.end());
            std::sort(cell.ruleFlows.begin(), cell.ruleFlows.end(), bySize);
            result.devices[r].cells.push_back(std::move(cell));
        }
    }
    return result;
}

std::string ablationMarkdown(const std::vector<AblationResult>& results)
{
    std::ostringstream out;
    std::vector<std::string> variants;
    for (const auto& r : results)
        for (const auto& d : r.devices)
            for (const auto& c : d.cells)
                if (std::find(variants.begin(), variants.end(), c.variant) == variants.end())
                    variants.push_back(c.variant);
    out << "| file | device | default |";
    for (const auto& v : variants)
        out << " " << v << " moved (default / peak / run) |";
    out << " conf. >= 70 % without its frames |\n|---|---|---|";
    for (size_t i = 0; i <= variants.size(); ++i)
        out << "---|";
    out << "\n";
    for (const auto& r : results) {
        std::string file = r.file;
        if (const size_t slash = file.find_last_of("/\\"); slash != std::string::npos)
            file = file.substr(slash + 1);
        for (const auto& d : r.devices) {
            out << "| " << file << " | " << d.label << " | " << d.defaultMoment << (d.history ? "" : ", no history")
                << (d.hadFrames ? "" : ", no frames") << " |";
            std::string confident;
            for (const auto& v : variants) {
                auto it = std::find_if(d.cells.begin(), d.cells.end(), [&](const AblationCell& c) { return c.variant == v; });
                if (it == d.cells.end()) {
                    out << " |";
                    continue;
                }
                out << " " << percent(it->atDefault.movedFraction()) << " / " << percent(it->atPeak.movedFraction()) << " / "
                    << percent(it->wholeRun.movedFraction()) << " |";
                const int64_t c = std::max(it->atDefault.confidentWithoutFrames, it->atPeak.confidentWithoutFrames);
                if (c > 0)
                    confident += (confident.empty() ? "" : ", ") + v + " " + mib(c);
            }
            out << " " << (confident.empty() ? "0" : confident) << " |\n";
        }
    }
    return out.str();
}

} // namespace poolscope
