#pragma once
// The SAX handler behind readKinetoTrace (kineto.cpp): keeps only memory instant events and operator
// spans of a Chrome/Kineto trace, with the limits that keep a hostile file bounded. Internal to the
// Kineto reader; nothing else includes it.
#include "core/formats/json_input.h"
#include "core/formats/kineto.h"
#include "core/model/ids.h"
#include "core/util/load_error.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace poolscope::kineto {

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

} // namespace poolscope::kineto
