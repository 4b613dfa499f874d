#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace poolscope {

enum class LoadErrorCode {
    FileNotFound,
    ReadFailed,
    UnknownFormat,
    Truncated,
    Malformed,        // a field of the wrong type or an impossible value
    UnsupportedVersion,
    CodeExecution,    // a pickle opcode that would import or call something
    LimitExceeded,    // nesting, sizes, decompression ratio, memory budget
    Cancelled,
};

// Typed load error (Tracy's NotTracyDump idea): the GUI shows message(), the CLI prints it and exits 2.
// what() is one line: "<file>: byte <offset>: <message>" (offset omitted when unknown).
class LoadError : public std::runtime_error {
public:
    LoadError(LoadErrorCode code, std::string file, int64_t offset, std::string message);
    LoadErrorCode code() const { return m_code; }
    int64_t offset() const { return m_offset; }
    const std::string& file() const { return m_file; }
    const std::string& message() const { return m_message; }

private:
    LoadErrorCode m_code;
    std::string m_file;
    int64_t m_offset;
    std::string m_message;
};

} // namespace poolscope
