// Sequence length and micro-batch from how the batch-dependent tensors scaled between paired call
// sites. A tensor linear in the tokens (b*s*h: the embedding output, b*s*V: the logits) scales by
// rb*rs; an attention-score tensor (b*a*s*s) by rb*rs^2. Two ratios, two unknowns: rs = rQ/rL and
// rb = rL/rs. Without score tensors (FlashAttention, or a model without attention) only the
// product rb*rs shows, and the axis says so rather than guessing.
#include "core/compare/axes.h"

#include "core/util/units.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <vector>

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
           percent(double(c.bytes) / double(std::max<int64_t>(classBytes, 1))) + " of the paired bytes; e.g. " + example(c) + ")";
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

namespace {

// One explanation of the paired ratios: b and s scaled by rb and rs.
struct Fit {
    double rb = 1, rs = 1;
    int64_t explained = 0;             // bytes of the clusters it accounts for
    const RatioCluster* linear = nullptr; // the largest cluster at rb*rs, for evidence
    const RatioCluster* quad = nullptr;   // the largest at rb*rs^2 (other than rb*rs), for evidence
    bool quadByLaw = false;               // `quad` is a score tensor by the what-if laws, not by its ratio alone
    int changedAxes() const { return !nearRatio(rb, 1.0) + !nearRatio(rs, 1.0); }
};

bool oneOf(double r, std::initializer_list<double> allowed)
{
    for (double x : allowed)
        if (nearRatio(r, x))
            return true;
    return false;
}

// Tensors the laws call linear scale by rb*rs; score tensors by rb*rs^2; integer inputs by rb*rs.
// Secondary terms count half: tables of s rows (rs), s x s masks (rs^2), and attention terms the
// laws missed and took for linear (score gradients in backward: rb*rs^2). They exist, but the bulk of
// what a model allocates is its primary terms, and an explanation must not rest on the exceptions.
// A tensor that kept its size supports only the explanation that nothing changed: buffers of a
// weight's size that the laws took for batch-dependent keep theirs under any change of b or s.
Fit explain(const SitePairing& sites, double rb, double rs)
{
    Fit f{rb, rs};
    const double lin = rb * rs, quad = rb * rs * rs;
    const bool identity = nearRatio(rb, 1.0) && nearRatio(rs, 1.0);
    int64_t primary = 0, secondary = 0;
    auto keep = [](const RatioCluster*& slot, const RatioCluster& c) {
        if (!slot || c.bytes > slot->bytes)
            slot = &c;
    };
    for (const RatioCluster& c : sites.linear) {
        if (!identity && nearRatio(c.ratio, 1.0))
            continue;
        if (nearRatio(c.ratio, lin)) {
            primary += c.bytes;
            keep(f.linear, c);
        } else if (oneOf(c.ratio, {rs, quad, rs * rs})) {
            secondary += c.bytes;
            if (nearRatio(c.ratio, quad))
                keep(f.quad, c);
        }
    }
    const RatioCluster* quadLabelled = nullptr;
    for (const RatioCluster& c : sites.quadratic) {
        if (!identity && nearRatio(c.ratio, 1.0))
            continue;
        if (nearRatio(c.ratio, quad)) {
            primary += c.bytes;
            keep(quadLabelled, c);
        } else if (nearRatio(c.ratio, rs * rs)) {
            secondary += c.bytes;
        }
    }
    if (quadLabelled) {
        f.quad = quadLabelled;
        f.quadByLaw = true;
    }
    for (const RatioCluster& c : sites.input)
        if (nearRatio(c.ratio, lin) && (identity || !nearRatio(c.ratio, 1.0))) {
            primary += c.bytes;
            if (!f.linear)
                f.linear = &c;
        }
    f.explained = primary + secondary / 2;
    return f;
}

void pushAxis(AxisInference& out, const char* name, const std::string& phrase, double ratio, const std::string& evidence)
{
    CompareAxis axis;
    axis.name = name;
    axis.ratio = ratio;
    axis.phrase = phrase;
    axis.evidence = evidence;
    out.axes.push_back(std::move(axis));
}

// Precision changed too: element sizes and token counts mix in every ratio, so only the tokens'
// own ratio is read, from tensors whose element size no precision changes.
void inferTokensAcrossPrecision(const SitePairing& sites, int direction, AxisInference& out)
{
    const RatioCluster* linear = nullptr;
    std::string how;
    if (!sites.input.empty()) {
        // Token ids and labels are integers: no precision setting changes their element size.
        linear = &sites.input.front();
        how = describe(*linear, SitePairing::total(sites.input), "integer inputs (token ids, labels; no precision changes them)");
    } else if (!sites.linearKept.empty()) {
        // fp32-list operators' outputs (norms, losses) keep their element size: their ratio is the tokens'.
        linear = &sites.linearKept.front();
        how = describe(*linear, SitePairing::total(sites.linearKept), "tensors of fp32-list operators (norms, softmax: no precision changes their element size)");
    } else if ((linear = extreme(sites.linear, direction))) {
        how = describe(*linear, SitePairing::total(sites.linear),
                       direction < 0 ? "the tensors whose element size did not shrink" : "the tensors whose element size did not grow");
    }
    if (!linear) {
        out.notes.push_back("sequence and micro-batch: with the precision changing too, no tensor of unchanged element size could be "
                            "paired, so the traces cannot tell whether the tokens changed");
        return;
    }
    // Score tensors made by fp32-list operators (softmax, exp) keep their element size under any
    // precision: their ratio is b*s^2 alone, and with the tokens' b*s it separates the two.
    const RatioCluster* scores = sites.quadraticKept.empty() ? nullptr : &sites.quadraticKept.front();
    const double rT = linear->ratio;
    if (scores) {
        const double rs = scores->ratio / rT, rb = rT / rs;
        const std::string evidence = how + "; " +
                                     describe(*scores, SitePairing::total(sites.quadraticKept),
                                              "b*a*s*s score tensors of fp32-list operators (softmax, exp: their element size no precision changes)") +
                                     "; so s " + ratioText(rs) + " (" + ratioText(scores->ratio) + " / " + ratioText(rT) + ") and b " + ratioText(rb);
        if (!nearRatio(rs, 1.0))
            pushAxis(out, "sequence", "sequence " + ratioText(rs), rs, evidence);
        if (!nearRatio(rb, 1.0))
            pushAxis(out, "micro_batch", "micro-batch " + ratioText(rb), rb, evidence);
        return;
    }
    if (nearRatio(rT, 1.0))
        return;
    pushAxis(out, "tokens", "tokens " + ratioText(rT) + " (batch or sequence: the traces cannot tell)", rT,
             how + "; with the precision changing too, no score tensor of an fp32 operator was paired to separate batch from sequence");
}

} // namespace

void inferTokenAxes(const SitePairing& sites, int precisionDirection, AxisInference& out)
{
    if (sites.linear.empty() && sites.input.empty() && sites.quadratic.empty()) {
        out.notes.push_back("sequence and micro-batch: no tensor that follows the tokens could be paired by call site in both runs, so the "
                            "traces cannot tell whether they changed");
        return;
    }
    if (precisionDirection != 0)
        return inferTokensAcrossPrecision(sites, precisionDirection, out);

    // Every explanation two observed ratios allow (one as the linear term, one as the quadratic),
    // scored by the bytes it accounts for.
    const int64_t total = SitePairing::total(sites.linear) + SitePairing::total(sites.quadratic) + SitePairing::total(sites.input);
    std::vector<double> ratios{1.0};
    for (const auto* cls : {&sites.linear, &sites.quadratic, &sites.input})
        for (const RatioCluster& c : *cls)
            if (c.bytes * 50 >= total || cls == &sites.input)
                ratios.push_back(c.ratio);
    std::vector<Fit> fits;
    for (double rL : ratios) {
        // The quadratic term at an observed ratio, or at rL^2 (only s changed: the hypothesis a
        // model without score tensors cannot refute).
        std::vector<double> quads = ratios;
        quads.push_back(rL * rL);
        for (double rQ : quads) {
            const double rs = rQ / rL, rb = rL / rs;
            if (rs > 1.0 / 64 && rs < 64 && rb > 1.0 / 64 && rb < 64)
                fits.push_back(explain(sites, rb, rs));
        }
    }
    int64_t best = 0;
    for (const Fit& f : fits)
        best = std::max(best, f.explained);
    // The explanations within half a percent of the best, and of those the ones that change fewest axes.
    std::vector<const Fit*> top;
    int fewest = 3;
    for (const Fit& f : fits)
        if (double(f.explained) >= double(best) - 0.005 * double(total))
            fewest = std::min(fewest, f.changedAxes());
    for (const Fit& f : fits)
        if (double(f.explained) >= double(best) - 0.005 * double(total) && f.changedAxes() == fewest)
            top.push_back(&f);
    const Fit& fit = *top.front();
    if (fit.changedAxes() == 0)
        return; // the tokens did not change
    bool agree = true, sameTokens = true;
    for (const Fit* f : top) {
        agree &= nearRatio(f->rb, fit.rb) && nearRatio(f->rs, fit.rs);
        sameTokens &= nearRatio(f->rb * f->rs, fit.rb * fit.rs);
    }
    const double rT = fit.rb * fit.rs;
    const std::string how = fit.linear ? describe(*fit.linear, total, "tensors linear in the tokens") : std::string();
    if (!agree) {
        if (!sameTokens) {
            out.notes.push_back("sequence and micro-batch: the paired tensors' ratios fit several explanations equally, so the traces cannot "
                                "tell how the tokens changed");
            return;
        }
        pushAxis(out, "tokens", "tokens " + ratioText(rT) + " (batch or sequence: the traces cannot tell)", rT,
                 how + (how.empty() ? "" : "; ") +
                     (sites.quadratic.empty() ? "no b*a*s*s attention-score tensors (FlashAttention, or none found), so b x s shows only as a product"
                                              : "the attention-score tensors scaled as the rest, which fits a longer sequence as well as a larger batch"));
        return;
    }
    std::string evidence = how;
    if (fit.quad) {
        evidence += (evidence.empty() ? "" : "; ") +
                    describe(*fit.quad, total, fit.quadByLaw ? "b*a*s*s score tensors" : "tensors scaling as the square of the linear ones (an s^2 term)");
        evidence += "; so s " + ratioText(fit.rs) + " (" + ratioText(fit.quad->ratio) + " / " + ratioText(rT) + ") and b " + ratioText(fit.rb);
    }
    if (const RatioCluster* input = sites.input.empty() ? nullptr : &sites.input.front(); input && !nearRatio(input->ratio, rT))
        out.notes.push_back("inputs scaled " + ratioText(input->ratio) + " while the activations scaled " + ratioText(rT) +
                            ": the batch may hold other data than before");
    if (!nearRatio(fit.rs, 1.0))
        pushAxis(out, "sequence", "sequence " + ratioText(fit.rs), fit.rs, evidence);
    if (!nearRatio(fit.rb, 1.0))
        pushAxis(out, "micro_batch", "micro-batch " + ratioText(fit.rb), fit.rb, evidence);
}

} // namespace poolscope
