#pragma once
// A loaded snapshot with the user's code taken out of it (`poolscope redact`, File > Export redacted
// copy, and the ablation suite that measures how much the pools rest on names and frames). Every
// number stays: events, sizes, addresses, streams, times, segments, OOMs; only frames and names change.
#include "core/model/trace.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace poolscope {

class RuleSet;

// Which frames a redacted copy keeps: all; Python's only (what stacks='python' and Windows captures
// record: C++ and CPython-internal frames go); none (the history stays, every stack is empty).
enum class FrameKeep : uint8_t { All, Python, None };
std::string_view frameKeepName(FrameKeep keep);
std::optional<FrameKeep> parseFrameKeep(std::string_view name); // "all" | "python" | "none"

struct RedactOptions {
    // Frames outside PyTorch and installed packages get stable tokens ("user/file3.py", "fn12"; line
    // numbers kept); library paths lose everything above the package; annotations other than step
    // and phase markers get tokens.
    bool renameCode = false;
    FrameKeep frames = FrameKeep::All;
    // The annotation patterns that say which annotations are phase markers (kept as markers);
    // null: the rules compiled into the binary.
    const RuleSet* markers = nullptr;
};

struct RedactStats {
    size_t framesRenamed = 0; // frames whose file or function became a token
    size_t pathsCut = 0;      // library frames whose path lost its directories
    size_t framesDropped = 0; // distinct frames no stack keeps
    size_t annotationsRenamed = 0;
    size_t stacksEmptied = 0; // stacks that had frames and have none now
};

// Whether a frame is one that a Python-only capture records: a Python source (".py", "<frozen ...>"),
// not a native one (no file, "??", or a C/C++ source, including CPython's own with line numbers).
bool isPythonRecordedFrame(const Frame& frame);

// A copy of `trace` redacted as asked, `path` kept (the caller names the copy). Kineto traces keep
// their operator names unless renameCode, which replaces those a user's record_function wrote.
std::shared_ptr<Trace> redact(const Trace& trace, const RedactOptions& options, RedactStats* stats = nullptr);

} // namespace poolscope
