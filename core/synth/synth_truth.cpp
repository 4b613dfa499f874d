#include "core/synth/synth_truth.h"

namespace poolscope {
namespace {

int8_t exponent(int64_t from, int64_t to)
{
    if (from <= 0 || to <= 0)
        return -1;
    if (to == from)
        return 0;
    if (to == 2 * from)
        return 1;
    if (to == 4 * from)
        return 2;
    return -1;
}

} // namespace

std::string SynthLaw::text() const
{
    if (!known())
        return "?";
    if (batch == 0 && seq == 0)
        return "fixed";
    std::string out = "x ";
    if (batch > 0)
        out += "b";
    if (seq > 0)
        out += std::string(batch > 0 ? "*" : "") + "s" + (seq == 2 ? "^2" : "");
    return out;
}

std::vector<SynthLaw> synthTruthLaws(const SynthModel& model)
{
    SynthModel b2 = model, s2 = model;
    b2.microBatch *= 2;
    s2.seq *= 2;
    b2.capacity.reset();
    s2.capacity.reset();
    const SynthResult base = synthesize(model), wide = synthesize(b2), longer = synthesize(s2);
    const auto& a0 = base.trace.devices.at(0).allocations;
    const auto& a1 = wide.trace.devices.at(0).allocations;
    const auto& a2 = longer.trace.devices.at(0).allocations;
    if (a1.size() != a0.size() || a2.size() != a0.size())
        return {};
    std::vector<SynthLaw> out(a0.size());
    for (size_t i = 0; i < a0.size(); ++i) {
        if (a0[i].preexisting() != a1[i].preexisting() || a0[i].preexisting() != a2[i].preexisting())
            return {};
        out[i].batch = exponent(a0[i].size, a1[i].size);
        out[i].seq = exponent(a0[i].size, a2[i].size);
    }
    return out;
}

} // namespace poolscope
