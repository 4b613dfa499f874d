#pragma once
// Feeds nlohmann's SAX parser from a byte span while keeping Progress current, honouring
// Progress::cancel and knowing the byte offset of the token being parsed (for error messages).
// Shared by the JSON readers that stream (Kineto traces, memory timelines): none builds a DOM.
#include "core/util/load_error.h"
#include "core/util/progress.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>

namespace poolscope::jsonin {

class ByteCursor {
public:
    ByteCursor(std::span<const uint8_t> bytes, const std::string& name, Progress& progress)
        : m_begin(reinterpret_cast<const char*>(bytes.data())), m_end(m_begin + bytes.size()), m_name(name),
          m_progress(progress)
    {
        m_pos = m_begin;
        m_nextCheck = nextCheckAfter(m_begin);
    }
    int64_t offset() const { return int64_t(m_pos - m_begin); }
    int64_t size() const { return int64_t(m_end - m_begin); }
    const std::string& name() const { return m_name; }
    const char* begin() const { return m_begin; }
    const char* end() const { return m_end; }

    void advanced(const char* p)
    {
        m_pos = p;
        if (p == m_nextCheck) [[unlikely]]
            tick();
    }

    [[noreturn]] void fail(LoadErrorCode code, const std::string& message) const
    {
        throw LoadError(code, m_name, offset(), message);
    }

private:
    static constexpr int64_t kStep = int64_t(1) << 20;
    const char* nextCheckAfter(const char* p) const { return m_end - p > kStep ? p + kStep : nullptr; }
    void tick()
    {
        m_progress.bytesDone.store(offset(), std::memory_order_relaxed);
        if (m_progress.cancel.load(std::memory_order_relaxed))
            throw LoadError(LoadErrorCode::Cancelled, m_name, offset(), "loading was cancelled");
        m_nextCheck = nextCheckAfter(m_pos);
    }

    const char* m_begin;
    const char* m_end;
    const char* m_pos;
    const char* m_nextCheck;
    const std::string& m_name;
    Progress& m_progress;
};

class ProgressIterator {
public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = char;
    using difference_type = std::ptrdiff_t;
    using pointer = const char*;
    using reference = const char&;

    ProgressIterator() = default;
    ProgressIterator(const char* p, ByteCursor* cursor) : m_p(p), m_cursor(cursor) {}
    reference operator*() const { return *m_p; }
    ProgressIterator& operator++()
    {
        m_cursor->advanced(++m_p);
        return *this;
    }
    ProgressIterator operator++(int)
    {
        auto old = *this;
        ++*this;
        return old;
    }
    bool operator==(const ProgressIterator& o) const { return m_p == o.m_p; }

private:
    const char* m_p = nullptr;
    ByteCursor* m_cursor = nullptr;
};

// Base for SAX handlers: turns nlohmann's parse errors into LoadError (Truncated at the end of the
// input, Malformed elsewhere) and enforces LoadOptions::maxNesting.
struct SaxBase {
    ByteCursor& cursor;
    int maxNesting;
    int depth = 0;

    SaxBase(ByteCursor& c, int nesting) : cursor(c), maxNesting(nesting) {}

    void enter()
    {
        if (++depth > maxNesting)
            cursor.fail(LoadErrorCode::LimitExceeded,
                        "JSON nested deeper than " + std::to_string(maxNesting) + " levels (LoadOptions::maxNesting)");
    }
    void leave() { --depth; }

    bool parse_error(std::size_t position, const std::string& /*lastToken*/, const nlohmann::json::exception& ex)
    {
        std::string what = ex.what();
        // nlohmann's text: "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
        if (auto colon = what.find("]"); colon != std::string::npos)
            what = what.substr(colon + 2);
        const auto at = int64_t(position > 0 ? position - 1 : 0);
        if (at + 1 >= cursor.size())
            throw LoadError(LoadErrorCode::Truncated, cursor.name(), at, "JSON ends unexpectedly (file truncated?): " + what);
        throw LoadError(LoadErrorCode::Malformed, cursor.name(), at, "invalid JSON: " + what);
    }
};

// Runs the parser over `cursor`'s bytes with `sax` (a SaxBase-derived nlohmann SAX handler).
template <typename Sax>
void saxParse(ByteCursor& cursor, Sax& sax, Progress& progress)
{
    progress.stage.store(int(LoadStage::Parsing), std::memory_order_relaxed);
    progress.bytesTotal.store(cursor.size(), std::memory_order_relaxed);
    progress.bytesDone.store(0, std::memory_order_relaxed);
    ProgressIterator first(cursor.begin(), &cursor), last(cursor.end(), &cursor);
    nlohmann::json::sax_parse(first, last, &sax, nlohmann::json::input_format_t::json, true, false);
    progress.bytesDone.store(cursor.size(), std::memory_order_relaxed);
}

} // namespace poolscope::jsonin
