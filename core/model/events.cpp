#include "core/model/events.h"

#include "core/util/huge_pages.h"

#include <algorithm>
#include <array>

namespace poolscope {
namespace {
constexpr std::array<std::string_view, 11> kActionNames = {
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
    "segment_unmap", "snapshot", "oom", "annotate", "unknown"};
}

std::string_view actionName(Action a) { return kActionNames[size_t(a)]; }

Action parseAction(std::string_view name)
{
    for (size_t i = 0; i + 1 < kActionNames.size(); ++i)
        if (kActionNames[i] == name)
            return Action(i);
    return Action::Unknown;
}

void EventColumns::reserve(size_t n)
{
    reserveHuge(action, n);
    reserveHuge(addr, n);
    reserveHuge(size, n);
    reserveHuge(stream, n);
    reserveHuge(timeUs, n);
    reserveHuge(stack, n);
}

void EventColumns::populate(size_t from, size_t to) const
{
    auto column = [&](const auto& v) {
        const size_t end = std::min(to, v.capacity());
        if (from < end)
            populatePages(v.data() + from, (end - from) * sizeof(v[0]));
    };
    column(action);
    column(addr);
    column(size);
    column(stream);
    column(timeUs);
    column(stack);
}

size_t EventColumns::capacity() const
{
    return std::min({action.capacity(), addr.capacity(), size.capacity(), stream.capacity(), timeUs.capacity(), stack.capacity()});
}

} // namespace poolscope
