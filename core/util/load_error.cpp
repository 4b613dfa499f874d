#include "core/util/load_error.h"

namespace poolscope {
namespace {
// Messages quote the file's own strings (a field value, a pickle GLOBAL's name); control characters in
// them would break the one-line contract (and could drive a terminal), so they are shown escaped.
std::string oneLine(const std::string& text)
{
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (u < 0x20 || u == 0x7F) {
            const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[u >> 4];
            out += hex[u & 15];
        } else {
            out += c;
        }
    }
    return out;
}

std::string compose(const std::string& file, int64_t offset, const std::string& message)
{
    std::string s = file.empty() ? std::string("<input>") : file;
    if (offset >= 0)
        s += ": byte " + std::to_string(offset);
    return oneLine(s + ": " + message);
}
} // namespace

LoadError::LoadError(LoadErrorCode code, std::string file, int64_t offset, std::string message)
    : std::runtime_error(compose(file, offset, message)), m_code(code), m_file(std::move(file)), m_offset(offset),
      m_message(std::move(message))
{
}

} // namespace poolscope
