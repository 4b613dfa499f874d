// The ablation's measures on a trace of our own, with rules made to lean on exactly one thing each:
// a rule on the user's file name moves its bytes under renaming only, a rule on a C++ frame under
// Python-only frames, and a decision that keeps 70 % or more in another pool once the frames that
// decided it are gone counts as "confident without its frames". Without such rules nothing moves.
#include "core/classify/rules.h"
#include "core/model/trace_builder.h"
#include "core/redact/ablation.h"

#include <QtTest>

using namespace poolscope;

namespace {

// Three tensors alive at the end: one made in the user's file, one under a cuBLAS frame, one with
// only library frames.
std::shared_ptr<const Trace> sampleTrace()
{
    auto t = std::make_shared<Trace>();
    t->path = "ablation_sample.pickle";
    const FrameId user = t->frames.internFrame("/home/bob/proj/cache_store.py", "grow", 10);
    const FrameId torch = t->frames.internFrame("/venv/lib/python3.11/site-packages/torch/nn/functional.py", "linear", 2000);
    const FrameId cublas = t->frames.internFrame("??", "at::cuda::getCurrentCUDABlasHandle()", 0);
    const FrameId s1[] = {user}, s2[] = {cublas, torch}, s3[] = {torch};
    const StackId a = t->frames.internStack(s1), b = t->frames.internStack(s2), c = t->frames.internStack(s3);
    DeviceTrace d;
    const uint64_t base = 0x7f0000000000ull;
    d.events.push(Action::Alloc, base, 4 << 20, 0, 1, a);
    d.events.push(Action::Alloc, base + (4 << 20), 2 << 20, 0, 2, b);
    d.events.push(Action::Alloc, base + (6 << 20), 1 << 20, 0, 3, c);
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    t->devices.push_back(std::move(d));
    return t;
}

// The user-file tensor (4 MiB) lives only in the middle of the run, then torch-framed tensors
// (1 + 8 MiB) make the peak: the default moment and the peak cannot see the user file's rule, the
// whole-run measure can. A 64 KiB user-file block first of all (alone: "100 %" of a moment under
// the floor) is not judged.
std::shared_ptr<const Trace> midRunTrace()
{
    auto t = std::make_shared<Trace>();
    t->path = "ablation_midrun.pickle";
    const FrameId user = t->frames.internFrame("/home/bob/proj/cache_store.py", "grow", 10);
    const FrameId torch = t->frames.internFrame("/venv/lib/python3.11/site-packages/torch/nn/functional.py", "linear", 2000);
    const FrameId s1[] = {user}, s3[] = {torch};
    const StackId a = t->frames.internStack(s1), c = t->frames.internStack(s3);
    DeviceTrace d;
    const uint64_t base = 0x7f0000000000ull;
    d.events.push(Action::Alloc, base + (32 << 20), 64 << 10, 0, 1, a);                  // 0: tiny, alone
    d.events.push(Action::FreeRequested, base + (32 << 20), 64 << 10, 0, 2, a);          // 1
    d.events.push(Action::FreeCompleted, base + (32 << 20), 64 << 10, 0, 3, a);          // 2
    d.events.push(Action::Alloc, base + (4 << 20), 1 << 20, 0, 4, c);                    // 3
    d.events.push(Action::Alloc, base, 4 << 20, 0, 5, a);                                // 4: 4 of 5 MiB
    d.events.push(Action::FreeRequested, base, 4 << 20, 0, 6, a);                        // 5
    d.events.push(Action::FreeCompleted, base, 4 << 20, 0, 7, a);                        // 6
    d.events.push(Action::Alloc, base + (8 << 20), 8 << 20, 0, 8, c);                    // 7: the peak, 9 MiB
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    t->devices.push_back(std::move(d));
    return t;
}

std::shared_ptr<const RuleSet> rulesLeaningOn(bool userFile, bool cppFrame)
{
    std::string rules = R"({"version": 1, "rules": [)";
    if (userFile)
        rules += R"({"name": "by-user-file", "pool": "kv_cache", "confidence": 90, "reason": "t", "frames_any": [{"file": "cache_store\\.py"}]},)";
    if (cppFrame)
        rules += R"({"name": "by-cpp-frame", "pool": "workspace", "confidence": 90, "reason": "t", "frames_any": [{"function": "getCurrentCUDABlasHandle"}]},)";
    rules += R"({"name": "rest", "pool": "activation", "confidence": 40, "reason": "t"}]})";
    return std::make_shared<const RuleSet>(RuleSet::parse(rules, "test"));
}

const AblationCell& cell(const AblationResult& r, const std::string& variant)
{
    for (const auto& c : r.devices.at(0).cells)
        if (c.variant == variant)
            return c;
    throw std::runtime_error("no " + variant);
}

} // namespace

class TestAblation : public QObject {
    Q_OBJECT
private slots:
    void nothingLeansOnNames()
    {
        const auto r = ablate(sampleTrace(), rulesLeaningOn(false, false));
        QCOMPARE(r.devices.size(), size_t(1));
        for (const char* v : {"renamed", "python", "none"}) {
            QCOMPARE(cell(r, v).atPeak.moved, int64_t(0));
            QCOMPARE(cell(r, v).atPeak.bytes, int64_t(7 << 20));
            QCOMPARE(cell(r, v).atPeak.confidentWithoutFrames, int64_t(0));
        }
        QVERIFY(ablationMarkdown({r}).find("| ablation_sample.pickle | cuda:0 | peak | 0.0 % / 0.0 % / 0.0 % |") != std::string::npos);
    }

    void aUserFileRuleMovesUnderRenaming()
    {
        const auto r = ablate(sampleTrace(), rulesLeaningOn(true, false));
        QCOMPARE(cell(r, "renamed").atPeak.moved, int64_t(4 << 20));
        QCOMPARE(cell(r, "renamed").atDefault.moved, int64_t(4 << 20)); // no OOM: the default moment is the peak
        QCOMPARE(cell(r, "python").atPeak.moved, int64_t(0));           // a Python frame: still there
        QCOMPARE(cell(r, "none").atPeak.moved, int64_t(4 << 20));
        QCOMPARE(cell(r, "renamed").flows.at(0).first, std::string("kv_cache -> activation"));
        // The copy's guess is 40 %: not confident, so not counted.
        QCOMPARE(cell(r, "renamed").atPeak.confidentWithoutFrames, int64_t(0));
    }

    void aCppFrameRuleMovesUnderPythonOnly()
    {
        const auto r = ablate(sampleTrace(), rulesLeaningOn(false, true));
        QCOMPARE(cell(r, "renamed").atPeak.moved, int64_t(0)); // PyTorch's symbols keep their names
        QCOMPARE(cell(r, "python").atPeak.moved, int64_t(2 << 20));
        QCOMPARE(qRound(cell(r, "python").atPeak.movedFraction() * 1000), 286); // 2 of 7 MiB
    }

    // The peak and the default moment see nothing; the run's worst moment is after event 4, where
    // 4 of the 5 MiB alive sit in another pool, with the pools and the allocation named.
    void theWholeRunSeesWhatIsGoneByThePeak()
    {
        const auto r = ablate(midRunTrace(), rulesLeaningOn(true, false));
        const AblationCell& renamed = cell(r, "renamed");
        QCOMPARE(renamed.atPeak.moved, int64_t(0));
        QCOMPARE(renamed.atDefault.moved, int64_t(0));
        const AblationRunWorst& w = renamed.wholeRun;
        QCOMPARE(w.index, EventIndex(4));
        QVERIFY(!w.beforeFirstEvent);
        QCOMPARE(w.bytes, int64_t(5 << 20));
        QCOMPARE(w.moved, int64_t(4 << 20));
        QCOMPARE(w.peakBytes, int64_t(9 << 20));
        QCOMPARE(w.flows.size(), size_t(1));
        QCOMPARE(w.flows[0].first, std::string("kv_cache -> activation"));
        QCOMPARE(w.allocations.size(), size_t(1));
        QCOMPARE(w.allocations[0].size, int64_t(4 << 20));
        QCOMPARE(w.allocations[0].from, std::string("kv_cache (by-user-file)"));
        QCOMPARE(w.allocations[0].to, std::string("activation (rest)"));
        QVERIFY(w.allocations[0].site.find("cache_store.py:10 grow") != std::string::npos);
        // A Python frame stays under --frames python: nothing moves at any moment there.
        QCOMPARE(cell(r, "python").wholeRun.moved, int64_t(0));
        QCOMPARE(cell(r, "python").wholeRun.index, kNoEvent);
        QVERIFY(ablationMarkdown({r}).find("| 0.0 % / 0.0 % / 80.0 % |") != std::string::npos);
    }

    // Without the floor the lone 64 KiB block (event 0) would be the worst moment at 100 %.
    void momentsUnderTheFloorAreNotJudged()
    {
        const auto r = ablate(midRunTrace(), rulesLeaningOn(true, false));
        const AblationRunWorst& w = cell(r, "renamed").wholeRun;
        QVERIFY(double(64 << 10) < kRunFloor * double(w.peakBytes)); // the premise: the lone block is under the floor
        QVERIFY(w.index != 0);
        QVERIFY(w.movedFraction() < 1.0);
    }

    void confidenceWithoutItsFramesIsCounted()
    {
        // A rule on "no frame matches X" holds vacuously on an empty stack and keeps its 90 %.
        const auto rules = std::make_shared<const RuleSet>(RuleSet::parse(
            R"({"version": 1, "rules": [
                {"name": "by-file", "pool": "kv_cache", "confidence": 90, "reason": "t", "frames_any": [{"file": "cache_store\\.py"}]},
                {"name": "not-torch", "pool": "parameter", "confidence": 90, "reason": "t", "frames_none": [{"file": "torch/"}]},
                {"name": "rest", "pool": "activation", "confidence": 40, "reason": "t"}]})",
            "test"));
        const auto r = ablate(sampleTrace(), rules);
        const AblationMoment& none = cell(r, "none").atPeak;
        // Every tensor lands in "parameter" at 90 % on an empty stack. The user-file one moved from
        // kv_cache, which its frame decided: confident without the frame that was its evidence. The
        // other two were activation by no evidence at all, so no frames of theirs are gone.
        QCOMPARE(none.moved, int64_t(7 << 20));
        QCOMPARE(none.confidentWithoutFrames, int64_t(4 << 20));
        QCOMPARE(cell(r, "renamed").atPeak.confidentWithoutFrames, int64_t(4 << 20));
    }
};

QTEST_GUILESS_MAIN(TestAblation)
#include "test_ablation.moc"
