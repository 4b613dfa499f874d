#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace poolscope {

// `python -m torch.cuda._memory_viz trace_plot` writes a page whose script holds
//   const local_files = [{"name": "snapshot.pickle", "base64": "gASV..."}]
// i.e. the snapshot pickle, padded with 1-3 NUL bytes to a multiple of 3, as base64 in a JSON string.
// Returns the decoded pickle with that padding removed. Throws LoadError: UnknownFormat when the page
// holds no embedded file (naming what it looks like instead), Malformed with the byte offset in the
// HTML of a character that is not base64, Truncated when the string never closes.
std::vector<uint8_t> extractHtmlPickle(std::span<const uint8_t> html, const std::string& nameForErrors);

// Standard base64 (RFC 4648, '=' padding, whitespace and JSON's "\/" escape tolerated). `baseOffset`
// is added to the offsets in errors so they point into the enclosing file.
std::vector<uint8_t> decodeBase64(std::string_view text, const std::string& nameForErrors, int64_t baseOffset = 0);

} // namespace poolscope
