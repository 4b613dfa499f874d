#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace poolscope {

// JSON text for people and scripts. Strings from a dump (frame names, file names, warnings) may not
// be valid UTF-8; nlohmann's dump throws on those, so invalid bytes become U+FFFD instead: a stray
// byte in a frame name must never cost the user the whole report.
inline std::string jsonText(const nlohmann::json& j, int indent = 2)
{
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace poolscope
