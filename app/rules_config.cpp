#include "app/rules_config.h"

#include "core/util/resource_dir.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace poolscope::app {

std::string userRulesPath()
{
    namespace fs = std::filesystem;
    std::vector<std::string> candidates;
    if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg)
        candidates.push_back(std::string(xdg) + "/poolscope/rules.json");
    if (const char* home = std::getenv("HOME"); home && *home)
        candidates.push_back(std::string(home) + "/.config/poolscope/rules.json");
    for (const auto& c : candidates) {
        std::error_code ec;
        if (fs::is_regular_file(c, ec))
            return c;
    }
    return {};
}

std::shared_ptr<const RuleSet> loadRules(const std::string& extraFile)
{
    const std::string shipped = resourcesDir() + "/classifier/rules.json";
    std::error_code ec;
    auto set = std::make_shared<RuleSet>();
    set->merge(std::filesystem::is_regular_file(shipped, ec) ? RuleSet::fromFile(shipped) : RuleSet::builtin());
    if (const std::string user = userRulesPath(); !user.empty())
        set->merge(RuleSet::fromFile(user));
    if (!extraFile.empty())
        set->merge(RuleSet::fromFile(extraFile));
    return set;
}

} // namespace poolscope::app

#include "app/terminal_progress.h"
#include "core/engine/document.h"

#include <filesystem>

namespace poolscope::app {

std::shared_ptr<const Document> openDocument(const std::string& file, const std::string& rulesFile, bool classify, bool eagerTimelines,
                                             bool seriesColumns)
{
    DocumentOptions options;
    if (classify)
        options.rules = loadRules(rulesFile); // before the dump: a bad rules file fails fast
    options.eagerTimelines = eagerTimelines;
    options.seriesColumns = seriesColumns;
    TerminalProgress line("loading " + std::filesystem::path(file).filename().string());
    return Document::open(file, options, line.progress());
}

} // namespace poolscope::app
