#include "core/classify/text_pattern.h"

namespace poolscope {
namespace {

// Splits at top-level '|' (outside parentheses and brackets); false when the nesting is not plain.
bool splitTop(const std::string& s, std::vector<std::string>& parts)
{
    int depth = 0;
    std::string cur;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '\\' && i + 1 < s.size()) {
            cur += c;
            cur += s[++i];
            continue;
        }
        if (c == '(')
            ++depth;
        else if (c == ')')
            --depth;
        if (depth < 0)
            return false;
        if (c == '|' && depth == 0) {
            parts.push_back(cur);
            cur.clear();
            continue;
        }
        cur += c;
    }
    parts.push_back(cur);
    return depth == 0;
}

// A run of literal characters: escapes of punctuation are literal, anything special is not.
bool literalRun(const std::string& s, size_t begin, size_t end, std::string& out)
{
    out.clear();
    for (size_t i = begin; i < end; ++i) {
        const char c = s[i];
        if (c == '\\') {
            if (i + 1 >= end)
                return false;
            const char e = s[++i];
            if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                return false; // \w, \d, \b, \s ...: a class, not a character
            out += e;
            continue;
        }
        if (std::string_view("^$.|?*+()[]{}").find(c) != std::string_view::npos)
            return false;
        out += c;
    }
    return true;
}

} // namespace

bool TextPattern::expand(const std::string& source, std::vector<Piece>& out)
{
    std::vector<std::string> alts;
    if (!splitTop(source, alts))
        return false;
    for (const std::string& alt : alts) {
        size_t b = 0, e = alt.size();
        const bool atStart = b < e && alt[b] == '^';
        if (atStart)
            ++b;
        const bool atEnd = e > b && alt[e - 1] == '$' && (e < 2 || alt[e - 2] != '\\');
        if (atEnd)
            --e;
        // At most one group "(a|b|c)" of literals, with literals around it.
        size_t open = std::string::npos;
        for (size_t i = b; i < e; ++i) {
            if (alt[i] == '\\') {
                ++i;
                continue;
            }
            if (alt[i] == '(') {
                open = i;
                break;
            }
        }
        std::string head, tail;
        if (open == std::string::npos) {
            if (!literalRun(alt, b, e, head))
                return false;
            out.push_back(Piece{head, atStart, atEnd});
            continue;
        }
        const size_t close = alt.find(')', open);
        if (close == std::string::npos || close >= e || alt.find('(', open + 1) < close)
            return false;
        if (!literalRun(alt, b, open, head) || !literalRun(alt, close + 1, e, tail))
            return false;
        std::vector<std::string> inner;
        if (!splitTop(alt.substr(open + 1, close - open - 1), inner))
            return false;
        for (const auto& in : inner) {
            std::string lit;
            if (!literalRun(in, 0, in.size(), lit))
                return false;
            out.push_back(Piece{head + lit + tail, atStart, atEnd});
        }
    }
    return true;
}

TextPattern TextPattern::compile(const std::string& source)
{
    TextPattern p;
    p.m_source = source;
    if (!expand(source, p.m_pieces)) {
        p.m_pieces.clear();
        p.m_useRegex = true;
        p.m_regex = std::regex(source, std::regex::ECMAScript);
    }
    return p;
}

bool TextPattern::search(std::string_view text) const
{
    if (m_useRegex)
        return std::regex_search(text.begin(), text.end(), m_regex);
    for (const Piece& pc : m_pieces) {
        const std::string_view lit = pc.text;
        if (pc.atStart && pc.atEnd) {
            if (text == lit)
                return true;
        } else if (pc.atStart) {
            if (text.substr(0, lit.size()) == lit)
                return true;
        } else if (pc.atEnd) {
            if (text.size() >= lit.size() && text.substr(text.size() - lit.size()) == lit)
                return true;
        } else if (text.find(lit) != std::string_view::npos) {
            return true;
        }
    }
    return false;
}

} // namespace poolscope
