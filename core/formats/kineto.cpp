#include "core/formats/kineto.h"

#include "core/formats/json_input.h"
#include "core/model/trace_builder.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

namespace poolscope {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
// Strings that are not numbers (pid "Spans", tid "stream 7") get keys far above real pids/tids.
constexpr int64_t kStringKeyBase = int64_t(1) << 62;
// Byte counts beyond 8 PiB are damage (finalizeDevice refuses such sums too); checked here so that
// negating a Bytes value can never overflow.
constexpr int64_t kMaxBytes = int64_t(1) << 53;
// What one memory event costs once the model is built: the budget bounds the number of events.
constexpr int64_t kBytesPerEvent = 256;

struct RawMemory {
    int64_t tsNs = kNoTime;
    int64_t bytes = 0;
    uint64_t addr = 0;
    int64_t totalAllocated = 0;
    int64_t totalReserved = 0;
    int32_t deviceType = -1;
    int32_t deviceId = 0;
    uint32_t thread = 0;
    bool hasAddr = false;
    bool hasTotalAllocated = false;
    bool hasTotalReserved = false;
    bool oom = false;
};

struct RawOp {
    int64_t startNs;
    int64_t endNs;
    uint32_t thread;
    uint32_t name;
};

enum class EvField : uint8_t { Other, Name, Ph, Pid, Tid, Ts, Dur, Args };
enum class ArgField : uint8_t { Other, DeviceType, DeviceId, Bytes, Addr, TotalAllocated, TotalReserved };

EvField eventField(std::string_view k)
{
    if (k == "name") return EvField::Name;
    if (k == "ph") return EvField::Ph;
    if (k == "pid") return EvField::Pid;
    if (k == "tid") return EvField::Tid;
    if (k == "ts") return EvField::Ts;
    if (k == "dur") return EvField::Dur;
    if (k == "args") return EvField::Args;
    return EvField::Other;
}

ArgField argField(std::string_view k)
{
    if (k == "Device Type") return ArgField::DeviceType;
    if (k == "Device Id") return ArgField::DeviceId;
    if (k == "Bytes") return ArgField::Bytes;
    if (k == "Addr") return ArgField::Addr;
    if (k == "Total Allocated") return ArgField::TotalAllocated;
    if (k == "Total Reserved") return ArgField::TotalReserved;
    return ArgField::Other;
}

// A JSON number as the SAX parser hands it over.
struct Num {
    enum Kind : uint8_t { Signed, Unsigned, Float } kind;
    int64_t i = 0;
    uint64_t u = 0;
    double d = 0;
    std::string_view text;

    std::optional<int64_t> asInt() const
    {
        if (kind == Signed) return i;
        if (kind == Unsigned) return u <= uint64_t(std::numeric_limits<int64_t>::max()) ? std::optional<int64_t>(int64_t(u)) : std::nullopt;
        if (std::isfinite(d) && std::fabs(d) < 9.2e18) return int64_t(std::llround(d));
        return std::nullopt;
    }
    std::optional<uint64_t> asUnsigned() const
    {
        if (kind == Unsigned) return u;
        if (kind == Signed) return uint64_t(i); // negative addresses do not occur; keep the bits
        if (std::isfinite(d) && d >= 0 && d < 1.8e19) return uint64_t(std::llround(d));
        return std::nullopt;
    }
    // µs -> ns, exactly from the text for floats.
    std::optional<int64_t> microsToNanos() const
    {
        if (kind == Float) return parseMicrosToNanos(text);
        auto v = asInt();
        if (!v || *v > std::numeric_limits<int64_t>::max() / 1000 || *v < std::numeric_limits<int64_t>::min() / 1000)
            return std::nullopt;
        return *v * 1000;
    }
};

class KinetoSax : public jsonin::SaxBase {
public:
    using SaxBase::SaxBase;

    std::vector<RawMemory> memory;
    std::vector<RawOp> ops;
    std::deque<std::string> names; // stable addresses for the index below
    int64_t memoryWithoutBytes = 0;
    int64_t maxMemoryEvents = std::numeric_limits<int64_t>::max(); // from LoadOptions::memoryBudgetBytes
    int64_t threadCount() const { return int64_t(m_threads.size()); }
    bool sawEventsArray = false;

    bool null() { return true; }
    bool boolean(bool) { return true; }
    bool number_integer(int64_t v) { return number(Num{Num::Signed, v, 0, 0, {}}); }
    bool number_unsigned(uint64_t v) { return number(Num{Num::Unsigned, 0, v, 0, {}}); }
    bool number_float(double v, const std::string& s) { return number(Num{Num::Float, 0, 0, v, s}); }
    bool binary(nlohmann::json::binary_t&) { return true; }

    bool string(std::string& s)
    {
        if (m_inEvent && depth == m_eventDepth) {
            switch (m_field) {
            case EvField::Name: m_name.assign(s); break;
            case EvField::Ph: m_ph = s.empty() ? 0 : s[0]; break;
            case EvField::Pid: m_pid = keyFromString(s); m_hasPid = true; break;
            case EvField::Tid: m_tid = keyFromString(s); m_hasTid = true; break;
            default: break;
            }
        }
        return true;
    }

    bool key(std::string& k)
    {
        if (depth == 1 && m_rootIsObject)
            m_nextArrayIsEvents = (k == "traceEvents");
        else if (m_inEvent && depth == m_eventDepth)
            m_field = eventField(k);
        else if (m_inArgs && depth == m_eventDepth + 1)
            m_arg = argField(k);
        return true;
    }

    bool start_object(std::size_t)
    {
        if (depth == 0)
            m_rootIsObject = true;
        const bool isEvent = m_eventsDepth >= 0 && depth == m_eventsDepth;
        const bool isArgs = m_inEvent && depth == m_eventDepth && m_field == EvField::Args;
        enter();
        if (isEvent)
            beginEvent();
        else if (isArgs)
            m_inArgs = true;
        return true;
    }

    bool end_object()
    {
        if (m_inArgs && depth == m_eventDepth + 1)
            m_inArgs = false;
        else if (m_inEvent && depth == m_eventDepth) {
            m_inEvent = false;
            finishEvent();
        }
        leave();
        return true;
    }

    bool start_array(std::size_t)
    {
        const bool events = m_eventsDepth < 0 && (depth == 0 || (depth == 1 && m_rootIsObject && m_nextArrayIsEvents));
        enter();
        if (events) {
            m_eventsDepth = depth;
            sawEventsArray = true;
        }
        return true;
    }

    bool end_array()
    {
        if (depth == m_eventsDepth)
            m_eventsDepth = -2; // the events array is closed; later arrays are something else
        leave();
        return true;
    }

private:
    bool number(const Num& n)
    {
        if (m_inEvent && depth == m_eventDepth) {
            switch (m_field) {
            case EvField::Pid: m_pid = n.asInt().value_or(0); m_hasPid = true; break;
            case EvField::Tid: m_tid = n.asInt().value_or(0); m_hasTid = true; break;
            case EvField::Ts:
                if (auto v = n.microsToNanos()) m_ts = *v, m_hasTs = true;
                break;
            case EvField::Dur:
                if (auto v = n.microsToNanos()) m_dur = *v, m_hasDur = true;
                break;
            default: break;
            }
        } else if (m_inArgs && depth == m_eventDepth + 1) {
            switch (m_arg) {
            case ArgField::DeviceType: m_mem.deviceType = int32_t(n.asInt().value_or(-1)); break;
            case ArgField::DeviceId: m_mem.deviceId = int32_t(n.asInt().value_or(0)); break;
            case ArgField::Bytes:
                if (auto v = n.asInt()) m_mem.bytes = *v, m_hasBytes = true;
                break;
            case ArgField::Addr:
                if (auto v = n.asUnsigned()) m_mem.addr = *v, m_mem.hasAddr = true;
                break;
            case ArgField::TotalAllocated:
                if (auto v = n.asInt()) m_mem.totalAllocated = *v, m_mem.hasTotalAllocated = true;
                break;
            case ArgField::TotalReserved:
                if (auto v = n.asInt()) m_mem.totalReserved = *v, m_mem.hasTotalReserved = true;
                break;
            default: break;
            }
        }
        return true;
    }

    void beginEvent()
    {
        m_inEvent = true;
        m_eventDepth = depth;
        m_field = EvField::Other;
        m_name.clear();
        m_ph = 0;
        m_pid = m_tid = 0;
        m_hasPid = m_hasTid = m_hasTs = m_hasDur = m_hasBytes = false;
        m_ts = m_dur = 0;
        m_mem = RawMemory{};
    }

    void finishEvent()
    {
        const bool oom = m_name == "[OutOfMemory]";
        if (oom || m_name == "[memory]") {
            if (!m_hasBytes) {
                ++memoryWithoutBytes;
                return;
            }
            if (!oom && (m_mem.bytes > kMaxBytes || m_mem.bytes < -kMaxBytes))
                cursor.fail(LoadErrorCode::Malformed, "[memory] event with Bytes " + std::to_string(m_mem.bytes) +
                                                          ": beyond 8 PiB, not a real byte count");
            for (const auto& [has, v, what] : {std::tuple{m_mem.hasTotalAllocated, m_mem.totalAllocated, "Total Allocated"},
                                               std::tuple{m_mem.hasTotalReserved, m_mem.totalReserved, "Total Reserved"}})
                if (has && (v > kMaxBytes || v < -kMaxBytes))
                    cursor.fail(LoadErrorCode::Malformed, std::string("[memory] event with ") + what + " " + std::to_string(v) +
                                                              ": beyond 8 PiB, not a real byte count");
            if (int64_t(memory.size()) >= maxMemoryEvents)
                cursor.fail(LoadErrorCode::LimitExceeded,
                            "more than " + std::to_string(maxMemoryEvents) + " [memory] events: beyond the memory budget (" +
                                std::to_string(kBytesPerEvent) + " bytes each once built; LoadOptions::memoryBudgetBytes)");
            m_mem.oom = oom;
            m_mem.tsNs = m_hasTs ? m_ts : kNoTime;
            m_mem.thread = thread();
            memory.push_back(m_mem);
        } else if (m_ph == 'X' && m_hasTs && m_hasDur) {
            // ts and dur are each below 2^63 ns; their sum may not be: an op that ends past the end of time.
            const int64_t dur = std::max<int64_t>(m_dur, 0);
            const int64_t end = m_ts > std::numeric_limits<int64_t>::max() - dur ? std::numeric_limits<int64_t>::max() : m_ts + dur;
            ops.push_back(RawOp{m_ts, end, thread(), internName()});
        }
    }

    uint32_t thread()
    {
        const auto key = std::make_pair(m_pid, m_tid);
        auto [it, inserted] = m_threads.try_emplace(key, uint32_t(m_threads.size()));
        return it->second;
    }

    uint32_t internName()
    {
        auto it = m_nameIndex.find(m_name);
        if (it != m_nameIndex.end())
            return it->second;
        names.push_back(m_name);
        const auto id = uint32_t(names.size() - 1);
        m_nameIndex.emplace(names.back(), id);
        return id;
    }

    int64_t keyFromString(const std::string& s)
    {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc() && p == s.data() + s.size())
            return v; // Kineto writes some tids as "25738"
        auto [it, inserted] = m_stringKeys.try_emplace(s, kStringKeyBase + int64_t(m_stringKeys.size()));
        return it->second;
    }

    struct PairHash {
        size_t operator()(const std::pair<int64_t, int64_t>& p) const noexcept
        {
            return std::hash<int64_t>{}(p.first) * 1000003u ^ std::hash<int64_t>{}(p.second);
        }
    };

    bool m_rootIsObject = false;
    bool m_nextArrayIsEvents = false;
    int m_eventsDepth = -1; // depth (containers open) inside the events array
    bool m_inEvent = false;
    bool m_inArgs = false;
    int m_eventDepth = 0;
    EvField m_field = EvField::Other;
    ArgField m_arg = ArgField::Other;
    std::string m_name;
    char m_ph = 0;
    int64_t m_pid = 0, m_tid = 0, m_ts = 0, m_dur = 0;
    bool m_hasPid = false, m_hasTid = false, m_hasTs = false, m_hasDur = false, m_hasBytes = false;
    RawMemory m_mem;
    std::unordered_map<std::pair<int64_t, int64_t>, uint32_t, PairHash> m_threads;
    std::unordered_map<std::string_view, uint32_t> m_nameIndex;
    std::unordered_map<std::string, int64_t> m_stringKeys;
};

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
                a.opName = sax.names[eventOp[size_t(a.allocEvent)]];
        anchorOnReported(dev, firstReportedIndex, out.warnings);
        out.devices.push_back(std::move(dev));
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
