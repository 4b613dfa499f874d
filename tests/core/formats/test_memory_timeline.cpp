// export_memory_timeline's raw rows: actions, synthetic pairing, categories, errors.
#include "core/formats/memory_timeline.h"

#include "fixture_util.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace poolscope;
using namespace poolscope::testutil;

namespace {

Trace readRows(const std::string& json)
{
    Trace t;
    Progress progress;
    const auto bytes = toBytes(json);
    readMemoryTimelineRaw(bytes, "t.raw.json", t, {}, progress);
    return t;
}

LoadError rowsError(const std::string& json)
{
    try {
        readRows(json);
    } catch (const LoadError& e) {
        return e;
    }
    return LoadError(LoadErrorCode(-1), "", -1, "no error");
}

// Two pre-existing tensors (parameter, optimizer state), an activation that becomes a gradient
// (a version increment that changes category), an increment that keeps its category, a temporary,
// and a destroy of something the export never saw created.
const char* kRows = R"([[-1, 1, 100, 0], [-1, 1, 200, 1], [1000, 2, 50, 4], [2000, 3, -50, 4], [2000, 3, 50, 5],
 [2500, 3, -200, 1], [2500, 3, 200, 1], [3000, 4, -50, 5], [4000, 2, 30, 3], [5000, 4, -30, 3], [6000, 4, -7, 7]])";

} // namespace

class TestMemoryTimeline : public QObject {
    Q_OBJECT

private slots:
    void rowsBecomeEvents()
    {
        const Trace t = readRows(kRows);
        QCOMPARE(t.devices.size(), size_t(1));
        const DeviceTrace& d = t.devices[0];
        QCOMPARE(d.label(), std::string("cuda:0"));
        const std::vector<Action> actions = {Action::Alloc, Action::Alloc, Action::Alloc, Action::FreeCompleted, Action::Alloc,
                                             Action::FreeCompleted, Action::Alloc, Action::FreeCompleted, Action::FreeCompleted};
        QCOMPARE(d.events.action, actions);
        // PREEXISTING rows (t = -1) take the earliest time; ns become µs.
        QCOMPARE(d.events.timeUs, (std::vector<int64_t>{1, 1, 1, 2, 2, 3, 4, 5, 6}));
        QCOMPARE(d.events.size, (std::vector<int64_t>{100, 200, 50, 50, 50, 50, 30, 30, 7}));
        // Pairing by synthetic key: each free closes the allocation of its size and category.
        QCOMPARE(d.events.addr[3], d.events.addr[2]);
        QCOMPARE(d.events.addr[5], d.events.addr[4]);
        QCOMPARE(d.events.addr[7], d.events.addr[6]);

        QCOMPARE(d.allocations.size(), size_t(6));
        const std::vector<ProfilerCategory> categories = {ProfilerCategory::Unknown, ProfilerCategory::Parameter,
                                                          ProfilerCategory::OptimizerState, ProfilerCategory::Activation,
                                                          ProfilerCategory::Gradient, ProfilerCategory::Temporary};
        for (size_t i = 0; i < categories.size(); ++i)
            QCOMPARE(d.allocations[i].category, categories[i]);
        QVERIFY(d.allocations[0].preexisting()); // the destroy of 7 bytes never created
        QVERIFY(d.allocations[1].aliveAtEnd());
        QVERIFY(d.allocations[2].aliveAtEnd());

        // The 7 bytes freed were allocated before the export began.
        QCOMPARE(d.initialAllocated, int64_t(7));
        QCOMPARE(d.allocated, (std::vector<int64_t>{107, 307, 357, 307, 357, 307, 337, 307, 300}));
        QCOMPARE(d.peakAllocated, int64_t(357));
        QCOMPARE(d.peakIndex, EventIndex(2));
    }

    void destroyInAnotherCategory()
    {
        const Trace t = readRows("[[0, 2, 64, 4], [10, 2, 64, 4], [20, 4, -64, 3]]");
        const DeviceTrace& d = t.devices[0];
        QCOMPARE(d.events.addr[2], d.events.addr[1]); // the most recent 64-byte allocation
        QCOMPARE(d.allocations.size(), size_t(2));
        bool warned = false;
        for (const auto& w : t.warnings)
            warned = warned || w.find("another category") != std::string::npos;
        QVERIFY(warned);
    }

    void unknownActionsAndCategoriesAreKept()
    {
        const Trace t = readRows("[[0, 2, 64, 9], [5, 7, 1, 0]]");
        const DeviceTrace& d = t.devices[0];
        QCOMPARE(d.eventCount(), size_t(2));
        QCOMPARE(d.events.action[1], Action::Unknown);
        QCOMPARE(d.unknownActions.at("timeline action 7"), int64_t(1));
        QCOMPARE(d.allocations[0].category, ProfilerCategory::Unknown);
    }

    void emptyExport()
    {
        const Trace t = readRows(" [ ] ");
        QCOMPARE(t.devices.size(), size_t(1));
        QCOMPARE(t.devices[0].eventCount(), size_t(0));
    }

    void errors()
    {
        auto e = rowsError("[[0, 2, 64, 4], [1, 2, 64]]");
        QCOMPARE(e.code(), LoadErrorCode::Malformed);
        QVERIFY(e.message().find("row 1 has 3") != std::string::npos);
        QCOMPARE(e.offset(), int64_t(26)); // at the closing bracket of the short row

        e = rowsError("[[0, 2, \"64\", 4]]");
        QCOMPARE(e.code(), LoadErrorCode::Malformed);
        QVERIFY(e.message().find("string") != std::string::npos);

        e = rowsError("[[0, 1000, 2000], [[0, 1, 2, 3, 4, 5, 6, 7, 8]]]"); // the coalesced [times, sizes] form
        QCOMPARE(e.code(), LoadErrorCode::Malformed);

        e = rowsError("{\"a\": 1}");
        QCOMPARE(e.code(), LoadErrorCode::Malformed);

        e = rowsError("[[0, 2, 64, 4], [1, 4, -64,");
        QCOMPARE(e.code(), LoadErrorCode::Truncated);
    }

    void everyPrefixFailsTyped()
    {
        const std::string rows = kRows;
        for (size_t cut = 0; cut + 1 < rows.size(); ++cut) {
            const auto e = rowsError(rows.substr(0, cut));
            QVERIFY2(e.code() == LoadErrorCode::Truncated || e.code() == LoadErrorCode::Malformed, e.what());
        }
    }

    void loadsCompressedThroughLoad()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("memory.raw.json.gz").toStdString();
        writeFile(path, gzipCompress(toBytes(kRows)));
        auto trace = load(path);
        QCOMPARE(trace->format, SourceFormat::MemoryTimelineRaw);
        QCOMPARE(trace->formatDetail, std::string("export_memory_timeline raw JSON, gzip-compressed"));
        QCOMPARE(trace->inputBytes, int64_t(std::string_view(kRows).size()));
        QCOMPARE(trace->devices.at(0).allocations.size(), size_t(6));
    }
};

QTEST_APPLESS_MAIN(TestMemoryTimeline)
#include "test_memory_timeline.moc"
