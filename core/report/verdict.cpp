#include "core/report/verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace poolscope {
namespace {

// Verdicts are read side by side across devices and runs: always GiB, two decimals.
std::string gib(int64_t bytes)
{
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(int64_t(1) << 30));
    return buf;
}

constexpr int64_t kListedMinimum = (int64_t(1) << 30) / 200; // ~0.005 GiB: shows as at least 0.01

} // namespace

std::string_view poolPhrase(Pool pool)
{
    switch (pool) {
    case Pool::Parameter:
        return "parameters";
    case Pool::CastCache:
        return "autocast's weight casts";
    case Pool::KvCache:
        return "the KV cache";
    case Pool::Workspace:
        return "library workspaces";
    case Pool::Gradient:
        return "gradients";
    case Pool::OptimizerState:
        return "optimizer state";
    case Pool::Activation:
        return "activations";
    case Pool::Temporary:
        return "temporary buffers";
    case Pool::Input:
        return "input batches";
    case Pool::Other:
        return "other memory";
    case Pool::Unknown:
        return "unclassified memory";
    case Pool::CachedFree:
        return "cached but free memory (fragmentation)";
    }
    return "memory";
}

std::string_view poolAdvice(Pool pool)
{
    switch (pool) {
    case Pool::Parameter:
        return "shard them (ZeRO-3/FSDP), offload them, or hold them in lower precision (bf16, 8-bit, 4-bit)";
    case Pool::CastCache:
        return "autocast keeps a low-precision copy of every weight the forward used until autocast exits; hold the weights "
               "in bf16 themselves (fp32 master copies in the optimizer), or pass cache_enabled=False to torch.autocast; the "
               "micro-batch does not change it";
    case Pool::KvCache:
        return "lower the engine's cache budget (vLLM gpu_memory_utilization, max_model_len or max_num_seqs; SGLang "
               "mem_fraction_static; Hugging Face generate: fewer new tokens or a quantized or offloaded cache); sharding the "
               "weights does not shrink it";
    case Pool::Workspace:
        return "the libraries size these themselves (cuBLAS: CUBLAS_WORKSPACE_CONFIG, cuDNN: torch.backends.cudnn.benchmark, "
               "NCCL: NCCL_BUFFSIZE); they are rarely the wall, so look at the next largest pool";
    case Pool::Gradient:
        return "shard them (ZeRO-2/FSDP) or keep them in lower precision; gradient accumulation does not shrink them";
    case Pool::OptimizerState:
        return "shard it (ZeRO/FSDP), offload it, or pick a lower-state optimizer";
    case Pool::Activation:
        return "checkpoint them (torch.utils.checkpoint), cut the micro-batch or the sequence length, or use FlashAttention";
    case Pool::Temporary:
        return "find the largest short-lived buffers at this moment (poolscope explain) and chunk the operation that makes them";
    case Pool::Input:
        return "cut the batch, or keep it on the host until it is needed";
    case Pool::Other:
    case Pool::Unknown:
        return "run poolscope explain on its largest allocations, or add a rule that names them";
    case Pool::CachedFree:
        return "the allocator holds memory it cannot reuse; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb)";
    }
    return "";
}

PoolConfidence aliveConfidence(const Classification& c, const std::vector<Allocation>& allocations, std::span<const AllocId> alive)
{
    std::array<double, kPoolCount> weighted{}, bytes{};
    for (AllocId id : alive) {
        if (!id.valid() || id.value >= c.size() || id.value >= allocations.size())
            continue;
        const size_t p = size_t(c.pool[id.value]);
        const double b = double(std::max<int64_t>(allocations[id.value].size, 0));
        weighted[p] += b * c.confidence[id.value];
        bytes[p] += b;
    }
    PoolConfidence out;
    out.fill(-1);
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (bytes[p] > 0)
            out[p] = int(std::lround(weighted[p] / bytes[p]));
    return out;
}

Verdict makeVerdict(std::string_view moment, const PoolBytes& pools, const PoolConfidence* confidence)
{
    Verdict v;
    const int64_t allocated = allocatedBytes(pools);
    const int64_t cached = pools[size_t(Pool::CachedFree)];
    std::vector<Pool> order;
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (pools[p] > 0)
            order.push_back(Pool(p));
    std::stable_sort(order.begin(), order.end(), [&](Pool a, Pool b) { return pools[size_t(a)] > pools[size_t(b)]; });

    v.breakdown = std::string(moment) + ":";
    if (order.empty() && cached <= 0) {
        v.breakdown += " nothing is allocated.";
        v.sentence = v.breakdown;
        return v;
    }
    v.dominant = order.empty() ? Pool::CachedFree : order.front();
    if (cached > 0 && (order.empty() || cached > pools[size_t(order.front())]))
        v.dominant = Pool::CachedFree;

    bool first = true;
    for (Pool p : order) {
        const int64_t b = pools[size_t(p)];
        if (!first && b < kListedMinimum)
            continue;
        v.breakdown += std::string(first ? " " : ", ") + std::string(poolName(p)) + " " + gib(b);
        if (first && allocated > 0)
            v.breakdown += " (" + std::to_string(int(std::lround(100.0 * double(b) / double(allocated)))) + "%)";
        first = false;
    }
    if (cached > 0 && (v.dominant == Pool::CachedFree || cached * 10 >= allocated))
        v.breakdown += std::string(first ? " " : "; ") + "cached_free " + gib(cached) + " reserved but not allocated";
    v.breakdown += ".";

    if (confidence && v.dominant != Pool::CachedFree)
        v.confidence = (*confidence)[size_t(v.dominant)];
    if (v.confidence >= 0 && v.confidence < kSureConfidence)
        v.advice = "The wall is probably " + std::string(poolPhrase(v.dominant)) + " (classified with " + std::to_string(v.confidence) +
                   "% confidence; poolscope explain shows the evidence): " + std::string(poolAdvice(v.dominant));
    else
        v.advice = "The wall is " + std::string(poolPhrase(v.dominant)) + ": " + std::string(poolAdvice(v.dominant));
    // What a smaller micro-batch could give back at most: the memory that scales with it.
    const int64_t perBatch = pools[size_t(Pool::Activation)] + pools[size_t(Pool::Input)];
    if (v.dominant != Pool::Activation && v.dominant != Pool::Input)
        v.advice += perBatch > 0 ? "; cutting the micro-batch frees at most " + (perBatch < kListedMinimum ? std::string("0.01 GiB") : gib(perBatch))
                                 : std::string("; cutting the micro-batch frees nothing here (no activations or inputs are alive)");
    v.advice += ".";
    v.sentence = v.breakdown + " " + v.advice;
    return v;
}

} // namespace poolscope
