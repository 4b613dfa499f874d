// Grad mode from a run's structure. With grad on, autograd keeps what each operator saved for
// backward, so a forward's live memory accumulates from its first layer to its last; under
// torch.no_grad or inference_mode nothing is kept and only the tensors the running operators use
// are alive. A backward pass recorded says "on" outright; a no_grad / inference_mode frame (a
// decorated function) says "off". Otherwise the forward's peak tells: at it, how much of what is
// alive was made in the first half of the allocations before it. A graph being kept puts about half
// there (the early layers' saved tensors); a forward that keeps nothing, next to none.
#include "core/compare/run_profile.h"
#include "core/model/torch_paths.h"

#include <algorithm>
#include <cstdio>

namespace poolscope {
namespace {

constexpr size_t kMinAllocations = 32; // a forward of fewer allocations says nothing about its graph
constexpr double kKeptShare = 0.25;    // at or above: the early layers' tensors live at the peak (graph kept)
constexpr double kNothingShare = 0.12; // at or below: only the latest tensors live (nothing kept)

bool weightPool(Pool p)
{
    return p == Pool::Parameter || p == Pool::Gradient || p == Pool::OptimizerState || p == Pool::CastCache || p == Pool::KvCache;
}

bool contains(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

} // namespace

GradModeFinding findGradMode(const Trace& trace, const DeviceTrace& dev, const Classification& c, const TraceModel& m)
{
    GradModeFinding out;
    // The run facts say whether a training backward ran (frames, an annotation or the autograd
    // engine's frees); the model's phase runs are the same evidence where the facts are missing.
    if (c.facts.backward == Known::Yes || m.hasBackward) {
        out.mode = 1;
        out.evidence = "a backward pass is recorded";
        return out;
    }
    // Calls whose tensors outlive the next call in a run without backward (the run facts: an
    // evaluation that keeps each call's output with its graph).
    if (c.facts.backward == Known::No && c.facts.graphsKeptAcrossCalls) {
        out.mode = 1;
        out.evidence = "no backward recorded, yet each call of the model left its tensors alive after the next call had run: "
                       "graphs kept (grad on)";
        return out;
    }
    // A function decorated with @torch.no_grad() / @torch.inference_mode() runs inside grad_mode.py's
    // decorate_context; a `with` block leaves no frame.
    const FrameTable& frames = trace.frames;
    for (const Allocation& al : dev.allocations) {
        if (al.preexisting() || !al.stack.valid())
            continue;
        for (FrameId f : frames.stack(al.stack)) {
            const Frame& fr = frames.frame(f);
            const std::string file = forwardSlashes(fr.filename); // Windows records backslashes
            if (contains(file, "autograd/grad_mode.py") && !contains(fr.name, "enable_grad") && !contains(fr.name, "set_grad_enabled")) {
                out.mode = -1;
                out.evidence = "allocations under torch.no_grad / inference_mode frames (" + fr.name + " in grad_mode.py)";
                return out;
            }
        }
    }
    if (dev.peakIndex == kNoEvent)
        return out;
    // The in-trace allocations outside the weights made up to the peak, in order; those alive there.
    std::vector<size_t> made;
    for (size_t a = 0; a < dev.allocations.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        if (al.preexisting() || al.allocEvent > dev.peakIndex || (a < c.pool.size() && weightPool(c.pool[a])))
            continue;
        made.push_back(a);
    }
    if (made.size() < kMinAllocations)
        return out;
    std::sort(made.begin(), made.end(), [&](size_t x, size_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
    int64_t alive = 0, early = 0;
    for (size_t i = 0; i < made.size(); ++i) {
        const Allocation& al = dev.allocations[made[i]];
        if (!al.aliveAfter(dev.peakIndex))
            continue;
        alive += al.size;
        if (i < made.size() / 2)
            early += al.size;
    }
    if (alive == 0)
        return out;
    const double share = double(early) / double(alive);
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f%%", 100.0 * share);
    const std::string what = "no backward recorded; at the peak " + std::string(pct) + " of the live activations were made in the first half of the " +
                             std::to_string(made.size()) + " allocations before it";
    if (share >= kKeptShare) {
        out.mode = 1;
        out.evidence = what + ": the forward keeps its graph from its first layers on (grad on)";
    } else if (share <= kNothingShare) {
        out.mode = -1;
        out.evidence = what + ": only the running operators' tensors live, nothing is kept for a backward (torch.no_grad or inference_mode)";
    }
    return out;
}

} // namespace poolscope
