#include "core/timeline/prepared_trace.h"

#include "core/util/load_error.h"

#include <atomic>
#include <exception>
#include <optional>
#include <thread>
#include <tuple>

namespace poolscope {

size_t PreparedTrace::defaultDevice() const
{
    size_t best = 0;
    auto score = [&](size_t i) {
        const DeviceTrace& d = trace->devices[i];
        return std::tuple(!d.ooms.empty(), d.kind == DeviceKind::Cuda, d.eventCount(), d.segments.size());
    };
    for (size_t i = 1; i < devices.size(); ++i)
        if (score(i) > score(best))
            best = i;
    return best;
}

size_t PreparedTrace::findDevice(int device) const
{
    for (size_t i = 0; i < trace->devices.size(); ++i)
        if (trace->devices[i].device == device && trace->devices[i].kind == DeviceKind::Cuda)
            return i;
    for (size_t i = 0; i < trace->devices.size(); ++i)
        if (trace->devices[i].device == device)
            return i;
    return std::string::npos;
}

PoolAssignment poolAssignment(const Trace&, const DeviceTrace& dev, const Classification& c)
{
    PoolAssignment p;
    if (c.size() != dev.allocations.size())
        return p;
    p.allocationPool = c.pool;
    p.allocationRule = c.rule;
    p.ruleReason.reserve(c.rules.size());
    for (const auto& r : c.rules)
        p.ruleReason.push_back(r.reason);
    return p;
}

std::shared_ptr<const PreparedTrace> prepareTrace(std::shared_ptr<const Trace> trace, const RuleSet* rules,
                                                  const std::atomic<bool>* cancel)
{
    auto out = std::make_shared<PreparedTrace>();
    out->trace = trace;
    std::optional<RuleSet> loaded;
    if (!rules) {
        try {
            loaded = RuleSet::load();
            rules = &*loaded;
        } catch (const std::exception& e) {
            out->notes.push_back(std::string("pools are unclassified: the classifier rules could not be loaded (") + e.what() + ")");
        }
    }
    for (size_t i = 0; i < trace->devices.size(); ++i) {
        if (cancel && cancel->load())
            return nullptr;
        const DeviceTrace& dev = trace->devices[i];
        PreparedDevice pd;
        if (rules) {
            // The alive-set index and the time axis read only the trace, not the pools: built on a
            // second thread while this one classifies (see TimelineParts). Then that thread makes
            // zeroed columns for the pool series until the classifier is done (see ColumnStock).
            TimelineParts parts;
            ColumnStock stock(dev.eventCount());
            std::atomic<bool> classified{false};
            std::exception_ptr aliveError;
            std::thread aliveThread([&] {
                try {
                    parts.alive.emplace(dev.allocations);
                    if (dev.hasTime)
                        parts.timeAxis = EventAxis::byTime(dev.events.timeUs);
                    stock.fill(kPoolCount, classified);
                } catch (...) {
                    aliveError = std::current_exception();
                }
            });
            std::shared_ptr<Classification> c;
            try {
                c = std::make_shared<Classification>(classify(*trace, dev, *rules));
            } catch (...) {
                classified = true;
                aliveThread.join();
                throw;
            }
            classified = true;
            aliveThread.join();
            if (aliveError)
                std::rethrow_exception(aliveError);
            std::optional<PoolSeries> series;
            series.emplace(computePoolSeries(dev, *c, PoolSeriesOptions{.stock = &stock}));
            stock.clear();
            pd.timeline = std::make_shared<DeviceTimeline>(trace, i, poolAssignment(*trace, dev, *c), std::move(series), std::move(parts));
            pd.classification = std::move(c);
        } else {
            pd.timeline = std::make_shared<DeviceTimeline>(trace, i);
        }
        out->devices.push_back(std::move(pd));
    }
    return out;
}

} // namespace poolscope
