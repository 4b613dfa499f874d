// An OOM at a limit of the process's own (torch.cuda.set_per_process_memory_fraction): the device
// had room for the request, so the capacity is not reserved + free at the OOM (139 GiB on the H200
// this dump came from, where the run was capped at 1.9 GiB). A real dump (tests/data/gpu_runs,
// foreach Adam running out under a cap) and a generated OOM at the device's own limit.
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/report/report.h"
#include "core/synth/synth.h"

#include <QtTest>

using namespace poolscope;

class TestOomProcessLimit : public QObject {
    Q_OBJECT
private slots:
    void aCapThatRefusedTheRequestIsTheCapacity()
    {
        DocumentOptions options;
        options.rules = std::make_shared<const RuleSet>(RuleSet::fromFile(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
        const auto doc = Document::open(POOLSCOPE_TEST_DATA "/gpu_runs/adam_step_oom.pickle.gz", options);
        QVERIFY(doc);
        const DeviceDocument& dev = doc->device(doc->defaultDevice());
        const DeviceTrace& d = dev.device();
        QCOMPARE(d.ooms.size(), size_t(1));
        const OomEvent& oom = d.ooms.back();
        QVERIFY(oom.deviceFree > int64_t(100) << 30); // the H200 had room
        QVERIFY(oom.atProcessLimit());
        const int64_t reserved = d.reservedAt(oom.index);
        QCOMPARE(dev.oomCapacity(), reserved + oom.requestedBytes);
        QVERIFY(dev.oomCapacity() < int64_t(3) << 30);
        const std::string text = reportText(buildReport(*doc, ReportOptions{}));
        QVERIFY2(text.find("The device had room for it: a limit of this process refused it") != std::string::npos, text.c_str());
        // The wall is still named (an OOM is one wherever the limit came from), and the replay of the
        // allocator settings runs against the limit's lower end (the bytes reserved), not 139 GiB.
        QVERIFY2(text.find("The wall is optimizer state") != std::string::npos, text.c_str());
        QVERIFY2(text.find("still run out at 1.86 GiB") != std::string::npos, text.c_str());
    }

    void theDevicesOwnLimitIsReservedPlusFree()
    {
        SynthModel m; // the generator's allocator runs out of the device's memory
        m.layers = 2;
        m.hidden = 128;
        m.heads = 4;
        m.seq = 64;
        m.microBatch = 2;
        m.vocab = 1000;
        m.capacity = synthSizes(m).parameterBytes * 3;
        const SynthResult r = synthesize(m);
        const DeviceTrace& d = r.trace.devices[0];
        QCOMPARE(d.ooms.size(), size_t(1));
        QVERIFY(!d.ooms.back().atProcessLimit());
        QCOMPARE(d.ooms.back().capacity(d.reservedAt(d.ooms.back().index)), d.reservedAt(d.ooms.back().index) + d.ooms.back().deviceFree);
    }
};

QTEST_GUILESS_MAIN(TestOomProcessLimit)
#include "test_oom_process_limit.moc"
