#pragma once
// Test helper for the report suites: a real dump opened with the shipped rules, as written or as a
// redacted copy with Python frames only ("python") or none ("none").
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/redact/redact.h"

#include <QString>

#include <memory>
#include <string>

namespace poolscope::testing {

inline DocumentOptions shippedRulesOptions()
{
    DocumentOptions o;
    o.rules = std::make_shared<const RuleSet>(RuleSet::fromFile(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
    return o;
}

inline std::shared_ptr<const Document> openWithFrames(const std::string& path, const QString& frames)
{
    auto doc = Document::open(path, shippedRulesOptions());
    if (!doc || frames == "all")
        return doc;
    RedactOptions r;
    r.frames = frames == "python" ? FrameKeep::Python : FrameKeep::None;
    r.markers = doc->rules();
    return Document::fromTrace(redact(doc->trace(), r), shippedRulesOptions());
}

} // namespace poolscope::testing
