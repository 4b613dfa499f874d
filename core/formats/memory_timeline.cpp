#include "core/formats/memory_timeline.h"

#include "core/formats/json_input.h"
#include "core/formats/kineto.h"
#include "core/model/trace_builder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace poolscope {
namespace {

enum RawAction : int64_t { kPreexisting = 1, kCreate = 2, kIncrementVersion = 3, kDestroy = 4 };
constexpr int64_t kCategoryCount = 8; // 0..6 named, 7 = None ("unknown")

using Row = std::array<int64_t, 4>; // t_ns, action, bytes, category
// Byte counts beyond 8 PiB are damage (finalizeDevice refuses such sums too); checked per row so that
// negating bytes can never overflow.
constexpr int64_t kMaxBytes = int64_t(1) << 53;
// What one row costs once the model is built: the budget bounds the number of rows.
constexpr int64_t kBytesPerRow = 256;

class TimelineSax : public jsonin::SaxBase {
public:
    using SaxBase::SaxBase;
    std::vector<Row> rows;
    int64_t maxRows = std::numeric_limits<int64_t>::max(); // from LoadOptions::memoryBudgetBytes

    bool null() { return reject("null"); }
    bool boolean(bool) { return reject("a boolean"); }
    bool string(std::string&) { return reject("a string"); }
    bool binary(nlohmann::json::binary_t&) { return reject("binary data"); }
    bool key(std::string&) { return true; }
    bool number_integer(int64_t v) { return value(v); }
    bool number_unsigned(uint64_t v)
    {
        if (v > uint64_t(std::numeric_limits<int64_t>::max()))
            cursor.fail(LoadErrorCode::Malformed, "number too large for a memory timeline row");
        return value(int64_t(v));
    }
    bool number_float(double v, const std::string&)
    {
        if (!std::isfinite(v) || std::fabs(v) > 9.2e18)
            cursor.fail(LoadErrorCode::Malformed, "number out of range in a memory timeline row");
        return value(int64_t(std::llround(v)));
    }
    bool start_object(std::size_t) { return reject("an object"); }
    bool end_object() { return true; }

    bool start_array(std::size_t)
    {
        enter();
        if (depth == 2) {
            m_row = Row{};
            m_count = 0;
        } else if (depth > 2) {
            cursor.fail(LoadErrorCode::Malformed,
                        "expected rows of 4 numbers [t_ns, action, bytes, category], found a nested array in row " +
                            std::to_string(rows.size()) +
                            (rows.empty() ? " (is this export_memory_timeline's [times, sizes] form? PoolScope reads the .raw.json export)"
                                          : ""));
        }
        return true;
    }

    bool end_array()
    {
        if (depth == 2) {
            if (m_count != 4)
                cursor.fail(LoadErrorCode::Malformed, "expected rows of 4 numbers [t_ns, action, bytes, category], row " +
                                                          std::to_string(rows.size()) + " has " + std::to_string(m_count));
            if (m_row[2] > kMaxBytes || m_row[2] < -kMaxBytes)
                cursor.fail(LoadErrorCode::Malformed, "row " + std::to_string(rows.size()) + " has bytes " + std::to_string(m_row[2]) +
                                                          ": beyond 8 PiB, not a real byte count");
            if (int64_t(rows.size()) >= maxRows)
                cursor.fail(LoadErrorCode::LimitExceeded, "more than " + std::to_string(maxRows) + " rows: beyond the memory budget (" +
                                                              std::to_string(kBytesPerRow) + " bytes each once built; LoadOptions::memoryBudgetBytes)");
            rows.push_back(m_row);
        }
        leave();
        return true;
    }

private:
    bool value(int64_t v)
    {
        if (depth != 2)
            return reject("a bare number");
        if (m_count < 4)
            m_row[size_t(m_count)] = v;
        ++m_count;
        return true;
    }
    bool reject(const char* what)
    {
        cursor.fail(LoadErrorCode::Malformed, std::string("expected a JSON array of [t_ns, action, bytes, category] rows, found ") +
                                                  what + (depth <= 1 ? "" : " in row " + std::to_string(rows.size())));
    }

    Row m_row{};
    int m_count = 0;
};

int64_t nanosToMicros(int64_t ns) { return ns >= 0 ? ns / 1000 : -((-ns + 999) / 1000); }

ProfilerCategory toCategory(int64_t c)
{
    return c >= 0 && c < kCategoryCount ? ProfilerCategory(int8_t(c)) : ProfilerCategory::Unknown;
}

// Open allocations by synthetic key (bytes, category); most recent last.
class SyntheticHeap {
public:
    uint64_t open(int64_t bytes, int64_t category)
    {
        const uint64_t addr = m_next++;
        m_open[{bytes, category}].push_back(addr);
        return addr;
    }
    // The allocation a destroy of (bytes, category) closes; a fresh address when nothing matches.
    uint64_t close(int64_t bytes, int64_t category, int64_t& categoryMismatches)
    {
        if (auto it = m_open.find({bytes, category}); it != m_open.end() && !it->second.empty())
            return pop(it->second);
        // Same bytes, other category: the most recently opened one.
        std::vector<uint64_t>* best = nullptr;
        for (auto it = m_open.lower_bound({bytes, std::numeric_limits<int64_t>::min()});
             it != m_open.end() && it->first.first == bytes; ++it)
            if (!it->second.empty() && (!best || it->second.back() > best->back()))
                best = &it->second;
        if (best) {
            ++categoryMismatches;
            return pop(*best);
        }
        return m_next++; // allocated before the export began: finalizeDevice makes it pre-existing
    }

private:
    static uint64_t pop(std::vector<uint64_t>& v)
    {
        const uint64_t a = v.back();
        v.pop_back();
        return a;
    }
    uint64_t m_next = 1;
    std::map<std::pair<int64_t, int64_t>, std::vector<uint64_t>> m_open;
};

} // namespace

void readMemoryTimelineRaw(std::span<const uint8_t> bytes, const std::string& name, Trace& out,
                           const LoadOptions& options, Progress& progress)
{
    jsonin::ByteCursor cursor(bytes, name, progress);
    TimelineSax sax(cursor, options.maxNesting);
    sax.maxRows = std::max<int64_t>(options.memoryBudgetBytes / kBytesPerRow, 1);
    jsonin::saxParse(cursor, sax, progress);
    progress.stage.store(int(LoadStage::Building), std::memory_order_relaxed);
    auto& rows = sax.rows;

    // PREEXISTING rows carry t = -1: give them the earliest real time, as PyTorch's plot does.
    int64_t tMin = std::numeric_limits<int64_t>::max();
    for (const auto& r : rows)
        if (r[0] >= 0)
            tMin = std::min(tMin, r[0]);
    if (tMin == std::numeric_limits<int64_t>::max())
        tMin = 0;
    for (auto& r : rows)
        if (r[0] < 0)
            r[0] = tMin;
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a[0] < b[0]; });

    DeviceTrace dev;
    dev.kind = DeviceKind::Cuda;
    dev.device = 0;
    dev.events.reserve(rows.size());
    std::vector<int64_t> eventCategory; // per event: the raw category index
    eventCategory.reserve(rows.size());
    SyntheticHeap heap;
    int64_t mismatches = 0, unknownCategories = 0;

    auto openAlloc = [&](const Row& r) {
        const int64_t size = r[2] < 0 ? -r[2] : r[2];
        dev.events.push(Action::Alloc, heap.open(size, r[3]), size, 0, nanosToMicros(r[0]), StackId{});
        eventCategory.push_back(r[3]);
    };
    auto closeAlloc = [&](const Row& r) {
        const int64_t size = r[2] < 0 ? -r[2] : r[2];
        dev.events.push(Action::FreeCompleted, heap.close(size, r[3], mismatches), size, 0, nanosToMicros(r[0]), StackId{});
        eventCategory.push_back(r[3]);
    };

    for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        if (r[3] < 0 || r[3] >= kCategoryCount)
            ++unknownCategories;
        switch (r[1]) {
        case kPreexisting:
        case kCreate:
            openAlloc(r);
            break;
        case kDestroy:
            closeAlloc(r);
            break;
        case kIncrementVersion:
            if (r[2] < 0 && i + 1 < rows.size() && rows[i + 1][1] == kIncrementVersion && rows[i + 1][0] == r[0] &&
                rows[i + 1][2] == -r[2]) {
                const Row& next = rows[++i];
                if (next[3] == r[3])
                    break; // same pool before and after: nothing moves
                closeAlloc(r);
                openAlloc(next);
            } else if (r[2] < 0) {
                closeAlloc(r);
            } else {
                openAlloc(r);
            }
            break;
        default:
            dev.events.push(Action::Unknown, 0, r[2], 0, nanosToMicros(r[0]), StackId{});
            eventCategory.push_back(r[3]);
            ++dev.unknownActions["timeline action " + std::to_string(r[1])];
            break;
        }
    }

    finalizeDevice(dev, out.warnings);
    anchorInitialAllocated(dev, dev.orphanFreeBytes); // no final segments to anchor the end on
    for (auto& a : dev.allocations) {
        // The category of the row that opened it; for pre-existing ones, that of the row that closed it.
        const EventIndex e = a.allocEvent != kNoEvent ? a.allocEvent : a.freeCompletedEvent;
        if (e != kNoEvent)
            a.category = toCategory(eventCategory[size_t(e)]);
    }
    if (mismatches > 0)
        out.warnings.push_back("cuda:0: " + std::to_string(mismatches) +
                               " timeline frees matched an allocation of the same size in another category");
    if (unknownCategories > 0)
        out.warnings.push_back(std::to_string(unknownCategories) + " timeline rows have a category index outside 0..7 (read as unknown)");
    out.warnings.push_back("cuda:0: the memory timeline names no device and no addresses: cuda:0 is assumed and "
                           "addresses are synthetic ids (allocations paired by size and category)");
    out.devices.push_back(std::move(dev));
    progress.stage.store(int(LoadStage::Done), std::memory_order_relaxed);
}

} // namespace poolscope
