#include "core/allocator/allocator_config.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace poolscope {
namespace {

std::string trim(std::string_view s)
{
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
        s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
        s.remove_suffix(1);
    return std::string(s);
}

std::optional<int64_t> parseInt(std::string_view s)
{
    const std::string t = trim(s);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size())
        return std::nullopt;
    return v;
}

std::optional<bool> parseBool(std::string_view s)
{
    std::string t = trim(s);
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (t == "true" || t == "1")
        return true;
    if (t == "false" || t == "0")
        return false;
    return std::nullopt;
}

// garbage_collection_threshold: CUDAAllocatorConfig::parseGarbageCollectionThreshold accepts
// 0 < value < 1 only.
std::optional<double> parseFraction(std::string_view s)
{
    const std::string t = trim(s);
    if (t.empty())
        return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size() || !(v > 0.0 && v < 1.0))
        return std::nullopt;
    return v;
}

void note(std::vector<std::string>* notes, std::string text)
{
    if (notes)
        notes->push_back(std::move(text));
}

// Index of the power-of-two interval a size in MiB falls into (CUDAAllocatorConfig's log2 index).
size_t intervalIndexForMb(uint64_t mb)
{
    const size_t index = mb == 0 ? 0 : size_t(std::bit_width(mb) - 1);
    return std::min(index, kRoundUpPowerOfTwoIntervals - 1);
}

// All integers in a rendered dict such as "{'1': 0, '2': 4}" or {"1":0}, in order.
std::vector<int64_t> integersIn(std::string_view s)
{
    std::vector<int64_t> out;
    size_t i = 0;
    while (i < s.size()) {
        if (std::isdigit(static_cast<unsigned char>(s[i])) || (s[i] == '-' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
            size_t j = i + 1;
            while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])))
                ++j;
            if (auto v = parseInt(s.substr(i, j - i)))
                out.push_back(*v);
            i = j;
        } else {
            ++i;
        }
    }
    return out;
}

// Tokens of an allocator config string, split like CUDAAllocatorConfig::lexArgs: ',', ':', '[' and ']'
// are tokens of their own, spaces are dropped.
std::vector<std::string> lexArgs(std::string_view env)
{
    std::vector<std::string> out;
    std::string buf;
    for (char ch : env) {
        if (ch == ',' || ch == ':' || ch == '[' || ch == ']') {
            if (!buf.empty())
                out.push_back(std::move(buf));
            buf.clear();
            out.emplace_back(1, ch);
        } else if (ch != ' ') {
            buf.push_back(ch);
        }
    }
    if (!buf.empty())
        out.push_back(std::move(buf));
    return out;
}

bool parseRoundupDivisions(AllocatorConfig& config, const std::vector<std::string>& tok, size_t& i)
{
    auto& div = config.roundupPower2Divisions;
    if (i < tok.size() && tok[i] == "[") {
        size_t lastIndex = 0;
        bool first = true;
        while (++i < tok.size() && tok[i] != "]") {
            const std::string key = tok[i];
            if (i + 2 >= tok.size() || tok[i + 1] != ":")
                return false;
            i += 2;
            auto value = parseInt(tok[i]);
            if (!value || *value < 0 || (*value != 0 && !std::has_single_bit(uint64_t(*value))))
                return false;
            if (key == ">") {
                std::fill(div.begin() + std::ptrdiff_t(lastIndex), div.end(), *value);
            } else {
                auto mb = parseInt(key);
                if (!mb || *mb <= 0 || !std::has_single_bit(uint64_t(*mb)))
                    return false;
                const size_t index = intervalIndexForMb(uint64_t(*mb));
                if (first) {
                    std::fill(div.begin(), div.begin() + std::ptrdiff_t(index), *value);
                    first = false;
                }
                div[index] = *value;
                lastIndex = index;
            }
            if (i + 1 < tok.size() && tok[i + 1] == ",")
                ++i;
        }
        return i < tok.size();
    }
    if (i >= tok.size())
        return false;
    auto value = parseInt(tok[i]);
    if (!value || *value < 0)
        return false;
    div.fill(*value);
    return true;
}

} // namespace

bool applyAllocConf(AllocatorConfig& config, const std::string& conf, std::vector<std::string>* notes)
{
    const auto tok = lexArgs(conf);
    bool ok = true;
    for (size_t i = 0; i < tok.size(); ++i) {
        if (tok[i] == ",")
            continue;
        const std::string key = tok[i];
        if (i + 2 >= tok.size() || tok[i + 1] != ":") {
            note(notes, "PYTORCH_CUDA_ALLOC_CONF: option '" + key + "' has no value");
            return false;
        }
        i += 2;
        if (key == "max_split_size_mb") {
            auto mb = parseInt(tok[i]);
            if (!mb || *mb < 0) {
                ok = false;
                continue;
            }
            // The allocator raises smaller values to the large-buffer size (20 MiB).
            const int64_t clamped = std::clamp<int64_t>(*mb, kLargeBuffer >> 20, kNoSplitLimit >> 20);
            config.maxSplitSize = clamped << 20;
        } else if (key == "max_non_split_rounding_mb") {
            auto mb = parseInt(tok[i]);
            if (!mb || *mb < 0) {
                ok = false;
                continue;
            }
            config.maxNonSplitRoundingSize = std::max<int64_t>(*mb, kLargeBuffer >> 20) << 20;
        } else if (key == "expandable_segments") {
            auto b = parseBool(tok[i]);
            if (!b) {
                ok = false;
                continue;
            }
            config.expandableSegments = *b;
        } else if (key == "roundup_power2_divisions") {
            if (!parseRoundupDivisions(config, tok, i)) {
                note(notes, "PYTORCH_CUDA_ALLOC_CONF: malformed roundup_power2_divisions");
                return false;
            }
        } else if (key == "garbage_collection_threshold") {
            auto v = parseFraction(tok[i]);
            if (!v) {
                ok = false;
                continue;
            }
            config.gcThreshold = *v;
        } else {
            // pinned_*, release_lock_on_cudamalloc, backend: they do not change where a block lands.
            if (tok[i] == "[")
                while (i < tok.size() && tok[i] != "]")
                    ++i;
        }
    }
    if (!ok)
        note(notes, "PYTORCH_CUDA_ALLOC_CONF: some values were not understood and were ignored");
    return ok;
}

AllocatorConfig allocatorConfigFromSettings(const std::map<std::string, std::string>& settings,
                                            std::vector<std::string>* notes)
{
    AllocatorConfig config;
    if (auto it = settings.find("PYTORCH_CUDA_ALLOC_CONF"); it != settings.end() && !trim(it->second).empty()) {
        std::string conf = trim(it->second);
        if (conf.size() >= 2 && (conf.front() == '\'' || conf.front() == '"') && conf.back() == conf.front())
            conf = conf.substr(1, conf.size() - 2);
        applyAllocConf(config, conf, notes);
    }
    if (auto it = settings.find("max_split_size"); it != settings.end()) {
        auto v = parseInt(it->second);
        if (!v)
            note(notes, "allocator_settings.max_split_size: not an integer: " + it->second);
        else
            config.maxSplitSize = *v < 0 ? kNoSplitLimit : *v;
    }
    if (auto it = settings.find("max_non_split_rounding_size"); it != settings.end()) {
        if (auto v = parseInt(it->second); v && *v > 0)
            config.maxNonSplitRoundingSize = *v;
    }
    if (auto it = settings.find("expandable_segments"); it != settings.end()) {
        auto b = parseBool(it->second);
        if (!b)
            note(notes, "allocator_settings.expandable_segments: not a boolean: " + it->second);
        else
            config.expandableSegments = *b;
    }
    if (auto it = settings.find("garbage_collection_threshold"); it != settings.end()) {
        // Rendered as "0.000000" when unset; anything else out of (0, 1) is not a threshold.
        const std::string t = trim(it->second);
        char* end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        if (t.empty() || end != t.c_str() + t.size() || v < 0.0 || v >= 1.0)
            note(notes, "allocator_settings.garbage_collection_threshold: not a fraction in [0, 1): " + it->second);
        else
            config.gcThreshold = v;
    }
    if (auto it = settings.find("roundup_power2_divisions"); it != settings.end()) {
        const auto ints = integersIn(it->second);
        if (ints.size() % 2 != 0) {
            note(notes, "allocator_settings.roundup_power2_divisions: expected key/value pairs");
        } else {
            // Keys are interval starts in MiB ('1', '2', ... '32768'), values the division counts.
            for (size_t k = 0; k + 1 < ints.size(); k += 2)
                if (ints[k] > 0 && ints[k + 1] >= 0)
                    config.roundupPower2Divisions[intervalIndexForMb(uint64_t(ints[k]))] = ints[k + 1];
        }
    }
    return config;
}

std::string applyAllocConfStrict(AllocatorConfig& config, const std::string& conf, std::vector<std::string>* ignored)
{
    // Checked like CUDAAllocatorConfig::parseArgs, which raises on each of these.
    AllocatorConfig out = config;
    const auto tok = lexArgs(conf);
    for (size_t i = 0; i < tok.size(); ++i) {
        if (tok[i] == ",")
            continue;
        const std::string key = tok[i];
        if (key == ":" || key == "[" || key == "]")
            return "unexpected '" + key + "' (expected OPTION:VALUE[,OPTION:VALUE...])";
        if (i + 2 >= tok.size() || tok[i + 1] != ":")
            return "option '" + key + "' has no value (expected " + key + ":VALUE)";
        i += 2;
        const std::string value = tok[i];
        if (key == "max_split_size_mb") {
            auto mb = parseInt(value);
            if (!mb || *mb <= (kLargeBuffer >> 20))
                return "max_split_size_mb expects a whole number of MiB above " + std::to_string(kLargeBuffer >> 20) + ", got '" + value + "'";
            out.maxSplitSize = std::min<int64_t>(*mb, kNoSplitLimit >> 20) << 20;
        } else if (key == "max_non_split_rounding_mb") {
            auto mb = parseInt(value);
            if (!mb || *mb <= 0)
                return "max_non_split_rounding_mb expects a whole number of MiB, got '" + value + "'";
            out.maxNonSplitRoundingSize = std::max<int64_t>(*mb, kLargeBuffer >> 20) << 20;
        } else if (key == "expandable_segments") {
            if (value != "True" && value != "False")
                return "expandable_segments expects True or False, got '" + value + "'";
            out.expandableSegments = value == "True";
        } else if (key == "garbage_collection_threshold") {
            auto v = parseFraction(value);
            if (!v)
                return "garbage_collection_threshold expects a fraction between 0 and 1 (exclusive), got '" + value + "'";
            out.gcThreshold = *v;
        } else if (key == "roundup_power2_divisions") {
            if (!parseRoundupDivisions(out, tok, i))
                return "roundup_power2_divisions expects a power of two (4) or a list such as [256:1,512:2,>:4]";
        } else if (key == "backend" || key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
                   key == "pinned_num_register_threads" || key == "pinned_use_background_threads" ||
                   key == "graph_capture_record_stream_reuse" || key == "per_process_memory_fraction") {
            if (ignored)
                ignored->push_back(key);
            if (value == "[")
                while (i < tok.size() && tok[i] != "]")
                    ++i;
        } else {
            return "unknown option '" + key + "' (PyTorch's names: expandable_segments, max_split_size_mb, "
                   "garbage_collection_threshold, roundup_power2_divisions, max_non_split_rounding_mb)";
        }
    }
    config = out;
    return {};
}

std::string describeAllocConf(const AllocatorConfig& config)
{
    const AllocatorConfig defaults;
    std::string out;
    auto add = [&](const std::string& item) { out += (out.empty() ? "" : ",") + item; };
    if (config.expandableSegments)
        add("expandable_segments:True");
    if (config.maxSplitSize != defaults.maxSplitSize)
        add("max_split_size_mb:" + std::to_string(config.maxSplitSize >> 20));
    if (config.maxNonSplitRoundingSize != defaults.maxNonSplitRoundingSize)
        add("max_non_split_rounding_mb:" + std::to_string(config.maxNonSplitRoundingSize >> 20));
    if (config.gcThreshold > 0) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", config.gcThreshold);
        add(std::string("garbage_collection_threshold:") + buf);
    }
    if (config.roundupPower2Divisions != defaults.roundupPower2Divisions) {
        const auto& d = config.roundupPower2Divisions;
        if (std::all_of(d.begin(), d.end(), [&](int64_t v) { return v == d[0]; })) {
            add("roundup_power2_divisions:" + std::to_string(d[0]));
        } else {
            std::string list;
            for (size_t k = 0; k < d.size(); ++k)
                list += (list.empty() ? "" : ",") + std::to_string(int64_t(1) << k) + ":" + std::to_string(d[k]);
            add("roundup_power2_divisions:[" + list + "]");
        }
    }
    return out.empty() ? "PyTorch's defaults" : out;
}

int64_t roundupPower2Divisions(const AllocatorConfig& config, int64_t size)
{
    const int logSize = std::bit_width(uint64_t(size)) - 1;
    const int index = std::clamp(logSize - 20, 0, int(kRoundUpPowerOfTwoIntervals) - 1);
    return config.roundupPower2Divisions[size_t(index)];
}

int64_t roundSize(const AllocatorConfig& config, int64_t size)
{
    if (size < kMinBlockSize)
        return kMinBlockSize;
    if (size > kMaxRequest)
        return size; // never handed out (malloc fails it first); no rounding that could overflow
    const int64_t divisions = roundupPower2Divisions(config, size);
    if (divisions > 1 && size > kMinBlockSize * divisions) {
        // roundup_power2_next_division: the next of `divisions` equal steps between powers of two.
        const auto u = uint64_t(size);
        if (std::has_single_bit(u))
            return size;
        const uint64_t floor = std::bit_floor(u);
        const uint64_t step = floor >> (std::bit_width(uint64_t(divisions)) - 1);
        if (step == 0)
            return int64_t(floor << 1);
        const uint64_t down = u & ~(step - 1);
        return int64_t(down == u ? u : down + step);
    }
    return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

int64_t allocationSize(int64_t roundedSize)
{
    if (roundedSize <= kSmallSize)
        return kSmallBuffer;
    if (roundedSize < kMinLargeAlloc)
        return kLargeBuffer;
    if (roundedSize > kMaxRequest)
        return roundedSize;
    return kRoundLarge * ((roundedSize + kRoundLarge - 1) / kRoundLarge);
}

} // namespace poolscope
