#include "core/compare/tensor_relation.h"

#include "core/classify/classifier.h"
#include "core/compare/axes.h"
#include "core/util/units.h"

#include <cmath>

namespace poolscope {
namespace {

int64_t total(const std::vector<int64_t>& v)
{
    int64_t t = 0;
    for (int64_t x : v)
        t += x;
    return t;
}

// Whether every size of `small` appears in `big` (as a multiset, at the allocator's 512-byte granularity).
bool subMultiset(const std::vector<int64_t>& small, const std::vector<int64_t>& big)
{
    size_t j = 0;
    for (int64_t s : small) {
        const int64_t key = mirrorKey(s);
        while (j < big.size() && mirrorKey(big[j]) < key)
            ++j;
        if (j == big.size() || mirrorKey(big[j]) != key)
            return false;
        ++j;
    }
    return true;
}

} // namespace

TensorRelation relate(const std::vector<int64_t>& a, const std::vector<int64_t>& b)
{
    TensorRelation r;
    r.countA = a.size();
    r.countB = b.size();
    r.bytesA = total(a);
    r.bytesB = total(b);
    if (a.empty() && b.empty())
        return r;
    r.factor = r.bytesA > 0 ? double(r.bytesB) / double(r.bytesA) : 0.0;
    // Totals within 2 %: the same tensors, give or take what the classifier put elsewhere.
    if (r.bytesA > 0 && nearRatio(double(r.bytesB), double(r.bytesA))) {
        r.kind = Relation::Same;
        return r;
    }
    if (a.size() == b.size() && r.bytesA > 0) {
        // Each tensor scaled alike: ceil(n / N) elements of a sharded tensor, or a narrower element.
        bool scaled = true;
        for (size_t i = 0; i < a.size() && scaled; ++i)
            scaled = std::abs(double(b[i]) - double(a[i]) * r.factor) <= 64.0 + 0.002 * double(a[i]);
        if (scaled) {
            r.kind = Relation::Scaled;
            return r;
        }
    }
    if (b.size() < a.size() && subMultiset(b, a))
        r.kind = Relation::Fewer;
    else if (b.size() > a.size() && subMultiset(a, b))
        r.kind = Relation::More;
    else
        r.kind = Relation::Different;
    return r;
}

int wholeDivisor(double factor)
{
    if (factor <= 0)
        return 0;
    const double n = factor < 1 ? 1.0 / factor : factor;
    const double rounded = std::round(n);
    return rounded >= 2 && std::abs(n - rounded) <= 0.02 * rounded ? int(rounded) : 0;
}

std::vector<int64_t> without(const std::vector<int64_t>& a, const std::vector<int64_t>& b)
{
    std::vector<int64_t> out;
    size_t j = 0;
    for (int64_t x : a) {
        while (j < b.size() && mirrorKey(b[j]) < mirrorKey(x))
            ++j;
        if (j < b.size() && mirrorKey(b[j]) == mirrorKey(x))
            ++j;
        else
            out.push_back(x);
    }
    return out;
}

std::string tensorsText(size_t count, int64_t bytes)
{
    return std::to_string(count) + " tensors, " + formatBytes(bytes);
}

} // namespace poolscope
