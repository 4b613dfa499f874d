#include "core/formats/kineto.h"

#include "core/formats/kineto_sax.h"
#include "core/model/trace_builder.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

namespace poolscope {
namespace {

using namespace kineto;

struct OpAssignment {
    std::vector<StackId> stack;     // per memory event
    std::vector<uint32_t> innermost; // per memory event: op name index or kNone
    int64_t outside = 0;
};

// Names every memory event by the operators that enclose it on its pid/tid: sweep each thread's ops
// (sorted by start, longest first so parents precede children) alongside its memory events by ts.
OpAssignment assignOperators(const KinetoSax& sax, FrameTable& frames)
{
    const auto& ops = sax.ops;
    const auto& mem = sax.memory;
    std::vector<uint32_t> opOrder(ops.size());
    std::iota(opOrder.begin(), opOrder.end(), 0u);
    std::sort(opOrder.begin(), opOrder.end(), [&](uint32_t a, uint32_t b) {
        const auto& x = ops[a];
        const auto& y = ops[b];
        if (x.thread != y.thread) return x.thread < y.thread;
        if (x.startNs != y.startNs) return x.startNs < y.startNs;
        if (x.endNs != y.endNs) return x.endNs > y.endNs;
        return a < b;
    });
    std::vector<uint32_t> memOrder(mem.size());
    std::iota(memOrder.begin(), memOrder.end(), 0u);
    std::stable_sort(memOrder.begin(), memOrder.end(), [&](uint32_t a, uint32_t b) {
        if (mem[a].thread != mem[b].thread) return mem[a].thread < mem[b].thread;
        return mem[a].tsNs < mem[b].tsNs;
    });

    OpAssignment result;
    result.stack.assign(mem.size(), StackId{});
    result.innermost.assign(mem.size(), kNone);
    std::vector<FrameId> nameFrame(sax.names.size());
    std::vector<uint32_t> open; // ops that may still contain later events, outermost first
    std::vector<FrameId> chain;
    size_t oi = 0;
    uint32_t currentThread = kNone;
    for (uint32_t m : memOrder) {
        const auto& ev = mem[m];
        if (ev.thread != currentThread) {
            currentThread = ev.thread;
            open.clear();
            while (oi < opOrder.size() && ops[opOrder[oi]].thread < currentThread)
                ++oi;
        }
        for (; oi < opOrder.size() && ops[opOrder[oi]].thread == currentThread && ops[opOrder[oi]].startNs <= ev.tsNs; ++oi) {
            const auto& op = ops[opOrder[oi]];
            while (!open.empty() && ops[open.back()].endNs < op.startNs)
                open.pop_back();
            open.push_back(opOrder[oi]);
        }
        // Events come in ts order, so an op that ended before this one never contains a later one.
        std::erase_if(open, [&](uint32_t o) { return ops[o].endNs < ev.tsNs; });
        if (open.empty()) {
            ++result.outside;
            continue;
        }
        chain.clear();
        for (auto it = open.rbegin(); it != open.rend(); ++it) {
            const uint32_t name = ops[*it].name;
            if (!nameFrame[name].valid())
                nameFrame[name] = frames.internFrame("<op>", sax.names[name], 0);
            chain.push_back(nameFrame[name]);
        }
        result.stack[m] = frames.internStack(chain);
        result.innermost[m] = ops[open.back()].name;
    }
    return result;
}

int64_t nanosToMicros(int64_t ns)
{
    if (ns == kNoTime)
        return kNoTime;
    return ns >= 0 ? ns / 1000 : -((-ns + 999) / 1000);
}

int kindOrder(int32_t deviceType) { return deviceType == 1 ? 0 : deviceType == 0 ? 1 : 2; }

void anchorReserved(DeviceTrace& dev);

// Kineto reports the allocator's own totals: anchor our running sum on them (it knows what was
// allocated before profiling began) and take reserved bytes from them (there are no segment events).
void anchorOnReported(DeviceTrace& dev, int64_t firstReportedIndex, std::vector<std::string>& warnings)
{
    if (firstReportedIndex >= 0 && !dev.reportedAllocated.empty()) {
        const auto j = size_t(firstReportedIndex);
        const int64_t initial = dev.reportedAllocated[j] - (dev.allocated[j] - dev.initialAllocated);
        if (initial >= dev.orphanFreeBytes) {
            anchorInitialAllocated(dev, initial);
            return anchorReserved(dev);
        }
        warnings.push_back(dev.label() + ": Total Allocated is smaller than the [memory] events imply; "
                                         "allocated bytes are our own running sum");
    }
    anchorInitialAllocated(dev, dev.orphanFreeBytes);
    anchorReserved(dev);
}

void anchorReserved(DeviceTrace& dev)
{
    const size_t n = dev.eventCount();
    if (!dev.reportedReserved.empty() && n > 0) {
        dev.reserved = dev.reportedReserved;
        dev.initialReserved = dev.reserved.front();
        dev.endReserved = dev.reserved.back();
    }
}

// Replaces leading "unknown" (-1) entries of a carried-forward series with its first known value.
void backfill(std::vector<int64_t>& series)
{
    auto first = std::find_if(series.begin(), series.end(), [](int64_t v) { return v >= 0; });
    if (first == series.end())
        return;
    std::fill(series.begin(), first, *first);
}

} // namespace

void anchorInitialAllocated(DeviceTrace& dev, int64_t initial)
{
    const int64_t shift = initial - dev.initialAllocated;
    if (shift == 0)
        return;
    for (auto& v : dev.allocated)
        v += shift;
    dev.initialAllocated = initial;
    dev.peakAllocated += shift;
}

std::optional<int64_t> parseMicrosToNanos(std::string_view text)
{
    if (text.find_first_of("eE") != std::string_view::npos) {
        const double d = std::strtod(std::string(text).c_str(), nullptr);
        if (!std::isfinite(d) || std::fabs(d) > 9.2e15)
            return std::nullopt;
        return int64_t(std::llround(d * 1000.0));
    }
    size_t p = 0;
    const bool negative = p < text.size() && text[p] == '-';
    if (negative)
        ++p;
    int64_t whole = 0;
    const size_t digitsStart = p;
    for (; p < text.size() && text[p] >= '0' && text[p] <= '9'; ++p) {
        if (whole > (std::numeric_limits<int64_t>::max() / 1000 - 9) / 10)
            return std::nullopt;
        whole = whole * 10 + (text[p] - '0');
    }
    if (p == digitsStart)
        return std::nullopt;
    int64_t frac = 0;
    int fracDigits = 0;
    bool roundUp = false;
    if (p < text.size() && text[p] == '.') {
        for (++p; p < text.size() && text[p] >= '0' && text[p] <= '9'; ++p) {
            if (fracDigits < 3) {
                frac = frac * 10 + (text[p] - '0');
                ++fracDigits;
            } else if (fracDigits == 3) {
                roundUp = text[p] >= '5';
                ++fracDigits;
            }
        }
    }
    if (p != text.size())
        return std::nullopt;
    for (int k = std::min(fracDigits, 3); k < 3; ++k)
        frac *= 10;
    const int64_t ns = whole * 1000 + frac + (roundUp ? 1 : 0);
    return negative ? -ns : ns;
}

void readKinetoTrace(std::span<const uint8_t> bytes, const std::string& name, Trace& out, const LoadOptions& options,
                     Progress& progress)
{
    jsonin::ByteCursor cursor(bytes, name, progress);
    KinetoSax sax(cursor, options.maxNesting);
    sax.maxMemoryEvents = std::max<int64_t>(options.memoryBudgetBytes / kBytesPerEvent, 1);
    jsonin::saxParse(cursor, sax, progress);
    if (!sax.sawEventsArray)
        throw LoadError(LoadErrorCode::Malformed, name, -1,
                        "expected a Chrome trace: a JSON object with a \"traceEvents\" array, or an array of events");

    progress.stage.store(int(LoadStage::Building), std::memory_order_relaxed);
    const OpAssignment ops = assignOperators(sax, out.frames);

    // Group per (Device Type, Device Id), CUDA first; file order is kept within a device.
    std::map<std::tuple<int, int32_t, int32_t>, std::vector<uint32_t>> perDevice;
    for (uint32_t i = 0; i < sax.memory.size(); ++i) {
        const auto& m = sax.memory[i];
        perDevice[{kindOrder(m.deviceType), m.deviceType, m.deviceId}].push_back(i);
    }
    // Each device is a DeviceTrace with its own tables: a few bytes of file must not make millions.
    constexpr size_t kMaxDevices = 1024;
    if (perDevice.size() > kMaxDevices)
        throw LoadError(LoadErrorCode::LimitExceeded, name, -1, "[memory] events name " + std::to_string(perDevice.size()) +
                                                                    " devices (Device Type, Device Id); PoolScope reads at most " +
                                                                    std::to_string(kMaxDevices));

    // Operator names go to out.opNames once each, as they are first used by an allocation.
    std::vector<uint32_t> opOfName(sax.names.size(), 0);
    auto opIndex = [&](uint32_t name) {
        if (opOfName[name] == 0) {
            opOfName[name] = uint32_t(out.opNames.size());
            out.opNames.push_back(sax.names[name]);
        }
        return opOfName[name];
    };
    bool anyWithoutAddr = false, anyWithTotals = false;
    for (auto& [key, indices] : perDevice) {
        std::stable_sort(indices.begin(), indices.end(),
                         [&](uint32_t a, uint32_t b) { return sax.memory[a].tsNs < sax.memory[b].tsNs; });
        const int32_t type = std::get<1>(key);
        DeviceTrace dev;
        dev.kind = type == 1 ? DeviceKind::Cuda : type == 0 ? DeviceKind::Cpu : DeviceKind::Other;
        dev.device = std::get<2>(key);
        dev.events.reserve(indices.size());

        const bool hasAllocated = std::any_of(indices.begin(), indices.end(), [&](uint32_t i) { return sax.memory[i].hasTotalAllocated; });
        const bool hasReserved = std::any_of(indices.begin(), indices.end(), [&](uint32_t i) { return sax.memory[i].hasTotalReserved; });
        anyWithTotals = anyWithTotals || hasAllocated;
        int64_t lastAllocated = -1, lastReserved = -1, firstReportedIndex = -1;
        uint64_t nextSynthetic = 1;
        std::unordered_map<int64_t, std::vector<uint64_t>> openBySize; // addressless allocations, LIFO
        std::vector<uint32_t> eventOp;
        eventOp.reserve(indices.size());

        for (uint32_t i : indices) {
            const auto& m = sax.memory[i];
            const int64_t ts = nanosToMicros(m.tsNs);
            const StackId stack = ops.stack[i];
            anyWithoutAddr = anyWithoutAddr || (!m.hasAddr && !m.oom);
            if (m.oom) {
                // An OOM's request is kept whatever it says (a bug's absurd size is the story); |INT64_MIN| saturates.
                const int64_t requested = m.bytes >= 0 ? m.bytes : m.bytes == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -m.bytes;
                dev.events.push(Action::Oom, std::numeric_limits<uint64_t>::max(), requested, 0, ts, stack);
            } else if (m.bytes > 0) {
                uint64_t addr = m.addr;
                if (!m.hasAddr) {
                    addr = nextSynthetic++;
                    openBySize[m.bytes].push_back(addr);
                }
                dev.events.push(Action::Alloc, addr, m.bytes, 0, ts, stack);
            } else if (m.bytes < 0) {
                uint64_t addr = m.addr;
                if (!m.hasAddr) {
                    auto& open = openBySize[-m.bytes];
                    if (open.empty()) {
                        addr = nextSynthetic++;
                    } else {
                        addr = open.back();
                        open.pop_back();
                    }
                }
                dev.events.push(Action::FreeCompleted, addr, -m.bytes, 0, ts, stack);
            } else {
                dev.events.push(Action::Unknown, m.addr, 0, 0, ts, stack);
                ++dev.unknownActions["[memory] with Bytes = 0"];
            }
            eventOp.push_back(ops.innermost[i]);
            if (m.hasTotalAllocated) {
                if (firstReportedIndex < 0)
                    firstReportedIndex = int64_t(dev.events.count() - 1);
                lastAllocated = m.totalAllocated;
            }
            if (m.hasTotalReserved)
                lastReserved = m.totalReserved;
            if (hasAllocated)
                dev.reportedAllocated.push_back(lastAllocated);
            if (hasReserved)
                dev.reportedReserved.push_back(lastReserved);
        }
        backfill(dev.reportedAllocated);
        backfill(dev.reportedReserved);

        finalizeDevice(dev, out.warnings);
        for (auto& a : dev.allocations)
            if (a.allocEvent != kNoEvent && eventOp[size_t(a.allocEvent)] != kNone)
                a.op = opIndex(eventOp[size_t(a.allocEvent)]);
        anchorOnReported(dev, firstReportedIndex, out.warnings);
        out.devices.push_back(std::move(dev));
    }

    // torch.profiler's schedule marks every step with a ProfilerStep#N op: kept as annotations for
    // every device (issue 24's steps), as a snapshot's record_function scopes are.
    for (const RawOp& op : sax.ops) {
        const std::string& opName = sax.names[op.name];
        if (opName.rfind("ProfilerStep#", 0) != 0 || opName.size() == 13 ||
            opName.find_first_not_of("0123456789", 13) != std::string::npos)
            continue;
        out.annotations.push_back(Annotation{opName, true, -1, nanosToMicros(op.startNs)});
        out.annotations.push_back(Annotation{opName, false, -1, nanosToMicros(op.endNs)});
    }
    if (sax.memory.empty())
        out.warnings.push_back("the trace has no [memory] events: record with torch.profiler.profile(profile_memory=True)");
    if (sax.memoryWithoutBytes > 0)
        out.warnings.push_back(std::to_string(sax.memoryWithoutBytes) + " [memory] events without a Bytes argument were ignored");
    if (ops.outside > 0)
        out.warnings.push_back(std::to_string(ops.outside) + " of " + std::to_string(sax.memory.size()) +
                               " memory events lie outside every operator on their thread (no operator name)");
    if (anyWithoutAddr)
        out.versionHints.push_back("older profiler: [memory] events without Addr (allocations paired by size)");
    if (!sax.memory.empty() && !anyWithTotals)
        out.versionHints.push_back("older profiler: no Total Allocated/Reserved (allocated bytes are our running sum from 0)");
    progress.stage.store(int(LoadStage::Done), std::memory_order_relaxed);
}

} // namespace poolscope
