#pragma once
#include "core/model/ids.h"

#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace poolscope {

struct Frame {
    std::string filename;
    std::string name;
    int64_t line = 0;

    // C++ frames recorded with stacks='all' have filename "??" or "" (or a .cpp/.h/.cu file) and line 0.
    bool isPython() const;
    bool operator==(const Frame&) const = default;
};

// Interns frames and stacks once, so a dump with 768k frame references and 668 distinct frames holds
// 668 Frame objects. Stacks are innermost first, as PyTorch records them.
class FrameTable {
public:
    FrameId internFrame(const Frame& frame);
    FrameId internFrame(std::string_view filename, std::string_view name, int64_t line);
    StackId internStack(std::span<const FrameId> framesInnermostFirst);

    const Frame& frame(FrameId id) const { return m_frames[id.value]; }
    std::span<const FrameId> stack(StackId id) const;
    size_t frameCount() const { return m_frames.size(); }
    size_t stackCount() const { return m_stackOffsets.size() - 1; }

    // The innermost Python frame that is not PyTorch's own plumbing (torch/, site-packages/torch):
    // what a user recognises as "their" line. Falls back to the innermost Python frame; for C++-only
    // stacks to the autograd node (…Backward0::apply), the ATen operator, or the first frame past the
    // allocator's own plumbing.
    FrameId userFrame(StackId id) const;

private:
    struct FrameKeyHash {
        size_t operator()(const Frame& f) const noexcept;
    };
    std::vector<Frame> m_frames;
    std::unordered_map<Frame, FrameId, FrameKeyHash> m_frameIndex;
    std::vector<FrameId> m_stackFrames;
    std::vector<uint32_t> m_stackOffsets{0};
    std::unordered_multimap<uint64_t, StackId> m_stackIndex;
};

} // namespace poolscope
