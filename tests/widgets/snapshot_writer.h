#pragma once
// Writes a Trace as a PyTorch snapshot dict in JSON (what users get from json.dump of
// torch.cuda.memory._snapshot()), so widget tests open a file through the real loader.
#include "core/model/trace.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

namespace poolscope::testing {

inline nlohmann::json framesJson(const Trace& t, StackId stack)
{
    nlohmann::json frames = nlohmann::json::array();
    if (!stack.valid())
        return frames;
    for (FrameId f : t.frames.stack(stack)) {
        const Frame& fr = t.frames.frame(f);
        frames.push_back({{"filename", fr.filename}, {"line", fr.line}, {"name", fr.name}});
    }
    return frames;
}

inline const char* actionText(Action a)
{
    switch (a) {
    case Action::Alloc: return "alloc";
    case Action::FreeRequested: return "free_requested";
    case Action::FreeCompleted: return "free_completed";
    case Action::SegmentAlloc: return "segment_alloc";
    case Action::SegmentFree: return "segment_free";
    case Action::SegmentMap: return "segment_map";
    case Action::SegmentUnmap: return "segment_unmap";
    case Action::Snapshot: return "snapshot";
    case Action::Oom: return "oom";
    case Action::Annotate: return "annotate";
    case Action::Unknown: break;
    }
    return "unknown_action";
}

inline nlohmann::json snapshotJson(const Trace& t)
{
    using nlohmann::json;
    json root;
    json segments = json::array();
    json traces = json::array();
    for (const DeviceTrace& d : t.devices) {
        for (const Segment& s : d.segments) {
            json blocks = json::array();
            for (const Block& b : s.blocks)
                blocks.push_back({{"address", b.address},
                                  {"size", b.size},
                                  {"requested_size", b.requestedSize},
                                  {"state", b.state == BlockState::ActiveAllocated ? "active_allocated"
                                            : b.state == BlockState::ActivePendingFree ? "active_pending_free" : "inactive"},
                                  {"frames", framesJson(t, b.stack)}});
            segments.push_back({{"device", d.device},
                                {"address", s.address},
                                {"total_size", s.totalSize},
                                {"allocated_size", s.allocatedSize},
                                {"active_size", s.allocatedSize},
                                {"requested_size", s.allocatedSize},
                                {"stream", s.stream},
                                {"segment_type", s.isLarge ? "large" : "small"},
                                {"segment_pool_id", json::array({0, 0})},
                                {"is_expandable", false},
                                {"frames", json::array()},
                                {"blocks", blocks}});
        }
        json entries = json::array();
        const EventColumns& ev = d.events;
        for (size_t i = 0; i < ev.count(); ++i) {
            json e = {{"action", actionText(ev.action[i])}, {"size", ev.size[i]}, {"stream", ev.stream[i]}};
            if (ev.action[i] == Action::Oom)
                e["device_free"] = int64_t(ev.addr[i]);
            else
                e["addr"] = ev.addr[i];
            if (ev.timeUs[i] != kNoTime)
                e["time_us"] = ev.timeUs[i];
            if (ev.stack[i].valid())
                e["frames"] = framesJson(t, ev.stack[i]);
            entries.push_back(std::move(e));
        }
        while (traces.size() < size_t(d.device))
            traces.push_back(json::array());
        traces.push_back(std::move(entries));
    }
    root["segments"] = segments;
    root["device_traces"] = traces;
    json ann = json::array();
    for (const Annotation& a : t.annotations)
        ann.push_back({{"name", a.name}, {"stage", a.start ? "START" : "END"}, {"device", a.device}, {"time_us", a.timeUs}});
    root["external_annotations"] = ann;
    return root;
}

inline void writeSnapshotJson(const Trace& t, const std::string& path) { std::ofstream(path) << snapshotJson(t).dump(); }

// Several single-device traces as the devices 0, 1, ... of one snapshot (what a DataParallel job's
// one process dumps): segments and traces renumbered, annotations left out.
inline void writeMultiDeviceSnapshotJson(const std::vector<const Trace*>& traces, const std::string& path)
{
    using nlohmann::json;
    json root{{"segments", json::array()}, {"device_traces", json::array()}, {"external_annotations", json::array()}};
    for (size_t i = 0; i < traces.size(); ++i) {
        json one = snapshotJson(*traces[i]);
        for (json& seg : one["segments"]) {
            seg["device"] = int(i);
            root["segments"].push_back(std::move(seg));
        }
        json entries = json::array();
        for (const json& t : one["device_traces"])
            if (!t.empty())
                entries = t;
        root["device_traces"].push_back(std::move(entries));
    }
    std::ofstream(path) << root.dump();
}

} // namespace poolscope::testing
