#include "core/classify/rules.h"

#include "core/classify/builtin_rules.h"

#include "core/util/load_error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace poolscope {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, kLifetimeCount> kLifetimeNames = {
    "preexisting", "recorded",         "alive_at_end",      "freed", "alive_whole_trace", "same_phase",
    "later_phase", "survives_step", "survives_backward", "quick", "own_phase", "no_history", "unrecorded",
    "after_first_forward"};

// Errors name the list, the entry's index and name, and the field, so a user can find the typo.
class Context {
public:
    Context(const std::string& origin, std::string_view list, size_t index, std::string name)
        : m_origin(origin), m_list(list), m_index(index), m_name(std::move(name))
    {
    }
    [[noreturn]] void fail(std::string_view field, const std::string& what) const
    {
        std::string msg = std::string(m_list) + " " + std::to_string(m_index);
        if (!m_name.empty())
            msg += " '" + m_name + "'";
        msg += ": field '" + std::string(field) + "': " + what;
        throw LoadError(LoadErrorCode::Malformed, m_origin, -1, msg);
    }
    void setName(std::string name) { m_name = std::move(name); }

private:
    const std::string& m_origin;
    std::string_view m_list;
    size_t m_index;
    std::string m_name;
};

void checkRegex(const Context& ctx, std::string_view field, const std::string& source)
{
    if (source.empty())
        ctx.fail(field, "empty pattern");
    try {
        (void)TextPattern::compile(source);
    } catch (const std::regex_error& e) {
        ctx.fail(field, "bad regular expression '" + source + "': " + e.what());
    }
}

std::string getString(const Context& ctx, const json& obj, const char* field, bool required)
{
    auto it = obj.find(field);
    if (it == obj.end()) {
        if (required)
            ctx.fail(field, "missing (a string is required)");
        return {};
    }
    if (!it->is_string())
        ctx.fail(field, "expected a string");
    return it->get<std::string>();
}

void checkKeys(const Context& ctx, const json& obj, std::initializer_list<std::string_view> allowed)
{
    for (auto it = obj.begin(); it != obj.end(); ++it)
        if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end())
            ctx.fail(it.key(), "unknown field");
}

FramePattern parsePattern(const Context& ctx, const json& j, const std::string& field)
{
    if (!j.is_object())
        ctx.fail(field, "expected an object {\"file\": regex, \"function\": regex}");
    for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "file" && it.key() != "function")
            ctx.fail(field + "." + it.key(), "unknown field (expected file or function)");
    FramePattern p;
    p.file = getString(ctx, j, "file", false);
    p.function = getString(ctx, j, "function", false);
    if (p.file.empty() && p.function.empty())
        ctx.fail(field, "needs \"file\" or \"function\"");
    if (!p.file.empty())
        checkRegex(ctx, field + ".file", p.file);
    if (!p.function.empty())
        checkRegex(ctx, field + ".function", p.function);
    return p;
}

std::vector<FramePattern> parsePatterns(const Context& ctx, const json& obj, const char* field)
{
    std::vector<FramePattern> out;
    auto it = obj.find(field);
    if (it == obj.end())
        return out;
    if (!it->is_array() || it->empty())
        ctx.fail(field, "expected a non-empty array of frame patterns");
    for (size_t i = 0; i < it->size(); ++i)
        out.push_back(parsePattern(ctx, (*it)[i], std::string(field) + "[" + std::to_string(i) + "]"));
    return out;
}

uint8_t parsePhaseMask(const Context& ctx, const json& obj, const char* field, bool allowNever)
{
    auto it = obj.find(field);
    if (it == obj.end())
        return 0;
    if (!it->is_array() || it->empty())
        ctx.fail(field, "expected a non-empty array of phase names");
    uint8_t mask = 0;
    for (const auto& v : *it) {
        if (!v.is_string())
            ctx.fail(field, "expected phase names (strings)");
        const auto name = v.get<std::string>();
        if (allowNever && name == "never") {
            mask |= uint8_t(1u << kPhaseCount);
            continue;
        }
        auto ph = parsePhase(name);
        if (!ph)
            ctx.fail(field, "unknown phase '" + name + "' (expected forward, backward, optimizer_step, zero_grad, teardown, unknown" +
                                (allowNever ? ", never" : "") + ")");
        mask |= uint8_t(1u << unsigned(*ph));
    }
    return mask;
}

uint16_t parseLifetimes(const Context& ctx, const json& obj, const char* field)
{
    auto it = obj.find(field);
    if (it == obj.end())
        return 0;
    if (!it->is_array() || it->empty())
        ctx.fail(field, "expected a non-empty array of lifetime names");
    uint16_t mask = 0;
    for (const auto& v : *it) {
        if (!v.is_string())
            ctx.fail(field, "expected lifetime names (strings)");
        const auto name = v.get<std::string>();
        auto pos = std::find(kLifetimeNames.begin(), kLifetimeNames.end(), name);
        if (pos == kLifetimeNames.end()) {
            std::string all;
            for (auto n : kLifetimeNames)
                all += (all.empty() ? "" : ", ") + std::string(n);
            ctx.fail(field, "unknown lifetime '" + name + "' (expected one of " + all + ")");
        }
        mask |= uint16_t(1u << (pos - kLifetimeNames.begin()));
    }
    return mask;
}

int64_t parseBytes(const Context& ctx, const json& obj, const char* field, int64_t fallback)
{
    auto it = obj.find(field);
    if (it == obj.end())
        return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
        ctx.fail(std::string("size.") + field, "expected a non-negative integer number of bytes");
    return it->get<int64_t>();
}

struct ParsedRule {
    Rule rule;
    std::string before, after;
    bool disabled = false;
};

ParsedRule parseRule(const json& j, size_t index, const std::string& origin)
{
    Context ctx(origin, "rule", index, {});
    if (!j.is_object())
        ctx.fail("(rule)", "expected an object");
    ParsedRule out;
    Rule& r = out.rule;
    r.origin = origin;
    r.name = getString(ctx, j, "name", true);
    if (r.name.empty())
        ctx.fail("name", "must not be empty");
    ctx.setName(r.name);
    checkKeys(ctx, j, {"name", "pool", "reason", "confidence", "frames_any", "frames_all", "frames_none", "free_frames_any",
                       "free_frames_none", "innermost", "innermost_python",
                       "stack", "phase", "free_phase", "lifetime", "not_lifetime", "size", "before", "after",
                       "disabled", "comment", "roles", "hint"});
    if (auto it = j.find("disabled"); it != j.end()) {
        if (!it->is_boolean())
            ctx.fail("disabled", "expected true or false");
        out.disabled = it->get<bool>();
        if (out.disabled)
            return out; // a deletion needs nothing else
    }
    const auto pool = getString(ctx, j, "pool", true);
    auto p = parsePool(pool);
    if (!p || *p == Pool::CachedFree)
        ctx.fail("pool", "unknown pool '" + pool +
                             "' (expected parameter, cast_cache, gradient, optimizer_state, kv_cache, activation, temporary, "
                             "workspace, input, other, unknown)");
    r.pool = *p;
    r.reason = getString(ctx, j, "reason", true);
    if (r.reason.empty())
        ctx.fail("reason", "must not be empty: every decision explains itself");
    if (auto it = j.find("confidence"); it != j.end()) {
        if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 100)
            ctx.fail("confidence", "expected an integer from 0 to 100");
        r.confidence = uint8_t(it->get<int64_t>());
    }
    r.framesAny = parsePatterns(ctx, j, "frames_any");
    r.framesAll = parsePatterns(ctx, j, "frames_all");
    r.framesNone = parsePatterns(ctx, j, "frames_none");
    r.freeFramesAny = parsePatterns(ctx, j, "free_frames_any");
    r.freeFramesNone = parsePatterns(ctx, j, "free_frames_none");
    if (auto it = j.find("innermost"); it != j.end()) {
        if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 4096)
            ctx.fail("innermost", "expected an integer from 1 to 4096");
        r.innermost = int(it->get<int64_t>());
    }
    if (auto it = j.find("innermost_python"); it != j.end()) {
        if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 4096)
            ctx.fail("innermost_python", "expected an integer from 1 to 4096");
        if (r.innermost > 0)
            ctx.fail("innermost_python", "give \"innermost\" or \"innermost_python\", not both");
        r.innermostPython = int(it->get<int64_t>());
    }
    if (auto s = getString(ctx, j, "stack", false); !s.empty()) {
        if (s == "empty")
            r.stack = StackCondition::Empty;
        else if (s == "present")
            r.stack = StackCondition::Present;
        else if (s != "any")
            ctx.fail("stack", "expected \"empty\", \"present\" or \"any\"");
    }
    r.phaseMask = parsePhaseMask(ctx, j, "phase", false);
    r.freePhaseMask = parsePhaseMask(ctx, j, "free_phase", true);
    r.lifetimeAll = parseLifetimes(ctx, j, "lifetime");
    r.lifetimeNone = parseLifetimes(ctx, j, "not_lifetime");
    if (r.lifetimeAll & r.lifetimeNone)
        ctx.fail("not_lifetime", "names a lifetime that \"lifetime\" requires: the rule could never match");
    if (auto it = j.find("size"); it != j.end()) {
        if (!it->is_object())
            ctx.fail("size", "expected an object {\"min\", \"max\", \"mirrors\"}");
        for (auto k = it->begin(); k != it->end(); ++k)
            if (k.key() != "min" && k.key() != "max" && k.key() != "mirrors")
                ctx.fail("size." + k.key(), "unknown field (expected min, max or mirrors)");
        r.minBytes = parseBytes(ctx, *it, "min", 0);
        r.maxBytes = parseBytes(ctx, *it, "max", std::numeric_limits<int64_t>::max());
        if (r.minBytes > r.maxBytes)
            ctx.fail("size", "min is larger than max");
        if (auto m = it->find("mirrors"); m != it->end()) {
            if (*m == "parameter")
                r.mirrors = SizeMirror::Parameter;
            else if (*m == "gradient")
                r.mirrors = SizeMirror::Gradient;
            else if (*m == "half_parameter")
                r.mirrors = SizeMirror::HalfParameter;
            else
                ctx.fail("size.mirrors", "expected \"parameter\", \"gradient\" or \"half_parameter\"");
        }
    }
    if (auto it = j.find("roles"); it != j.end()) {
        if (!it->is_array())
            ctx.fail("roles", "expected a list of role names");
        for (const auto& role : *it) {
            uint16_t found = 0;
            for (size_t k = 0; k < kRuleRoleCount && role.is_string(); ++k)
                if (ruleRoleName(uint16_t(1u << k)) == role.get<std::string>())
                    found = uint16_t(1u << k);
            if (!found) {
                std::string known;
                for (size_t k = 0; k < kRuleRoleCount; ++k)
                    known += (k ? ", " : "") + std::string(ruleRoleName(uint16_t(1u << k)));
                ctx.fail("roles", "unknown role " + role.dump() + " (expected one of " + known + ")");
            }
            r.roles |= found;
        }
    }
    if (auto it = j.find("hint"); it != j.end()) {
        if (!it->is_boolean())
            ctx.fail("hint", "expected true or false");
        r.hint = it->get<bool>();
    }
    out.before = getString(ctx, j, "before", false);
    out.after = getString(ctx, j, "after", false);
    if (!out.before.empty() && !out.after.empty())
        ctx.fail("after", "give \"before\" or \"after\", not both");
    return out;
}

} // namespace

std::string_view ruleRoleName(uint16_t role)
{
    switch (role) {
    case kRoleWeightCast:
        return "weight_cast";
    case kRoleCastSurplus:
        return "cast_surplus";
    case kRoleFlatGradBuffer:
        return "flat_grad_buffer";
    case kRoleLibraryWorkspace:
        return "library_workspace";
    case kRoleMovesParameters:
        return "moves_parameters";
    case kRoleIndistinctCopies:
        return "indistinct_copies";
    case kRoleCollectedOutputs:
        return "collected_outputs";
    }
    return "?";
}

std::string_view lifetimeName(Lifetime l)
{
    for (size_t i = 0; i < kLifetimeCount; ++i)
        if (uint16_t(l) == (1u << i))
            return kLifetimeNames[i];
    return "?";
}

RuleSet RuleSet::parse(std::string_view jsonText, const std::string& origin)
{
    json doc;
    try {
        doc = json::parse(jsonText.begin(), jsonText.end());
    } catch (const json::parse_error& e) {
        throw LoadError(LoadErrorCode::Malformed, origin, int64_t(e.byte), std::string("rules file is not valid JSON: ") + e.what());
    }
    if (!doc.is_object())
        throw LoadError(LoadErrorCode::Malformed, origin, -1, "rules file: expected a JSON object with \"rules\"");
    for (auto it = doc.begin(); it != doc.end(); ++it)
        if (it.key() != "version" && it.key() != "rules" && it.key() != "phases" && it.key() != "annotations" &&
            it.key() != "comment")
            throw LoadError(LoadErrorCode::Malformed, origin, -1,
                            "rules file: unknown top-level field '" + it.key() + "' (expected version, rules, phases, annotations)");
    if (auto v = doc.find("version"); v != doc.end() && (!v->is_number_integer() || v->get<int64_t>() != 1))
        throw LoadError(LoadErrorCode::UnsupportedVersion, origin, -1, "rules file: field 'version': only version 1 is known");

    RuleSet set;
    set.m_sources.push_back(origin);
    std::set<std::string> names;
    if (auto rules = doc.find("rules"); rules != doc.end()) {
        if (!rules->is_array())
            throw LoadError(LoadErrorCode::Malformed, origin, -1, "rules file: field 'rules': expected an array");
        for (size_t i = 0; i < rules->size(); ++i) {
            auto parsed = parseRule((*rules)[i], i, origin);
            if (!names.insert(parsed.rule.name).second)
                Context(origin, "rule", i, parsed.rule.name).fail("name", "duplicate rule name");
            if (parsed.disabled) {
                set.m_deletedRules.push_back(parsed.rule.name);
                continue;
            }
            set.m_rules.push_back(std::move(parsed.rule));
            set.m_placement.push_back(Placement{parsed.before, parsed.after});
        }
    }
    if (auto phases = doc.find("phases"); phases != doc.end()) {
        if (!phases->is_array())
            throw LoadError(LoadErrorCode::Malformed, origin, -1, "rules file: field 'phases': expected an array");
        for (size_t i = 0; i < phases->size(); ++i) {
            const auto& j = (*phases)[i];
            Context ctx(origin, "phase pattern", i, {});
            if (!j.is_object())
                ctx.fail("(pattern)", "expected an object");
            PhasePattern p;
            p.name = getString(ctx, j, "name", true);
            ctx.setName(p.name);
            checkKeys(ctx, j, {"name", "phase", "file", "function", "disabled", "comment"});
            if (j.contains("disabled") && !j["disabled"].is_boolean())
                ctx.fail("disabled", "expected true or false");
            if (j.value("disabled", false)) {
                set.m_deletedPhases.push_back(p.name);
                continue;
            }
            auto ph = parsePhase(getString(ctx, j, "phase", true));
            if (!ph || *ph == Phase::Unknown)
                ctx.fail("phase", "expected forward, backward, optimizer_step, zero_grad or teardown");
            p.phase = *ph;
            json pat = json::object();
            if (j.contains("file"))
                pat["file"] = j["file"];
            if (j.contains("function"))
                pat["function"] = j["function"];
            p.pattern = parsePattern(ctx, pat, "file/function");
            set.m_phases.push_back(std::move(p));
        }
    }
    if (auto anns = doc.find("annotations"); anns != doc.end()) {
        if (!anns->is_array())
            throw LoadError(LoadErrorCode::Malformed, origin, -1, "rules file: field 'annotations': expected an array");
        for (size_t i = 0; i < anns->size(); ++i) {
            const auto& j = (*anns)[i];
            Context ctx(origin, "annotation pattern", i, {});
            if (!j.is_object())
                ctx.fail("(pattern)", "expected an object");
            AnnotationPattern a;
            a.name = getString(ctx, j, "name", true);
            ctx.setName(a.name);
            checkKeys(ctx, j, {"name", "match", "phase", "disabled", "comment"});
            if (j.contains("disabled") && !j["disabled"].is_boolean())
                ctx.fail("disabled", "expected true or false");
            if (j.value("disabled", false)) {
                set.m_deletedAnnotations.push_back(a.name);
                continue;
            }
            a.match = getString(ctx, j, "match", true);
            checkRegex(ctx, "match", a.match);
            auto ph = parsePhase(getString(ctx, j, "phase", true));
            if (!ph || *ph == Phase::Unknown)
                ctx.fail("phase", "expected forward, backward, optimizer_step or zero_grad");
            a.phase = *ph;
            set.m_annotations.push_back(std::move(a));
        }
    }
    // Placements and deletions only mean something when this set is merged into another one; on its
    // own the file's order is the order.
    set.internAll();
    return set;
}

RuleSet RuleSet::fromFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw LoadError(LoadErrorCode::FileNotFound, path, -1, "cannot open rules file");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad())
        throw LoadError(LoadErrorCode::ReadFailed, path, -1, "cannot read rules file");
    const std::string text = ss.str();
    if (text.size() > (size_t(16) << 20))
        throw LoadError(LoadErrorCode::LimitExceeded, path, -1, "rules file larger than 16 MiB");
    return parse(text, path);
}

void RuleSet::merge(const RuleSet& user)
{
    auto findRule = [&](const std::string& name) {
        return std::find_if(m_rules.begin(), m_rules.end(), [&](const Rule& r) { return r.name == name; });
    };
    for (const auto& name : user.m_deletedRules)
        if (auto it = findRule(name); it != m_rules.end())
            m_rules.erase(it);
    // New rules without a placement go, in their file's order, before every existing rule.
    size_t insertAt = 0;
    for (size_t i = 0; i < user.m_rules.size(); ++i) {
        const Rule& r = user.m_rules[i];
        const Placement pl = i < user.m_placement.size() ? user.m_placement[i] : Placement{};
        auto existing = findRule(r.name);
        if (existing != m_rules.end() && pl.before.empty() && pl.after.empty()) {
            *existing = r;
            continue;
        }
        if (existing != m_rules.end()) {
            const size_t pos = size_t(existing - m_rules.begin());
            m_rules.erase(existing);
            if (pos < insertAt)
                --insertAt;
        }
        const std::string& anchor = pl.before.empty() ? pl.after : pl.before;
        if (!anchor.empty()) {
            auto at = findRule(anchor);
            if (at == m_rules.end())
                throw LoadError(LoadErrorCode::Malformed, r.origin, -1,
                                "rule '" + r.name + "': field '" + (pl.before.empty() ? "after" : "before") +
                                    "': no rule named '" + anchor + "'");
            if (!pl.after.empty())
                ++at;
            const size_t pos = size_t(at - m_rules.begin());
            m_rules.insert(at, r);
            if (pos < insertAt)
                ++insertAt;
            continue;
        }
        m_rules.insert(m_rules.begin() + std::ptrdiff_t(insertAt), r);
        ++insertAt;
    }
    m_placement.assign(m_rules.size(), Placement{});

    // Phase and annotation patterns: the same by-name override; new user ones take priority (go first).
    auto mergeList = [](auto& mine, const auto& theirs, const std::vector<std::string>& deleted) {
        for (const auto& name : deleted) {
            auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& q) { return q.name == name; });
            if (it != mine.end())
                mine.erase(it);
        }
        size_t at = 0;
        for (const auto& p : theirs) {
            auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& q) { return q.name == p.name; });
            if (it != mine.end())
                *it = p;
            else
                mine.insert(mine.begin() + std::ptrdiff_t(at++), p);
        }
    };
    mergeList(m_phases, user.m_phases, user.m_deletedPhases);
    mergeList(m_annotations, user.m_annotations, user.m_deletedAnnotations);
    for (const auto& s : user.m_sources)
        if (std::find(m_sources.begin(), m_sources.end(), s) == m_sources.end())
            m_sources.push_back(s);
    internAll();
}

int RuleSet::internRegex(const std::string& source)
{
    if (source.empty())
        return -1;
    for (size_t i = 0; i < m_regexes.size(); ++i)
        if (m_regexes[i].source() == source)
            return int(i);
    m_regexes.push_back(TextPattern::compile(source));
    return int(m_regexes.size() - 1);
}

void RuleSet::internAll()
{
    m_regexes.clear();
    auto internPattern = [&](FramePattern& p) {
        p.fileRegex = internRegex(p.file);
        p.functionRegex = internRegex(p.function);
    };
    for (auto& r : m_rules) {
        for (auto& p : r.framesAny)
            internPattern(p);
        for (auto& p : r.framesAll)
            internPattern(p);
        for (auto& p : r.framesNone)
            internPattern(p);
        for (auto& p : r.freeFramesAny)
            internPattern(p);
        for (auto& p : r.freeFramesNone)
            internPattern(p);
    }
    for (auto& p : m_phases)
        internPattern(p.pattern);
    for (auto& a : m_annotations)
        a.regex = internRegex(a.match);
}

RuleSet RuleSet::builtin() { return parse(kBuiltinRulesJson, "<built-in rules.json>"); }

} // namespace poolscope
