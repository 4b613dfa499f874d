#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace poolscope {

// Zeroed int64 columns of one length, made ahead by a thread that would otherwise wait. Touching
// fresh memory for the first time (the kernel zeroing and mapping each page) is most of what the
// pool series cost at millions of events: some 50 MB per column at 6M events. prepareTrace has its
// second thread fill a stock while the first classifies; the series then takes ready columns.
class ColumnStock {
public:
    explicit ColumnStock(size_t length) : m_length(length) {}

    size_t length() const { return m_length; }
    // Makes up to `columns` columns, a chunk at a time, until `stop` is set. The column being made
    // when it is stays half-made and take() finishes it. Not to be called while another thread takes.
    void fill(size_t columns, const std::atomic<bool>& stop);
    // A zeroed column of length(): a made one when there is one, else a new one.
    std::vector<int64_t> take();
    size_t ready() const { return m_columns.size(); }
    void clear() { m_columns.clear(); } // gives back the columns nobody took

private:
    size_t m_length;
    std::vector<std::vector<int64_t>> m_columns;
};

} // namespace poolscope
