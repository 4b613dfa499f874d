#include "core/sites/site_key.h"

#include "core/model/torch_paths.h"

namespace poolscope {
namespace {
constexpr uint64_t kOp = 1ull << 62, kFrame = 2ull << 62, kSize = 3ull << 62, kValue = (1ull << 62) - 1;

std::string frameText(const Frame& fr)
{
    if (fr.isPython())
        return fr.filename + ":" + std::to_string(fr.line) + " " + fr.name;
    return fr.name;
}
} // namespace

SiteNames::SiteNames(const Trace& trace) : m_trace(trace), m_userFrame(trace.frames.stackCount(), -2) {}

SiteKey SiteNames::key(const Allocation& a) const
{
    if (a.op != 0)
        return kOp | a.op;
    if (a.stack.valid() && a.stack.value < m_userFrame.size()) {
        int64_t& f = m_userFrame[a.stack.value];
        if (f == -2) {
            const FrameId u = m_trace.frames.userFrame(a.stack);
            f = u ? int64_t(u.value) : -1;
        }
        if (f >= 0)
            return kFrame | uint64_t(f);
    }
    return kSize | uint64_t(a.size);
}

std::string SiteNames::label(SiteKey key) const
{
    const uint64_t v = key & kValue;
    switch (key >> 62) {
    case 1: return m_trace.opNames[v < m_trace.opNames.size() ? v : 0];
    case 2: return frameText(m_trace.frames.frame(FrameId(uint32_t(v))));
    default: return "(no frames) " + std::to_string(v) + "-byte allocations";
    }
}

std::string allocationSiteText(const Trace& trace, const Allocation& a)
{
    if (!trace.opName(a).empty())
        return trace.opName(a);
    const FrameId f = trace.frames.userFrame(a.stack);
    return f ? frameText(trace.frames.frame(f)) : std::string();
}

std::string shortStackSite(const Trace& trace, StackId stack)
{
    if (!stack.valid())
        return {};
    const FrameId f = trace.frames.userFrame(stack);
    if (!f)
        return {};
    const Frame& fr = trace.frames.frame(f);
    if (!fr.isPython())
        return fr.name;
    const std::string where = ":" + std::to_string(fr.line) + " " + fr.name;
    if (const auto inPackage = installedPackagePath(fr.filename))
        return *inPackage + where;
    // Another file: its folder and name.
    const std::string path = forwardSlashes(fr.filename);
    const size_t last = path.rfind('/');
    size_t from = last == std::string::npos || last == 0 ? 0 : path.rfind('/', last - 1);
    from = from == std::string::npos ? 0 : from + 1;
    return path.substr(from) + where;
}

} // namespace poolscope
