// Where a precision what-if cannot tell some tensors' element size (Python frames only: no operator
// named), the prediction is a range. A run fits when its reserved peak does, so the reserved peak and
// the fit get the range too, from the same two replays (all 16-bit, all fp32), in the text and JSON.
#include "core/classify/classifier.h"
#include "core/synth/synth.h"
#include "core/util/units.h"
#include "core/whatif/whatif.h"
#include "python_frames.h"

#include <QtTest>

#include <nlohmann/json.hpp>

using namespace poolscope;

namespace {

// A model that writes its own softmax, recorded in fp32 with stacks='python': under autocast its exp
// and sum are fp32 (autocast's fp32 list), which no frame says (docs/accuracy.md, "Python-only precision").
struct PythonOnly {
    std::shared_ptr<Trace> trace;
    TraceModel model;
    const DeviceTrace& dev() const { return trace->devices[0]; }
};

PythonOnly pythonOnlyRun()
{
    SynthModel m;
    m.layers = 6;
    m.hidden = 512;
    m.heads = 8;
    m.seq = 320;
    m.microBatch = 4;
    m.vocab = 8000;
    m.positions = 2048;
    m.steps = 2;
    m.dtype = SynthDtype::Fp32;
    m.attention = SynthAttention::Manual;
    m.mlp = SynthMlp::Gelu;
    PythonOnly p{pythonFramesOnly(synthesize(m).trace), {}};
    p.model = buildTraceModel(*p.trace, p.dev(), classify(*p.trace, p.dev(), RuleSet::builtin()));
    return p;
}

Scenario autocastBf16(std::optional<int64_t> capacity)
{
    Scenario s;
    s.autocast = AutocastKind::Bf16;
    s.capacity = capacity;
    return s;
}

} // namespace

class TestWhatIfFitRange : public QObject {
    Q_OBJECT
private slots:
    void reservedPeakHasTheRange();
    void fitDependsOnTheGuess();
    void fitsAtBothEnds();
    void noRangeNoFitRange();
};

void TestWhatIfFitRange::reservedPeakHasTheRange()
{
    const PythonOnly p = pythonOnlyRun();
    const WhatIfResult r = runWhatIf(*p.trace, p.dev(), p.model, autocastBf16(std::nullopt));
    QVERIFY(r.unknownElementBytes > 0);
    QVERIFY(r.peakAllocatedLow < r.peakAllocatedHigh);
    // The reserved peak moves with the element sizes too, and the prediction lies between its ends.
    QVERIFY2(r.peakReservedLow < r.peakReservedHigh, qPrintable(QString("%1 .. %2").arg(r.peakReservedLow).arg(r.peakReservedHigh)));
    QVERIFY(r.peakReservedLow <= r.peakReserved && r.peakReserved <= r.peakReservedHigh);
    // Reserved never below allocated at either end.
    QVERIFY(r.peakReservedLow >= r.peakAllocatedLow && r.peakReservedHigh >= r.peakAllocatedHigh);
    const std::string text = renderWhatIfText(r);
    QVERIFY2(text.find("peak reserved between " + formatBytes(r.peakReservedLow) + " and " + formatBytes(r.peakReservedHigh)) !=
                 std::string::npos,
             text.c_str());
    const nlohmann::json j = whatIfJson(r);
    QCOMPARE(j["predicted"]["peak_reserved_range"]["low"].get<int64_t>(), r.peakReservedLow);
    QCOMPARE(j["predicted"]["peak_reserved_range"]["high"].get<int64_t>(), r.peakReservedHigh);
    QVERIFY(j["fits_range"].is_null()); // no capacity: no fit to judge
    QVERIFY(fitRangeText(r).empty());
}

void TestWhatIfFitRange::fitDependsOnTheGuess()
{
    const PythonOnly p = pythonOnlyRun();
    const WhatIfResult open = runWhatIf(*p.trace, p.dev(), p.model, autocastBf16(std::nullopt));
    // A device between the all-16-bit run's reserved peak and what the all-fp32 run must have
    // allocated at once: the first fits, the second cannot, whatever the allocator frees.
    QVERIFY2(open.peakReservedLow < open.peakAllocatedHigh,
             qPrintable(QString("reserved low %1, allocated high %2").arg(open.peakReservedLow).arg(open.peakAllocatedHigh)));
    const int64_t capacity = (open.peakReservedLow + open.peakAllocatedHigh) / 2;
    const WhatIfResult r = runWhatIf(*p.trace, p.dev(), p.model, autocastBf16(capacity));
    QVERIFY(r.capacity);
    QVERIFY(r.fitsAll16Bit);
    QVERIFY(!r.fitsAllFp32);
    QVERIFY(r.fitUncertain());
    const std::string sentence = fitRangeText(r);
    QVERIFY2(sentence.starts_with("Whether it fits depends on the element sizes the trace cannot tell: with all of them 16-bit it "
                                  "fits, with all of them fp32 it does not fit"),
             sentence.c_str());
    QVERIFY(renderWhatIfText(r).find(sentence) != std::string::npos);
    const nlohmann::json j = whatIfJson(r);
    QCOMPARE(j["fits_range"]["all_16bit"].get<bool>(), true);
    QCOMPARE(j["fits_range"]["all_fp32"].get<bool>(), false);
    QCOMPARE(j["fits"].get<bool>(), r.fits());
}

void TestWhatIfFitRange::fitsAtBothEnds()
{
    const PythonOnly p = pythonOnlyRun();
    const WhatIfResult open = runWhatIf(*p.trace, p.dev(), p.model, autocastBf16(std::nullopt));
    const WhatIfResult r = runWhatIf(*p.trace, p.dev(), p.model, autocastBf16(open.peakReservedHigh + (int64_t(1) << 30)));
    QVERIFY(r.fits() && r.fitsAll16Bit && r.fitsAllFp32);
    QVERIFY(!r.fitUncertain());
    QVERIFY2(fitRangeText(r).starts_with("It fits at both ends of that range"), fitRangeText(r).c_str());
    const nlohmann::json j = whatIfJson(r);
    QCOMPARE(j["fits_range"]["all_16bit"].get<bool>(), true);
    QCOMPARE(j["fits_range"]["all_fp32"].get<bool>(), true);
}

void TestWhatIfFitRange::noRangeNoFitRange()
{
    // With every tensor's type known (no precision knob), no range: the JSON says null, the text nothing.
    const PythonOnly p = pythonOnlyRun();
    Scenario s;
    s.seqScale = Ratio{2, 1};
    s.capacity = int64_t(80) << 30;
    const WhatIfResult r = runWhatIf(*p.trace, p.dev(), p.model, s);
    QCOMPARE(r.unknownElementBytes, int64_t(0));
    QCOMPARE(r.peakReservedLow, r.peakReserved);
    QCOMPARE(r.peakReservedHigh, r.peakReserved);
    QVERIFY(!r.fitUncertain());
    QVERIFY(fitRangeText(r).empty());
    const nlohmann::json j = whatIfJson(r);
    QVERIFY(j["predicted"]["peak_reserved_range"].is_null());
    QVERIFY(j["fits_range"].is_null());
}

QTEST_GUILESS_MAIN(TestWhatIfFitRange)
#include "test_whatif_fit_range.moc"
