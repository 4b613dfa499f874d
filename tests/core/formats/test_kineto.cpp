// Kineto/Chrome traces: [memory]/[OutOfMemory] events, devices, operator names, old traces without
// addresses or totals, errors; plus the two real traces of the corpus against expected.json.
#include "core/formats/kineto.h"

#include "fixture_util.h"

#include <nlohmann/json.hpp>

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <map>
#include <random>

using namespace poolscope;
using namespace poolscope::testutil;

namespace {

Trace readJson(const std::string& json, const LoadOptions& options = {})
{
    Trace t;
    Progress progress;
    const auto bytes = toBytes(json);
    readKinetoTrace(bytes, "trace.json", t, options, progress);
    return t;
}

LoadError readError(const std::string& json, const LoadOptions& options = {})
{
    try {
        readJson(json, options);
    } catch (const LoadError& e) {
        return e;
    }
    return LoadError(LoadErrorCode(-1), "", -1, "no error");
}

std::string mem(const char* name, std::string_view tid, std::string_view ts, std::string_view args)
{
    return std::string(R"({"ph":"i","cat":"cpu_instant_event","s":"t","name":")") + name + R"(","pid":1,"tid":)" +
           std::string(tid) + R"(,"ts":)" + std::string(ts) + R"(,"args":{)" + std::string(args) + "}}";
}

// New-style trace: two nested operators on pid 1 / tid 2, CUDA and CPU memory, an OOM, events out of
// ts order in the file, a tid written as a string, unrelated metadata with nesting.
const std::string kNewTrace = std::string(R"({"schemaVersion":1,"deviceProperties":[{"id":0,"name":"H100","x":{"y":[1,2]}}],
"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"aten::empty","pid":1,"tid":2,"ts":100.5,"dur":10,"args":{"Input Dims":[[2,3]],"Call stack":"a.py(1): f"}},
{"ph":"X","cat":"cpu_op","name":"model.forward","pid":1,"tid":2,"ts":90,"dur":100},
{"ph":"X","cat":"cpu_op","name":"other.thread","pid":1,"tid":3,"ts":0,"dur":1000},
)") + mem("[memory]", "2", "150", R"("Total Reserved":2000,"Total Allocated":1000,"Bytes":-512,"Addr":4096,"Device Id":0,"Device Type":1,"Ev Idx":7)") +
                              ",\n" + mem("[memory]", "2", "101.2506", R"("Total Reserved":2000,"Total Allocated":1512,"Bytes":512,"Addr":4096,"Device Id":0,"Device Type":1)") +
                              ",\n" + mem("[memory]", "\"2\"", "95", R"("Total Reserved":0,"Total Allocated":8,"Bytes":8,"Addr":77,"Device Id":-1,"Device Type":0)") +
                              ",\n" + mem("[OutOfMemory]", "2", "300", R"("Total Reserved":2000,"Total Allocated":1000,"Bytes":99999,"Device Id":0,"Device Type":1)") +
                              ",\n" + R"({"ph":"M","name":"process_name","pid":1,"args":{"name":"python"}}
]})";

} // namespace

class TestKineto : public QObject {
    Q_OBJECT

private slots:
    void microsToNanos()
    {
        QCOMPARE(parseMicrosToNanos("1336304245461.149"), std::optional<int64_t>(1336304245461149));
        QCOMPARE(parseMicrosToNanos("12"), std::optional<int64_t>(12000));
        QCOMPARE(parseMicrosToNanos("12.5"), std::optional<int64_t>(12500));
        QCOMPARE(parseMicrosToNanos("12.0005"), std::optional<int64_t>(12001));
        QCOMPARE(parseMicrosToNanos("12.0004"), std::optional<int64_t>(12000));
        QCOMPARE(parseMicrosToNanos("-3.25"), std::optional<int64_t>(-3250));
        QCOMPARE(parseMicrosToNanos("1.5e3"), std::optional<int64_t>(1500000));
        QCOMPARE(parseMicrosToNanos("abc"), std::optional<int64_t>());
        QCOMPARE(parseMicrosToNanos("99999999999999999999"), std::optional<int64_t>());
    }

    void newStyleTrace()
    {
        const Trace t = readJson(kNewTrace);
        QCOMPARE(t.devices.size(), size_t(2));
        const DeviceTrace& cuda = t.devices[0]; // CUDA first
        QCOMPARE(cuda.kind, DeviceKind::Cuda);
        QCOMPARE(cuda.device, 0);
        QCOMPARE(cuda.eventCount(), size_t(3));
        // Sorted by ts: alloc (101.25), free (150), OOM (300).
        QCOMPARE(cuda.events.action[0], Action::Alloc);
        QCOMPARE(cuda.events.action[1], Action::FreeCompleted);
        QCOMPARE(cuda.events.action[2], Action::Oom);
        QCOMPARE(cuda.events.timeUs[0], int64_t(101));
        QCOMPARE(cuda.events.timeUs[1], int64_t(150));
        QCOMPARE(cuda.events.size[1], int64_t(512)); // positive on free
        QCOMPARE(cuda.events.addr[0], uint64_t(4096));
        QVERIFY(cuda.hasTime);

        QCOMPARE(cuda.allocations.size(), size_t(1));
        const Allocation& a = cuda.allocations[0];
        QCOMPARE(a.size, int64_t(512));
        QCOMPARE(a.allocEvent, EventIndex(0));
        QCOMPARE(a.freeCompletedEvent, EventIndex(1));
        QCOMPARE(t.opName(a), std::string("aten::empty"));
        const auto stack = t.frames.stack(a.stack);
        QCOMPARE(stack.size(), size_t(2));
        QCOMPARE(t.frames.frame(stack[0]).name, std::string("aten::empty")); // innermost first
        QCOMPARE(t.frames.frame(stack[0]).filename, std::string("<op>"));
        QCOMPARE(t.frames.frame(stack[0]).line, int64_t(0));
        QCOMPARE(t.frames.frame(stack[1]).name, std::string("model.forward"));

        // Anchored on Total Allocated: 1000 bytes were allocated before the first event.
        QCOMPARE(cuda.reportedAllocated, (std::vector<int64_t>{1512, 1000, 1000}));
        QCOMPARE(cuda.initialAllocated, int64_t(1000));
        QCOMPARE(cuda.allocated, (std::vector<int64_t>{1512, 1000, 1000}));
        QCOMPARE(cuda.peakAllocated, int64_t(1512));
        QCOMPARE(cuda.peakIndex, EventIndex(0));
        QCOMPARE(cuda.reserved, (std::vector<int64_t>{2000, 2000, 2000}));
        QCOMPARE(cuda.endReserved, int64_t(2000));

        QCOMPARE(cuda.ooms.size(), size_t(1));
        QCOMPARE(cuda.ooms[0].requestedBytes, int64_t(99999));
        QCOMPARE(cuda.ooms[0].deviceFree, int64_t(-1));
        QCOMPARE(cuda.ooms[0].index, EventIndex(2));

        const DeviceTrace& cpu = t.devices[1];
        QCOMPARE(cpu.kind, DeviceKind::Cpu);
        QCOMPARE(cpu.device, -1);
        QCOMPARE(cpu.label(), std::string("cpu"));
        QCOMPARE(cpu.eventCount(), size_t(1));
        // tid "2" is thread 2: enclosed by model.forward only (aten::empty starts at 100.5).
        QCOMPARE(t.opName(cpu.allocations.at(0)), std::string("model.forward"));
        QCOMPARE(t.frames.stack(cpu.allocations[0].stack).size(), size_t(1));
    }

    void operatorOnOtherThreadDoesNotName()
    {
        const std::string json = "[" + std::string(R"({"ph":"X","name":"op","pid":1,"tid":9,"ts":0,"dur":100},)") +
                                 mem("[memory]", "2", "50", R"("Bytes":16,"Addr":1,"Device Type":1,"Device Id":0)") + "]";
        const Trace t = readJson(json);
        QCOMPARE(t.devices.size(), size_t(1));
        QVERIFY(t.opName(t.devices[0].allocations[0]).empty());
        QVERIFY(!t.devices[0].events.stack[0].valid());
        QVERIFY(!t.warnings.empty()); // "outside every operator"
    }

    // 2021 traces: Device Type/Id and Bytes only. Frees pair with the latest open allocation of the
    // same size; a free of something never allocated becomes a pre-existing allocation.
    void oldStyleWithoutAddresses()
    {
        const char* args[] = {R"("Device Type":1,"Device Id":0,"Bytes":16)", R"("Device Type":1,"Device Id":0,"Bytes":32)",
                              R"("Device Type":1,"Device Id":0,"Bytes":16)", R"("Device Type":1,"Device Id":0,"Bytes":-16)",
                              R"("Device Type":1,"Device Id":0,"Bytes":-64)", R"("Device Type":1,"Device Id":0,"Bytes":-32)"};
        std::string json = "[";
        for (int i = 0; i < 6; ++i)
            json += (i ? "," : "") + mem("[memory]", "1", std::to_string(10 * (i + 1)), args[i]);
        json += "]";
        const Trace t = readJson(json);
        QCOMPARE(t.devices.size(), size_t(1));
        const DeviceTrace& d = t.devices[0];
        QCOMPARE(d.eventCount(), size_t(6));
        QVERIFY(d.reportedAllocated.empty());
        QVERIFY(d.reportedReserved.empty());
        // Synthetic addresses: the second 16-byte alloc (event 2) is the one the free at event 3 closes.
        QCOMPARE(d.events.addr[3], d.events.addr[2]);
        QCOMPARE(d.events.addr[5], d.events.addr[1]);
        QVERIFY(d.events.addr[4] != d.events.addr[0]);
        QCOMPARE(d.allocations.size(), size_t(4));
        QVERIFY(d.allocations[0].preexisting()); // the 64-byte free
        QCOMPARE(d.allocations[0].size, int64_t(64));
        // Running sum is ours; the 64 bytes freed were there at the start.
        QCOMPARE(d.initialAllocated, int64_t(64));
        QCOMPARE(d.allocated, (std::vector<int64_t>{80, 112, 128, 112, 48, 16}));
        QCOMPARE(d.peakAllocated, int64_t(128));
        QVERIFY(!t.versionHints.empty());
    }

    void nestingLimitAndErrors()
    {
        LoadOptions options;
        options.maxNesting = 8;
        auto e = readError(R"({"traceEvents":[{"args":{"a":[[[[[[[[1]]]]]]]]}}]})", options);
        QCOMPARE(e.code(), LoadErrorCode::LimitExceeded);

        const std::string cut = kNewTrace.substr(0, kNewTrace.size() / 2);
        e = readError(cut);
        QCOMPARE(e.code(), LoadErrorCode::Truncated);
        QVERIFY(e.offset() > 0);

        std::string broken = kNewTrace;
        const auto at = broken.find("\"dur\":100");
        broken[at + 6] = '#';
        e = readError(broken);
        QCOMPARE(e.code(), LoadErrorCode::Malformed);
        QCOMPARE(e.offset(), int64_t(at + 6));
        QCOMPARE(e.file(), std::string("trace.json"));

        e = readError(R"({"displayTimeUnit":"ms"})");
        QCOMPARE(e.code(), LoadErrorCode::Malformed);
        QVERIFY(e.message().find("traceEvents") != std::string::npos);
    }

    // Every prefix fails with a typed error; random byte flips either parse or fail typed. Never a
    // crash, a hang or another exception (QtTest reports those as failures).
    void damagedInputFailsCleanly()
    {
        for (size_t cut = 0; cut < kNewTrace.size(); ++cut) {
            const auto e = readError(kNewTrace.substr(0, cut));
            QVERIFY2(e.code() == LoadErrorCode::Truncated || e.code() == LoadErrorCode::Malformed,
                     qPrintable(QString("cut %1: %2").arg(cut).arg(e.what())));
        }
        std::mt19937 rng(11);
        for (int round = 0; round < 3000; ++round) {
            std::string bad = kNewTrace;
            for (int k = 0; k < 3; ++k)
                bad[rng() % bad.size()] = char(rng() % 256);
            try {
                readJson(bad);
            } catch (const LoadError&) {
            }
        }
    }

    void cancel()
    {
        std::string json = "[";
        for (int i = 0; i < 40000; ++i)
            json += (i ? "," : "") + mem("[memory]", "1", std::to_string(i), R"("Device Type":1,"Device Id":0,"Bytes":16,"Addr":)" + std::to_string(4096 + 16 * i));
        json += "]";
        QVERIFY(json.size() > (2 << 20));
        Trace t;
        Progress progress;
        progress.cancel = true;
        const auto bytes = toBytes(json);
        try {
            readKinetoTrace(bytes, "c.json", t, {}, progress);
            QFAIL("not cancelled");
        } catch (const LoadError& e) {
            QCOMPARE(e.code(), LoadErrorCode::Cancelled);
        }
        Progress fresh;
        Trace ok;
        readKinetoTrace(bytes, "c.json", ok, {}, fresh);
        QCOMPARE(fresh.bytesDone.load(), int64_t(bytes.size()));
        QCOMPARE(ok.devices.at(0).eventCount(), size_t(40000));
        QCOMPARE(ok.devices[0].peakAllocated, int64_t(40000 * 16));
    }

    void corpusMatchesExpected_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("hta") << "hta_df_index_resolver.json.gz";
        QTest::newRow("resnet50 (2021)") << "kineto_resnet50_w0.pt.trace.json.gz";
    }
    void corpusMatchesExpected()
    {
        QFETCH(QString, file);
        const QString dir = QStringLiteral(POOLSCOPE_CORPUS_DIR);
        if (!QDir(dir).exists(file))
            QSKIP("corpus not present");
        std::ifstream in((dir + "/expected.json").toStdString());
        const auto expected = nlohmann::json::parse(in).at(file.toStdString());

        Progress progress;
        const auto trace = load((dir + "/" + file).toStdString(), {}, progress);
        QCOMPARE(trace->format, SourceFormat::KinetoTrace);
        QVERIFY(trace->formatDetail.ends_with("gzip-compressed"));
        QCOMPARE(progress.stage.load(), int(LoadStage::Done));

        size_t memoryEvents = 0, ooms = 0;
        for (const auto& d : trace->devices) {
            memoryEvents += d.eventCount();
            ooms += d.ooms.size();
        }
        QCOMPARE(memoryEvents, expected.at("memory_events").get<size_t>());
        QCOMPARE(ooms, expected.at("oom_events").get<size_t>());
        QCOMPARE(trace->devices.size(), expected.at("devices").size());
        for (const auto& e : expected.at("devices")) {
            const int type = e.at("device_type").get<int>();
            const int id = e.at("device_id").get<int>();
            const DeviceTrace* d = trace->findDevice(id, type == 1 ? DeviceKind::Cuda : DeviceKind::Cpu);
            QVERIFY2(d, qPrintable(QString("device %1/%2 missing").arg(type).arg(id)));
            QCOMPARE(d->eventCount(), e.at("events").get<size_t>());
            int64_t sumBytes = 0;
            for (size_t i = 0; i < d->eventCount(); ++i) {
                if (d->events.action[i] == Action::Alloc)
                    sumBytes += d->events.size[i];
                else if (d->events.action[i] == Action::FreeCompleted)
                    sumBytes -= d->events.size[i];
            }
            QCOMPARE(sumBytes, e.at("sum_bytes").get<int64_t>());
            if (e.at("peak_total_allocated").is_null()) {
                QVERIFY(d->reportedAllocated.empty());
            } else {
                QVERIFY(!d->reportedAllocated.empty());
                const int64_t peak = *std::max_element(d->reportedAllocated.begin(), d->reportedAllocated.end());
                QCOMPARE(peak, e.at("peak_total_allocated").get<int64_t>());
                // Our running sum, anchored once, must follow Kineto's own totals at every event.
                QCOMPARE(d->allocated, d->reportedAllocated);
                QCOMPARE(d->peakAllocated, peak);
            }
            // Every allocation the trace made has an operator name on these real traces, mostly.
            size_t named = 0, made = 0;
            for (const auto& a : d->allocations) {
                made += !a.preexisting();
                named += !a.preexisting() && a.op != 0;
            }
            qInfo("%s %s: %zu allocations, %zu named by an operator, initial %lld, peak %lld", qPrintable(file),
                  d->label().c_str(), made, named, (long long)d->initialAllocated, (long long)d->peakAllocated);
            if (d->kind == DeviceKind::Cuda)
                QVERIFY(named * 2 > made);
        }
    }
};

QTEST_APPLESS_MAIN(TestKineto)
#include "test_kineto.moc"
