#include "core/whatif/scenario.h"

#include "core/util/units.h"

#include <array>
#include <charconv>
#include <limits>
#include <numeric>
#include <regex>

namespace poolscope {
namespace {

__extension__ using Wide = __int128; // bytes x num fits where int64 would overflow

constexpr int64_t kMaxScaleDen = 1'000'000;
constexpr int64_t kMaxScale = 4096;

Ratio reduced(int64_t num, int64_t den)
{
    const int64_t g = std::gcd(num, den);
    return g > 1 ? Ratio{num / g, den / g} : Ratio{num, den};
}

bool inRange(const Ratio& r)
{
    return r.num > 0 && r.den > 0 && r.num <= kMaxScale * r.den && r.den <= kMaxScale * r.num;
}

std::optional<int64_t> parseInt(std::string_view s)
{
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty())
        return std::nullopt;
    return v;
}

constexpr std::array<std::string_view, 8> kOptimizerNames = {"keep", "adamw", "adam", "sgd",
                                                             "sgd-momentum", "lion", "adafactor", "adam8bit"};
constexpr std::array<std::string_view, 7> kShardingNames = {"none", "zero-1", "zero-2", "zero-3",
                                                            "fsdp-full", "fsdp-grad-op", "fsdp-hybrid"};
constexpr std::array<std::string_view, 4> kCheckpointNames = {"none", "full", "selective", "sqrt"};
constexpr std::array<std::string_view, 4> kAutocastNames = {"keep", "bf16", "fp16", "off"};

} // namespace

Ratio Ratio::operator*(const Ratio& o) const
{
    const int64_t g1 = std::gcd(num, o.den), g2 = std::gcd(o.num, den);
    return reduced((num / g1) * (o.num / g2), (den / g2) * (o.den / g1));
}

int64_t Ratio::apply(int64_t bytes) const
{
    if (num == den)
        return bytes;
    const Wide scaled = (Wide(bytes) * num * 2 + den) / (Wide(den) * 2);
    return scaled > Wide(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max() : int64_t(scaled);
}

std::string Ratio::text() const
{
    if (den == 1)
        return std::to_string(num);
    // Decimal when the denominator divides a power of ten (every parsed decimal does).
    int64_t scale = 1;
    int digits = 0;
    while (scale % den != 0 && digits < 6) {
        scale *= 10;
        ++digits;
    }
    if (scale % den != 0)
        return std::to_string(num) + "/" + std::to_string(den);
    const int64_t fixed = num * (scale / den);
    std::string frac = std::to_string(fixed % scale);
    frac.insert(0, size_t(digits) - frac.size(), '0');
    while (!frac.empty() && frac.back() == '0')
        frac.pop_back();
    return std::to_string(fixed / scale) + (frac.empty() ? "" : "." + frac);
}

std::optional<Ratio> parseRatio(std::string_view text)
{
    if (auto slash = text.find('/'); slash != std::string_view::npos) {
        auto n = parseInt(text.substr(0, slash)), d = parseInt(text.substr(slash + 1));
        if (!n || !d || *n <= 0 || *d <= 0 || *d > kMaxScaleDen)
            return std::nullopt;
        Ratio r = reduced(*n, *d);
        return inRange(r) ? std::optional(r) : std::nullopt;
    }
    const size_t dot = text.find('.');
    const std::string_view whole = text.substr(0, dot);
    const std::string_view frac = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
    if ((whole.empty() && frac.empty()) || frac.size() > 6 || whole.size() > 6)
        return std::nullopt;
    for (char c : whole)
        if (c < '0' || c > '9')
            return std::nullopt;
    for (char c : frac)
        if (c < '0' || c > '9')
            return std::nullopt;
    if (dot != std::string_view::npos && frac.empty())
        return std::nullopt;
    int64_t den = 1;
    for (size_t i = 0; i < frac.size(); ++i)
        den *= 10;
    const int64_t num = (whole.empty() ? 0 : *parseInt(whole)) * den + (frac.empty() ? 0 : *parseInt(frac));
    if (num <= 0)
        return std::nullopt;
    Ratio r = reduced(num, den);
    return inRange(r) ? std::optional(r) : std::nullopt;
}

std::string_view optimizerName(OptimizerKind k) { return kOptimizerNames[size_t(k)]; }
std::string_view shardingName(ShardingKind k) { return kShardingNames[size_t(k)]; }
std::string_view checkpointName(CheckpointKind k) { return kCheckpointNames[size_t(k)]; }
std::string_view autocastName(AutocastKind k) { return kAutocastNames[size_t(k)]; }

std::optional<AutocastKind> parseAutocast(std::string_view name)
{
    if (name == "bf16" || name == "bfloat16")
        return AutocastKind::Bf16;
    if (name == "fp16" || name == "float16" || name == "half")
        return AutocastKind::Fp16;
    if (name == "off" || name == "fp32" || name == "none" || name == "float32")
        return AutocastKind::Off;
    return std::nullopt;
}

std::optional<OptimizerKind> parseOptimizer(std::string_view name)
{
    for (size_t i = 1; i < kOptimizerNames.size(); ++i)
        if (kOptimizerNames[i] == name)
            return OptimizerKind(i);
    if (name == "adam-8bit" || name == "adamw8bit" || name == "adamw-8bit")
        return OptimizerKind::Adam8bit;
    if (name == "momentum")
        return OptimizerKind::SgdMomentum;
    return std::nullopt;
}

std::optional<CheckpointKind> parseCheckpoint(std::string_view name)
{
    for (size_t i = 1; i < kCheckpointNames.size(); ++i)
        if (kCheckpointNames[i] == name)
            return CheckpointKind(i);
    return std::nullopt;
}

std::optional<ShardingKind> parseZeroStage(std::string_view stage)
{
    if (stage == "1")
        return ShardingKind::Zero1;
    if (stage == "2")
        return ShardingKind::Zero2;
    if (stage == "3")
        return ShardingKind::Zero3;
    return std::nullopt;
}

std::optional<ShardingKind> parseFsdp(std::string_view mode)
{
    if (mode == "full" || mode == "full-shard" || mode == "FULL_SHARD")
        return ShardingKind::FsdpFull;
    if (mode == "grad-op" || mode == "shard-grad-op" || mode == "SHARD_GRAD_OP")
        return ShardingKind::FsdpGradOp;
    if (mode == "hybrid" || mode == "hybrid-shard" || mode == "HYBRID_SHARD")
        return ShardingKind::FsdpHybrid;
    return std::nullopt;
}

bool Scenario::isIdentity() const
{
    return batchScale.isOne() && seqScale.isOne() && activationScale.isOne() && checkpoint == CheckpointKind::None &&
           optimizer == OptimizerKind::Keep && sharding == ShardingKind::None && !offloadOptimizer &&
           autocast == AutocastKind::Keep && trainable.isOne() && freeze.empty() && accumulate == 1;
}

std::string Scenario::validate() const
{
    for (const Ratio* r : {&batchScale, &seqScale, &activationScale})
        if (!inRange(*r))
            return "scale factors must lie between 1/4096 and 4096";
    if (!inRange(trainable) || trainable.num > trainable.den)
        return "--trainable must be a fraction of the parameters between 1/4096 and 1";
    if (!trainable.isOne() && !freeze.empty())
        return "--trainable and --freeze exclude each other";
    if (accumulate < 1 || accumulate > 4096)
        return "--accumulate must be between 1 and 4096 micro-steps";
    if (!freeze.empty()) {
        try {
            std::regex re(freeze.front() == '!' ? freeze.substr(1) : freeze);
        } catch (const std::regex_error&) {
            return "--freeze expects a regular expression over the gradients' frames, got '" + freeze + "'";
        }
    }
    if (ranks < 1 || ranks > 65536)
        return "--ranks must be between 1 and 65536";
    if (ranks > 1 && sharding == ShardingKind::None)
        return "--ranks only matters with --zero or --fsdp";
    if (autocastWholeRun && (autocast == AutocastKind::Keep || autocast == AutocastKind::Off))
        return "--autocast-region only matters with --autocast bf16 or fp16";
    if (capacity && *capacity <= 0)
        return "--capacity must be a positive size";
    return {};
}

std::string Scenario::describe() const
{
    std::string out;
    auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
    if (!batchScale.isOne())
        add("micro-batch x" + batchScale.text());
    if (!seqScale.isOne())
        add("sequence x" + seqScale.text());
    if (!activationScale.isOne())
        add("activations x" + activationScale.text());
    if (checkpoint != CheckpointKind::None)
        add("checkpointing " + std::string(checkpointName(checkpoint)));
    if (optimizer != OptimizerKind::Keep)
        add("optimizer " + std::string(optimizerName(optimizer)));
    if (sharding != ShardingKind::None)
        add(std::string(shardingName(sharding)) + " on " + std::to_string(ranks) + " ranks");
    if (offloadOptimizer)
        add("optimizer offloaded to CPU");
    if (autocast != AutocastKind::Keep)
        add(autocast == AutocastKind::Off ? std::string("autocast off (fp32)")
                                          : "autocast " + std::string(autocastName(autocast)) + (autocastWholeRun ? " (one region over every step)" : ""));
    if (!trainable.isOne())
        add("trainable x" + trainable.text());
    if (!freeze.empty())
        add("frozen '" + freeze + "'");
    if (accumulate > 1)
        add("gradient accumulation over " + std::to_string(accumulate) + " micro-steps");
    if (out.empty())
        out = "as recorded";
    if (capacity)
        out += " (capacity " + formatBytes(*capacity) + ")";
    return out;
}

} // namespace poolscope
