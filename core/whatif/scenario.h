#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace poolscope {

// An exact scale factor such as 2, 1.5 or 0.25, kept as a fraction so that byte sizes scale with
// integer arithmetic (no doubles until presentation).
struct Ratio {
    int64_t num = 1;
    int64_t den = 1;

    bool isOne() const { return num == den; }
    bool operator==(const Ratio& o) const { return num * o.den == o.num * den; }
    Ratio squared() const { return {num * num, den * den}; }
    Ratio operator*(const Ratio& o) const;
    // bytes * num / den, rounded to nearest, saturating at INT64_MAX.
    int64_t apply(int64_t bytes) const;
    double value() const { return double(num) / double(den); }
    std::string text() const; // "2", "1.5", "0.25"
};

// "2", "1.5", "0.125", "3/4"; nullopt when not a positive number with at most 6 decimals (or a
// fraction) between 1/4096 and 4096.
std::optional<Ratio> parseRatio(std::string_view text);

enum class OptimizerKind : uint8_t { Keep, AdamW, Adam, Sgd, SgdMomentum, Lion, Adafactor, Adam8bit };
enum class ShardingKind : uint8_t { None, Zero1, Zero2, Zero3, FsdpFull, FsdpGradOp, FsdpHybrid };
enum class CheckpointKind : uint8_t { None, Full, Selective, Sqrt };
// Autocast's compute type: Keep (as recorded), Bf16 / Fp16 (autocast on: matmuls in 16 bits, the
// weight-cast cache, fp32 master weights), Off (autocast off: everything in the weights' fp32).
enum class AutocastKind : uint8_t { Keep, Bf16, Fp16, Off };

std::string_view optimizerName(OptimizerKind k); // "adamw", "sgd-momentum", ... ("keep" for Keep)
std::optional<OptimizerKind> parseOptimizer(std::string_view name);
std::string_view shardingName(ShardingKind k); // "zero-2", "fsdp-full", ...
std::string_view checkpointName(CheckpointKind k);
std::optional<CheckpointKind> parseCheckpoint(std::string_view name); // full|selective|sqrt
std::optional<ShardingKind> parseZeroStage(std::string_view stage);   // 1|2|3
std::optional<ShardingKind> parseFsdp(std::string_view mode);         // full|grad-op|hybrid
std::string_view autocastName(AutocastKind k);                         // "bf16", "fp16", "off" ("keep")
std::optional<AutocastKind> parseAutocast(std::string_view name);     // bf16|fp16|off (also fp32, none)

// "What if I ..." as knobs. The default value of every knob means "as recorded", so a
// default-constructed Scenario is the identity: its replay must reproduce the trace.
struct Scenario {
    Ratio batchScale;      // micro-batch b: every allocation whose size follows the tokens
    Ratio seqScale;        // sequence s: linear terms x s, the attention-score term x s^2
    Ratio activationScale; // a plain factor on the activation pool
    CheckpointKind checkpoint = CheckpointKind::None;
    OptimizerKind optimizer = OptimizerKind::Keep;
    ShardingKind sharding = ShardingKind::None;
    int ranks = 1; // data-parallel ranks Nd (hybrid: ranks of one shard group)
    bool offloadOptimizer = false;
    AutocastKind autocast = AutocastKind::Keep;
    // Where the autocast region of --autocast bf16|fp16 is: around each forward (false: the weight-cast
    // cache is made per forward and goes once its backward is done) or one region around every
    // recorded step (true: each weight is cast once, in the first forward, and its cast lives until
    // the region exits, past the end of the trace).
    bool autocastWholeRun = false;
    Ratio trainable;         // fraction of each weight's gradient and optimizer state kept (LoRA-like adapters)
    std::string freeze;      // a regular expression over the stacks that made the gradients: those are frozen
                             // (a leading '!' freezes the ones it does not match)
    int accumulate = 1;      // gradient accumulation: micro-batch / K, K forward/backward passes per step
    std::optional<int64_t> capacity; // device bytes; nullopt: the recorded OOM's, if any

    bool isIdentity() const;
    // Empty when consistent; otherwise one line saying what is wrong (e.g. sharding with 1 rank).
    std::string validate() const;
    // "seq x2, checkpoint full, zero-2 on 8 ranks"; "as recorded" for the identity.
    std::string describe() const;
};

} // namespace poolscope
