// Every snapshot variant the project's generator writes (tests/data/make_fixtures.py), loaded through
// poolscope::load and compared with the facts an independent Python replay computed.
#include "core/load.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

using namespace poolscope;
using nlohmann::json;

namespace {
const std::string kDir = std::string(POOLSCOPE_TEST_DATA) + "/snapshots/";

json facts()
{
    std::ifstream f(kDir + "facts.json");
    return json::parse(f);
}

LoadErrorCode loadError(const std::string& path, std::string* message = nullptr)
{
    try {
        load(path);
    } catch (const LoadError& e) {
        if (message)
            *message = e.what();
        return e.code();
    }
    return LoadErrorCode::Cancelled;
}
} // namespace

class TestSnapshotVariants : public QObject {
    Q_OBJECT
private slots:
    void matchesIndependentFacts_data()
    {
        QTest::addColumn<QString>("file");
        const json all = facts();
        for (const auto& [name, _] : all.items())
            QTest::newRow(name.c_str()) << QString::fromStdString(name);
    }
    void matchesIndependentFacts()
    {
        QFETCH(QString, file);
        const json expected = facts()[file.toStdString()];
        const auto trace = load(kDir + file.toStdString());
        QCOMPARE(trace->devices.size(), expected.size());
        for (const json& e : expected) {
            const DeviceTrace* d = trace->findDevice(e["device"].get<int>());
            QVERIFY(d);
            QCOMPARE(int64_t(d->eventCount()), e["entries"].get<int64_t>());
            QCOMPARE(d->initialAllocated, e["initial_allocated"].get<int64_t>());
            QCOMPARE(d->peakAllocated, e["peak_allocated"].get<int64_t>());
            QCOMPARE(d->peakIndex, e["peak_index"].get<int64_t>());
            QCOMPARE(d->endReserved, e["end_reserved"].get<int64_t>());
            QCOMPARE(d->orphanFreeBytes, e["orphan_free_bytes"].get<int64_t>());
            QCOMPARE(int64_t(d->ooms.size()), e["ooms"].get<int64_t>());
            // At the end, allocated equals the final segments' active blocks: the model is absolute.
            if (d->eventCount() > 0) {
                int64_t active = 0;
                for (const auto& s : d->segments)
                    for (const auto& b : s.blocks)
                        active += b.state == BlockState::ActiveAllocated ? b.size : 0;
                QCOMPARE(d->allocated.back(), active);
                QCOMPARE(d->reserved.back(), d->endReserved);
            }
        }
    }

    void allEncodingsAgree()
    {
        const auto ref = load(kDir + "train_p4.pickle");
        for (const char* name : {"train_p0.pickle", "train_p1.pickle", "train_p2.pickle", "train_p3.pickle", "train_p5.pickle", "train.json", "train.pickle.gz",
                                 "train.pickle.zst", "train.json.zst"}) {
            const auto t = load(kDir + name);
            const DeviceTrace& a = ref->devices[0];
            const DeviceTrace& b = t->devices[0];
            QVERIFY2(a.allocated == b.allocated, name);
            QVERIFY2(a.reserved == b.reserved, name);
            QVERIFY2(a.events.timeUs == b.events.timeUs, name);
            QCOMPARE(t->frames.frameCount(), ref->frames.frameCount());
            QCOMPARE(t->annotations.size(), size_t(2));
            QCOMPARE(t->allocatorSettings.at("roundup_power2_divisions"), std::string("1:0,2:0"));
        }
    }

    void framesAreInternedOnce()
    {
        const auto t = load(kDir + "train_p4.pickle");
        QCOMPARE(t->frames.frameCount(), size_t(7)); // 2 C++ frames and 5 Python frames in the generator
        const DeviceTrace& d = t->devices[0];
        // alloc and free of one tensor share one traceback in PyTorch, hence one StackId here.
        QCOMPARE(d.events.action[1], Action::Alloc);
        QCOMPARE(d.events.action[5], Action::FreeRequested);
        QCOMPARE(d.events.stack[1], d.events.stack[5]);
        const auto frames = t->frames.stack(d.events.stack[1]);
        QCOMPARE(frames.size(), size_t(5));
        QCOMPARE(t->frames.frame(frames[0]).filename, std::string("??")); // innermost first
        QCOMPARE(t->frames.frame(t->frames.userFrame(d.events.stack[1])).filename, std::string("/home/u/model.py"));
    }

    void pairingAndPreexisting()
    {
        const auto t = load(kDir + "train_p4.pickle");
        const DeviceTrace& d = t->devices[0];
        int preexisting = 0, aliveAtEnd = 0;
        for (const auto& a : d.allocations) {
            preexisting += a.preexisting();
            aliveAtEnd += a.aliveAtEnd();
            if (!a.preexisting() && !a.aliveAtEnd())
                QVERIFY(a.freeRequestedEvent < a.freeCompletedEvent && a.allocEvent < a.freeRequestedEvent);
        }
        QCOMPARE(preexisting, 2); // the parameter still alive, and the one freed during the trace
        QCOMPARE(aliveAtEnd, 4);  // parameter, one activation, two optimizer buffers
        QCOMPARE(d.ooms.size(), size_t(1));
        QCOMPARE(d.ooms[0].requestedBytes, int64_t(40) << 20);
        QCOMPARE(d.ooms[0].deviceFree, int64_t(3) << 20);
        // The surviving activation takes its rounded size from the final block.
        for (const auto& a : d.allocations)
            if (a.size == (int64_t(4) << 20) - 300)
                QCOMPARE(a.blockSize, int64_t(4) << 20);
    }

    void legacyBlocksGetAddressesAndStacks()
    {
        const auto t = load(kDir + "legacy_no_time.pickle");
        const DeviceTrace& d = t->devices[0];
        QVERIFY(!d.hasTime);
        QCOMPARE(d.segments[1].blocks[1].address, d.segments[1].address + (uint64_t(12) << 20));
        QVERIFY(d.segments[0].blocks[0].stack.valid());
    }

    void unknownKeysAndActionsAreKeptAndCounted()
    {
        const auto t = load(kDir + "two_devices_unknown.pickle");
        QCOMPARE(t->devices.size(), size_t(2));
        QCOMPARE(t->devices[0].unknownActions.at("mystery_action"), int64_t(1));
        QCOMPARE(t->unknownKeys.at("snapshot.some_future_key"), int64_t(1));
        QCOMPARE(t->unknownKeys.at("trace_entry.brand_new_key"), int64_t(1));
        bool warned = false;
        for (const auto& w : t->warnings)
            warned |= w.find("mystery_action") != std::string::npos;
        QVERIFY(warned);
    }

    void bareSegmentListAndEmptyTrace()
    {
        const auto bare = load(kDir + "bare_segments.pickle");
        QCOMPARE(bare->devices.size(), size_t(1));
        QCOMPARE(bare->devices[0].eventCount(), size_t(0));
        QCOMPARE(bare->devices[0].peakIndex, kNoEvent);
        const auto empty = load(kDir + "empty_trace.pickle");
        QCOMPARE(empty->devices.size(), size_t(1));
        QCOMPARE(empty->devices[0].peakAllocated, int64_t(0));
    }

    // Python's json.dump writes lone surrogates (surrogateescape-decoded names) as lone \udcxx
    // escapes: each reads as U+FFFD with a warning; valid pairs and escaped backslashes stay as they are.
    void loneSurrogatesInJsonAreReplaced()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("odd.json").toStdString();
        // As written in the file: \udcff alone, \ud83d alone, a valid pair, and an escaped backslash.
        const std::string names[] = {"lone\\udcff low", "lone \\ud83d high", "pair \\ud83d\\ude00 ok", "not \\\\udcff an escape"};
        std::string entries;
        for (int i = 0; i < 4; ++i)
            entries += std::string(i ? "," : "") + "{\"action\": \"alloc\", \"addr\": " + std::to_string(4096 * (i + 1)) +
                       ", \"size\": 512, \"stream\": 0, \"frames\": [{\"filename\": \"a.py\", \"line\": 1, \"name\": \"" + names[i] + "\"}]}";
        std::ofstream(path) << "{\"segments\": [], \"device_traces\": [[" + entries + "]]}";
        const auto t = load(path);
        const DeviceTrace& d = t->devices[0];
        auto name = [&](size_t e) { return t->frames.frame(t->frames.stack(d.events.stack[e])[0]).name; };
        QCOMPARE(name(0), std::string("lone\xef\xbf\xbd low"));
        QCOMPARE(name(1), std::string("lone \xef\xbf\xbd high"));
        QCOMPARE(name(2), std::string("pair \xf0\x9f\x98\x80 ok"));
        QCOMPARE(name(3), std::string("not \\udcff an escape"));
        QVERIFY(std::any_of(t->warnings.begin(), t->warnings.end(),
                            [](const std::string& w) { return w.rfind("2 lone surrogate escape(s)", 0) == 0; }));
    }

    void codeInAPickleIsRefused()
    {
        std::string msg;
        QCOMPARE(loadError(kDir + "evil_reduce.pickle", &msg), LoadErrorCode::CodeExecution);
        QVERIFY2(msg.find("evil_reduce.pickle: byte ") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find("tried to run code") != std::string::npos, msg.c_str());
    }

    void truncatedSnapshotAtEveryByte()
    {
        std::ifstream f(kDir + "train_p4.pickle", std::ios::binary);
        const std::string whole((std::istreambuf_iterator<char>(f)), {});
        const std::string path = QDir::tempPath().toStdString() + "/poolscope_trunc.pickle";
        for (size_t cut = 1; cut < whole.size(); cut += 7) {
            std::ofstream(path, std::ios::binary | std::ios::trunc).write(whole.data(), std::streamsize(cut));
            const auto code = loadError(path);
            QVERIFY2(code == LoadErrorCode::Truncated || code == LoadErrorCode::Malformed, std::to_string(cut).c_str());
        }
        std::remove(path.c_str());
    }

    void wrongFieldTypeNamesTheField()
    {
        // A JSON snapshot whose size is a string: the message names the field and what was expected.
        const std::string path = QDir::tempPath().toStdString() + "/poolscope_badfield.json";
        std::ofstream(path) << R"({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": "big"}]]})";
        std::string msg;
        QCOMPARE(loadError(path, &msg), LoadErrorCode::Malformed);
        QVERIFY2(msg.find("trace entry #0.size: expected an integer, found str 'big'") != std::string::npos, msg.c_str());
        std::remove(path.c_str());
    }
};

QTEST_APPLESS_MAIN(TestSnapshotVariants)
#include "test_snapshot_variants.moc"
