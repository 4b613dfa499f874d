#pragma once
// A small training step with realistic frames (poolscope synth's generator), as the window holds it:
// classified by the shipped rules through a Document, timelines built.
#include "core/engine/document.h"
#include "core/synth/synth.h"

#include <memory>

namespace poolscope::testing {

inline SynthModel smallWindowModel()
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 256;
    m.heads = 4;
    m.seq = 128;
    m.microBatch = 2;
    m.vocab = 1024;
    m.steps = 2;
    return m;
}

inline std::shared_ptr<const Document> synthDocument(const SynthModel& model = smallWindowModel())
{
    DocumentOptions options;
    options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    return Document::fromTrace(std::make_shared<Trace>(synthesize(model).trace), options);
}

} // namespace poolscope::testing
