// Every real dump's pools at its peak, written down after judging each file by hand from its frames,
// sizes and lifetimes (issue 15), with the evidence behind the judgement; and the honesty of every
// verdict. Skipped where ../shared/corpus is absent.
//
// The expectations are judgements, not the classifier's output copied: each comment says what in the
// dump supports the split. A pool may move by at most 1 % of the allocated bytes before this fails, so
// a rule change that moves a real file shows here and must be judged again.
#include "core/classify/shipped_rules.h"
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/load.h"
#include "core/report/verdict.h"
#include "core/timeline/alive_index.h"
#include "core/util/units.h"

#include <QtTest>

#include <filesystem>
#include <map>

using namespace poolscope;

namespace {

const std::string kCorpus = POOLSCOPE_CORPUS_DIR;
constexpr double kGiBytes = double(int64_t(1) << 30);

const RuleSet& defaultRules() { return poolscope::testing::shippedRules(); }

struct Judged {
    const char* file;
    int device;
    bool history;
    std::map<std::string, double> gib; // pools at the peak, GiB (pools under 0.5 MiB left out)
    const char* evidence;
};

// clang-format off
const std::vector<Judged> kJudged = {
    {"cranberrii_snapshot.pickle", 0, true, {{"activation", 4.218}, {"parameter", 1.012}, {"temporary", 0.238}, {"workspace", 0.016}},
     "LoRA fine-tuning, peak in the first backward: forward outputs alive since the forward (module frames) and saved tensors released "
     "in backward are activations; the frozen base weights predate recording (parameter, lifetime only); two blocks of 8,519,680 B "
     "without stacks are cuBLAS's default workspaces"},
    {"dt_tomi.pickle", 0, true, {{"workspace", 0.017}},
     "a tiny sample: two cuBLAS workspaces (getCurrentCUDABlasHandle frames) and a cuBLASLt call's 1 MiB workspace "
     "(gemm_and_bias frames: PyTorch 2.0 to 2.4 allocate it per call) are all of it"},
    {"hta_df_index_resolver.json.gz", 1, true, {{"activation", 1.242}, {"parameter", 3.815}, {"temporary", 1.117}},
     "Kineto: memory before profiling (the profiler's own total, no event touches it) is the model's (parameter, probable); forward "
     "ops' outputs released in backward are activations; aten::mm outputs born and freed in backward are scratch"},
    {"k_ctx128_forward_mixed.pickle", 0, true, {{"activation", 3.222}, {"cast_cache", 6.298}, {"parameter", 12.818}, {"temporary", 0.005}, {"workspace", 0.031}},
     "forward under autocast: 290 cached_cast outputs exactly half an fp32 weight's size are the weight casts (the same 6.30 GiB at "
     "context 256); the weights predate recording; the rest of the growth is the forward's activations"},
    {"k_ctx256_forward_mixed.pickle", 0, true, {{"activation", 7.290}, {"cast_cache", 6.298}, {"parameter", 12.819}, {"temporary", 0.010}, {"workspace", 0.031}},
     "as at context 128: the casts follow the weights, the activations grow with the context"},
    {"k_ctx128_fullstep.pickle", 0, true, {{"activation", 0.020}, {"gradient", 12.817}, {"optimizer_state", 25.388}, {"parameter", 12.818}, {"temporary", 0.191}, {"workspace", 0.062}},
     "peak at the end of AdamW's step: two moment buffers per parameter (torch/optim frames, kept past the step), gradients born in "
     "backward and kept, weights before recording mirroring the gradients' sizes"},
    {"k_ctx256_fullstep.pickle", 0, true, {{"activation", 0.039}, {"gradient", 12.691}, {"optimizer_state", 25.383}, {"parameter", 12.819}, {"temporary", 0.191}, {"workspace", 0.062}},
     "as at context 128"},
    {"kineto_resnet50_w0.pt.trace.json.gz", 0, true, {{"activation", 2.535}, {"temporary", 0.065}},
     "ResNet-50 at the end of its forward: convolution outputs saved for backward"},
    {"kineto_resnet50_w0.pt.trace.json.gz", -1, true, {{"input", 0.054}},
     "the CPU side: the DataLoader's batches"},
    {"mosaic_output.pickle", 0, true, {{"unknown", 2.101}},
     "Mosaic's generated test snapshot: random sizes and frames named /path/to/foo.py bar; nothing in it names a pool, and unknown is the "
     "honest answer (the one file exempt from the unknown <= 5 % target)"},
    {"mp_10streams.pickle", 0, true, {{"activation", 1.953}, {"parameter", 13.827}, {"temporary", 3.531}, {"workspace", 0.062}},
     "Llama inference (modeling_llama.py): weights before recording plus layers that select_n loads per forward (.to(), module frames); "
     "the lm_head's 1.95 GiB logits kept by the caller past the forward (an output: activation); attention scores and MLP "
     "intermediates born and freed within one forward (temporary)"},
    {"muduard_2dev.pickle", 0, false, {{"unknown", 9.975}, {"workspace", 0.016}},
     "segments only, no stack anywhere: nothing says what the blocks are (their sizes factor as fp16 C x H x W feature maps of a UNet, but "
     "also as weights: no suggestion is made); two blocks of cuBLAS's default workspace size"},
    {"muduard_segments_list.pkl", 1, false, {{"activation", 1.100}, {"parameter", 2.012}, {"unknown", 0.003}, {"workspace", 0.008}},
     "bare list of segments with legacy history: diffusers attention outputs (module frames) are activations; the blocks without a "
     "stack predate history recording (parameter at 40 %, timing only); one default-size cuBLAS workspace"},
    {"nh_forward_fp32.pickle", 0, true, {{"activation", 11.621}, {"gradient", 7.596}, {"optimizer_state", 15.155}, {"parameter", 7.622}, {"unknown", 0.038}, {"workspace", 0.016}},
     "a forward after earlier steps: gradients and AdamW state from before recording (their block stacks name backward and the step); "
     "the forward's outputs kept; one 39 MiB block freed by the benchmark loop is unknown"},
    {"nh_forward_mixed.pickle", 0, true, {{"activation", 7.409}, {"cast_cache", 3.721}, {"gradient", 7.577}, {"optimizer_state", 15.199}, {"parameter", 7.622}, {"temporary", 0.006}, {"unknown", 0.019}, {"workspace", 0.017}},
     "as the fp32 run, plus 337 cached_cast outputs half an fp32 weight's size: the autocast cast cache (3.72 GiB), which the old "
     "verdict counted as activations"},
    {"wed_inference_128.pickle", 0, true, {{"parameter", 1.578}, {"temporary", 0.033}, {"workspace", 0.008}},
     "forward without grad: weights before recording, every intermediate freed within the forward"},
    {"wed_inference_256.pickle", 0, true, {{"parameter", 1.578}, {"temporary", 0.086}, {"workspace", 0.008}},
     "as at context 128"},
    {"wed_training_128.pickle", 0, true, {{"activation", 0.019}, {"gradient", 1.579}, {"optimizer_state", 3.231}, {"other", 0.002}, {"parameter", 1.578}, {"temporary", 0.114}, {"workspace", 0.016}},
     "peak inside the student's AdamW step (optimizer.py step): moments from before recording, replaced out of place inside the step "
     "(freed there: optimizer state), and the new ones; gradients from AccumulateGrad"},
    {"wed_training_256.pickle", 0, true, {{"activation", 3.657}, {"optimizer_state", 3.153}, {"other", 0.005}, {"parameter", 1.578}, {"temporary", 0.076}, {"workspace", 0.016}},
     "peak at the end of the forward: activations saved for backward, and the previous step's moments (freed and remade inside the "
     "next optimizer.step: optimizer state, formerly 37 % unknown)"},
    {"yiyi_oom_snapshot.pickle", 0, false, {{"unknown", 11.027}},
     "an OOM observer's dump (one snapshot entry): every block's stack is FlexGen's init_weight_list, run from the user's checkout: "
     "only names the program chose say weights, a renamed copy has none, and without history nothing confirms them: unknown, and "
     "the verdict says what the dump cannot tell (issue 22)"},
    {"zl_decomfl.pickle", 0, true, {{"activation", 0.010}, {"optimizer_state", 0.611}, {"parameter", 0.468}, {"temporary", 0.575}},
     "zeroth-order Adam (adam_forward.py): the per-parameter K preconditioner made in the estimator's constructor and remade in "
     "update_K_param_paramwise is optimizer state; its perturbations are scratch; the model moved by .to()"},
};
// clang-format on

struct Moment {
    PoolBytes pools{};
    int64_t allocated = 0;
    Verdict verdict;
    MomentEvidence evidence;
};

Moment atPeak(const Trace& trace, const DeviceTrace& dev)
{
    const Classification c = classify(trace, dev, defaultRules());
    const PoolSeries s = computePoolSeries(dev, c);
    Moment m;
    m.pools = s.at(dev.peakIndex);
    m.allocated = allocatedBytes(m.pools);
    const std::vector<AllocId> alive = AliveIndex(dev.allocations).aliveAfter(dev.peakIndex);
    m.evidence = momentEvidence(c, dev.allocations, alive);
    m.verdict = makeVerdict("At the peak", m.pools, m.evidence);
    return m;
}

const DeviceTrace* findDevice(const Trace& t, int device)
{
    for (const DeviceTrace& d : t.devices)
        if (d.device == device)
            return &d;
    return nullptr;
}

} // namespace

class TestCorpusPools : public QObject {
    Q_OBJECT
private slots:
    void initTestCase()
    {
        if (!std::filesystem::is_directory(kCorpus))
            QSKIP("corpus not present (../shared/corpus)");
    }

    void judgedPoolsAtThePeak_data()
    {
        QTest::addColumn<int>("row");
        for (size_t i = 0; i < kJudged.size(); ++i)
            QTest::newRow((std::string(kJudged[i].file) + " dev " + std::to_string(kJudged[i].device)).c_str()) << int(i);
    }
    void judgedPoolsAtThePeak()
    {
        QFETCH(int, row);
        const Judged& j = kJudged[size_t(row)];
        const auto trace = load(kCorpus + "/" + j.file);
        const DeviceTrace* dev = findDevice(*trace, j.device);
        QVERIFY(dev);
        const Moment m = atPeak(*trace, *dev);
        QCOMPARE(m.evidence.history, j.history);
        const double allocated = double(m.allocated) / kGiBytes;
        double moved = 0;
        std::string got;
        for (size_t p = 0; p < kAllocationPoolCount; ++p) {
            const double g = double(m.pools[p]) / kGiBytes;
            const auto it = j.gib.find(std::string(poolName(Pool(p))));
            const double want = it == j.gib.end() ? 0.0 : it->second;
            if (g >= 0.0005)
                got += " " + std::string(poolName(Pool(p))) + "=" + QString::number(g, 'f', 3).toStdString() + " (" +
                       evidenceText(m.evidence.mainEvidence(Pool(p))) + ")";
            moved += std::abs(g - want);
            QVERIFY2(std::abs(g - want) <= std::max(0.002, 0.01 * allocated),
                     qPrintable(QString("%1: %2 is %3 GiB, judged %4 GiB; at the peak:%5").arg(j.file, QString(poolName(Pool(p)).data()))
                                    .arg(g, 0, 'f', 3).arg(want, 0, 'f', 3).arg(QString::fromStdString(got))));
        }
        qInfo("%s dev %d, allocated %.2f GiB:%s\n  judged: %s\n  %s", j.file, j.device, allocated, got.c_str(), j.evidence,
              m.verdict.sentence.c_str());
        // The targets: at most 5 % of the peak's bytes away from the judged pools; unknown at
        // most 5 % where history exists (Mosaic's random test snapshot names nothing).
        QVERIFY(moved / 2 <= 0.05 * allocated + 1e-9);
        if (j.history && std::string(j.file) != "mosaic_output.pickle")
            QVERIFY2(double(m.pools[size_t(Pool::Unknown)]) <= 0.05 * double(m.allocated), j.file);
    }

    // No verdict is stated with >= 70 % confidence that the evidence does not support; a dump
    // without history says so first and never concludes absence.
    void everyVerdictIsHonest_data() { judgedPoolsAtThePeak_data(); }
    void everyVerdictIsHonest()
    {
        QFETCH(int, row);
        const Judged& j = kJudged[size_t(row)];
        const auto trace = load(kCorpus + "/" + j.file);
        const Moment m = atPeak(*trace, *findDevice(*trace, j.device));
        const Verdict& v = m.verdict;
        if (!m.evidence.history) {
            QVERIFY2(v.sentence.rfind(std::string(kNoHistoryCaveat), 0) == 0, v.sentence.c_str());
            QVERIFY2(v.advice.find("frees nothing") == std::string::npos, v.advice.c_str());
        }
        // A wall only at an OOM (the largest pool elsewhere): either is a plain claim to check.
        const bool plain = (v.advice.rfind("The wall is ", 0) == 0 && v.advice.rfind("The wall is probably", 0) != 0) ||
                           (v.advice.rfind("The largest pool is ", 0) == 0 && v.advice.rfind("The largest pool is probably", 0) != 0);
        if (plain && v.dominant != Pool::CachedFree && v.dominant != Pool::Unknown) { // "unclassified" claims nothing
            QVERIFY2(v.confidence >= kSureConfidence, v.sentence.c_str());
            QVERIFY2(v.evidence != 0 && v.evidence != kEvidenceSize, v.sentence.c_str());
            if (!m.evidence.history)
                QVERIFY2(v.evidence & kEvidenceFrames, v.sentence.c_str());
        }
    }

    // The verdicts the issue names.
    void namedVerdicts()
    {
        auto verdict = [](const char* file, int device = 0) {
            const auto trace = load(kCorpus + "/" + file);
            return atPeak(*trace, *findDevice(*trace, device)).verdict;
        };
        const Verdict mixed = verdict("nh_forward_mixed.pickle");
        QVERIFY2(mixed.breakdown.find("cast cache 3.72 GiB") != std::string::npos, mixed.breakdown.c_str());
        // The cast cache does not count toward what cutting the micro-batch frees.
        QVERIFY2(mixed.advice.find("cutting the micro-batch frees at most 7.4") != std::string::npos, mixed.advice.c_str());
        const Verdict bare = verdict("muduard_2dev.pickle");
        // No OOM in it: no wall to name (issue 22), and the largest pool has neither history nor a stack.
        QVERIFY2(bare.advice.rfind("The dump cannot name the largest pool:", 0) == 0, bare.advice.c_str());
        const Verdict oom = verdict("yiyi_oom_snapshot.pickle");
        // The trace records no OOM entry (one snapshot entry): no wall to name (issue 22); the only
        // evidence is the program's own function names, so the verdict names no pool and gives no knob.
        QVERIFY2(oom.sentence.rfind(std::string(kNoHistoryCaveat) + " At the peak: unknown 11.03 GiB (100% of allocated).", 0) == 0,
                 oom.sentence.c_str());
        QVERIFY2(oom.advice.rfind("The dump cannot name the largest pool: 11.03 GiB have no allocation history", 0) == 0, oom.advice.c_str());
        QVERIFY2(oom.advice.find("ZeRO") == std::string::npos, oom.advice.c_str());
        const Verdict wed = verdict("wed_training_256.pickle");
        QCOMPARE(wed.dominant, Pool::Activation);
    }
};

QTEST_GUILESS_MAIN(TestCorpusPools)
#include "test_corpus_pools.moc"
