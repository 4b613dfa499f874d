#include "core/util/column_stock.h"

#include "core/util/huge_pages.h"

#include <algorithm>

namespace poolscope {

namespace {
constexpr size_t kChunk = size_t(1) << 19; // 4 MB of int64: a stop is heeded within a few milliseconds
}

void ColumnStock::fill(size_t columns, const std::atomic<bool>& stop)
{
    while (m_columns.size() < columns && !stop.load(std::memory_order_relaxed)) {
        std::vector<int64_t>& c = m_columns.emplace_back();
        reserveHuge(c, m_length);
        while (c.size() < m_length && !stop.load(std::memory_order_relaxed))
            c.resize(std::min(m_length, c.size() + kChunk), 0);
    }
}

std::vector<int64_t> ColumnStock::take()
{
    std::vector<int64_t> c;
    if (!m_columns.empty()) { // the first made are whole; only the last may be half-made
        c = std::move(m_columns.front());
        m_columns.erase(m_columns.begin());
    } else {
        reserveHuge(c, m_length);
    }
    c.resize(m_length, 0); // finishes a half-made one; capacity is reserved, nothing moves
    return c;
}

} // namespace poolscope
