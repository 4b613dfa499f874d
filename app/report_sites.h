#pragma once
// `report --between A B` and `report --by-site`: the two views of report that are not a report of
// one moment's pools (kept out of cmd_report.cpp so that file stays the command line's).
#include <optional>
#include <string>

namespace poolscope {
class Document;
}

namespace poolscope::app {

std::string reportBetween(const Document& doc, std::optional<int> device, const std::string& a, const std::string& b, bool json);
std::string reportBySite(const Document& doc, std::optional<int> device, const std::string& at, bool json, int top);

} // namespace poolscope::app
