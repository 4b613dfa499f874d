#include "core/formats/snapshot_decoder.h"
#include "core/formats/snapshot_readers.h"

#include "core/util/load_error.h"

#include <algorithm>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace poolscope {
namespace {
// What one trace entry costs once the model is built (event columns, its Allocation, the
// allocated/reserved series): charged to the arena, so the memory budget bounds the entry count too.
constexpr int64_t kBytesPerEntry = 192;
// Unknown action names and keys are counted by name; a hostile file's megabyte-long name is not copied
// once per entry.
constexpr size_t kMaxNameInWarning = 64;
// allocator_settings values are rendered for display; a shared dict of 100k items is not, 100k times.
constexpr size_t kMaxSettingText = 1024;
constexpr std::string_view kEntryKeys[] = {"action", "addr", "size", "stream", "time_us", "frames", "device_free"};
// Keys newer PyTorch versions add to trace entries that PoolScope does not use (not "unknown").
constexpr std::string_view kIgnoredEntryKeys[] = {"compile_context", "user_metadata", "pool_id", "forward_frames", "real_size", "device"};
} // namespace

std::string Where::str() const
{
    if (m_text)
        return *m_text;
    if (m_parent)
        return m_parent->str() + "[" + std::to_string(m_index) + "]";
    if (m_index < 0)
        return m_prefix;
    return std::string(m_prefix) + std::to_string(m_index) + (m_field ? m_field : "");
}

SnapshotDecoder::SnapshotDecoder(ValueArena& arena, SnapshotAssembler& out, std::string name, bool framesListsAreUnique)
    : m_arena(arena), m_out(out), m_name(std::move(name)), m_releaseFrameLists(framesListsAreUnique)
{
}

void SnapshotDecoder::fail(const Where& where, const std::string& expected, const PyValue& found) const
{
    throw LoadError(LoadErrorCode::Malformed, m_name, -1, "field " + where.str() + ": expected " + expected + ", found " + render(found));
}

std::string SnapshotDecoder::render(const PyValue& v) const
{
    switch (v.kind) {
    case PyKind::Str: {
        auto s = m_arena.str(v);
        return "str '" + std::string(s.substr(0, 40)) + (s.size() > 40 ? "...'" : "'");
    }
    case PyKind::Int: return "int " + std::to_string(v.i);
    case PyKind::UInt: return "int " + std::to_string(uint64_t(v.i)) + " (beyond int64)";
    default: return std::string(pyKindName(v.kind));
    }
}

int64_t SnapshotDecoder::intValue(const PyValue& v, const Where& where) const
{
    switch (v.kind) {
    case PyKind::Int:
    case PyKind::Bool: return v.i;
    case PyKind::Float: { // JSON writers sometimes emit 1.7e15 for time_us
        const double d = v.asFloat();
        if (!(d > -9.2e18 && d < 9.2e18)) // NaN, infinities, beyond int64: the cast would be undefined
            fail(where, "an integer", v);
        return int64_t(d);
    }
    case PyKind::None: return 0;
    default: fail(where, "an integer", v);
    }
}

uint64_t SnapshotDecoder::addrValue(const PyValue& v, const Where& where) const
{
    if (v.kind == PyKind::UInt)
        return uint64_t(v.i);
    return uint64_t(intValue(v, where));
}

int64_t SnapshotDecoder::intField(const PyValue& dict, std::string_view key, const Where& where, int64_t fallback, bool required) const
{
    const PyValue* v = m_arena.get(dict, key);
    if (!v) {
        if (required)
            throw LoadError(LoadErrorCode::Malformed, m_name, -1, "field " + where.str() + "." + std::string(key) + " is missing");
        return fallback;
    }
    if (v->kind == PyKind::Int || v->kind == PyKind::Bool)
        return v->i;
    const std::string field = where.str() + "." + std::string(key);
    return intValue(*v, field);
}

std::string SnapshotDecoder::strField(const PyValue& dict, std::string_view key, const Where& where) const
{
    const PyValue* v = m_arena.get(dict, key);
    if (!v || v->kind == PyKind::None)
        return {};
    if (v->kind != PyKind::Str)
        fail(where.str() + "." + std::string(key), "a string", *v);
    // Copies are charged: one memo-shared long string must not be copied for every dict that names it.
    m_arena.charge(int64_t(m_arena.str(*v).size()));
    return std::string(m_arena.str(*v));
}

// ---- streaming trace entries ------------------------------------------------------------------

// Asked of every appended batch, frames lists included: keys are classified once per string (entryKey)
// instead of compared as text per dict.
bool SnapshotDecoder::looksLikeEntry(const PyValue& v)
{
    if (v.kind != PyKind::Dict)
        return false;
    const auto kv = m_arena.items(v);
    for (size_t k = 0; k + 1 < kv.size(); k += 2)
        if (entryKey(kv[k].kind, kv[k].ref) == EntryKey::Action)
            return true;
    return false;
}

bool SnapshotDecoder::onAppend(ValueArena&, uint32_t listRef, std::span<const PyValue> items)
{
    if (items.empty()) {
        // The end of a batch read directly (readItem): the worker may go on with it.
        if (PendingTrace* pending = streaming(listRef); pending && pending->worker)
            pending->worker->publish(pending->events.count());
        return false;
    }
    auto pendingIt = m_pending.find(listRef);
    if (pendingIt == m_pending.end()) {
        // A list that already stores something else is never streamed: decodeDeviceTraces then reports
        // its first bad item, instead of its stored items being dropped once entries follow.
        if (!looksLikeEntry(items.front()) || !m_arena.container(listRef).items.empty())
            return false;
        pendingIt = m_pending.emplace(listRef, PendingTrace{}).first;
        const size_t expected = std::exchange(m_expectedEntries, 0);
        pendingIt->second.events.reserve(expected);
        // One worker, for the first trace: a dump's bulk is one device's entries.
        if (m_pairWhileParsing && !m_workerStarted && expected >= kPairingWorkerMinEntries) {
            m_workerStarted = true;
            try {
                pendingIt->second.worker = std::make_unique<PairingWorker>(pendingIt->second.events, expected);
            } catch (const std::system_error&) {
                // No thread to be had: pair afterwards, as for small dumps.
            }
        }
    }
    PendingTrace& pending = pendingIt->second;
    makeRoom(pending, items.size());
    for (const PyValue& item : items) {
        if (!looksLikeEntry(item))
            fail(Where("trace entry #", m_entriesSeen, ""), "a dict with an 'action' key", item);
        convertEntry(pending, item);
        m_arena.release(item.ref);
        ++m_entriesSeen;
    }
    if (pending.worker)
        pending.worker->publish(pending.events.count());
    return true;
}

void SnapshotDecoder::makeRoom(PendingTrace& pending, size_t entries)
{
    // The worker reads the columns: they must not reallocate under it while entries are pushed.
    const size_t need = pending.events.count() + entries;
    if (!pending.worker || need <= pending.room) // asked per entry: the columns' capacity is not recomputed
        return;
    if (need > pending.events.capacity())
        pending.worker->whileIdle([&] { pending.events.reserve(std::max(need, 2 * pending.events.capacity())); });
    pending.room = pending.events.capacity();
}

SnapshotDecoder::EntryKey SnapshotDecoder::classifyKey(PyKind kind, uint32_t ref)
{
    if (kind != PyKind::Str)
        return EntryKey::Unknown;
    if (ref >= m_keyKind.size())
        m_keyKind.resize(size_t(ref) + 1024, int8_t(EntryKey::Unseen));
    int8_t& k = m_keyKind[ref];
    if (k == int8_t(EntryKey::Unseen)) {
        const auto s = m_arena.str(ref);
        k = int8_t(EntryKey::Unknown);
        for (size_t i = 0; i < std::size(kEntryKeys); ++i)
            if (s == kEntryKeys[i])
                k = int8_t(i);
        for (auto ignored : kIgnoredEntryKeys)
            if (s == ignored)
                k = int8_t(EntryKey::Ignored);
    }
    return EntryKey(k);
}

Action SnapshotDecoder::actionOf(uint32_t strRef)
{
    if (strRef >= m_actionKind.size())
        m_actionKind.resize(size_t(strRef) + 1024, 0);
    int8_t& cached = m_actionKind[strRef];
    if (cached == 0)
        cached = int8_t(int(parseAction(m_arena.str(strRef))) + 1);
    return Action(cached - 1);
}

void SnapshotDecoder::convertEntry(PendingTrace& pending, const PyValue& entry)
{
    EntryFields e;
    const auto kv = m_arena.items(entry);
    for (size_t k = 0; k + 1 < kv.size(); k += 2) {
        const PyValue& value = kv[k + 1];
        switch (entryKey(kv[k].kind, kv[k].ref)) {
        case EntryKey::Action: {
            if (value.kind != PyKind::Str)
                fail(Where("trace entry #", m_entriesSeen, ".action"), "a string", value);
            e.action = actionOf(value.ref);
            e.actionText = m_arena.str(value);
            break;
        }
        case EntryKey::Addr: e.addr = addrValue(value, Where("trace entry #", m_entriesSeen, ".addr")); break;
        case EntryKey::Size: e.size = intValue(value, Where("trace entry #", m_entriesSeen, ".size")); break;
        case EntryKey::Stream: e.stream = int64_t(addrValue(value, Where("trace entry #", m_entriesSeen, ".stream"))); break;
        case EntryKey::TimeUs:
            if (value.kind != PyKind::None)
                e.time = intValue(value, Where("trace entry #", m_entriesSeen, ".time_us"));
            break;
        case EntryKey::Frames: e.stack = stackOf(value, Where("trace entry #", m_entriesSeen, ".frames")); break;
        case EntryKey::DeviceFree: e.deviceFree = intValue(value, Where("trace entry #", m_entriesSeen, ".device_free")); break;
        case EntryKey::Ignored: break;
        case EntryKey::Unknown:
        case EntryKey::Unseen:
            m_out.unknownKey("trace_entry", kv[k].kind == PyKind::Str ? m_arena.str(kv[k]) : "<non-string key>");
            break;
        }
    }
    finishEntry(pending, e);
}

// What every entry goes through, read generally or directly: the checks, the budget, the columns.
void SnapshotDecoder::finishEntry(PendingTrace& pending, EntryFields& e)
{
    if (e.size < 0)
        fail(Where("trace entry #", m_entriesSeen, ".size"), "a non-negative byte count", PyValue::makeInt(e.size));
    try {
        m_arena.charge(kBytesPerEntry);
    } catch (const std::length_error& e) {
        throw LoadError(LoadErrorCode::LimitExceeded, m_name, -1,
                        "more trace entries than the memory budget allows (" + std::to_string(kBytesPerEntry) +
                            " bytes each once built): " + e.what() + " (LoadOptions::memoryBudgetBytes)");
    }
    if (e.action == Action::Unknown)
        ++pending.unknownActions[std::string(e.actionText.substr(0, kMaxNameInWarning))];
    if (e.action == Action::Oom && e.deviceFree >= 0)
        e.addr = uint64_t(e.deviceFree);
    pending.events.push(e.action, e.addr, e.size, e.stream, e.time, e.stack);
}

// ---- frames -------------------------------------------------------------------------------------

FrameId SnapshotDecoder::frameOf(const PyValue& dict, const Where& where)
{
    if (dict.kind != PyKind::Dict)
        fail(where, "a frame dict {filename, line, name}", dict);
    if (dict.ref >= m_frameOfDict.size())
        m_frameOfDict.resize(std::max<size_t>(size_t(dict.ref) + 1, m_frameOfDict.size() * 2));
    Cached& c = m_frameOfDict[dict.ref];
    const uint32_t gen = m_arena.container(dict.ref).generation;
    if (c.id != UINT32_MAX && c.generation == gen)
        return FrameId(c.id);
    const FrameId id = m_out.trace().frames.internFrame(strField(dict, "filename", where), strField(dict, "name", where), frameLine(dict));
    c = Cached{gen, id.value};
    return id;
}

// No figure depends on a frame's line: a value that is not a line (2^64-1, which is -1 written
// unsigned; a float; a string) keeps the frame, as line -1 (unknown), and is counted for a warning
// instead of refusing the whole dump.
int64_t SnapshotDecoder::frameLine(const PyValue& dict)
{
    const PyValue* v = m_arena.get(dict, "line");
    if (!v || v->kind == PyKind::None)
        return 0;
    if ((v->kind == PyKind::Int || v->kind == PyKind::Bool) && v->i >= -1)
        return v->i;
    if (m_oddLines++ == 0)
        m_oddLineExample = render(*v);
    return -1;
}

StackId SnapshotDecoder::stackOf(const PyValue& list, const Where& where)
{
    if (list.kind == PyKind::None)
        return {};
    if (list.kind == PyKind::Stack) // decoded when read directly (readItem)
        return StackId(list.ref);
    if (list.kind != PyKind::List && list.kind != PyKind::Tuple)
        fail(where, "a list of frames", list);
    if (list.ref >= m_stackOfList.size())
        m_stackOfList.resize(std::max<size_t>(size_t(list.ref) + 1, m_stackOfList.size() * 2));
    const uint32_t gen = m_arena.container(list.ref).generation;
    if (Cached& c = m_stackOfList[list.ref]; c.id != UINT32_MAX && c.generation == gen)
        return StackId(c.id);
    const StackId id = internFrames(m_arena.items(list), where);
    if (m_releaseFrameLists) {
        m_arena.release(list.ref);
    } else {
        // Frames lists are shared between entries and blocks (alloc and free of one tensor share one
        // traceback): keep the slot, drop the items, answer later references from the cache.
        m_arena.dropItems(list.ref);
        m_stackOfList[list.ref] = Cached{gen, id.value};
    }
    return id;
}

StackId SnapshotDecoder::internFrames(std::span<const PyValue> frames, const Where& where)
{
    m_frameRefs.clear();
    for (const PyValue& f : frames) {
        if (f.kind != PyKind::Dict) {
            // frameOf names the first bad frame, in order, as decoding each would have.
            for (size_t i = 0; i < frames.size(); ++i)
                frameOf(frames[i], Where(where, int64_t(i)));
            fail(where, "a list of frame dicts", f);
        }
        m_frameRefs.push_back(f.ref);
    }
    return internFrameDicts(m_frameRefs, where);
}

StackId SnapshotDecoder::internFrameDicts(std::span<const uint32_t> dicts, const Where& where)
{
    const uint64_t h = SeqTable::hash(dicts);
    if (const StackId known = m_stackOfDicts.find(h, dicts); known.valid())
        return known;
    m_frameScratch.clear();
    for (size_t i = 0; i < dicts.size(); ++i)
        m_frameScratch.push_back(frameOf(PyValue{PyKind::Dict, dicts[i], 0}, Where(where, int64_t(i))));
    const StackId id = m_out.trace().frames.internStack(m_frameScratch);
    m_stackOfDicts.insert(h, dicts, id);
    return id;
}

// ---- the root dict ------------------------------------------------------------------------------

void SnapshotDecoder::moveTrace(int device, PendingTrace& pending)
{
    DeviceTrace& d = m_out.device(device);
    if (pending.worker) {
        m_out.setPairing(device, pending.worker->finish());
        pending.worker.reset();
    }
    d.events = std::move(pending.events);
    for (auto& [name, count] : pending.unknownActions)
        d.unknownActions[name] += count;
}

void SnapshotDecoder::decodeDeviceTraces(const PyValue& list)
{
    if (list.kind != PyKind::List)
        fail("device_traces", "a list (one list of entries per device)", list);
    const auto lists = m_arena.items(list);
    if (lists.size() > size_t(kMaxDevices))
        throw LoadError(LoadErrorCode::LimitExceeded, m_name, -1, "device_traces holds " + std::to_string(lists.size()) +
                                                                      " lists; PoolScope reads at most " + std::to_string(kMaxDevices) + " devices");
    m_streamingRef = UINT32_MAX; // m_pending loses its entries below
    m_streamingTrace = nullptr;
    for (size_t dev = 0; dev < lists.size(); ++dev) {
        const PyValue& inner = lists[dev];
        const std::string where = "device_traces[" + std::to_string(dev) + "]";
        if (inner.kind != PyKind::List)
            fail(where, "a list of trace entries", inner);
        m_out.device(int(dev));
        if (auto it = m_pending.find(inner.ref); it != m_pending.end()) {
            moveTrace(int(dev), it->second);
            m_pending.erase(it);
            continue;
        }
        // Not streamed (e.g. a single APPEND of a non-entry): convert what is stored now.
        PendingTrace pending;
        for (const PyValue& e : m_arena.items(inner)) {
            if (!looksLikeEntry(e))
                fail(std::string(where + "[" + std::to_string(pending.events.count()) + "]"), "a dict with an 'action' key", e);
            convertEntry(pending, e);
        }
        moveTrace(int(dev), pending);
    }
}

void SnapshotDecoder::decodeSettings(const PyValue& dict)
{
    if (dict.kind != PyKind::Dict)
        fail("allocator_settings", "a dict", dict);
    const auto kv = m_arena.items(dict);
    for (size_t k = 0; k + 1 < kv.size(); k += 2) {
        if (kv[k].kind != PyKind::Str)
            continue;
        const PyValue& v = kv[k + 1];
        std::string text;
        switch (v.kind) {
        case PyKind::Str: text = std::string(m_arena.str(v)); break;
        case PyKind::Bool: text = v.i ? "True" : "False"; break;
        case PyKind::Int: text = std::to_string(v.i); break;
        case PyKind::Float: text = std::to_string(v.asFloat()); break;
        case PyKind::Dict: {
            // roundup_power2_divisions: {"1": 0, "2": 0, ...} rendered as "1:0,2:0,..."
            const auto inner = m_arena.items(v);
            for (size_t j = 0; j + 1 < inner.size() && text.size() < kMaxSettingText; j += 2) {
                if (!text.empty())
                    text += ",";
                text += inner[j].kind == PyKind::Str ? std::string(m_arena.str(inner[j])) : std::to_string(inner[j].i);
                text += ":" + std::to_string(inner[j + 1].i);
            }
            break;
        }
        default: text = std::string(pyKindName(v.kind)); break;
        }
        m_arena.charge(int64_t(m_arena.str(kv[k]).size() + text.size()));
        m_out.setSetting(std::string(m_arena.str(kv[k])), std::move(text));
    }
}

void SnapshotDecoder::decodeAnnotations(const PyValue& list)
{
    if (list.kind != PyKind::List)
        fail("external_annotations", "a list", list);
    size_t i = 0;
    for (const PyValue& a : m_arena.items(list)) {
        const std::string where = "external_annotations[" + std::to_string(i++) + "]";
        if (a.kind != PyKind::Dict)
            fail(where, "a dict {name, stage, device, time_us}", a);
        Annotation ann;
        ann.name = strField(a, "name", where);
        const std::string stage = strField(a, "stage", where);
        if (stage != "START" && stage != "END")
            throw LoadError(LoadErrorCode::Malformed, m_name, -1, "field " + where + ".stage: expected 'START' or 'END', found '" + stage + "'");
        ann.start = stage == "START";
        ann.device = int(intField(a, "device", where, 0));
        ann.timeUs = intField(a, "time_us", where, kNoTime);
        m_out.addAnnotation(std::move(ann));
    }
}

void SnapshotDecoder::decodeDeviceProperties(const PyValue& list)
{
    // Written by resources/capture/poolscope_capture.py: [{device, name, total_memory, free_at_dump}].
    if (list.kind != PyKind::List)
        fail("poolscope_device_properties", "a list of dicts {device, name, total_memory, free_at_dump}", list);
    size_t i = 0;
    for (const PyValue& d : m_arena.items(list)) {
        const std::string where = "poolscope_device_properties[" + std::to_string(i++) + "]";
        if (d.kind != PyKind::Dict)
            fail(where, "a dict {device, name, total_memory, free_at_dump}", d);
        DeviceProperties p;
        p.device = int(intField(d, "device", where, 0));
        p.totalMemory = intField(d, "total_memory", where, -1);
        p.freeAtDump = intField(d, "free_at_dump", where, -1);
        const auto kv = m_arena.items(d);
        for (size_t k = 0; k + 1 < kv.size(); k += 2)
            if (kv[k].kind == PyKind::Str && m_arena.str(kv[k]) == "name" && kv[k + 1].kind == PyKind::Str)
                p.name = std::string(m_arena.str(kv[k + 1]));
        if (p.totalMemory < -1 || p.freeAtDump < -1)
            throw LoadError(LoadErrorCode::Malformed, m_name, -1, "field " + where + ": a negative byte count");
        m_out.trace().deviceProperties.push_back(std::move(p));
    }
}

void SnapshotDecoder::decodeRoot(const PyValue& root)
try {
    if (root.kind == PyKind::List) { // the oldest form: torch.cuda.memory_snapshot(), a bare list of segments
        decodeSegments(root, "segments");
        m_out.trace().versionHints.emplace_back(kBareSegmentListHint);
        return;
    }
    if (root.kind != PyKind::Dict)
        fail("<top level>", "a dict with 'segments' and 'device_traces', or a list of segments", root);
    const auto kv = m_arena.items(root);
    bool sawSegments = false;
    for (size_t k = 0; k + 1 < kv.size(); k += 2) {
        if (kv[k].kind != PyKind::Str)
            continue;
        const auto key = m_arena.str(kv[k]);
        const PyValue& v = kv[k + 1];
        if (key == "segments") {
            decodeSegments(v, "segments");
            sawSegments = true;
        } else if (key == "device_traces") {
            decodeDeviceTraces(v);
        } else if (key == "allocator_settings") {
            decodeSettings(v);
        } else if (key == "external_annotations") {
            decodeAnnotations(v);
        } else if (key == "poolscope_device_properties") {
            decodeDeviceProperties(v);
        } else if (key == "host_segments" || key == "host_traces") {
            m_out.trace().versionHints.push_back("PyTorch >= 2.6 (" + std::string(key) + ", pinned host memory: not shown)");
        } else {
            m_out.unknownKey("snapshot", key);
        }
    }
    if (!sawSegments)
        throw LoadError(LoadErrorCode::Malformed, m_name, -1, "the top-level dict has no 'segments' key: not a PyTorch allocator snapshot");
    if (!m_pending.empty())
        m_out.trace().warnings.push_back(std::to_string(m_pending.size()) + " lists of trace entries were outside device_traces and ignored");
    if (m_oddLines > 0)
        m_out.trace().warnings.push_back(std::to_string(m_oddLines) + " frame(s) had a line that is not a line number (e.g. " + m_oddLineExample +
                                         "); kept, with the line shown as unknown");
} catch (const std::length_error& e) { // ValueArena::charge: segments, blocks and strings decoded here count too
    throw LoadError(LoadErrorCode::LimitExceeded, m_name, -1, std::string(e.what()) + " (LoadOptions::memoryBudgetBytes)");
}

} // namespace poolscope
