#include "core/model/frames.h"
#include "core/model/torch_paths.h"

namespace poolscope {
namespace {

bool endsWith(std::string_view s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

uint64_t hashStack(std::span<const FrameId> frames)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a over the ids
    for (FrameId f : frames) {
        h ^= f.value;
        h *= 1099511628211ull;
    }
    return h ^ frames.size();
}

bool isCompiledSource(std::string_view filename)
{
    for (std::string_view ext : {".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh"})
        if (endsWith(filename, ext))
            return true;
    return false;
}

bool isTorchInternal(std::string_view filename)
{
    return isTorchSource(filename);
}

// The allocator's own frames, found innermost in every C++ stack (stacks='all'): capturing the
// traceback, the caching allocator, the empty-tensor factories. None of them says why the memory exists.
bool isAllocationPlumbing(std::string_view name)
{
    for (std::string_view p : {"torch::unwind::", "torch::CapturedTraceback", "torch::cuda::(anonymous namespace)::gather",
                               "c10::cuda::CUDACachingAllocator::", "c10::CachingAllocator", "at::detail::", "at::TensorBase at::detail::",
                               "at::native::empty", "at::empty", "at::(anonymous namespace)::create_out"})
        if (name.substr(0, p.size()) == p)
            return true;
    return false;
}

} // namespace

bool Frame::isPython() const
{
    if (filename.empty() || filename == "??")
        return false;
    return endsWith(filename, ".py") || filename.front() == '<' || line > 0;
}

size_t FrameTable::FrameKeyHash::operator()(const Frame& f) const noexcept
{
    const size_t h1 = std::hash<std::string_view>{}(f.filename);
    const size_t h2 = std::hash<std::string_view>{}(f.name);
    return h1 ^ (h2 * 31) ^ (std::hash<int64_t>{}(f.line) * 131);
}

FrameId FrameTable::internFrame(const Frame& frame)
{
    auto [it, inserted] = m_frameIndex.try_emplace(frame, FrameId(uint32_t(m_frames.size())));
    if (inserted)
        m_frames.push_back(frame);
    return it->second;
}

FrameId FrameTable::internFrame(std::string_view filename, std::string_view name, int64_t line)
{
    return internFrame(Frame{std::string(filename), std::string(name), line});
}

StackId FrameTable::internStack(std::span<const FrameId> frames)
{
    const uint64_t h = hashStack(frames);
    auto [lo, hi] = m_stackIndex.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
        auto existing = stack(it->second);
        if (existing.size() == frames.size() && std::equal(existing.begin(), existing.end(), frames.begin()))
            return it->second;
    }
    const StackId id{uint32_t(stackCount())};
    m_stackFrames.insert(m_stackFrames.end(), frames.begin(), frames.end());
    m_stackOffsets.push_back(uint32_t(m_stackFrames.size()));
    m_stackIndex.emplace(h, id);
    return id;
}

std::span<const FrameId> FrameTable::stack(StackId id) const
{
    if (!id.valid() || id.value >= stackCount())
        return {};
    const uint32_t begin = m_stackOffsets[id.value], end = m_stackOffsets[id.value + 1];
    return {m_stackFrames.data() + begin, end - begin};
}

FrameId FrameTable::userFrame(StackId id) const
{
    FrameId firstPython, first;
    for (FrameId f : stack(id)) {
        const Frame& fr = frame(f);
        if (!first)
            first = f;
        // A line of Python source: the interpreter's own C frames carry a file and a line too
        // (a CPython built with symbols: Objects/descrobject.c:365 method_vectorcall_VARARGS_KEYWORDS),
        // and are nobody's code.
        if (!fr.isPython() || isCompiledSource(fr.filename))
            continue;
        if (!firstPython)
            firstPython = f;
        if (!isTorchInternal(fr.filename))
            return f;
    }
    if (firstPython)
        return firstPython;
    // C++ only (the autograd engine's thread has no Python frames): the autograd node says which
    // backward made it, else the ATen operator, else the first frame past the allocator's plumbing.
    FrameId op, past;
    for (FrameId f : stack(id)) {
        const std::string& name = frame(f).name;
        if (name.find("torch::autograd::generated::") != std::string::npos && name.find("::apply(") != std::string::npos)
            return f;
        if (!op && name.rfind("at::_ops::", 0) == 0 && name.find("::call(") != std::string::npos)
            op = f;
        if (!past && !name.empty() && !isAllocationPlumbing(name))
            past = f;
    }
    return op ? op : past ? past : first;
}

} // namespace poolscope
