#include "core/formats/pickle_writer.h"
#include "core/formats/snapshot_writer_util.h"

#include <algorithm>
#include <charconv>

// writeSnapshotJson: the snapshot dict as JSON, which PoolScope and json.load read alike.

namespace poolscope {
namespace {

// JSON: the same dict, frames written out in full (JSON has no sharing).
class JsonOut {
public:
    explicit JsonOut(std::ostream& out) : m_out(out) { m_buf.reserve(1 << 20); }
    ~JsonOut() { flush(); }
    void raw(std::string_view s)
    {
        m_buf.append(s);
        if (m_buf.size() >= (1 << 20))
            flush();
    }
    void num(int64_t v) { numT(v); }
    void dbl(double v) { numT(v); }
    void unum(uint64_t v) { numT(v); }
    void str(std::string_view s)
    {
        m_buf.push_back('"');
        for (char c : s) {
            const auto u = static_cast<unsigned char>(c);
            if (c == '"' || c == '\\') {
                m_buf.push_back('\\');
                m_buf.push_back(c);
            } else if (u < 0x20) {
                static const char* hex = "0123456789abcdef";
                m_buf.append("\\u00");
                m_buf.push_back(hex[u >> 4]);
                m_buf.push_back(hex[u & 15]);
            } else {
                m_buf.push_back(c);
            }
        }
        m_buf.push_back('"');
    }
    void flush()
    {
        m_out.write(m_buf.data(), std::streamsize(m_buf.size()));
        m_buf.clear();
    }

private:
    template <typename T>
    void numT(T v)
    {
        char tmp[24];
        auto [p, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
        m_buf.append(tmp, size_t(p - tmp));
    }
    std::ostream& m_out;
    std::string m_buf;
};

void jsonFrames(JsonOut& j, const FrameTable& table, StackId stack)
{
    j.raw("[");
    if (stack.valid()) {
        bool first = true;
        for (FrameId f : table.stack(stack)) {
            const Frame& fr = table.frame(f);
            j.raw(first ? "{\"name\":" : ",{\"name\":");
            first = false;
            j.str(fr.name);
            j.raw(",\"filename\":");
            j.str(fr.filename);
            j.raw(",\"line\":");
            j.num(fr.line);
            j.raw("}");
        }
    }
    j.raw("]");
}

} // namespace

void writeSnapshotJson(const Trace& trace, std::ostream& out)
{
    JsonOut j(out);
    const auto devices = snapshotDevices(trace);
    j.raw("{\"segments\":[");
    bool first = true;
    for (const auto* d : devices) {
        for (const auto& s : d->segments) {
            j.raw(first ? "{\"device\":" : ",{\"device\":");
            first = false;
            j.num(d->device);
            j.raw(",\"address\":");
            j.unum(s.address);
            j.raw(",\"total_size\":");
            j.num(s.totalSize);
            j.raw(",\"allocated_size\":");
            j.num(s.allocatedSize);
            j.raw(",\"active_size\":");
            j.num(s.activeSize);
            j.raw(",\"requested_size\":");
            j.num(s.requestedSize);
            j.raw(",\"stream\":");
            j.num(s.stream);
            j.raw(s.isLarge ? ",\"segment_type\":\"large\"" : ",\"segment_type\":\"small\"");
            j.raw(",\"segment_pool_id\":[");
            j.num(s.poolId[0]);
            j.raw(",");
            j.num(s.poolId[1]);
            j.raw(s.isExpandable ? "],\"is_expandable\":true,\"blocks\":[" : "],\"is_expandable\":false,\"blocks\":[");
            bool firstBlock = true;
            for (const auto& b : s.blocks) {
                j.raw(firstBlock ? "{\"address\":" : ",{\"address\":");
                firstBlock = false;
                j.unum(b.address);
                j.raw(",\"size\":");
                j.num(b.size);
                j.raw(",\"requested_size\":");
                j.num(b.requestedSize);
                j.raw(",\"state\":");
                j.str(snapshotStateName(b.state));
                j.raw(",\"frames\":");
                jsonFrames(j, trace.frames, b.stack);
                j.raw("}");
            }
            j.raw("],\"frames\":");
            jsonFrames(j, trace.frames, s.stack);
            j.raw("}");
        }
    }
    j.raw("],\"device_traces\":[");
    const int maxDevice = devices.empty() ? -1 : devices.back()->device;
    for (int dev = 0; dev <= maxDevice; ++dev) {
        j.raw(dev == 0 ? "[" : ",[");
        auto it = std::find_if(devices.begin(), devices.end(), [&](const DeviceTrace* d) { return d->device == dev; });
        if (it != devices.end()) {
            const auto& ev = (*it)->events;
            for (size_t i = 0; i < ev.count(); ++i) {
                j.raw(i == 0 ? "{\"action\":" : ",{\"action\":");
                j.str(actionName(ev.action[i]));
                j.raw(ev.action[i] == Action::Oom ? ",\"device_free\":" : ",\"addr\":");
                j.unum(ev.addr[i]);
                j.raw(",\"size\":");
                j.num(ev.size[i]);
                j.raw(",\"stream\":");
                j.num(ev.stream[i]);
                if (ev.timeUs[i] != kNoTime) {
                    j.raw(",\"time_us\":");
                    j.num(ev.timeUs[i]);
                }
                j.raw(",\"frames\":");
                jsonFrames(j, trace.frames, ev.stack[i]);
                j.raw("}");
            }
        }
        j.raw("]");
    }
    j.raw("]");
    if (!trace.allocatorSettings.empty()) {
        j.raw(",\"allocator_settings\":{");
        bool firstSetting = true;
        for (const auto& [k, text] : trace.allocatorSettings) {
            if (!firstSetting)
                j.raw(",");
            firstSetting = false;
            j.str(k);
            j.raw(":");
            const SettingValue v = parseSnapshotSetting(k, text);
            switch (v.kind) {
            case SettingValue::Bool: j.raw(v.b ? "true" : "false"); break;
            case SettingValue::Int: j.num(v.i); break;
            case SettingValue::Float: j.dbl(v.f); break;
            case SettingValue::Str: j.str(v.s); break;
            case SettingValue::IntDict: {
                j.raw("{");
                for (size_t k2 = 0; k2 < v.dict.size(); ++k2) {
                    if (k2)
                        j.raw(",");
                    j.str(v.dict[k2].first);
                    j.raw(":");
                    j.num(v.dict[k2].second);
                }
                j.raw("}");
                break;
            }
            }
        }
        j.raw("}");
    }
    if (!trace.annotations.empty()) {
        j.raw(",\"external_annotations\":[");
        for (size_t i = 0; i < trace.annotations.size(); ++i) {
            const auto& a = trace.annotations[i];
            j.raw(i == 0 ? "{\"stage\":" : ",{\"stage\":");
            j.raw(a.start ? "\"START\"" : "\"END\"");
            j.raw(",\"name\":");
            j.str(a.name);
            j.raw(",\"device\":");
            j.num(a.device);
            if (a.timeUs != kNoTime) {
                j.raw(",\"time_us\":");
                j.num(a.timeUs);
            }
            j.raw("}");
        }
        j.raw("]");
    }
    j.raw("}");
    j.flush();
}

} // namespace poolscope
