// The cascade's finder of the attention-score width (law_cascade.h): softmax's outputs where the
// trace names them, else the most common width no model dimension explains. Split from law_dims.cpp,
// whose other finders (tokens, sequence, matrices) it follows in the cascade.
#include "core/whatif/law_cascade.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace poolscope::law_detail {

// The score width: softmax's outputs (and its autograd node's) where the trace has them, else the
// most common width (by bytes) that no model dimension explains.
void findScoreWidth(LawContext& x)
{
    const int64_t T = x.m.dims.tokens;
    std::map<int64_t, int64_t> anchorBytes; // width (T known) or size -> bytes
    auto anchorOp = [&](const StackOpFacts& f) {
        if (f.has(StackOpFacts::LogSoftmax))
            return false;
        if (f.has(StackOpFacts::SoftmaxOp))
            return true;
        // The causal mask is applied to the scores and nothing else (masked_fill, where), in forward
        // or by their autograd nodes.
        return x.m.dims.seq > 0 && (f.opKey == "maskedfill" || f.opKey == "where");
    };
    std::vector<std::pair<int64_t, FrameId>> anchorLines; // (width, the Python call site)
    std::map<int64_t, int64_t> forwardBytes, softmaxBytes; // of anchorBytes, the forward's and the fp32 operators' among them
    // Without softmax or the mask, the scores are the width the most score operators make (q @ k.T,
    // exp, the scale...), not the context (attn @ v) that only a product makes.
    std::map<int64_t, std::set<std::string>> opsAt;
    auto pythonSite = [&](const StackOpFacts& f) {
        return f.userFrame && f.has(StackOpFacts::Python) && x.trace.frames.frame(f.userFrame).isPython() &&
               x.trace.frames.frame(f.userFrame).filename.ends_with(".py");
    };
    for (size_t a = 0; a < x.m.allocationCount; ++a) {
        if (!x.open(a))
            continue;
        const StackOpFacts& f = x.facts(a);
        if (!anchorOp(f))
            continue;
        if (T > 0 && (x.size(a) % T != 0 || x.size(a) / T <= 8))
            continue; // per-row statistics of the softmax (max, sum): tokens x heads
        const int64_t w = T > 0 ? x.size(a) / T : x.size(a);
        anchorBytes[w] += x.size(a);
        if (!f.has(StackOpFacts::Backward)) {
            forwardBytes[w] += x.size(a);
            if (f.precision == OpPrecision::Fp32)
                softmaxBytes[w] += x.size(a);
        }
        if (pythonSite(f))
            anchorLines.emplace_back(w, f.userFrame);
    }
    // No softmax and no mask: a product of activations (bmm, matmul) of b*a*s*s elements, s known.
    // With s unknown (no mask, no position ids, b = 1 hiding the position embedding's ratio):
    // attention's signature instead, a product of two activations (no weight) and another score
    // operator (exp, the scale, max) on the same elements, less the context (attn @ v), which has
    // a layer input's bytes (at its own element size or the other 16/32-bit one).
    const int64_t s = x.m.dims.seq;
    const int64_t U = x.m.passes.empty() ? 0 : x.m.passes.front().inputBytes;
    auto contextBytes = [&](int64_t bytes) { return U > 0 && (bytes == U || 2 * bytes == U || bytes == 2 * U); };
    const bool productPath = anchorBytes.empty() && T > 0;
    if (productPath)
        for (size_t a = 0; a < x.m.allocationCount; ++a) {
            const StackOpFacts& f = x.facts(a);
            if (!x.open(a) || !f.has(StackOpFacts::ScoreOp) || f.has(StackOpFacts::LinearOp) || f.has(StackOpFacts::Backward) ||
                x.size(a) % T != 0)
                continue;
            if (s > 0) {
                if (x.size(a) % (T * s) != 0)
                    continue;
                const int64_t headsTimesE = x.size(a) / (T * s);
                if (headsTimesE < 2 || headsTimesE > 1024)
                    continue;
            } else if (x.size(a) / T <= 8 || contextBytes(x.size(a))) {
                continue;
            }
            opsAt[x.size(a) / T].insert(f.opKey);
            anchorBytes[x.size(a) / T] += x.size(a);
            forwardBytes[x.size(a) / T] += x.size(a);
            if (f.precision == OpPrecision::Fp32)
                softmaxBytes[x.size(a) / T] += x.size(a);
            if (pythonSite(f))
                anchorLines.emplace_back(x.size(a) / T, f.userFrame);
        }
    if (productPath && s == 0) {
        auto signature = [&](int64_t w) {
            std::set<std::string> ops;
            for (int64_t v : {w, 2 * w, w % 2 == 0 ? w / 2 : 0})
                if (auto it = opsAt.find(v); it != opsAt.end())
                    ops.insert(it->second.begin(), it->second.end());
            const bool product = ops.count("bmm") || ops.count("baddbmm") || ops.count("matmul");
            return product && ops.size() >= 2;
        };
        std::erase_if(anchorBytes, [&](auto& wb) { return !signature(wb.first); });
    }
    int64_t anchor = 0, most = 0;
    size_t mostOps = 0;
    for (auto& [w, bytes] : anchorBytes) {
        const size_t ops = opsAt.count(w) ? opsAt[w].size() : 0;
        if (std::tie(ops, bytes, w) > std::tie(mostOps, most, anchor)) {
            mostOps = ops;
            most = bytes;
            anchor = w;
        }
    }
    // No frame names softmax, the mask or a score operator (Python-only frames, a hand-written
    // softmax, an einsum): the tensors the softmax reduces over s are the scores.
    bool reduced = false;
    if (anchor == 0 && anchorBytes.empty() && T > 0 && s > 0) {
        for (auto& [qw, count] : x.scores.reductions)
            if (qw.first == s && (count > most || (count == most && qw.second > anchor))) {
                anchor = qw.second;
                most = count;
            }
        reduced = anchor > 0;
    }
    if (reduced) {
        x.m.dims.scoresFrom = "the tensors the softmax reduces over s (its maximum and sum)";
    } else if (anchor > 0 && productPath && s == 0) {
        x.m.dims.scoresFrom = "a product of two activations beside an exp, scale or mask on the same elements (s unknown)";
    } else if (anchor > 0) {
        x.m.dims.scoresFrom = "softmax's output, the causal mask's masked_fill or a product of b*a*s*s elements";
    } else if (T > 0 && x.weights.dims.size() > 1) {
        std::map<int64_t, int64_t> unexplained;
        int64_t total = 0;
        for (size_t a = 0; a < x.m.allocationCount; ++a) {
            if (!x.open(a))
                continue;
            total += x.size(a);
            if (x.size(a) % T == 0 && x.size(a) / T > 8 && !explainedByDimension(x.size(a) / T, x.weights.dims))
                unexplained[x.size(a) / T] += x.size(a);
        }
        for (auto& [w, bytes] : unexplained)
            if (bytes > most) {
                most = bytes;
                anchor = w;
            }
        if (anchor > 0 && most * 100 >= total) {
            x.m.dims.scoresFrom = "a width no parameter dimension explains";
            x.scores.unexplained = true;
        }
        else
            anchor = 0;
    }
    if (anchor == 0)
        return;
    for (auto& [w, frame] : anchorLines)
        if (w == anchor || T == 0)
            x.scores.softmaxLines.emplace_back(frame, x.trace.frames.frame(frame).line);
    // Under autocast softmax (and exp) run in fp32, the scores around them (q @ k.T, the mask) in 16 bits.
    // The run is known to be under autocast from its frames, from the weights' 16-bit twins cached per
    // forward (autocastFromStructure) or from the classifier's casts (RunFacts): with Python frames only
    // the scores still come at both element sizes, and both are the scores.
    const bool autocast = x.m.autocastSeen || x.m.autocastFromStructure || x.m.autocastFact == Known::Yes;
    if (autocast && reduced) {
        // Read from the softmax's reductions: the sum reduces exp's output, which autocast makes in
        // fp32 (exp is on its fp32 list), so the sum's input has 4 bytes an element; the anchor (the
        // maximum's input) has its own bytes over that many elements: 2 where the scores ran in 16
        // bits up to the exp, 4 where the code made them fp32 first.
        const auto sum = x.scores.sumWidths.find({s, anchor});
        if (sum != x.scores.sumWidths.end() && sum->second % 4 == 0 && sum->second > 0) {
            const int64_t elements = sum->second / 4;
            if (anchor == 2 * elements || anchor == 4 * elements)
                x.scores.anchorElement = anchor / elements;
        }
    } else if (autocast) {
        x.scores.anchorElement = softmaxBytes[anchor] > 0 ? 4 : 2; // an fp32 operator there makes the width fp32
    }
    // The family: the same elements at 1, 2, 4 and 8 bytes (masks, half-precision copies, fp32 upcasts).
    for (int64_t k : {4, 2}) {
        if (anchor % k == 0) {
            (T > 0 ? (void)x.scores.widths.push_back(anchor / k) : (void)x.scores.sizes.insert(anchor / k));
        }
    }
    (T > 0 ? (void)x.scores.widths.push_back(anchor) : (void)x.scores.sizes.insert(anchor));
    (T > 0 ? (void)x.scores.widths.push_back(anchor * 2) : (void)x.scores.sizes.insert(anchor * 2));
    x.m.dims.scoreWidth = T > 0 ? anchor : 0;
}

// Weight matrices (no vector: a norm's or a bias's weight is used elementwise, autocast casts only
// what a matmul takes): those that repeat once per unit, and the rest.

} // namespace poolscope::law_detail
