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
#include <sstream>
#include <nlohmann/json.hpp>

// `poolscope synth`: a synthetic training trace (documented as such) for tests, benchmarks and the
// bundled example. The trace comes from running a model description through the allocator simulator.

namespace poolscope::app {
namespace {

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t positive(Args& args, const std::string& name, int64_t fallback)
{
    const auto v = args.option(name);
    if (!v)
        return fallback;
    size_t used = 0;
    int64_t n = 0;
    try {
        n = std::stoll(*v, &used);
    } catch (...) {
        used = 0;
    }
    if (used != v->size() || n < 0)
        throw UsageError(name + " expects a non-negative integer, got '" + *v + "'");
    return n;
}

int64_t bytesOption(Args& args, const std::string& name)
{
    const auto v = args.option(name);
    if (!v)
        return -1;
    const int64_t bytes = parseBytes(*v);
    if (bytes <= 0)
        throw UsageError(name + " expects a size such as 24GiB, got '" + *v + "'");
    return bytes;
}

int runSynth(const std::vector<std::string>& argv)
{
    return guarded("synth", [&] {
        Args args(argv);
        SynthModel m;
        m.layers = int(positive(args, "--layers", m.layers));
        m.hidden = positive(args, "--hidden", m.hidden);
        m.heads = positive(args, "--heads", m.heads);
        m.seq = positive(args, "--seq", m.seq);
        m.microBatch = positive(args, "--batch", m.microBatch);
        m.vocab = positive(args, "--vocab", m.vocab);
        m.steps = int(positive(args, "--steps", m.steps));
        m.dataParallel = int(positive(args, "--ranks", m.dataParallel));
        m.zeroStage = int(positive(args, "--zero", m.zeroStage));
        m.targetEntries = positive(args, "--entries", 0);
        m.checkpointing = args.flag("--checkpointing");
        m.positions = positive(args, "--positions", 0);
        m.ffn = positive(args, "--ffn", 0);
        m.accumulate = int(positive(args, "--accumulate", 1));
        m.normsOnly = args.flag("--norms-only");
        if (auto a = args.option("--attention")) {
            auto k = parseSynthAttention(*a);
            if (!k)
                throw UsageError("--attention expects softmax, inline, manual or recompute");
            m.attention = *k;
        }
        if (auto l = args.option("--mlp")) {
            auto k = parseSynthMlp(*l);
            if (!k)
                throw UsageError("--mlp expects gelu or swiglu");
            m.mlp = *k;
        }
        if (auto t = args.option("--trainable")) {
            try {
                size_t used = 0;
                m.trainable = std::stod(*t, &used);
                if (used != t->size())
                    throw std::invalid_argument("");
            } catch (const std::exception&) {
                throw UsageError("--trainable expects a fraction in (0, 1], got '" + *t + "'");
            }
            if (!(m.trainable > 0 && m.trainable <= 1))
                throw UsageError("--trainable expects a fraction in (0, 1], got '" + *t + "'");
        }
        if (auto d = args.option("--dtype")) {
            auto dt = parseSynthDtype(*d);
            if (!dt)
                throw UsageError("--dtype expects fp32, bf16, mixed or autocast");
            m.dtype = *dt;
        }
        if (auto o = args.option("--optimizer")) {
            auto opt = parseSynthOptimizer(*o);
            if (!opt)
                throw UsageError("--optimizer expects adamw, adam, sgd, sgd-momentum, lion or adafactor");
            m.optimizer = *opt;
        }
        if (const int64_t cap = bytesOption(args, "--capacity"); cap > 0) {
            m.capacity = cap;
            m.allocator.deviceTotalMemory = cap;
        }
        if (const int64_t split = bytesOption(args, "--max-split-size"); split > 0)
            m.allocator.maxSplitSize = std::max(split, kLargeBuffer);
        m.allocator.expandableSegments = args.flag("--expandable-segments");
        // Issue 24: planted leaks and look-alikes, for trying `poolscope steps` on known truth.
        if (const auto leaks = args.option("--leaks")) {
            std::string item;
            for (std::stringstream ss(*leaks); std::getline(ss, item, ',');) {
                if (item == "kept-graph")
                    m.leaks.keptGraph = true;
                else if (item == "growing-cache")
                    m.leaks.growingCache = true;
                else if (item == "hook")
                    m.leaks.capturingHook = true;
                else if (item == "warmup")
                    m.leaks.warmup = true;
                else if (item.rfind("bank=", 0) == 0)
                    m.leaks.bankSize = std::max(1, std::atoi(item.c_str() + 5));
                else
                    throw UsageError("--leaks expects a comma list of kept-graph, growing-cache, hook, warmup, bank=N; got '" + item + "'");
            }
        }
        const int protocol = int(positive(args, "--protocol", 4));
        if (protocol < 2 || protocol > 5)
            throw UsageError("--protocol expects 2, 3, 4 or 5");
        // --scenario: a short dump in the shape a real stack leaves (issue 15 fixtures), not the
        // training model above.
        std::optional<StackScenario> scenario;
        if (const auto name = args.option("--scenario")) {
            scenario = parseStackScenario(*name);
            if (!scenario)
                throw UsageError("--scenario expects vllm, megatron, dp-oom, no-history or no-history-bare");
        }
        const int scale = int(positive(args, "--scale", 1));
        const auto out = args.option("-o");
        const auto truthPath = args.option("--truth");
        const auto lawsPath = args.option("--truth-laws");
        if (!args.positionals().empty())
            throw UsageError("synth takes options only");
        if (scenario && lawsPath)
            throw UsageError("--truth-laws describes the training model, not a --scenario dump");
        if (!out)
            throw UsageError("synth needs -o OUT.pickle|OUT.json|OUT.pickle.zst");

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
                zbuf = std::make_unique<ZstdOutputBuffer>(file);
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
    });
}

const CommandRegistrar kRegister(
    {"synth",
     "synth -o OUT.pickle|OUT.json|OUT.pickle.zst [--layers N] [--hidden H] [--heads A] [--seq S] [--batch B] [--vocab V] "
     "[--dtype fp32|bf16|mixed|autocast] [--optimizer adamw|adam|sgd|sgd-momentum|lion|adafactor] [--steps K] [--entries N] "
     "[--checkpointing] [--trainable F] [--ranks N] [--zero 0-3] [--capacity 24GiB] [--expandable-segments] [--max-split-size SIZE] "
     "[--protocol 2-5] [--truth POOLS.json] [--truth-laws LAWS.json] [--attention softmax|inline|manual|recompute] "
     "[--mlp gelu|swiglu] [--ffn F] [--positions P] [--accumulate K] [--norms-only] [--leaks kept-graph,growing-cache,hook,warmup,bank=N] "
     "| --scenario vllm|megatron|dp-oom|no-history|no-history-bare [--scale K]",
     "write a synthetic training trace (simulated allocator, realistic frames), optionally ending in an OOM", runSynth});

} // namespace
} // namespace poolscope::app
