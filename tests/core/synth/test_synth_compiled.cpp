// torch.compile'd stacks as dumps with known pools (poolscope synth --scenario compiled|cudagraphs,
// core/synth/synth_compiled.cpp): each pass is one Inductor-generated call(args) in a module under
// /tmp/torchinductor_<user>/, whose file and function names are generated (renamed, any user's).
// Each dump is written as a pickle, read back, and classified against its truth in the original and
// in the three redactions (renamed code, Python frames only, no frames with the history kept), at
// the default moment and the peak, at x1 and x3: at most 2 % of the bytes in a wrong pool with
// frames, 15 % frameless, none confident where the frames that were the evidence are gone. The
// renamed copy keeps no trace of the user name in the generated modules' directory.
#include "core/classify/shipped_rules.h"
#include "tests/core/classify/accuracy.h"

#include "core/classify/classifier.h"
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/redact/ablation.h"
#include "core/redact/redact.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

#include <cstdio>
#include <map>
#include <sstream>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment, so a fix
// shows as XPASS. Compiled without frames meets the target since the loss's seed starts the backward
// (structural_engine_walks.h, lossBackwardSeed; it was 18.0 %: the saved logits, max and log-sum-exp,
// let go of after the loss's gradient of the logits' size was made, read as the forward's scratch).
// CUDA graphs without frames met the target at stop 44 (21.3 % before): transformers' StaticCache,
// made before the first forward and kept like the weights, is told by its blocks (four or more of one
// size no weight has, made in a row: cache-preallocated-before-calls). None are left.
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses;
    return misses;
}

} // namespace

class TestSynthCompiled : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kCompiledScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }

    // The generated modules live under /tmp/torchinductor_<user>/: renamed, the user's name is gone
    // from the frames and from the bytes written.
    void renamedDropsTheInductorUser()
    {
        const ScenarioFixture f = makeScenario(StackScenario::Compiled);
        bool had = false;
        for (size_t i = 0; i < f.trace->frames.frameCount(); ++i)
            had = had || f.trace->frames.frame(FrameId{uint32_t(i)}).filename.find("torchinductor_alice") != std::string::npos;
        QVERIFY(had);
        RedactOptions o;
        o.markers = scenarioRules().get();
        o.renameCode = true;
        const auto copy = redact(*f.trace, o);
        for (size_t i = 0; i < copy->frames.frameCount(); ++i) {
            const Frame& fr = copy->frames.frame(FrameId{uint32_t(i)});
            QVERIFY2(fr.filename.find("alice") == std::string::npos && fr.name.find("alice") == std::string::npos, fr.filename.c_str());
        }
        std::ostringstream bytes;
        writeSnapshot(*copy, bytes, 4);
        QVERIFY(bytes.str().find("alice") == std::string::npos);
    }
};

QTEST_GUILESS_MAIN(TestSynthCompiled)
#include "test_synth_compiled.moc"
