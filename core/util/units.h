#pragma once
#include <cstdint>
#include <string>

namespace poolscope {

constexpr int64_t kKiB = int64_t(1) << 10;
constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kGiB = int64_t(1) << 30;

// "12.34 GiB", "512.00 MiB", "4.00 KiB", "12 B": binary units, two decimals, as people read them.
std::string formatBytes(int64_t bytes);
// "1.25 s", "340 ms", "12 us"
std::string formatDurationUs(int64_t us);
// A time axis over [0, endUs] counts in seconds from 2 s on, else in milliseconds: the chart's axis
// and every read-out of a moment on it say times in the same unit.
bool timeAxisInSeconds(int64_t endUs);
// A time since the first event in the unit of an axis ending at endUs: "12.345 s", "840.25 ms".
std::string formatAxisTime(int64_t us, int64_t endUs);
// "0x7f2a3c000000"
std::string formatAddress(uint64_t address);
// Parses "24GiB", "80 GB", "512MiB", "1073741824"; returns -1 when it is not a size.
int64_t parseBytes(const std::string& text);

} // namespace poolscope
