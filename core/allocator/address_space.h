#pragma once
#include <cstdint>
#include <map>

namespace poolscope {

// Where the simulated cudaMalloc places a new segment. Addresses matter to the allocator: best fit
// breaks ties by lowest address, so a replay can supply the device's recorded addresses.
class SegmentAddressSource {
public:
    virtual ~SegmentAddressSource() = default;
    // A free range of `bytes`; expandable segments ask for their whole virtual range.
    virtual uint64_t acquire(int64_t bytes, bool expandable) = 0;
    virtual void release(uint64_t addr, int64_t bytes) = 0;
    // Marks a range as taken (segments that existed before simulation began); false if it overlaps.
    virtual bool claim(uint64_t addr, int64_t bytes) = 0;
};

// First fit over a device-sized virtual range with 2 MiB alignment, reusing freed ranges the way
// cudaMalloc tends to, so synthetic traces show realistic, recurring addresses.
class VirtualAddressSpace final : public SegmentAddressSource {
public:
    static constexpr uint64_t kDefaultBase = 0x7f0000000000ull; // where CUDA maps device memory on Linux
    static constexpr uint64_t kDefaultSpan = uint64_t(1) << 44;  // 16 TiB
    static constexpr uint64_t kAlignment = uint64_t(2) << 20;

    explicit VirtualAddressSpace(uint64_t base = kDefaultBase, uint64_t span = kDefaultSpan);
    uint64_t acquire(int64_t bytes, bool expandable) override;
    void release(uint64_t addr, int64_t bytes) override;
    bool claim(uint64_t addr, int64_t bytes) override;
    bool isFree(uint64_t addr, int64_t bytes) const;

private:
    std::map<uint64_t, uint64_t> m_taken; // start -> length, disjoint
    uint64_t m_base;
    uint64_t m_end;
};

} // namespace poolscope
