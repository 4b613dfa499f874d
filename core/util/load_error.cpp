#include "core/util/load_error.h"

namespace poolscope {
namespace {
std::string compose(const std::string& file, int64_t offset, const std::string& message)
{
    std::string s = file.empty() ? std::string("<input>") : file;
    if (offset >= 0)
        s += ": byte " + std::to_string(offset);
    return s + ": " + message;
}
} // namespace

LoadError::LoadError(LoadErrorCode code, std::string file, int64_t offset, std::string message)
    : std::runtime_error(compose(file, offset, message)), m_code(code), m_file(std::move(file)), m_offset(offset),
      m_message(std::move(message))
{
}

} // namespace poolscope
