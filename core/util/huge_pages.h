#pragma once
#include <cstddef>
#include <vector>

namespace poolscope {

// Asks the kernel to back the not yet touched part of a large buffer with transparent huge pages
// (THP is commonly "madvise" only). A million-entry load faults in some 400 MB of fresh columns,
// arrays and containers; in 4 KiB pages that was ~110k page faults and a third of the CPU time in the
// kernel. Buffers under two huge pages are left alone: a small trace keeps its small footprint.
// Advice only: where the kernel says no, nothing changes.
void adviseHugePages(const void* data, size_t bytes);

// Faults in the pages of [data, data + bytes) now, zeroed where never written, without writing
// them (MADV_POPULATE_WRITE): the kernel's zeroing of fresh memory then happens on the calling
// thread, not on the first writer's. For a thread that would otherwise wait. Contents are never
// changed, so the range may be written by another thread meanwhile; false where not supported.
bool populatePages(const void* data, size_t bytes);

// reserve() that asks for huge pages for what was reserved (before any of it is touched).
template <typename T>
void reserveHuge(std::vector<T>& v, size_t n)
{
    v.reserve(n);
    adviseHugePages(v.data(), v.capacity() * sizeof(T));
}

// assign(n, value) into huge pages: reserved and advised first, so the fill faults in huge pages.
template <typename T>
void assignHuge(std::vector<T>& v, size_t n, const T& value)
{
    if (v.capacity() < n) {
        std::vector<T>().swap(v);
        reserveHuge(v, n);
    }
    v.assign(n, value);
}

} // namespace poolscope
