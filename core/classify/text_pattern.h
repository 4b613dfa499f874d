#pragma once
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope {

// An ECMAScript regular expression searched in frame filenames, function names and annotation
// names. std::regex costs microseconds per search and a big trace has tens of thousands of distinct
// function names, so the shapes rules actually use are recognised and matched with plain string
// operations: literals, ^prefix, suffix$, ^exact$, top-level alternatives of those, and one group
// of literal alternatives inside a literal ("^torch::autograd::(Engine|PythonEngine)::"). Anything
// else falls back to std::regex. Both paths give the same answers (tested).
class TextPattern {
public:
    // Throws std::regex_error when the expression is invalid.
    static TextPattern compile(const std::string& source);

    bool search(std::string_view text) const;
    const std::string& source() const { return m_source; }
    bool usesRegex() const { return m_useRegex; }

private:
    struct Piece {
        std::string text;
        bool atStart = false;
        bool atEnd = false;
    };
    static bool expand(const std::string& source, std::vector<Piece>& out);

    std::string m_source;
    bool m_useRegex = false;
    std::vector<Piece> m_pieces;
    std::regex m_regex;
};

} // namespace poolscope
