#pragma once
// In-memory frame ablations of a loaded trace, for measuring how much of a classification rests on
// frames: Python-only (what stacks='python' and Windows captures record) and none (history kept).
// Every number (events, sizes, addresses, times, segments) stays.
#include "core/model/trace.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace poolscope::testing {

// Renamed: frames of the user's own code (outside installed packages and PyTorch) get stable tokens
// for their file and function (lines kept), as `poolscope redact --rename-code` writes them.
enum class KeepFrames { Python, None, Renamed };

inline bool installedFrame(const std::string& file)
{
    for (const char* p : {"site-packages", "dist-packages", "/torch/", "\\torch\\", "/lib/python3", "\\Lib\\"})
        if (file.find(p) != std::string::npos)
            return true;
    return file.empty() || file == "??" || file.front() == '<' || !Frame{file, "", 0}.isPython() ||
           (file.size() > 4 && (file.compare(file.size() - 4, 4, ".cpp") == 0 || file.compare(file.size() - 2, 2, ".h") == 0));
}

inline std::shared_ptr<Trace> ablateFrames(const Trace& original, KeepFrames keep)
{
    auto t = std::make_shared<Trace>(original);
    const size_t stacks = t->frames.stackCount();
    std::vector<StackId> map(stacks);
    std::map<std::string, std::string> files, functions;
    auto token = [](std::map<std::string, std::string>& m, const std::string& name, const char* prefix, const char* suffix) {
        auto it = m.find(name);
        if (it == m.end())
            it = m.emplace(name, prefix + std::to_string(m.size()) + suffix).first;
        return it->second;
    };
    for (size_t s = 0; s < stacks; ++s) {
        if (keep == KeepFrames::None)
            continue; // invalid: no frames
        std::vector<FrameId> kept;
        for (FrameId f : t->frames.stack(StackId{uint32_t(s)})) {
            const Frame fr = t->frames.frame(f);
            if (keep == KeepFrames::Python && !fr.isPython())
                continue;
            if (keep == KeepFrames::Renamed && !installedFrame(fr.filename)) {
                kept.push_back(t->frames.internFrame(token(files, fr.filename, "/src/u", ".py"), token(functions, fr.name, "f", ""), fr.line));
                continue;
            }
            kept.push_back(f);
        }
        map[s] = kept.empty() ? StackId{} : t->frames.internStack(kept);
    }
    auto remap = [&](StackId& id) {
        if (id.valid() && id.value < stacks)
            id = map[id.value];
    };
    for (DeviceTrace& d : t->devices) {
        for (StackId& s : d.events.stack)
            remap(s);
        for (Allocation& a : d.allocations)
            remap(a.stack);
        for (Segment& seg : d.segments) {
            remap(seg.stack);
            for (Block& b : seg.blocks)
                remap(b.stack);
        }
    }
    return t;
}

} // namespace poolscope::testing
