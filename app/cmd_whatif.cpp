#include "app/args.h"
#include "app/commands.h"
#include "app/whatif_args.h"

#include "app/rules_config.h"

#include "core/engine/document.h"
#include "core/util/units.h"
#include "core/whatif/whatif.h"

#include <iostream>

namespace poolscope::app {
namespace {

CLI::Validator ratioCheck(const std::string& what)
{
    return valueCheck([](const std::string& v) { return bool(parseRatio(v)); }, "X", what);
}

Ratio ratioOr(const std::string& text, Ratio fallback = {}) { return text.empty() ? fallback : *parseRatio(text); }

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

void addWhatIfKnobs(CLI::App& app, WhatIfKnobs& k)
{
    const std::string factor = "a positive factor such as 2 or 0.5";
    auto add = [&](CLI::Option* o) {
        k.options.push_back(o);
        return o;
    };
    add(app.add_option("--batch-scale", k.batchScale, "micro-batch times X: every allocation that follows the tokens")->check(ratioCheck(factor))->type_name("X"));
    add(app.add_option("--activation-scale", k.activationScale, "the activation pool times X")->check(ratioCheck(factor))->type_name("X"));
    add(app.add_option("--seq-scale", k.seqScale, "sequence length times X: linear terms x X, attention scores x X^2")->check(ratioCheck(factor))->type_name("X"));
    add(app.add_option("--checkpoint", k.checkpoint, "activation checkpointing; alone: full")->check(choiceCheck(parseCheckpoint, "full|selective|sqrt")));
    add(app.add_option("--optimizer", k.optimizer, "another optimizer's state")
            ->check(choiceCheck(parseOptimizer, "adamw|adam|sgd|sgd-momentum|lion|adafactor|adam8bit")));
    auto* zero = add(app.add_option("--zero", k.zero, "DeepSpeed ZeRO stage, sharded over --ranks")->check(choiceCheck(parseZeroStage, "1|2|3")));
    auto* fsdp = add(app.add_option("--fsdp", k.fsdp, "FSDP sharding strategy, over --ranks")->check(choiceCheck(parseFsdp, "full|grad-op|hybrid")));
    zero->excludes(fsdp);
    add(addOptionalInt(app, "--ranks", k.ranks, "data-parallel ranks (default: 8 with --zero/--fsdp, else 1)"));
    add(app.add_flag("--offload-optimizer", k.offloadOptimizer, "optimizer state moved to the CPU"));
    add(app.add_option("--autocast", k.autocast, "autocast's compute type (off: everything in fp32)")->check(choiceCheck(parseAutocast, "bf16|fp16|off")));
    add(app.add_option("--autocast-region", k.autocastRegion,
                       "where the autocast region of --autocast bf16|fp16 is: around each forward (weights cast per forward) or one "
                       "region around every step (run: each weight cast once, kept to the region's end)")
            ->check(CLI::IsMember({"forward", "run"})));
    auto* trainable = add(app.add_option("--trainable", k.trainable, "the trainable share of the weights' gradients and optimizer state (LoRA-like)")
                              ->check(valueCheck([](const std::string& v) { return bool(parseRatio(v)); }, "F", "a fraction such as 0.1 or 1/8"))->type_name("F"));
    auto* freeze = add(app.add_option("--freeze", k.freeze, "freeze the weights whose gradients' stacks match this regular expression ('!' inverts)")
                           ->type_name("PATTERN"));
    trainable->excludes(freeze);
    add(app.add_option("--accumulate", k.accumulate, "gradient accumulation: micro-batch / K, K passes per step")->capture_default_str());
    k.capacityOption = add(app.add_option("--capacity", k.capacity, "the device's memory: an OOM above it, the capacity line (default: reserved + free at the recorded OOM)")
                               ->check(sizeCheck())
                               ->type_name("SIZE"));
}

Scenario whatIfScenario(const WhatIfKnobs& k)
{
    Scenario s;
    s.batchScale = ratioOr(k.batchScale);
    s.activationScale = ratioOr(k.activationScale);
    s.seqScale = ratioOr(k.seqScale);
    if (!k.checkpoint.empty())
        s.checkpoint = *parseCheckpoint(k.checkpoint);
    if (!k.optimizer.empty())
        s.optimizer = *parseOptimizer(k.optimizer);
    if (!k.zero.empty())
        s.sharding = *parseZeroStage(k.zero);
    if (!k.fsdp.empty())
        s.sharding = *parseFsdp(k.fsdp);
    s.ranks = k.ranks.value_or(s.sharding == ShardingKind::None ? 1 : 8);
    s.offloadOptimizer = k.offloadOptimizer;
    if (!k.autocast.empty())
        s.autocast = *parseAutocast(k.autocast);
    s.autocastWholeRun = k.autocastRegion == "run";
    if (!k.trainable.empty())
        s.trainable = *parseRatio(k.trainable);
    s.freeze = k.freeze;
    s.accumulate = k.accumulate;
    if (!k.capacity.empty())
        s.capacity = parseBytes(k.capacity);
    if (const std::string problem = s.validate(); !problem.empty())
        throw UsageError(problem);
    return s;
}

namespace {

CommandBody defineWhatIf(CLI::App& app)
{
    struct State {
        std::string file, rulesFile;
        std::optional<int> device;
        bool json = false;
        WhatIfKnobs knobs;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the dump (with its trace: the run is replayed)")->required();
    addDeviceOption(app, s->device);
    addWhatIfKnobs(app, s->knobs);
    addRulesOption(app, s->rulesFile);
    app.add_flag("--json", s->json, "one JSON object instead of text");
    return [s] {
        const Scenario scenario = whatIfScenario(s->knobs);
        const auto doc = openDocument(s->file, s->rulesFile);
        const DeviceDocument& dev = doc->pickDevice(s->device);
        if (dev.device().eventCount() == 0)
            throw std::invalid_argument(s->file + ": " + dev.label() + " has no trace events to replay (segments only)");
        const WhatIfResult r = runWhatIf(doc->trace(), dev.device(), *dev.traceModel(), scenario);
        std::cout << (s->json ? whatIfJsonText(r, doc->path()) : doc->path() + "\n" + renderWhatIfText(r));
        return 0;
    };
}

const CommandRegistrar kRegister({"whatif",
                                  "predict peak memory and OOM under another batch, sequence, checkpointing, optimizer, sharding, precision, "
                                  "trainable share or gradient accumulation",
                                  defineWhatIf});

} // namespace
} // namespace poolscope::app
