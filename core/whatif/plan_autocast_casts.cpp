#include "core/whatif/autocast_eligible.h"
#include "core/whatif/plan.h"

#include <cstdint>
#include <unordered_set>
#include <vector>

namespace poolscope {

using autocast_detail::eligible;
using autocast_detail::kInputWindow;

namespace {
constexpr int kMaxCastsPerCall = 2; // a matmul's tensor inputs: activation and weight, or two activations
}

// Autocast's casts where no frame names one (Python-only stacks: the _to_copy runs below the Python
// frame of the matmul that asked for it, so it carries that operator's frames, and a user's module
// may name no operator at all). Two facts of structure stand in for the missing frames:
// - A call site that casts a weight (TraceModel::weightCast: the weights' 16-bit twins) is a
//   matmul's: what it makes besides the casts is the matmul's 16-bit output.
// - One call leaves its allocations one after the other under one stack, and autocast casts before
//   the kernel runs: the call's leading allocations that have half the bytes of a live tensor made
//   before the call (its fp32 input; a 16-bit input is not cast) are the inputs' casts, one per
//   source, at most one per tensor input, never the call's last allocation (its output).
// `precision` gets both: matmul outputs Lower, inputs' casts Cast. Returns the casts found.
size_t castsFromStructure(const DeviceTrace& dev, const TraceModel& m, std::vector<OpPrecision>& precision)
{
    const size_t n = dev.allocations.size();
    std::unordered_set<uint32_t> matmulSites;
    for (size_t a = 0; a < n; ++a)
        if (m.weightCast[a] && dev.allocations[a].stack.valid())
            matmulSites.insert(dev.allocations[a].stack.value);
    for (size_t a = 0; a < n; ++a)
        if (!m.weightCast[a] && (precision[a] == OpPrecision::Unknown || precision[a] == OpPrecision::Promote) &&
            dev.allocations[a].stack.valid() && matmulSites.count(dev.allocations[a].stack.value) && eligible(m, a))
            precision[a] = OpPrecision::Lower;
    std::vector<uint8_t> claimed(n, 0);
    size_t found = 0;
    for (size_t first = 0; first < n;) {
        const StackId stack = dev.allocations[first].stack;
        size_t end = first + 1;
        while (end < n && stack.valid() && dev.allocations[end].stack == stack)
            ++end;
        if (end - first < 2 || (precision[first] != OpPrecision::Lower && !m.weightCast[first])) {
            first = end;
            continue;
        }
        int inputs = 0;
        for (size_t c = first; c + 1 < end && inputs < kMaxCastsPerCall; ++c) {
            const Allocation& al = dev.allocations[c];
            if (m.weightCast[c]) {
                ++inputs;
                continue;
            }
            if (al.preexisting() || !eligible(m, c))
                break;
            size_t source = SIZE_MAX;
            int seen = 0;
            for (size_t b = first; b-- > 0 && seen < kInputWindow;) {
                const Allocation& src = dev.allocations[b];
                if (src.preexisting())
                    break;
                if (!eligible(m, b))
                    continue;
                ++seen;
                if (claimed[b] || src.size != 2 * al.size || precision[b] == OpPrecision::Lower ||
                    (src.freeCompletedEvent != kNoEvent && src.freeCompletedEvent < al.allocEvent))
                    continue;
                source = b;
                break;
            }
            if (source == SIZE_MAX)
                break; // the kernel's own allocations begin: no cast comes after them
            claimed[source] = 1;
            precision[c] = OpPrecision::Cast;
            ++inputs;
            ++found;
        }
        first = end;
    }
    return found;
}

} // namespace poolscope
