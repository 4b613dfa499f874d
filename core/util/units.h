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
// "0x7f2a3c000000"
std::string formatAddress(uint64_t address);
// Parses "24GiB", "80 GB", "512MiB", "1073741824"; returns -1 when it is not a size.
int64_t parseBytes(const std::string& text);

} // namespace poolscope
