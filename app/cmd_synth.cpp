#include "app/args.h"
#include "app/commands.h"

#include "core/formats/pickle_writer.h"
#include "core/formats/zstd_output.h"
#include "core/synth/synth.h"
#include "core/synth/synth_stacks.h"
#include "core/synth/synth_truth.h"
#include "core/util/atomic_file.h"
#include "core/util/units.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

// `poolscope synth`: a synthetic training trace (documented as such) for tests, benchmarks and the
// bundled example. The trace comes from running a model description through the allocator simulator.

namespace poolscope::app {
namespace {

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

CommandBody defineSynth(CLI::App& app)
{
    struct State {
        SynthModel m;
        std::string out, truthPath, lawsPath, attention, mlp, dtype, optimizer, capacity, maxSplit, scenario, leaks;
        int protocol = 4, scale = 1;
    };
    auto s = std::make_shared<State>();
    SynthModel& m = s->m;
    const auto nonNegative = CLI::NonNegativeNumber;
    app.add_option("-o,--output", s->out, "the file to write: .pickle, .json, optionally .zst-compressed")->required()->type_name("OUT");
    app.add_option("--layers", m.layers, "transformer layers")->capture_default_str()->check(nonNegative);
    app.add_option("--hidden", m.hidden, "hidden size")->capture_default_str()->check(nonNegative);
    app.add_option("--heads", m.heads, "attention heads")->capture_default_str()->check(nonNegative);
    app.add_option("--seq", m.seq, "sequence length")->capture_default_str()->check(nonNegative);
    app.add_option("--batch", m.microBatch, "micro-batch")->capture_default_str()->check(nonNegative);
    app.add_option("--vocab", m.vocab, "vocabulary")->capture_default_str()->check(nonNegative);
    app.add_option("--dtype", s->dtype, "weights and compute precision (default: mixed)")
        ->check(choiceCheck(parseSynthDtype, "fp32|bf16|mixed|autocast"));
    app.add_option("--optimizer", s->optimizer, "the optimizer (default: adamw)")
        ->check(choiceCheck(parseSynthOptimizer, "adamw|adam|sgd|sgd-momentum|lion|adafactor"));
    app.add_option("--steps", m.steps, "training steps")->capture_default_str()->check(nonNegative);
    app.add_option("--entries", m.targetEntries, "repeat steps until about N trace entries (0: --steps)")->check(nonNegative);
    app.add_flag("--checkpointing", m.checkpointing, "full activation checkpointing (one layer input kept per layer)");
    app.add_option("--trainable", m.trainable, "the share of layers that train; the lowest are frozen")
        ->capture_default_str()
        ->check(valueCheck(
            [](const std::string& v) {
                try {
                    size_t used = 0;
                    const double f = std::stod(v, &used);
                    return used == v.size() && f > 0 && f <= 1;
                } catch (const std::exception&) {
                    return false;
                }
            },
            "F", "a fraction in (0, 1]"))
        ->type_name("F");
    app.add_option("--ranks", m.dataParallel, "data-parallel ranks (the trace is rank 0's)")->capture_default_str()->check(nonNegative);
    app.add_option("--zero", m.zeroStage, "ZeRO stage")->capture_default_str()->check(CLI::Range(0, 3));
    app.add_option("--capacity", s->capacity, "device memory: the run stops at the first OOM")->check(sizeCheck("24GiB"))->type_name("SIZE");
    app.add_flag("--expandable-segments", m.allocator.expandableSegments, "the allocator's expandable segments");
    app.add_option("--max-split-size", s->maxSplit, "the allocator's max_split_size_mb, as a size")->check(sizeCheck("200MiB"))->type_name("SIZE");
    app.add_option("--protocol", s->protocol, "pickle protocol")->capture_default_str()->check(CLI::Range(2, 5));
    app.add_option("--truth", s->truthPath, "also write each allocation's true pool (JSON)")->type_name("POOLS.json");
    auto* laws = app.add_option("--truth-laws", s->lawsPath, "also write each allocation's size law (JSON)")->type_name("LAWS.json");
    app.add_option("--attention", s->attention, "attention implementation (default: softmax)")
        ->check(choiceCheck(parseSynthAttention, "softmax|inline|manual|recompute"));
    app.add_option("--mlp", s->mlp, "MLP kind (default: gelu)")->check(choiceCheck(parseSynthMlp, "gelu|swiglu"));
    app.add_option("--ffn", m.ffn, "the MLP's width (0: 4 x hidden)")->check(nonNegative);
    app.add_option("--positions", m.positions, "rows of the position embedding (0: --seq)")->check(nonNegative);
    app.add_option("--accumulate", m.accumulate, "gradient accumulation micro-steps")->capture_default_str()->check(nonNegative);
    app.add_flag("--norms-only", m.normsOnly, "only the norms' weights train");
    // Issue 24: planted leaks and look-alikes, to try `poolscope steps` on known truth.
    app.add_option("--leaks", s->leaks,
                   "plant leaks and look-alikes, a comma list of kept-graph, growing-cache, hook (leaks), warmup, bank=N (not leaks)")
        ->check(valueCheck([](const std::string& v) { return bool(parseSynthLeaks(v)); }, "LIST",
                           "a comma list of kept-graph, growing-cache, hook, warmup, bank=N"))
        ->type_name("LIST");
    app.add_option("--scenario", s->scenario, "instead of the training model: a short dump in the shape a real stack leaves")
        ->check(choiceCheck(parseStackScenario, "vllm|megatron|dp-oom|no-history|no-history-bare|kv-generate|grads-moved|workspace-python|jvp-forward|hand-optimizer|script-attention|deepspeed-zero2|fsdp|ddp-buckets|peft-lora|compiled|cudagraphs|pipeline-1f1b|dpo-reference|gan|bnb-adam8bit|bnb-paged-adam8bit|qlora|fsdp2|deepspeed-zero3|gptq-calibration|trainer-eval-accumulation|dit-ema|diffusers-ema|ema-deepcopy|torchtune-optimizer-in-backward|lightning-closure|grpo-rollout|diffusers-offload"))
        ->excludes(laws);
    app.add_option("--scale", s->scale, "the --scenario dump's size factor")->capture_default_str()->check(nonNegative);
    return [s] {
        SynthModel m = s->m;
        if (!s->attention.empty())
            m.attention = *parseSynthAttention(s->attention);
        if (!s->mlp.empty())
            m.mlp = *parseSynthMlp(s->mlp);
        if (!s->dtype.empty())
            m.dtype = *parseSynthDtype(s->dtype);
        if (!s->optimizer.empty())
            m.optimizer = *parseSynthOptimizer(s->optimizer);
        if (!s->capacity.empty()) {
            m.capacity = parseBytes(s->capacity);
            m.allocator.deviceTotalMemory = *m.capacity;
        }
        if (!s->maxSplit.empty())
            m.allocator.maxSplitSize = std::max(parseBytes(s->maxSplit), kLargeBuffer);
        if (!s->leaks.empty())
            m.leaks = *parseSynthLeaks(s->leaks);
        const int protocol = s->protocol;
        // --scenario: a short dump in the shape a real stack leaves (issue 15 fixtures), not the
        // training model above.
        std::optional<StackScenario> scenario;
        if (!s->scenario.empty())
            scenario = parseStackScenario(s->scenario);
        const int scale = s->scale;
        const std::optional<std::string> out = s->out;
        const auto truthPath = s->truthPath.empty() ? std::nullopt : std::optional(s->truthPath);
        const auto lawsPath = s->lawsPath.empty() ? std::nullopt : std::optional(s->lawsPath);

        const auto t0 = std::chrono::steady_clock::now();
        const SynthResult r = scenario ? synthesizeScenario(*scenario, scale) : synthesize(m);
        const auto t1 = std::chrono::steady_clock::now();

        // Written beside the target and renamed into place: an interrupted run leaves no half file.
        AtomicFile atomic(*out);
        std::ostream& file = atomic.stream();
        const bool zst = endsWith(*out, ".zst");
        const std::string base = zst ? out->substr(0, out->size() - 4) : *out;
        const bool json = endsWith(base, ".json");
        {
            std::unique_ptr<ZstdOutputBuffer> zbuf;
            std::unique_ptr<std::ostream> zstream;
            std::ostream* sink = &file;
            if (zst) {
                zbuf = std::make_unique<ZstdOutputBuffer>(file, *out);
                zstream = std::make_unique<std::ostream>(zbuf.get());
                sink = zstream.get();
            }
            if (json)
                writeSnapshotJson(r.trace, *sink);
            else
                writeSnapshot(r.trace, *sink, protocol);
            if (zbuf)
                zbuf->close();
        }
        atomic.commit();
        if (truthPath) {
            // Per allocation (in the order a loader pairs them), the pool the generator put it in.
            nlohmann::json tj = nlohmann::json::array();
            for (Pool p : r.truth)
                tj.push_back(std::string(poolName(p)));
            AtomicFile tf(*truthPath);
            tf.stream() << tj.dump() << "\n";
            tf.commit();
        }
        if (lawsPath) {
            // Per allocation, the generator's own size law (b and s exponents, -1 unknown).
            nlohmann::json lj = nlohmann::json::array();
            for (const SynthLaw& l : synthTruthLaws(m))
                lj.push_back({{"law", l.text()}, {"b", int(l.batch)}, {"s", int(l.seq)}});
            AtomicFile lf(*lawsPath);
            lf.stream() << lj.dump() << "\n";
            lf.commit();
        }
        const auto t2 = std::chrono::steady_clock::now();
        const auto& dev = r.trace.devices.at(0);
        const double genS = std::chrono::duration<double>(t1 - t0).count();
        const double writeS = std::chrono::duration<double>(t2 - t1).count();
        std::cout << "synthetic trace: " << dev.eventCount() << " entries, " << r.stepsRun << " steps, "
                  << dev.allocations.size() << " allocations; peak allocated " << formatBytes(dev.peakAllocated)
                  << ", peak reserved " << formatBytes(r.peakReserved);
        if (r.oom)
            std::cout << "; out of memory at entry " << r.oomIndex;
        std::cout << "\n  parameters " << formatBytes(r.sizes.parameterBytes) << " (" << r.sizes.parameterElements
                  << " elements), optimizer state " << formatBytes(r.sizes.optimizerStateBytes) << ", activations per layer "
                  << formatBytes(r.sizes.activationBytesPerLayer) << "\n  generated in " << genS << " s, wrote " << *out
                  << " in " << writeS << " s\n";
        return 0;
    };
}

const CommandRegistrar kRegister({"synth", "write a synthetic training trace (simulated allocator, realistic frames), optionally ending in an OOM",
                                  defineSynth});

} // namespace
} // namespace poolscope::app
