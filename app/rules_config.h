#pragma once
#include "core/classify/rules.h"

#include <memory>
#include <string>

namespace poolscope::app {

// The classifier rules every face of the application uses, decided here and nowhere else: the
// shipped rules.json (resourcesDir(): the installed share/poolscope beside the binary, or the source
// tree's from a build tree, so a developer's edit takes effect without a rebuild; else the copy
// compiled in), extended by the per-user file ($XDG_CONFIG_HOME/poolscope/
// rules.json, else ~/.config/poolscope/rules.json) when it exists, then by `extraFile` (--rules).
// Throws LoadError naming the file, the rule and the field when any of them is bad.
std::shared_ptr<const RuleSet> loadRules(const std::string& extraFile = {});

// The per-user rules file that exists, or empty.
std::string userRulesPath();

} // namespace poolscope::app

namespace poolscope {
class Document;
}

namespace poolscope::app {

// How a command opens its FILE: with loadRules(rulesFile) unless `classify` is false; `eagerTimelines`
// for the commands that draw; without `seriesColumns` only each pool's peak is kept of the pool series
// (DocumentOptions::seriesColumns: a report). A bad rules file is the same error for every command (exit 2).
std::shared_ptr<const Document> openDocument(const std::string& file, const std::string& rulesFile, bool classify = true,
                                             bool eagerTimelines = false, bool seriesColumns = true);

} // namespace poolscope::app
