#include "app/args.h"
#include "app/commands.h"
#include "app/whatif_args.h"

#include "app/rules_config.h"

#include "core/allocator/allocator_config.h"
#include "core/engine/document.h"
#include "core/util/units.h"
#include "core/whatif/whatif.h"

#include <iostream>

namespace poolscope::app {
namespace {

Ratio ratioOption(Args& args, const char* name)
{
    const auto v = args.option(name);
    if (!v)
        return {};
    const auto r = parseRatio(*v);
    if (!r)
        throw UsageError(std::string(name) + " expects a positive factor such as 2 or 0.5, got '" + *v + "'");
    return *r;
}

} // namespace

// `--checkpoint` takes an optional mode: a bare flag means full checkpointing.
std::vector<std::string> normaliseWhatIfArgs(std::vector<std::string> argv)
{
    for (size_t i = 0; i < argv.size(); ++i) {
        if (argv[i] != "--checkpoint")
            continue;
        if (i + 1 < argv.size() && parseCheckpoint(argv[i + 1])) {
            argv[i] = "--checkpoint=" + argv[i + 1];
            argv.erase(argv.begin() + ptrdiff_t(i) + 1);
        } else {
            argv[i] = "--checkpoint=full";
        }
    }
    return argv;
}

Scenario whatIfScenario(Args& args)
{
    Scenario s;
    s.batchScale = ratioOption(args, "--batch-scale");
    s.activationScale = ratioOption(args, "--activation-scale");
    s.seqScale = ratioOption(args, "--seq-scale");
    if (auto c = args.option("--checkpoint")) {
        const auto k = parseCheckpoint(*c);
        if (!k)
            throw UsageError("--checkpoint expects full, selective or sqrt, got '" + *c + "'");
        s.checkpoint = *k;
    }
    if (auto o = args.option("--optimizer")) {
        const auto k = parseOptimizer(*o);
        if (!k)
            throw UsageError("--optimizer expects adamw, adam, sgd, sgd-momentum, lion, adafactor or adam8bit, got '" + *o + "'");
        s.optimizer = *k;
    }
    const auto zero = args.option("--zero");
    const auto fsdp = args.option("--fsdp");
    if (zero && fsdp)
        throw UsageError("--zero and --fsdp exclude each other");
    if (zero) {
        const auto k = parseZeroStage(*zero);
        if (!k)
            throw UsageError("--zero expects 1, 2 or 3, got '" + *zero + "'");
        s.sharding = *k;
    }
    if (fsdp) {
        const auto k = parseFsdp(*fsdp);
        if (!k)
            throw UsageError("--fsdp expects full, grad-op or hybrid, got '" + *fsdp + "'");
        s.sharding = *k;
    }
    s.ranks = args.intOption("--ranks", s.sharding == ShardingKind::None ? 1 : 8);
    s.offloadOptimizer = args.flag("--offload-optimizer");
    if (auto a = args.option("--autocast")) {
        const auto k = parseAutocast(*a);
        if (!k)
            throw UsageError("--autocast expects bf16, fp16 or off, got '" + *a + "'");
        s.autocast = *k;
    }
    if (auto t = args.option("--trainable")) {
        const auto r = parseRatio(*t);
        if (!r)
            throw UsageError("--trainable expects a fraction such as 0.1 or 1/8, got '" + *t + "'");
        s.trainable = *r;
    }
    if (auto f = args.option("--freeze"))
        s.freeze = *f;
    s.accumulate = args.intOption("--accumulate", 1);
    if (auto c = args.option("--capacity")) {
        const int64_t bytes = parseBytes(*c);
        if (bytes <= 0)
            throw UsageError("--capacity expects a size such as 80GiB, got '" + *c + "'");
        s.capacity = bytes;
    }
    if (auto conf = args.option("--alloc-conf")) {
        // PyTorch's own PYTORCH_CUDA_ALLOC_CONF syntax; what PyTorch would refuse is a usage error here.
        AllocatorConfig probe;
        if (const std::string problem = applyAllocConfStrict(probe, *conf); !problem.empty())
            throw UsageError("--alloc-conf: " + problem);
        s.allocConf = *conf;
    }
    if (const std::string problem = s.validate(); !problem.empty())
        throw UsageError(problem);
    return s;
}

namespace {

int runWhatIfCommand(const std::vector<std::string>& argv)
{
    return guarded("whatif", [&] {
        Args args(normaliseWhatIfArgs(argv));
        std::optional<int> device;
        if (auto d = args.option("--device"))
            device = Args({"--device", *d}).intOption("--device", 0);
        const bool asJson = args.flag("--json");
        const std::string rulesFile = args.option("--rules").value_or("");
        const Scenario scenario = whatIfScenario(args);
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("whatif expects one FILE");
        const auto doc = openDocument(files[0], rulesFile);
        const DeviceDocument& dev = doc->pickDevice(device);
        if (dev.device().eventCount() == 0)
            throw std::invalid_argument(files[0] + ": " + dev.label() + " has no trace events to replay (segments only)");
        const WhatIfResult r = runWhatIf(doc->trace(), dev.device(), *dev.traceModel(), scenario);
        std::cout << (asJson ? whatIfJsonText(r, doc->path()) : doc->path() + "\n" + renderWhatIfText(r));
        return 0;
    });
}

const CommandRegistrar kRegister(
    {"whatif",
     "whatif FILE [--device N] [--batch-scale X] [--activation-scale X] [--seq-scale X] [--checkpoint [full|selective|sqrt]] "
     "[--optimizer adamw|adam|sgd|sgd-momentum|lion|adafactor|adam8bit] [--zero 1|2|3 | --fsdp full|grad-op|hybrid] "
     "[--ranks N] [--offload-optimizer] [--autocast bf16|fp16|off] [--trainable 0.1 | --freeze PATTERN] [--accumulate K] "
     "[--capacity 80GiB] [--alloc-conf \"expandable_segments:True,max_split_size_mb:512,...\"] [--rules FILE] [--json]",
     "predict peak memory and OOM under another batch, sequence, checkpointing, optimizer, sharding, precision, "
     "trainable share, gradient accumulation or allocator setting (PYTORCH_CUDA_ALLOC_CONF, replayed)", runWhatIfCommand});

} // namespace
} // namespace poolscope::app
