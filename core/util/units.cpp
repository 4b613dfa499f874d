#include "core/util/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace poolscope {

std::string formatBytes(int64_t bytes)
{
    const int64_t mag = bytes < 0 ? -bytes : bytes;
    char buf[64];
    if (mag >= kGiB)
        std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(kGiB));
    else if (mag >= kMiB)
        std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / double(kMiB));
    else if (mag >= kKiB)
        std::snprintf(buf, sizeof buf, "%.2f KiB", double(bytes) / double(kKiB));
    else
        std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
    return buf;
}

std::string formatDurationUs(int64_t us)
{
    char buf[64];
    const int64_t mag = us < 0 ? -us : us;
    if (mag >= 1000000)
        std::snprintf(buf, sizeof buf, "%.2f s", double(us) / 1e6);
    else if (mag >= 1000)
        std::snprintf(buf, sizeof buf, "%.1f ms", double(us) / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%lld us", static_cast<long long>(us));
    return buf;
}

bool timeAxisInSeconds(int64_t endUs) { return endUs >= 2'000'000; }

std::string formatAxisTime(int64_t us, int64_t endUs)
{
    char buf[64];
    if (timeAxisInSeconds(endUs))
        std::snprintf(buf, sizeof buf, "%.3f s", double(us) / 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.2f ms", double(us) / 1e3);
    return buf;
}

std::string formatAddress(uint64_t address)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(address));
    return buf;
}

int64_t parseBytes(const std::string& text)
{
    size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])))
        ++i;
    size_t numEnd = i;
    while (numEnd < text.size() && (std::isdigit(static_cast<unsigned char>(text[numEnd])) || text[numEnd] == '.'))
        ++numEnd;
    if (numEnd == i)
        return -1;
    double value = 0;
    try {
        value = std::stod(text.substr(i, numEnd - i));
    } catch (...) {
        return -1;
    }
    std::string unit;
    for (size_t k = numEnd; k < text.size(); ++k)
        if (!std::isspace(static_cast<unsigned char>(text[k])))
            unit += char(std::tolower(static_cast<unsigned char>(text[k])));
    double scale = 1;
    if (unit.empty() || unit == "b")
        scale = 1;
    else if (unit == "k" || unit == "kib" || unit == "kb")
        scale = double(kKiB);
    else if (unit == "m" || unit == "mib" || unit == "mb")
        scale = double(kMiB);
    else if (unit == "g" || unit == "gib" || unit == "gb")
        scale = double(kGiB);
    else if (unit == "t" || unit == "tib" || unit == "tb")
        scale = double(kGiB) * 1024;
    else
        return -1;
    const double bytes = value * scale;
    if (!std::isfinite(bytes) || bytes > 9.2e18)
        return -1;
    return int64_t(std::llround(bytes));
}

} // namespace poolscope
