#pragma once
// Why one allocation got its size law: what `poolscope explain FILE --addr A --law` prints.
#include "core/model/trace.h"
#include "core/whatif/trace_model.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace poolscope {

struct LawExplanation {
    SizeLaw law = SizeLaw::Fixed;
    LawEvidence evidence = LawEvidence::Default;
    std::string formula;   // "bytes = c * b * s^2"
    std::string why;       // the step that decided it, in a sentence
    std::string dims;      // the run's dimensions the sizes were read against
    std::string ambiguity; // where the law was taken, not decided: the site and the other law
    std::string precision; // how autocast treats the operator that made it
    bool weightCast = false;
    // The cascade step that decided it (size_laws.h, lawSteps()): its place, name and job.
    int step = -1, steps = 0;
    std::string stepName, stepDoes;
    std::vector<SizeLaw> candidates; // the laws it chose among, its own included
    std::vector<SizeLaw> ruledOut;   // the candidates it removed
};

LawExplanation explainLaw(const Trace& trace, const DeviceTrace& dev, const TraceModel& model, size_t allocation);
std::string lawExplanationText(const LawExplanation& e);
nlohmann::json lawExplanationJson(const LawExplanation& e);

} // namespace poolscope
