#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace poolscope {

// Constants of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).
constexpr int64_t kMinBlockSize = 512;         // every request rounds up to at least this
constexpr int64_t kSmallSize = 1 << 20;        // largest request served from the small pool
constexpr int64_t kSmallBuffer = 2 << 20;      // small pool segment size
constexpr int64_t kLargeBuffer = 20 << 20;     // segment for 1-10 MiB requests; expandable large page
constexpr int64_t kMinLargeAlloc = 10 << 20;   // from here on a segment is the request rounded to 2 MiB
constexpr int64_t kRoundLarge = 2 << 20;
constexpr int64_t kNoSplitLimit = std::numeric_limits<int64_t>::max(); // max_split_size unset
constexpr int64_t kMaxRequest = int64_t(1) << 50; // 1 PiB: larger requests fail like cudaMalloc would
constexpr size_t kRoundUpPowerOfTwoIntervals = 16; // 1 MiB .. 32 GiB, one entry per power of two

// The subset of PYTORCH_CUDA_ALLOC_CONF that decides where blocks land.
struct AllocatorConfig {
    int64_t maxSplitSize = kNoSplitLimit;
    int64_t maxNonSplitRoundingSize = kLargeBuffer; // an oversize block serves requests up to this much smaller
    // Index i covers sizes in [2^i MiB, 2^(i+1) MiB); index 0 also covers everything below 1 MiB.
    std::array<int64_t, kRoundUpPowerOfTwoIntervals> roundupPower2Divisions{};
    bool expandableSegments = false;
    // garbage_collection_threshold: before cudaMalloc, free whole cached segments by age once reserved
    // exceeds this fraction of the allowed memory. PyTorch runs it only when
    // torch.cuda.set_per_process_memory_fraction was called (set_fraction); the simulator runs it when
    // it has a capacity, which then stands for the allowed maximum. 0: off.
    double gcThreshold = 0.0;
    // Only sizes the virtual address range of an expandable segment (1 1/8 of the device memory).
    int64_t deviceTotalMemory = int64_t(80) << 30;

    bool operator==(const AllocatorConfig&) const = default;
};

// Parses the snapshot's allocator_settings (values as the loader renders them: numbers, True/False,
// a dict like {'1': 0, '2': 4}) and, under them, PYTORCH_CUDA_ALLOC_CONF. Explicit fields win over the
// environment string, as they are what the allocator reported it used. Unusable values are skipped
// and described in `notes` when given.
AllocatorConfig allocatorConfigFromSettings(const std::map<std::string, std::string>& settings,
                                            std::vector<std::string>* notes = nullptr);
// Applies a PYTORCH_CUDA_ALLOC_CONF string ("max_split_size_mb:128,expandable_segments:True,
// roundup_power2_divisions:[256:1,512:2,>:4]") on top of `config`; returns false on a malformed option.
bool applyAllocConf(AllocatorConfig& config, const std::string& conf, std::vector<std::string>* notes = nullptr);

// PYTORCH_CUDA_ALLOC_CONF as a user types it on the command line: PyTorch's own names and syntax.
// Unlike applyAllocConf, anything PyTorch itself would refuse is an error: returns "" when the string
// was applied, else one line naming the option and what it expects. Options that do not change where
// a block lands (backend, release_lock_on_cudamalloc, pinned_*) are accepted and listed in `ignored`.
std::string applyAllocConfStrict(AllocatorConfig& config, const std::string& conf, std::vector<std::string>* ignored = nullptr);
// The settings that differ from PyTorch's defaults, in PYTORCH_CUDA_ALLOC_CONF syntax
// ("expandable_segments:True,max_split_size_mb:512"); "PyTorch's defaults" when none do.
std::string describeAllocConf(const AllocatorConfig& config);

int64_t roundupPower2Divisions(const AllocatorConfig& config, int64_t size);
// round_size(): the block size a request of `size` bytes asks the pools for.
int64_t roundSize(const AllocatorConfig& config, int64_t size);
// get_allocation_size(): the segment cudaMalloc'd when no cached block fits a rounded request.
int64_t allocationSize(int64_t roundedSize);
inline bool isSmallRequest(int64_t roundedSize) { return roundedSize <= kSmallSize; }

} // namespace poolscope
