#include "core/whatif/law_explain.h"

#include "core/util/units.h"
#include "core/whatif/law_cascade.h"
#include "core/whatif/size_laws.h"
#include "core/whatif/stack_facts.h"

namespace poolscope {
namespace {

std::string formulaOf(SizeLaw law)
{
    switch (law) {
    case SizeLaw::Fixed: return "bytes = c (follows neither the micro-batch b nor the sequence s)";
    case SizeLaw::Linear: return "bytes = c * b * s";
    case SizeLaw::Quadratic: return "bytes = c * b * s^2";
    case SizeLaw::Batch: return "bytes = c * b";
    case SizeLaw::Seq: return "bytes = c * s";
    case SizeLaw::SeqSquared: return "bytes = c * s^2";
    }
    return "?";
}

std::string stepOf(LawEvidence e, const Allocation& al, Pool pool, bool weightCast)
{
    switch (e) {
    case LawEvidence::Pool:
        return weightCast ? "made from a weight: an autocast cast the cast cache keeps (its pool, cast_cache)"
                          : "its pool (" + std::string(poolName(pool)) + ")" +
                                (al.preexisting() ? ": allocated before recording and not rebuilt in the trace" : "") +
                                " follows the weights, not the tokens";
    case LawEvidence::Phase:
        return "made in the optimizer step or zero_grad: the step's buffers follow the weights";
    case LawEvidence::WeightOrigin:
        return weightCast ? "made from a weight: a 16-bit cast of a weight matrix, at most one per weight per forward"
                          : "made from a weight: a gradient on its way into .grad, a table's gradient, or a dequantised weight";
    case LawEvidence::Dimensions:
        return "the run's dimensions: only this law explains its size";
    case LawEvidence::Frames:
        return "its size fits two laws; the code that made it decided (attention or score operators, a projection, the loss)";
    case LawEvidence::CallSite:
        return "its size fits two laws; its call site follows this law elsewhere in the trace";
    case LawEvidence::Neighbours:
        return "its size fits two laws; its input or the tensors made next decided";
    case LawEvidence::Default:
        return "nothing in the trace decided: taken as the usual case";
    case LawEvidence::Replaced:
        return "allocated before recording and freed in the trace, which builds the same structure again: it takes the law of "
               "the allocation of its size that replaces it";
    }
    return "?";
}

std::string precisionOf(OpPrecision p)
{
    switch (p) {
    case OpPrecision::Unknown: return "operator unknown (autocast's rules cannot be applied by name)";
    case OpPrecision::Lower: return "matmul family: 16-bit under autocast";
    case OpPrecision::Fp32: return "autocast's fp32 list: fp32 under autocast";
    case OpPrecision::Promote: return "follows its inputs' type";
    case OpPrecision::Cast: return "a dtype conversion";
    }
    return "?";
}

} // namespace

LawExplanation explainLaw(const Trace& trace, const DeviceTrace& dev, const TraceModel& m, size_t a)
{
    LawExplanation e;
    if (a >= m.allocationCount || a >= dev.allocations.size())
        return e;
    const Allocation& al = dev.allocations[a];
    e.law = m.law[a];
    e.evidence = m.lawEvidence[a];
    e.formula = formulaOf(e.law);
    e.weightCast = m.weightCast[a] != 0;
    e.why = stepOf(e.evidence, al, m.pool[a], e.weightCast);
    const RunDims& d = m.dims;
    if (d.tokens > 0) {
        e.dims = "tokens T = b*s = " + std::to_string(d.tokens) + " (" + d.tokensFrom + ")";
        if (d.seq > 0)
            e.dims += ", s = " + std::to_string(d.seq) + " (" + d.seqFrom + ")";
        if (d.batch > 0)
            e.dims += ", b = " + std::to_string(d.batch);
        if (d.scoreWidth > 0)
            e.dims += ", attention scores " + std::to_string(d.scoreWidth) + " B per token (" + d.scoresFrom + ")";
        e.dims += "; its size is " + std::to_string(m.requestedSize[a]) + " B";
        if (m.requestedSize[a] % d.tokens == 0)
            e.dims += " = T x " + std::to_string(m.requestedSize[a] / d.tokens) + " B";
    } else {
        e.dims = "no token count found";
    }
    e.precision = precisionOf(m.precision[a]);
    const auto steps = lawSteps();
    e.steps = int(steps.size());
    if (a < m.lawStep.size() && m.lawStep[a] < steps.size()) {
        e.step = int(m.lawStep[a]);
        e.stepName = steps[size_t(e.step)].name;
        e.stepDoes = steps[size_t(e.step)].does;
        for (SizeLaw l : {SizeLaw::Fixed, SizeLaw::Linear, SizeLaw::Quadratic, SizeLaw::Batch, SizeLaw::Seq, SizeLaw::SeqSquared}) {
            if (!(m.lawCandidates[a] & law_detail::lawBit(l)))
                continue;
            e.candidates.push_back(l);
            if (l != e.law)
                e.ruledOut.push_back(l);
        }
    }
    if (e.evidence == LawEvidence::Default && !al.preexisting()) {
        StackOpFacts none;
        const std::string site = law_detail::siteName(trace, al, none);
        for (const AmbiguousSite& s : m.ambiguous)
            if (s.site.rfind(site, 0) == 0) {
                e.ambiguity = "reported as ambiguous with " + std::to_string(s.count - 1) + " other allocation(s) of " + s.site + ": taken as " +
                              std::string(sizeLawName(s.chosen)) + ", could be " + sizeLawList(s.others);
                break;
            }
    }
    return e;
}

static std::string lawList(const std::vector<SizeLaw>& laws)
{
    std::string out;
    for (SizeLaw l : laws)
        out += (out.empty() ? "" : ", ") + std::string(sizeLawName(l));
    return out;
}

std::string lawExplanationText(const LawExplanation& e)
{
    std::string out = "size law: " + std::string(sizeLawName(e.law)) + ", " + e.formula + "\n";
    out += "  decided by: " + std::string(lawEvidenceName(e.evidence)) + ": " + e.why + "\n";
    if (e.step >= 0) {
        out += "  cascade step " + std::to_string(e.step + 1) + " of " + std::to_string(e.steps) + ", " + e.stepName + ": " + e.stepDoes + "\n";
        // Every law is a candidate until a step narrows them: all six means nothing narrowed them.
        if (e.candidates.size() < 6)
            out += "  candidates: " + lawList(e.candidates) +
                   (e.ruledOut.empty() ? std::string("") : "; ruled out by this step: " + lawList(e.ruledOut)) + "\n";
        else
            out += "  candidates: any law (no step narrowed them by size before this one): it chose " + std::string(sizeLawName(e.law)) + "\n";
    }
    out += "  dimensions: " + e.dims + "\n";
    out += "  precision: " + e.precision + "\n";
    if (!e.ambiguity.empty())
        out += "  " + e.ambiguity + "\n";
    return out;
}

nlohmann::json lawExplanationJson(const LawExplanation& e)
{
    nlohmann::json j;
    j["law"] = std::string(sizeLawName(e.law));
    j["formula"] = e.formula;
    j["evidence"] = std::string(lawEvidenceName(e.evidence));
    j["why"] = e.why;
    j["dimensions"] = e.dims;
    j["precision"] = e.precision;
    j["weight_cast"] = e.weightCast;
    j["ambiguity"] = e.ambiguity.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.ambiguity);
    if (e.step >= 0) {
        j["step"] = {{"index", e.step + 1}, {"of", e.steps}, {"name", e.stepName}, {"does", e.stepDoes}};
        auto names = [](const std::vector<SizeLaw>& laws) {
            nlohmann::json out = nlohmann::json::array();
            for (SizeLaw l : laws)
                out.push_back(std::string(sizeLawName(l)));
            return out;
        };
        j["candidates"] = names(e.candidates);
        j["ruled_out"] = names(e.ruledOut);
    }
    return j;
}

} // namespace poolscope
