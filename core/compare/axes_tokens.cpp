// Sequence length and micro-batch from how the batch-dependent tensors scaled between paired call
// sites. A tensor linear in the tokens (b*s*h: the embedding output, b*s*V: the logits) scales by
// rb*rs; an attention-score tensor (b*a*s*s) by rb*rs^2. Two ratios, two unknowns: rs = rQ/rL and
// rb = rL/rs. Without score tensors (FlashAttention, or a model without attention) only the
// product rb*rs shows, and the axis says so rather than guessing.
#include "core/compare/axes.h"

#include "core/util/units.h"

#include <cmath>
#include <cstdio>

namespace poolscope {
namespace {

// A cluster needs this share of its class's paired bytes to speak for the class when the dominant
// one cannot (precision changed): a few stray allocations must not decide.
constexpr double kMinShare = 0.05;

std::string percent(double share)
{
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * share);
    return buf;
}

std::string example(const RatioCluster& c)
{
    return c.site + " " + formatBytes(c.exampleA) + " -> " + formatBytes(c.exampleB);
}

std::string describe(const RatioCluster& c, int64_t classBytes, const char* what)
{
    return std::string(what) + " " + ratioText(c.ratio) + " (" + std::to_string(c.count) + " paired allocations, " +
           percent(double(c.bytes) / double(std::max<int64_t>(classBytes, 1))) + " of their bytes; e.g. " + example(c) + ")";
}

// The cluster of tokens-following tensors whose element size did not change with the precision:
// lowering the precision only shrinks element sizes, so those are the largest ratio (the smallest
// when precision rose) among clusters with a real share of the bytes.
const RatioCluster* extreme(const std::vector<RatioCluster>& clusters, int direction)
{
    const int64_t total = SitePairing::total(clusters);
    const RatioCluster* best = nullptr;
    for (const RatioCluster& c : clusters) {
        if (double(c.bytes) < kMinShare * double(total))
            continue;
        if (!best || (direction < 0 ? c.ratio > best->ratio : c.ratio < best->ratio))
            best = &c;
    }
    return best;
}

} // namespace

void inferTokenAxes(const SitePairing& sites, int precisionDirection, AxisInference& out)
{
    if (sites.linear.empty() && sites.input.empty()) {
        if (sites.quadratic.empty())
            out.notes.push_back("sequence and micro-batch: no tensor that follows the tokens could be paired by call site in both runs, so the "
                                "traces cannot tell whether they changed");
        return;
    }
    const int64_t linearBytes = SitePairing::total(sites.linear);
    const int64_t quadBytes = SitePairing::total(sites.quadratic);
    const RatioCluster* input = sites.input.empty() ? nullptr : &sites.input.front();
    const RatioCluster* linear = nullptr;
    std::string how;
    if (precisionDirection == 0) {
        linear = sites.linear.empty() ? input : &sites.linear.front();
        how = linear == input ? describe(*linear, SitePairing::total(sites.input), "input tensors")
                              : describe(*linear, linearBytes, "tensors linear in the tokens");
    } else if (input) {
        // Token ids and labels are integers: no precision setting changes their element size.
        linear = input;
        how = describe(*input, SitePairing::total(sites.input), "integer inputs (token ids, labels; no precision changes them)");
    } else if ((linear = extreme(sites.linear, precisionDirection))) {
        how = describe(*linear, linearBytes, precisionDirection < 0 ? "the tensors whose element size did not shrink"
                                                                    : "the tensors whose element size did not grow");
    }
    if (!linear) {
        out.notes.push_back("sequence and micro-batch: with the precision changing too, no tensor of unchanged element size could be "
                            "paired, so the traces cannot tell whether the tokens changed");
        return;
    }
    const double rL = linear->ratio;
    if (precisionDirection == 0 && input && linear != input && !nearRatio(input->ratio, rL))
        out.notes.push_back("inputs scaled " + ratioText(input->ratio) + " while the activations scaled " + ratioText(rL) +
                            ": the batch may hold other data than before");

    // The score tensors' ratio: by the what-if engine's law, else as the square of the linear one among
    // the linear tensors (nothing but an s^2 term scales by rL^2 when only s changed).
    const RatioCluster* quad = nullptr;
    std::string quadHow;
    if (precisionDirection == 0 && !sites.quadratic.empty()) {
        quad = &sites.quadratic.front();
        quadHow = describe(*quad, quadBytes, "b*a*s*s score tensors");
    } else if (precisionDirection == 0 && !nearRatio(rL, 1.0)) {
        for (const RatioCluster& c : sites.linear)
            if (nearRatio(c.ratio, rL * rL) && double(c.bytes) >= kMinShare * double(linearBytes)) {
                quad = &c;
                quadHow = describe(c, linearBytes, "tensors scaling as the square of the linear ones (an s^2 term)");
                break;
            }
    }

    if (nearRatio(rL, 1.0) && (!quad || nearRatio(quad->ratio, 1.0)))
        return; // the tokens did not change
    if (!quad) {
        CompareAxis axis;
        axis.name = "tokens";
        axis.ratio = rL;
        axis.phrase = "tokens " + ratioText(rL) + " (batch or sequence: the traces cannot tell)";
        axis.evidence = how + "; " +
                        (precisionDirection != 0
                             ? std::string("with the precision changing too, the attention-score tensors cannot separate batch from sequence")
                             : std::string("no b*a*s*s attention-score tensors (FlashAttention, or none found), so b x s shows only as "
                                           "a product"));
        out.axes.push_back(std::move(axis));
        return;
    }
    const double rQ = quad->ratio;
    const double rs = rQ / rL, rb = rL / rs;
    const std::string solved = "; so s " + ratioText(rs) + " (" + ratioText(rQ) + " / " + ratioText(rL) + ") and b " + ratioText(rb);
    if (!nearRatio(rs, 1.0)) {
        CompareAxis axis;
        axis.name = "sequence";
        axis.ratio = rs;
        axis.phrase = "sequence " + ratioText(rs);
        axis.evidence = how + "; " + quadHow + solved;
        out.axes.push_back(std::move(axis));
    }
    if (!nearRatio(rb, 1.0)) {
        CompareAxis axis;
        axis.name = "micro_batch";
        axis.ratio = rb;
        axis.phrase = "micro-batch " + ratioText(rb);
        axis.evidence = how + "; " + quadHow + solved;
        out.axes.push_back(std::move(axis));
    }
}

} // namespace poolscope
