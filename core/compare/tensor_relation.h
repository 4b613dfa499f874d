#pragma once
// Private to core/compare: how B's tensors of one kind (parameters, gradients, optimizer state)
// relate to A's, as sorted lists of sizes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace poolscope {

enum class Relation : uint8_t { Empty, Same, Scaled, Fewer, More, Different };

struct TensorRelation {
    Relation kind = Relation::Empty;
    double factor = 1.0; // B over A in bytes
    size_t countA = 0, countB = 0;
    int64_t bytesA = 0, bytesB = 0;
};

// Same: totals within 2 %. Scaled: as many tensors, each scaled by the same factor (ceil(n / N)
// elements of a sharded tensor, or a narrower element). Fewer/More: B's tensors are a sub-multiset
// of A's (or the reverse). Different: none of these.
TensorRelation relate(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// N when `factor` is 1/N (or N) for a whole N >= 2; 0 otherwise.
int wholeDivisor(double factor);

// The tensors of `a` not in `b` (as multisets at the allocator's 512-byte granularity), sorted.
std::vector<int64_t> without(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// "52 tensors, 13.15 MiB"
std::string tensorsText(size_t count, int64_t bytes);

} // namespace poolscope
