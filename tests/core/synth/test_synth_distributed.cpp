// Data-parallel training stacks as dumps with known pools (poolscope synth --scenario deepspeed-zero2,
// fsdp, ddp-buckets, peft-lora): gradients and optimizer state in flat partitions, shards and buckets, not one
// block per parameter. Each is written as a pickle, read back as a user's file would be, classified
// against its truth (not against the original's classification) in the original and in the three
// redactions (renamed code, Python frames only, no frames with the history kept): at the default
// moment and at the peak, at most 2 % of the bytes in a wrong pool with frames (all, renamed,
// Python-only), 15 % frameless, and none confident where the frames that were the evidence are gone.
#include "core/classify/shipped_rules.h"
#include "tests/core/classify/accuracy.h"

#include "core/classify/classifier.h"
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/redact/ablation.h"
#include "core/synth/synth_recorder.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cstdio>
#include <fstream>
#include <map>

using namespace poolscope;
using namespace poolscope::testing;

namespace {


// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment, so a fix
// shows as XPASS. FSDP x3 without frames: the stream's shape alone places the passes wrongly when
// every unit's forward gathers and frees a block of its parameters' size (the rise and fall reads
// as passes of their own), so activations read as a cache kept to the next forward. Since the loss's
// seed starts the backward (stop 35): fsdp x1 15.8 -> 8.9 % and peft-lora 34.4 -> 0.0 % (the logits,
// let go of by the loss's backward a few events after they were made, read as forward scratch).
// Since the engine's walks place the backwards (structural_engine_walks.h): fsdp x3 65.7 -> 34.3 %
// (the gathered weights no longer split the backward); peft-lora 33.5 -> 34.4 % (the same logits,
// and 5 MB of activations of half a weight's size now read as autocast's casts: two forwards found
// where one was).
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {{"fsdp x3 none", "34.3 %"}};
    return misses;
}

} // namespace

class TestSynthDistributed : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kDistributedScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }
};

QTEST_GUILESS_MAIN(TestSynthDistributed)
#include "test_synth_distributed.moc"
