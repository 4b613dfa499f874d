// The trace model's optimizer part (TraceOptimizer): what optimizer ran and how many bytes of state
// it keeps per parameter, read from the run facts the classifier built (its parameters, gradients
// and optimizer state, and the optimizer-step passes), so that a renamed or a Python-only copy of a
// dump gets the same figures as the original.
//
// The memory is structure: the state alive at the end over the parameters gives the bytes per
// parameter (8: Adam-like, 4: momentum-like, 0: none). A name says which kind it is (Adam or AdamW,
// Lion or SGD with momentum, a factored Adafactor, an 8-bit Adam), and only a name PyTorch or an
// installed optimizer library wrote is read:
// - the `Optimizer.step#<class>.step` annotation torch.optim's profiler hook records;
// - an installed optimizer's file (torch/optim/adamw.py, bitsandbytes/optim/...) in the stacks of
//   the allocations the run facts call optimizer state or that the optimizer-step passes made.
// A user's own file or function name never counts (a hand-written Adam in `my_optim.py` is read
// from its state). A library's name is kept where the state looks smaller than its kind's (ZeRO
// shards the state over the ranks: a quarter of Adam's 8 bytes per parameter is still Adam).
#include "core/whatif/trace_model.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <unordered_set>

namespace poolscope {
namespace {

OptimizerKind optimizerFromName(std::string_view name)
{
    auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
    if (has("8bit") || has("8Bit") || has("bitsandbytes"))
        return OptimizerKind::Adam8bit;
    if (has("Adafactor") || has("adafactor"))
        return OptimizerKind::Adafactor;
    if (has("Lion") || has("lion"))
        return OptimizerKind::Lion;
    if (has("AdamW") || has("adamw") || has("FusedAdam"))
        return OptimizerKind::AdamW;
    if (has("Adam") || has("optim/adam.py"))
        return OptimizerKind::Adam;
    if (has("SGD") || has("optim/sgd.py"))
        return OptimizerKind::Sgd;
    return OptimizerKind::Keep;
}

// An installed optimizer library's file, as a path component: ".../site-packages/torch/optim/adamw.py"
// or, in a copy whose library paths were cut to the package, "torch/optim/adamw.py". A user's
// checkout named after an optimizer is not one of these.
bool libraryOptimizerFile(std::string_view file)
{
    static constexpr std::array<std::string_view, 6> kPackages = {"torch/optim/",     "bitsandbytes/optim/", "apex/optimizers/",
                                                                  "deepspeed/ops/",   "torchao/optim/",      "transformers/optimization.py"};
    for (std::string_view p : kPackages)
        for (size_t at = file.find(p); at != std::string_view::npos; at = file.find(p, at + 1))
            if (at == 0 || file[at - 1] == '/')
                return true;
    return false;
}

struct Totals {
    int64_t parameterBytes = 0, gradientBytes = 0, stateBytes = 0;
};

// The run facts' pools: parameters alive at the end (or ever), the largest gradient pool, the state
// alive at the end.
Totals poolTotals(const DeviceTrace& dev, const RunFacts& facts)
{
    Totals t;
    int64_t params = 0, paramsEver = 0, gradNow = 0;
    for (const ParameterFact& p : facts.parameters) {
        const Allocation& al = dev.allocations[p.allocation];
        paramsEver += al.size;
        if (al.aliveAtEnd())
            params += al.size;
    }
    for (uint32_t a : facts.optimizerState)
        if (dev.allocations[a].aliveAtEnd())
            t.stateBytes += dev.allocations[a].size;
    std::vector<std::pair<EventIndex, int64_t>> grads;
    for (uint32_t a : facts.gradients) {
        const Allocation& al = dev.allocations[a];
        if (al.preexisting())
            gradNow += al.size;
        else
            grads.emplace_back(al.allocEvent, al.size);
        if (al.freeCompletedEvent != kNoEvent)
            grads.emplace_back(al.freeCompletedEvent, -al.size);
    }
    t.parameterBytes = params > 0 ? params : paramsEver;
    std::sort(grads.begin(), grads.end());
    t.gradientBytes = gradNow;
    for (auto& [ev, delta] : grads) {
        gradNow += delta;
        t.gradientBytes = std::max(t.gradientBytes, gradNow);
    }
    return t;
}

// A library's name for the optimizer: the annotation first, then an installed optimizer's file in
// the stacks of the state and of what the step passes made.
std::pair<OptimizerKind, std::string> namedOptimizer(const Trace& trace, const DeviceTrace& dev, const Classification& c)
{
    for (const auto& a : trace.annotations) {
        if (a.device != dev.device || a.name.find("Optimizer.step#") == std::string::npos)
            continue;
        if (auto k = optimizerFromName(a.name.substr(a.name.find('#') + 1)); k != OptimizerKind::Keep)
            return {k, "annotation " + a.name};
    }
    std::vector<uint32_t> made(c.facts.optimizerState.begin(), c.facts.optimizerState.end());
    for (size_t a = 0; a < dev.allocations.size() && a < c.birthPhase.size(); ++a)
        if (c.birthPhase[a] == Phase::OptimizerStep)
            made.push_back(uint32_t(a));
    std::unordered_set<uint32_t> stacks;
    for (uint32_t a : made)
        if (const StackId st = dev.allocations[a].stack; st.valid() && stacks.insert(st.value).second)
            for (FrameId f : trace.frames.stack(st)) {
                const std::string& file = trace.frames.frame(f).filename;
                if (!libraryOptimizerFile(file))
                    continue;
                if (auto k = optimizerFromName(file); k != OptimizerKind::Keep)
                    return {k, "frames in " + file};
            }
    return {OptimizerKind::Keep, {}};
}

} // namespace

TraceOptimizer findOptimizer(const Trace& trace, const DeviceTrace& dev, const Classification& c)
{
    TraceOptimizer o;
    const Totals t = poolTotals(dev, c.facts);
    o.parameterBytes = t.parameterBytes;
    o.gradientBytes = t.gradientBytes;
    o.stateBytes = t.stateBytes;
    // Bytes of state per fp32 parameter, from the pools alive at the end.
    int64_t ratio = 0;
    if (o.parameterBytes > 0 && o.stateBytes > 0) {
        const int64_t perParam4 = (o.stateBytes * 4 * 4 + o.parameterBytes * 2) / (o.parameterBytes * 4); // rounded
        int64_t best = 2;
        for (int64_t v : {2, 4, 8, 12})
            if (std::abs(v - perParam4) < std::abs(best - perParam4))
                best = v;
        ratio = best;
    }
    if (auto [kind, evidence] = namedOptimizer(trace, dev, c); kind != OptimizerKind::Keep) {
        o.recordedOptimizer = kind;
        o.optimizerEvidence = evidence;
    }
    switch (o.recordedOptimizer) {
    case OptimizerKind::AdamW:
    case OptimizerKind::Adam:
        o.stateBytesPerParam = ratio == 12 ? 12 : 8;
        break;
    case OptimizerKind::Sgd:
        if (ratio >= 4)
            o.recordedOptimizer = OptimizerKind::SgdMomentum;
        o.stateBytesPerParam = ratio >= 4 ? 4 : 0;
        break;
    case OptimizerKind::Lion:
        o.stateBytesPerParam = 4;
        break;
    case OptimizerKind::Adam8bit:
        o.stateBytesPerParam = 2;
        break;
    case OptimizerKind::Adafactor:
        o.stateBytesPerParam = int(std::max<int64_t>(ratio, 1));
        break;
    default:
        o.stateBytesPerParam = int(ratio);
        if (ratio == 8) {
            o.recordedOptimizer = OptimizerKind::AdamW;
            o.optimizerEvidence = "optimizer state = 2 x parameters (Adam-like)";
        } else if (ratio == 4) {
            o.recordedOptimizer = OptimizerKind::SgdMomentum;
            o.optimizerEvidence = "optimizer state = parameters (momentum-like)";
        }
        break;
    }
    if (o.stateBytes > 0 && o.optimizerEvidence.empty())
        o.optimizerEvidence = "optimizer state of " + std::to_string(o.stateBytesPerParam) + " B per parameter";
    return o;
}

} // namespace poolscope
