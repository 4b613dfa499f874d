#include "core/redact/redact.h"

#include "core/classify/rules.h"
#include "core/redact/code_names.h"

#include <vector>

namespace poolscope {
namespace {

bool endsWith(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

bool isNativeSourceName(std::string_view file)
{
    for (std::string_view ext : {".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".cu", ".cuh", ".inl", ".S"})
        if (endsWith(file, ext))
            return true;
    return false;
}

} // namespace

std::string_view frameKeepName(FrameKeep keep)
{
    switch (keep) {
    case FrameKeep::All: return "all";
    case FrameKeep::Python: return "python";
    case FrameKeep::None: return "none";
    }
    return "all";
}

std::optional<FrameKeep> parseFrameKeep(std::string_view name)
{
    for (FrameKeep k : {FrameKeep::All, FrameKeep::Python, FrameKeep::None})
        if (frameKeepName(k) == name)
            return k;
    return std::nullopt;
}

bool isPythonRecordedFrame(const Frame& frame)
{
    // Kineto's operator pseudo-frames are the profiler's, not a stack's: a Python-only capture has them too.
    if (frame.filename == "<op>")
        return true;
    if (isNativeSourceName(frame.filename))
        return false; // CPython's C frames carry line numbers under stacks='all'; Python never records them
    return frame.isPython();
}

std::shared_ptr<Trace> redact(const Trace& trace, const RedactOptions& options, RedactStats* stats)
{
    RedactStats local;
    RedactStats& st = stats ? *stats : local;
    const RuleSet builtinMarkers = options.markers || !options.renameCode ? RuleSet() : RuleSet::builtin();
    const RuleSet& markers = options.markers ? *options.markers : builtinMarkers;

    auto out = std::make_shared<Trace>();
    out->path = trace.path;
    out->format = trace.format;
    out->formatDetail = trace.formatDetail;
    out->versionHints = trace.versionHints;
    out->allocatorSettings = trace.allocatorSettings;
    out->warnings = trace.warnings;
    out->unknownKeys = trace.unknownKeys;
    out->inputBytes = trace.inputBytes;

    // Frames: each old frame maps to a new one, or to none when the redaction drops it.
    CodeTokens tokens(markers);
    const FrameTable& old = trace.frames;
    std::vector<FrameId> frameMap(old.frameCount());
    for (size_t i = 0; i < old.frameCount(); ++i) {
        const Frame& f = old.frame(FrameId(uint32_t(i)));
        const bool keep = options.frames == FrameKeep::All || (options.frames == FrameKeep::Python && isPythonRecordedFrame(f));
        if (!keep) {
            ++st.framesDropped;
            continue;
        }
        Frame renamed = f;
        if (options.renameCode) {
            renamed = tokens.renameFrame(f);
            if (renamed.name != f.name || renamed.filename.rfind("user/", 0) == 0)
                ++st.framesRenamed;
            else if (renamed.filename != f.filename)
                ++st.pathsCut;
        }
        frameMap[i] = out->frames.internFrame(renamed);
    }
    // Stacks: the kept frames in their order. An emptied stack stays a (valid) empty stack, as a
    // dump's `frames: []` reads.
    std::vector<StackId> stackMap(old.stackCount());
    std::vector<FrameId> scratch;
    for (size_t s = 0; s < old.stackCount(); ++s) {
        const auto frames = old.stack(StackId(uint32_t(s)));
        scratch.clear();
        for (FrameId f : frames)
            if (frameMap[f.value].valid())
                scratch.push_back(frameMap[f.value]);
        if (!frames.empty() && scratch.empty())
            ++st.stacksEmptied;
        stackMap[s] = out->frames.internStack(scratch);
    }
    auto mapStack = [&](StackId id) { return id.valid() && id.value < stackMap.size() ? stackMap[id.value] : StackId(); };

    out->devices = trace.devices;
    for (DeviceTrace& d : out->devices) {
        for (StackId& s : d.events.stack)
            s = mapStack(s);
        for (Allocation& a : d.allocations)
            a.stack = mapStack(a.stack);
        for (Segment& seg : d.segments) {
            seg.stack = mapStack(seg.stack);
            for (Block& b : seg.blocks)
                b.stack = mapStack(b.stack);
        }
    }

    out->annotations = trace.annotations;
    out->opNames = trace.opNames;
    if (options.renameCode) {
        for (Annotation& a : out->annotations) {
            std::string renamed = tokens.renameAnnotation(a.name);
            if (renamed != a.name)
                ++st.annotationsRenamed;
            a.name = std::move(renamed);
        }
        for (size_t i = 1; i < out->opNames.size(); ++i)
            out->opNames[i] = tokens.renameFrame(Frame{"<op>", out->opNames[i], 0}).name;
    }
    return out;
}

} // namespace poolscope
