#include "core/formats/pickle_writer.h"
#include "core/formats/snapshot_writer_util.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <optional>

// writeSnapshot: a Trace back in the shape torch.cuda.memory._snapshot() has, pickled.

namespace poolscope {

const char* snapshotStateName(BlockState s)
{
    switch (s) {
    case BlockState::ActiveAllocated:
        return "active_allocated";
    case BlockState::ActivePendingFree:
        return "active_pending_free";
    case BlockState::Inactive:
        break;
    }
    return "inactive";
}

std::vector<const DeviceTrace*> snapshotDevices(const Trace& trace)
{
    std::vector<const DeviceTrace*> out;
    for (const auto& d : trace.devices)
        if (d.kind == DeviceKind::Cuda && d.device >= 0)
            out.push_back(&d);
    std::sort(out.begin(), out.end(), [](const DeviceTrace* a, const DeviceTrace* b) { return a->device < b->device; });
    return out;
}


SettingValue parseSnapshotSetting(const std::string& key, const std::string& text)
{
    SettingValue v;
    v.s = text;
    if (text == "True" || text == "False") {
        v.kind = SettingValue::Bool;
        v.b = text == "True";
        return v;
    }
    int64_t i = 0;
    if (!text.empty()) {
        auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
        if (ec == std::errc() && p == text.data() + text.size()) {
            v.kind = SettingValue::Int;
            v.i = i;
            return v;
        }
        if (text.find_first_not_of("0123456789.-+eE") == std::string::npos && text.find_first_of("0123456789") != std::string::npos) {
            char* end = nullptr;
            const double f = std::strtod(text.c_str(), &end);
            if (end && *end == '\0') {
                v.kind = SettingValue::Float;
                v.f = f;
                return v;
            }
        }
    }
    if (key == "roundup_power2_divisions") {
        // The loader renders the dict as "1:0,2:0,...".
        std::vector<std::pair<std::string, int64_t>> items;
        size_t pos = 0;
        bool ok = !text.empty();
        while (ok && pos < text.size()) {
            const size_t comma = std::min(text.find(',', pos), text.size());
            const std::string item = text.substr(pos, comma - pos);
            const size_t colon = item.find(':');
            int64_t value = 0;
            ok = colon != std::string::npos &&
                 std::from_chars(item.data() + colon + 1, item.data() + item.size(), value).ec == std::errc();
            if (ok)
                items.emplace_back(item.substr(0, colon), value);
            pos = comma + 1;
        }
        if (ok) {
            v.kind = SettingValue::IntDict;
            v.dict = std::move(items);
        }
    }
    return v;
}

namespace {

class SnapshotPickler {
public:
    SnapshotPickler(const Trace& trace, PickleWriter& w) : m_trace(trace), m_w(w) {}

    // torch.cuda.memory_snapshot()'s shape: the segments list alone.
    void writeSegmentList()
    {
        size_t count = 0;
        for (const auto* d : snapshotDevices(m_trace))
            count += d->segments.size();
        m_w.beginList(count);
        for (const auto* d : snapshotDevices(m_trace))
            for (const auto& s : d->segments)
                segment(*d, s);
        m_w.endList();
    }

    void write()
    {
        const auto devices = snapshotDevices(m_trace);
        const bool settings = !m_trace.allocatorSettings.empty();
        // PyTorch >= 2.5 always writes external_annotations; the model cannot tell an empty list from a
        // missing one, so a dump recent enough to carry allocator_settings gets the (empty) list too.
        const bool annotations = !m_trace.annotations.empty() || settings;
        m_w.beginDict(2 + size_t(settings) + size_t(annotations));
        key("segments");
        size_t segmentCount = 0;
        for (const auto* d : devices)
            segmentCount += d->segments.size();
        m_w.beginList(segmentCount);
        for (const auto* d : devices)
            for (const auto& s : d->segments)
                segment(*d, s);
        m_w.endList();

        key("device_traces");
        const int maxDevice = devices.empty() ? -1 : devices.back()->device;
        m_w.beginList(size_t(maxDevice + 1));
        for (int dev = 0; dev <= maxDevice; ++dev) {
            auto it = std::find_if(devices.begin(), devices.end(), [&](const DeviceTrace* d) { return d->device == dev; });
            if (it == devices.end()) {
                m_w.beginList(0);
                m_w.endList();
            } else {
                entries(**it);
            }
        }
        m_w.endList();

        if (settings) {
            key("allocator_settings");
            m_w.beginDict(m_trace.allocatorSettings.size());
            for (const auto& [k, text] : m_trace.allocatorSettings) {
                key(k);
                const SettingValue v = parseSnapshotSetting(k, text);
                switch (v.kind) {
                case SettingValue::Bool: m_w.boolean(v.b); break;
                case SettingValue::Int: m_w.integer(v.i); break;
                case SettingValue::Float: m_w.floating(v.f); break;
                case SettingValue::Str: m_w.string(v.s); break;
                case SettingValue::IntDict:
                    m_w.beginDict(v.dict.size());
                    for (const auto& [dk, dv] : v.dict) {
                        m_w.string(dk);
                        m_w.integer(dv);
                    }
                    m_w.endDict();
                    break;
                }
            }
            m_w.endDict();
        }
        if (annotations) {
            key("external_annotations");
            m_w.beginList(m_trace.annotations.size());
            for (const auto& a : m_trace.annotations) {
                const bool time = a.timeUs != kNoTime;
                m_w.beginDict(3 + size_t(time));
                key("stage");
                m_w.sharedString(a.start ? "START" : "END");
                key("name");
                m_w.sharedString(a.name);
                key("device");
                m_w.integer(a.device);
                if (time) {
                    key("time_us");
                    m_w.integer(a.timeUs);
                }
                m_w.endDict();
            }
            m_w.endList();
        }
        m_w.endDict();
    }

private:
    void key(std::string_view k) { m_w.sharedString(k); }

    enum HotKey { kAction, kAddr, kDeviceFree, kSize, kStream, kTimeUs, kFrames, kName, kFilename, kLine, kHotKeys };
    void hot(HotKey k)
    {
        static constexpr const char* names[kHotKeys] = {"action", "addr", "device_free", "size", "stream",
                                                        "time_us", "frames", "name", "filename", "line"};
        if (m_hot[k] != kNone)
            m_w.fetch(m_hot[k]);
        else
            m_hot[k] = m_w.sharedString(names[k]);
    }

    // Writes a frames list; returns its memo index. Frame dicts are written once and fetched after,
    // as in PyTorch's dumps.
    uint32_t frames(StackId stack)
    {
        if (!stack.valid()) {
            const uint32_t index = m_w.beginList(0);
            m_w.endList();
            return index;
        }
        const auto ids = m_trace.frames.stack(stack);
        const uint32_t index = m_w.beginList(ids.size());
        for (FrameId f : ids) {
            uint32_t& memo = m_frameMemo[f.value];
            if (memo != kNone) {
                m_w.fetch(memo);
                continue;
            }
            const Frame& fr = m_trace.frames.frame(f);
            memo = m_w.beginDict(3);
            hot(kName);
            m_w.sharedString(fr.name);
            hot(kFilename);
            m_w.sharedString(fr.filename);
            hot(kLine);
            m_w.integer(fr.line);
            m_w.endDict();
        }
        m_w.endList();
        return index;
    }

    void segment(const DeviceTrace& d, const Segment& s)
    {
        m_w.beginDict(12);
        key("device");
        m_w.integer(d.device);
        key("address");
        m_w.unsignedInteger(s.address);
        key("total_size");
        m_w.integer(s.totalSize);
        key("allocated_size");
        m_w.integer(s.allocatedSize);
        key("active_size");
        m_w.integer(s.activeSize);
        key("requested_size");
        m_w.integer(s.requestedSize);
        key("stream");
        m_w.integer(s.stream);
        key("segment_type");
        m_w.sharedString(s.isLarge ? "large" : "small");
        key("segment_pool_id");
        m_w.beginTuple(2);
        m_w.integer(s.poolId[0]);
        m_w.integer(s.poolId[1]);
        m_w.endTuple();
        key("is_expandable");
        m_w.boolean(s.isExpandable);
        key("blocks");
        m_w.beginList(s.blocks.size());
        for (const auto& b : s.blocks) {
            m_w.beginDict(5);
            key("address");
            m_w.unsignedInteger(b.address);
            key("size");
            m_w.integer(b.size);
            key("requested_size");
            m_w.integer(b.requestedSize);
            key("state");
            m_w.sharedString(snapshotStateName(b.state));
            hot(kFrames);
            frames(b.stack);
            m_w.endDict();
        }
        m_w.endList();
        hot(kFrames);
        frames(s.stack);
        m_w.endDict();
    }

    void entries(const DeviceTrace& d)
    {
        const auto& ev = d.events;
        // PyTorch converts each recorded context to one Python list: a request's segment events share
        // it with its alloc, and a free's free_completed with its free_requested (or with the alloc,
        // when frees record no context of their own). Equal stacks of one allocation share it here.
        std::vector<uint32_t> group(ev.count(), AllocId::kInvalid);
        uint32_t nextAlloc = AllocId::kInvalid;
        for (size_t i = ev.count(); i-- > 0;) {
            const Action a = ev.action[i];
            const bool segmentEvent = a == Action::SegmentAlloc || a == Action::SegmentMap || a == Action::SegmentFree ||
                                      a == Action::SegmentUnmap;
            const bool hasAlloc = i < d.eventAlloc.size() && d.eventAlloc[i].valid();
            if (hasAlloc)
                group[i] = d.eventAlloc[i].value;
            else if (segmentEvent)
                group[i] = nextAlloc;
            if (a == Action::Alloc)
                nextAlloc = hasAlloc ? d.eventAlloc[i].value : AllocId::kInvalid;
            else if (!segmentEvent)
                nextAlloc = AllocId::kInvalid;
        }
        // Per allocation: the stack and memo index of the frames list its events last wrote.
        std::vector<std::pair<uint32_t, uint32_t>> lastList(d.allocations.size(), {StackId::kInvalid, kNone});
        uint32_t actionMemo[16];
        std::fill(std::begin(actionMemo), std::end(actionMemo), kNone);
        m_w.beginList(ev.count());
        for (size_t i = 0; i < ev.count(); ++i) {
            const bool time = ev.timeUs[i] != kNoTime;
            const bool oom = ev.action[i] == Action::Oom;
            m_w.beginDict(5 + size_t(time));
            hot(kAction);
            uint32_t& am = actionMemo[size_t(ev.action[i]) & 15];
            if (am != kNone)
                m_w.fetch(am);
            else
                am = m_w.sharedString(actionName(ev.action[i]));
            hot(oom ? kDeviceFree : kAddr);
            m_w.unsignedInteger(ev.addr[i]);
            hot(kSize);
            m_w.integer(ev.size[i]);
            hot(kStream);
            m_w.integer(ev.stream[i]);
            if (time) {
                hot(kTimeUs);
                m_w.integer(ev.timeUs[i]);
            }
            hot(kFrames);
            const StackId stack = ev.stack[i];
            if (group[i] != AllocId::kInvalid && group[i] < lastList.size() && stack.valid()) {
                auto& last = lastList[group[i]];
                if (last.first == stack.value && last.second != kNone)
                    m_w.fetch(last.second);
                else
                    last = {stack.value, frames(stack)};
            } else {
                frames(stack);
            }
            m_w.endDict();
        }
        m_w.endList();
    }

    static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
    const Trace& m_trace;
    PickleWriter& m_w;
    uint32_t m_hot[kHotKeys] = {kNone, kNone, kNone, kNone, kNone, kNone, kNone, kNone, kNone, kNone};
    std::vector<uint32_t> m_frameMemo = std::vector<uint32_t>(m_trace.frames.frameCount(), kNone);
};

} // namespace

void writeSnapshot(const Trace& trace, std::ostream& out, int protocol)
{
    PickleWriter w(out, protocol);
    SnapshotPickler(trace, w).write();
    w.finish();
}

void writeSnapshotSegmentList(const Trace& trace, std::ostream& out, int protocol)
{
    PickleWriter w(out, protocol);
    SnapshotPickler(trace, w).writeSegmentList();
    w.finish();
}

} // namespace poolscope
