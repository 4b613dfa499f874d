#include "core/formats/html_embed.h"

#include "core/util/load_error.h"

#include <array>

namespace poolscope {
namespace {

constexpr uint8_t kInvalid = 0xFF;
constexpr uint8_t kSkip = 0xFE;

constexpr std::array<uint8_t, 256> makeTable()
{
    std::array<uint8_t, 256> t{};
    for (auto& v : t)
        v = kInvalid;
    for (int i = 0; i < 26; ++i) {
        t[size_t('A' + i)] = uint8_t(i);
        t[size_t('a' + i)] = uint8_t(26 + i);
    }
    for (int i = 0; i < 10; ++i)
        t[size_t('0' + i)] = uint8_t(52 + i);
    t[size_t('+')] = 62;
    t[size_t('/')] = 63;
    for (char c : {' ', '\t', '\r', '\n', '\\'}) // '\\': JSON may write '/' as "\/"
        t[size_t(uint8_t(c))] = kSkip;
    return t;
}
constexpr auto kTable = makeTable();

std::string describeChar(uint8_t c)
{
    if (c >= 0x20 && c < 0x7F)
        return std::string("'") + char(c) + "'";
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%02X", c);
    return buf;
}

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

} // namespace

std::vector<uint8_t> decodeBase64(std::string_view text, const std::string& name, int64_t baseOffset)
{
    std::vector<uint8_t> out;
    out.reserve(text.size() / 4 * 3 + 3);
    uint32_t acc = 0;
    int bits = 0;
    size_t symbols = 0;
    bool padding = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const auto c = uint8_t(text[i]);
        if (c == '=') {
            padding = true;
            continue;
        }
        const uint8_t v = kTable[c];
        if (v == kSkip)
            continue;
        if (v == kInvalid || padding)
            throw LoadError(LoadErrorCode::Malformed, name, baseOffset + int64_t(i),
                            (padding ? "base64 data continues after '=' padding with " : "invalid base64 character ") +
                                describeChar(c));
        acc = (acc << 6) | v;
        bits += 6;
        ++symbols;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(uint8_t(acc >> bits));
            acc &= (1u << bits) - 1;
        }
    }
    if (symbols % 4 == 1)
        throw LoadError(LoadErrorCode::Truncated, name, baseOffset + int64_t(text.size()),
                        "base64 data ends in the middle of a byte (truncated?)");
    return out;
}

std::vector<uint8_t> extractHtmlPickle(std::span<const uint8_t> html, const std::string& name)
{
    const std::string_view page(reinterpret_cast<const char*>(html.data()), html.size());
    constexpr std::string_view kKey = "\"base64\"";
    size_t valueStart = std::string_view::npos;
    for (size_t at = page.find(kKey); at != std::string_view::npos; at = page.find(kKey, at + 1)) {
        size_t p = at + kKey.size();
        while (p < page.size() && isSpace(page[p]))
            ++p;
        if (p >= page.size() || page[p] != ':')
            continue; // the word in running text, not a JSON key
        ++p;
        while (p < page.size() && isSpace(page[p]))
            ++p;
        if (p >= page.size() || page[p] != '"')
            throw LoadError(LoadErrorCode::Malformed, name, int64_t(p), "expected a string after \"base64\":");
        valueStart = p + 1;
        break;
    }
    if (valueStart == std::string_view::npos) {
        std::string hint = "an HTML page without an embedded snapshot; PoolScope reads the page that "
                           "`python -m torch.cuda._memory_viz trace_plot` writes (a \"base64\" pickle in local_files)";
        if (page.find("data:image/png;base64,") != std::string_view::npos)
            hint += "; this one holds only a PNG image (export_memory_timeline_html?): export the .raw.json.gz "
                    "timeline or a snapshot pickle instead";
        throw LoadError(LoadErrorCode::UnknownFormat, name, -1, hint);
    }
    const size_t close = page.find('"', valueStart);
    if (close == std::string_view::npos)
        throw LoadError(LoadErrorCode::Truncated, name, int64_t(page.size()),
                        "the embedded base64 string never ends (file truncated?)");
    auto bytes = decodeBase64(page.substr(valueStart, close - valueStart), name, int64_t(valueStart));
    // _format_viz pads the pickle with 1-3 NULs so its length is a multiple of 3; STOP ('.') precedes them.
    for (int i = 0; i < 3 && !bytes.empty() && bytes.back() == 0; ++i)
        bytes.pop_back();
    if (bytes.empty() || bytes[0] != 0x80)
        throw LoadError(LoadErrorCode::Malformed, name, int64_t(valueStart),
                        "the file embedded in the HTML page is not a pickle (expected it to start with PROTO 0x80)");
    return bytes;
}

} // namespace poolscope
