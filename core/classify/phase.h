#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace poolscope {

// The phase of a training step an event belongs to. Unknown: no frame, annotation or neighbour said.
// Teardown: the step ended abnormally and its objects are being released (exception unwinding after
// an OOM: traceback and frame deallocation, the autograd graph deleted without a backward).
enum class Phase : uint8_t { Unknown, Forward, Backward, OptimizerStep, ZeroGrad, Teardown };
constexpr size_t kPhaseCount = 6;
constexpr std::array<std::string_view, kPhaseCount> kPhaseNames = {"unknown", "forward", "backward", "optimizer_step",
                                                                   "zero_grad", "teardown"};

constexpr std::string_view phaseName(Phase p) { return kPhaseNames[size_t(p)]; }
// How a sentence or a label names the phase ("optimizer step"); empty for Unknown.
constexpr std::string_view phaseWords(Phase p)
{
    switch (p) {
    case Phase::OptimizerStep: return "optimizer step";
    case Phase::Unknown: return {};
    default: return phaseName(p);
    }
}
inline std::optional<Phase> parsePhase(std::string_view name)
{
    for (size_t i = 0; i < kPhaseCount; ++i)
        if (kPhaseNames[i] == name)
            return Phase(i);
    return std::nullopt;
}

// Where an event's phase came from, strongest first. Explanations quote it.
// Structure: no frame or annotation named it; the allocation stream's shape did (see
// structural_phases.h): a rise to a peak is a forward, the fall that frees it while allocating is a
// backward, and so on. Decisions resting on it alone stay below 70 %.
enum class PhaseSource : uint8_t { Frames, Annotation, Structure, Inherited, None };

} // namespace poolscope
