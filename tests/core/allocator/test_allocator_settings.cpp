// Allocator settings proven by replay (issue 25): PyTorch's own PYTORCH_CUDA_ALLOC_CONF syntax,
// garbage_collection_threshold in the simulator, and synthetic traces built to fragment: they run
// out of memory under the default allocator and fit with expandable segments or a split limit, or
// fit with nothing because what is alive is already over the capacity.
#include "core/allocator/allocator_config.h"
#include "core/allocator/caching_allocator.h"
#include "core/allocator/fragmentation.h"
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/load.h"
#include "core/model/trace_builder.h"
#include "core/report/allocator_advice.h"
#include "core/report/device_memory.h"
#include "core/report/report.h"
#include "core/whatif/whatif.h"
#include "support/sim_recording.h"

#include <QProcess>
#include <QtTest>

using namespace poolscope;

namespace {
constexpr int64_t MiB = int64_t(1) << 20;

// Four steps of: a 200 MiB temporary, freed, then a 110 MiB block that lives on. Under the default
// allocator each 110 MiB block splits the temporary's cached segment and pins it, so 90 MiB of every
// segment stays free but can be neither reused (the next temporary needs 200) nor returned
// (release_cached_blocks frees only wholly free segments). Then `finalRequest` is asked for at
// `capacity`. The trace is what PyTorch records: segment events, allocs, frees, the OOM.
std::shared_ptr<const Document> fragmentingRun(int64_t capacity, int64_t finalRequest)
{
    CachingAllocatorSim sim(AllocatorConfig{}, capacity);
    testing::SimRecording rec{sim};
    for (int step = 0; step < 4; ++step) {
        const auto tmp = sim.malloc(200 * MiB, 0);
        rec.segmentEvents();
        rec.push(Action::Alloc, tmp.addr, 200 * MiB);
        sim.free(tmp.addr);
        rec.push(Action::FreeRequested, tmp.addr, 200 * MiB);
        rec.push(Action::FreeCompleted, tmp.addr, 200 * MiB);
        const auto keep = sim.malloc(110 * MiB, 0);
        rec.segmentEvents();
        rec.push(Action::Alloc, keep.addr, 110 * MiB);
    }
    const auto last = sim.malloc(finalRequest, 0);
    rec.segmentEvents();
    if (last.ok)
        rec.push(Action::Alloc, last.addr, finalRequest);
    else
        rec.push(Action::Oom, uint64_t(capacity - sim.stats().reserved), finalRequest);
    std::vector<std::string> warnings;
    DeviceTrace dev = rec.finish(warnings);
    auto trace = std::make_shared<Trace>();
    trace->path = "fragmenting-synth";
    trace->devices.push_back(std::move(dev));
    trace->allocatorSettings = {{"expandable_segments", "False"}, {"max_split_size", "-1"}, {"garbage_collection_threshold", "0.000000"}};
    DocumentOptions options;
    options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    options.eagerTimelines = false;
    return Document::fromTrace(trace, options);
}

WhatIfResult whatIf(const Document& doc, const std::string& conf)
{
    const DeviceDocument& d = doc.device(0);
    Scenario s;
    s.allocConf = conf;
    return runWhatIf(doc.trace(), d.device(), *d.traceModel(), s);
}

} // namespace

class TestAllocatorSettings : public QObject {
    Q_OBJECT
private slots:
    void strictSyntax();
    void settingsFromSnapshot();
    void garbageCollectionFreesOldSegments();
    void fragmentingRunFitsWithExpandableOrSplitLimit();
    void nothingHelpsWhenAliveIsOverCapacity();
    void outsidePyTorch();
    void captureHelperRecordIsRead();
    void commandLine();
};

void TestAllocatorSettings::strictSyntax()
{
    AllocatorConfig c;
    QCOMPARE(QString::fromStdString(applyAllocConfStrict(
                 c, "expandable_segments:True,max_split_size_mb:512,garbage_collection_threshold:0.8,roundup_power2_divisions:4")),
             QString());
    QVERIFY(c.expandableSegments);
    QCOMPARE(c.maxSplitSize, 512 * MiB);
    QCOMPARE(c.gcThreshold, 0.8);
    QCOMPARE(roundSize(c, 200 * MiB), 224 * MiB); // 4 divisions of [128, 256) MiB: steps of 32 MiB
    QCOMPARE(QString::fromStdString(describeAllocConf(c)),
             QString("expandable_segments:True,max_split_size_mb:512,garbage_collection_threshold:0.8,roundup_power2_divisions:4"));
    QCOMPARE(QString::fromStdString(describeAllocConf(AllocatorConfig{})), QString("PyTorch's defaults"));
    AllocatorConfig list;
    QVERIFY(applyAllocConfStrict(list, "roundup_power2_divisions:[256:1,512:2,>:4]").empty());
    QCOMPARE(roundupPower2Divisions(list, 100 * MiB), int64_t(1)); // the first entry also covers what lies below it
    QCOMPARE(roundupPower2Divisions(list, 300 * MiB), int64_t(1));
    // CUDAAllocatorConfig::parseRoundUpPower2Divisions fills '>' from the last listed interval on,
    // that interval included: 512 MiB ends up with 4, not 2. The replay does what PyTorch does.
    QCOMPARE(roundupPower2Divisions(list, 600 * MiB), int64_t(4));
    QCOMPARE(roundupPower2Divisions(list, int64_t(8) << 30), int64_t(4));
    // Each error names the option, and leaves the configuration as it was.
    const struct {
        const char* conf;
        const char* names;
    } bad[] = {{"expandable_segment:True", "expandable_segment"},
               {"expandable_segments:yes", "expandable_segments"},
               {"max_split_size_mb:20", "max_split_size_mb"},
               {"max_split_size_mb:big", "max_split_size_mb"},
               {"garbage_collection_threshold:1.5", "garbage_collection_threshold"},
               {"garbage_collection_threshold:0", "garbage_collection_threshold"},
               {"roundup_power2_divisions:[3:1]", "roundup_power2_divisions"},
               {"expandable_segments", "expandable_segments"}};
    for (const auto& b : bad) {
        AllocatorConfig keep;
        keep.maxSplitSize = 64 * MiB;
        const std::string problem = applyAllocConfStrict(keep, std::string("max_split_size_mb:300,") + b.conf);
        QVERIFY2(problem.find(b.names) != std::string::npos, b.conf);
        QCOMPARE(keep.maxSplitSize, 64 * MiB);
    }
    std::vector<std::string> ignored;
    AllocatorConfig other;
    QVERIFY(applyAllocConfStrict(other, "backend:native,release_lock_on_cudamalloc:True", &ignored).empty());
    QCOMPARE(ignored.size(), size_t(2));
}

void TestAllocatorSettings::settingsFromSnapshot()
{
    // As PyTorch's _snapshot() renders them (the loader's text): the threshold unset reads 0.000000.
    const auto off = allocatorConfigFromSettings({{"garbage_collection_threshold", "0.000000"}});
    QCOMPARE(off.gcThreshold, 0.0);
    const auto on = allocatorConfigFromSettings({{"garbage_collection_threshold", "0.600000"}, {"expandable_segments", "True"}});
    QCOMPARE(on.gcThreshold, 0.6);
    QVERIFY(on.expandableSegments);
}

void TestAllocatorSettings::garbageCollectionFreesOldSegments()
{
    AllocatorConfig cfg;
    cfg.gcThreshold = 0.5;
    auto run = [&](std::optional<int64_t> capacity) {
        auto sim = std::make_unique<CachingAllocatorSim>(cfg, capacity);
        const auto a = sim->malloc(300 * MiB, 0); // get_free_block call 1
        sim->free(a.addr);                        // cached at age 0 (clock 1)
        const auto b = sim->malloc(310 * MiB, 0); // call 2: a is too small; 300 <= 500, no GC yet
        sim->free(b.addr);                        // cached at clock 2
        // Call 3: nothing fits 320; reserved 610 > 0.5 x 1000: the mean age is 1.5, so a (age 2)
        // goes and b (age 1) stays; 300 MiB reclaimed covers the 110 over the threshold.
        const auto c = sim->malloc(320 * MiB, 0);
        Q_ASSERT(c.ok);
        return sim;
    };
    const auto gc = run(1000 * MiB);
    QCOMPARE(gc->stats().gcReleasedBytes, 300 * MiB);
    QCOMPARE(gc->stats().reserved, 630 * MiB);
    QCOMPARE(gc->stats().segments, int64_t(2));
    QCOMPARE(QString::fromStdString(gc->checkInvariants()), QString());
    // PyTorch runs it only with a memory fraction set: without a capacity there is nothing to run it against.
    const auto none = run(std::nullopt);
    QCOMPARE(none->stats().gcReleasedBytes, int64_t(0));
    QCOMPARE(none->stats().reserved, 930 * MiB);
}

void TestAllocatorSettings::fragmentingRunFitsWithExpandableOrSplitLimit()
{
    const auto doc = fragmentingRun(900 * MiB, 150 * MiB);
    QVERIFY(doc);
    const DeviceTrace& dev = doc->device(0).device();
    QCOMPARE(dev.ooms.size(), size_t(1));

    // Under the run's own settings the replay runs out where the run did, and reproduces it exactly.
    const WhatIfResult base = whatIf(*doc, "");
    QVERIFY(base.identity);
    QCOMPARE(base.allocatedMismatches, int64_t(0));
    QCOMPARE(base.reservedMatches, base.reservedCompared);
    QCOMPARE(base.capacity.value_or(0), 900 * MiB);
    QVERIFY(base.oom);
    QCOMPARE(base.oom->index, dev.ooms.front().index);
    QVERIFY(base.allocatorSettingsRecorded);
    // The layout after the flush: 4 x 90 MiB free, each too small for the 150 MiB request, none returnable.
    QVERIFY(base.fragmentationDetail.known);
    QCOMPARE(base.fragmentationDetail.freeBytes, 360 * MiB);
    QCOMPARE(base.fragmentationDetail.largestFree, 90 * MiB);
    QCOMPARE(base.fragmentationDetail.tooSmallBlocks, int64_t(4));
    QCOMPARE(base.fragmentationDetail.releasable, int64_t(0));

    // expandable_segments:True: one growing segment, mapped 20 MiB pages at a time; the free tail of
    // each step is reused by the next, so reserved grows by the kept block and a page of slack.
    const WhatIfResult exp = whatIf(*doc, "expandable_segments:True");
    QVERIFY(exp.allocatorChanged);
    QVERIFY(!exp.identity);
    QVERIFY(!exp.oom);
    QVERIFY(exp.fits());
    QCOMPARE(exp.peakReserved, 600 * MiB);
    QCOMPARE(exp.peakAllocated, base.peakAllocated); // the allocator moves no tensor
    QVERIFY(exp.fragmentationDetail.known); // taken at the reserved peak by a second replay

    // max_split_size_mb:128: the 200 MiB temporaries become oversize blocks that are never split, so
    // the kept blocks get segments of their own and one temporary segment is reused.
    const WhatIfResult split = whatIf(*doc, "max_split_size_mb:128");
    QVERIFY(!split.oom);
    QCOMPARE(split.peakReserved, 790 * MiB);

    // The verdict's advice names the setting with the lowest reserved peak, and only because it fits.
    const AllocatorAdvice advice = adviseAllocatorAtOom(doc->trace(), dev, *doc->device(0).traceModel(), dev.ooms.front().index);
    QVERIFY(advice.judged);
    QVERIFY(!advice.nothingHelps);
    QCOMPARE(advice.capacity, 900 * MiB);
    QVERIFY2(advice.sentence.rfind("With expandable_segments:True the replay's reserved peak is 0.59 GiB", 0) == 0, advice.sentence.c_str());
    QVERIFY(advice.sentence.find("this OOM would not have happened") != std::string::npos);
    QVERIFY(advice.sentence.find("max_split_size_mb:128 also fits") != std::string::npos);

    // The report at the OOM carries it in the verdict, and splits the fragmentation the same way.
    const MomentReport m = momentReport(doc->device(0), dev.ooms.front().index, "oom", 0);
    QVERIFY(m.verdict.sentence.find("With expandable_segments:True") != std::string::npos);
    QVERIFY(m.fragmentation.known);
    QCOMPARE(m.fragmentation.request, 150 * MiB);
    QCOMPARE(m.fragmentation.largestInPool, 90 * MiB);
    QCOMPARE(m.fragmentation.tooSmallBytes, 360 * MiB);
}

void TestAllocatorSettings::nothingHelpsWhenAliveIsOverCapacity()
{
    // 440 MiB alive + 500 MiB asked > 900 MiB: no placement rule can fit it.
    const auto doc = fragmentingRun(900 * MiB, 500 * MiB);
    const DeviceTrace& dev = doc->device(0).device();
    QCOMPARE(dev.ooms.size(), size_t(1));
    const AllocatorAdvice advice = adviseAllocatorAtOom(doc->trace(), dev, *doc->device(0).traceModel(), dev.ooms.front().index);
    QVERIFY(advice.judged);
    QVERIFY(advice.nothingHelps);
    QCOMPARE(advice.aliveRequested, 440 * MiB);
    QVERIFY(advice.trials.empty());
    QVERIFY2(advice.sentence.rfind("Allocated alone is over capacity", 0) == 0, advice.sentence.c_str());
    QVERIFY(advice.sentence.find("no allocator setting helps") != std::string::npos);
    // And every setting's replay agrees: each still runs out.
    for (const char* conf : {"expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"}) {
        const WhatIfResult r = whatIf(*doc, conf);
        QVERIFY2(r.oom.has_value(), conf);
        QVERIFY(r.oom->requestedLive + r.oom->requested > *r.capacity);
    }
}

void TestAllocatorSettings::outsidePyTorch()
{
    QVERIFY(!parseDeviceTotal("lots"));
    const auto a100 = parseDeviceTotal("A100-80GB");
    QVERIFY(a100);
    QVERIFY(a100->uncertainty > 0);
    QCOMPARE(parseDeviceTotal("80GiB")->bytes, int64_t(80) << 30);
    QCOMPARE(QString::fromStdString(parseDeviceTotal("80GiB")->source), QString("--capacity"));
    // 60 GiB reserved, 1 GiB free on an 80 GiB device: 19 GiB belong to someone else.
    const auto o = outsideMemory(parseDeviceTotal("80GiB"), int64_t(60) << 30, int64_t(1) << 30);
    QVERIFY(o);
    QCOMPARE(o->outside, int64_t(19) << 30);
    QVERIFY(o->likely.find("another process") != std::string::npos);
    const auto ctx = outsideMemory(parseDeviceTotal("80GiB"), (int64_t(80) << 30) - 600 * MiB, 100 * MiB);
    QCOMPARE(ctx->outside, 500 * MiB);
    QVERIFY(ctx->likely.find("CUDA context") != std::string::npos);
    QVERIFY(outsideMemory(parseDeviceTotal("10GiB"), int64_t(20) << 30, 0)->likely.find("not this device's") != std::string::npos);
    QVERIFY(!outsideMemory(std::nullopt, 0, 0));
    QVERIFY(!outsideMemory(parseDeviceTotal("80GiB"), 0, -1)); // free unknown
    // The capture helper's record is used when the user gives none, and says so.
    Trace t;
    t.deviceProperties.push_back({0, "NVIDIA A100-SXM4-80GB", int64_t(85) << 30, -1});
    const auto helper = deviceTotalFor(t, 0, std::nullopt);
    QVERIFY(helper);
    QVERIFY(helper->source.find("capture helper") != std::string::npos);
    QVERIFY(!deviceTotalFor(t, 1, std::nullopt));
    QCOMPARE(deviceTotalFor(t, 0, parseDeviceTotal("40GiB"))->bytes, int64_t(40) << 30);
}

void TestAllocatorSettings::captureHelperRecordIsRead()
{
    // The key resources/capture/poolscope_capture.py writes beside PyTorch's own.
    QTemporaryDir tmp;
    const QString good = tmp.filePath("helper.json");
    const QByteArray segments = R"("segments": [{"device": 0, "address": 1099511627776, "total_size": 2097152, "allocated_size": 0,
        "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "small", "blocks": [{"address": 1099511627776,
        "size": 2097152, "requested_size": 0, "state": "inactive"}]}], "device_traces": [[]])";
    {
        QFile f(good);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{" + segments + R"(, "poolscope_device_properties": [{"device": 0, "name": "NVIDIA A100-SXM4-80GB",
            "total_memory": 85031714816, "free_at_dump": 1048576}]})");
    }
    const auto trace = load(good.toStdString());
    QCOMPARE(trace->deviceProperties.size(), size_t(1));
    QCOMPARE(trace->deviceProperties[0].totalMemory, int64_t(85031714816));
    QCOMPARE(trace->deviceProperties[0].freeAtDump, int64_t(1048576));
    QCOMPARE(QString::fromStdString(trace->deviceProperties[0].name), QString("NVIDIA A100-SXM4-80GB"));
    QVERIFY(trace->unknownKeys.empty());
    const QString bad = tmp.filePath("bad.json");
    {
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{" + segments + R"(, "poolscope_device_properties": [{"device": 0, "total_memory": -5}]})");
    }
    try {
        load(bad.toStdString());
        QFAIL("a negative total was accepted");
    } catch (const std::exception& e) {
        QVERIFY2(std::string(e.what()).find("poolscope_device_properties[0]") != std::string::npos, e.what());
    }
}

void TestAllocatorSettings::commandLine()
{
    const QString file = QStringLiteral(POOLSCOPE_TEST_DATA "/snapshots/train.json");
    QProcess p;
    p.start(QStringLiteral(POOLSCOPE_BINARY), {"whatif", file, "--alloc-conf", "expandable_segment:True"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 2);
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(err.contains("expandable_segment") && err.count('\n') == 1, qPrintable(err));
    p.start(QStringLiteral(POOLSCOPE_BINARY), {"whatif", file, "--alloc-conf", "expandable_segments:True,max_split_size_mb:512"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    QVERIFY2(out.contains("replayed with: expandable_segments:True,max_split_size_mb:512"), qPrintable(out));
    QVERIFY2(out.contains("allocator: PyTorch's defaults (the run's allocator_settings)"), qPrintable(out));
}

QTEST_GUILESS_MAIN(TestAllocatorSettings)
#include "test_allocator_settings.moc"
