// Structurally valid files with wrong contents: fields of the wrong type, negative and absurd sizes
// and times, and traces that make no sense (frees without allocations, double frees, reused
// addresses, time going backwards, empty traces). Each case states its outcome: a Malformed or
// LimitExceeded LoadError naming the field, or a trace that loads with a warning saying what was odd.
// Snapshot cases run twice: as a pickle and as the same dict in JSON.
#include "robustness_util.h"

#include <QtTest>

#include <cmath>
#include <functional>
#include <limits>

using namespace poolscope;
using namespace poolscope::robust;

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

struct Case {
    const char* name;
    std::function<void(V&)> mutate;
    std::optional<LoadErrorCode> code; // nullopt: loads
    const char* needle;                // in the error, or in one of the warnings
    bool jsonToo = true;               // false where JSON cannot express the value (NaN)
};

V& traceOf(V& snap) { return snap.find("device_traces")->at(0); }
V& entry(V& snap, size_t k) { return traceOf(snap).at(k); }
V& segment(V& snap) { return snap.find("segments")->at(0); }
V& block(V& snap) { return segment(snap).find("blocks")->at(0); }
void setEntries(V& snap, std::vector<V> entries) { *traceOf(snap).items = std::move(entries); }

const std::vector<Case>& cases()
{
    using C = LoadErrorCode;
    static const std::vector<Case> all = {
        // ---- wrong types --------------------------------------------------------------------
        {"action is an int", [](V& s) { entry(s, 2).set("action", 5); }, C::Malformed, "trace entry #2.action: expected a string"},
        {"addr is a string", [](V& s) { entry(s, 2).set("addr", "0x10"); }, C::Malformed, "trace entry #2.addr: expected an integer"},
        {"size is a string", [](V& s) { entry(s, 2).set("size", "big"); }, C::Malformed, "trace entry #2.size"},
        {"size is a list", [](V& s) { entry(s, 2).set("size", V::list({1})); }, C::Malformed, "trace entry #2.size"},
        {"size is 1e300", [](V& s) { entry(s, 2).set("size", 1e300); }, C::Malformed, "trace entry #2.size"},
        {"size is NaN", [](V& s) { entry(s, 2).set("size", std::nan("")); }, C::Malformed, "trace entry #2.size", false},
        {"size is 2^64-1", [](V& s) { entry(s, 2).set("size", V::uint(~uint64_t(0))); }, C::Malformed, "trace entry #2.size"},
        {"stream is a string", [](V& s) { entry(s, 2).set("stream", "s"); }, C::Malformed, "trace entry #2.stream"},
        {"time_us is a string", [](V& s) { entry(s, 2).set("time_us", "now"); }, C::Malformed, "trace entry #2.time_us"},
        {"time_us is -inf", [](V& s) { entry(s, 2).set("time_us", -INFINITY); }, C::Malformed, "trace entry #2.time_us", false},
        {"frames is an int", [](V& s) { entry(s, 2).set("frames", 7); }, C::Malformed, "trace entry #2.frames"},
        {"frames hold ints", [](V& s) { entry(s, 2).set("frames", V::list({1, 2})); }, C::Malformed, "trace entry #2.frames[0]"},
        {"filename is an int", [](V& s) { entry(s, 2).set("frames", V::list({V::dict({{"filename", 3}, {"line", 1}, {"name", "f"}})})); },
         C::Malformed, "filename: expected a string"},
        // No figure depends on a frame's line: an odd one keeps the dump, as an unknown line, with a warning.
        {"line is a string", [](V& s) { entry(s, 2).set("frames", V::list({V::dict({{"filename", "a.py"}, {"line", "x"}, {"name", "f"}})})); },
         std::nullopt, "1 frame(s) had a line that is not a line number (e.g. str 'x')"},
        {"line is 2^64-1 (-1 written unsigned)",
         [](V& s) { entry(s, 2).set("frames", V::list({V::dict({{"filename", "a.py"}, {"line", V::uint(~uint64_t(0))}, {"name", "f"}})})); },
         std::nullopt, "(e.g. int 18446744073709551615 (beyond int64))"},
        {"entry is a string", [](V& s) { entry(s, 3) = V("oops"); }, C::Malformed, "trace entry #3"},
        {"entry lacks action", [](V& s) { entry(s, 3) = V::dict({{"addr", 1}}); }, C::Malformed, "trace entry #3"},
        {"first entry is a list", [](V& s) { entry(s, 0) = V::list(); }, C::Malformed, "device_traces[0][0]"},
        {"device_traces is a dict", [](V& s) { s.set("device_traces", V::dict()); }, C::Malformed, "device_traces: expected a list"},
        {"device_traces[0] is a string", [](V& s) { *s.find("device_traces")->items = {V("x")}; }, C::Malformed, "device_traces[0]"},
        {"segments is a string", [](V& s) { s.set("segments", "x"); }, C::Malformed, "segments: expected a list"},
        {"segment is an int", [](V& s) { segment(s) = V(1); }, C::Malformed, "segments[0]: expected a segment dict"},
        {"total_size is a string", [](V& s) { segment(s).set("total_size", "x"); }, C::Malformed, "segments[0].total_size"},
        {"total_size is missing", [](V& s) { segment(s).kv->erase(segment(s).kv->begin() + 2); }, C::Malformed, "total_size is missing"},
        {"address is a string", [](V& s) { segment(s).set("address", "x"); }, C::Malformed, "segments[0].address"},
        {"blocks is a dict", [](V& s) { segment(s).set("blocks", V::dict()); }, C::Malformed, "segments[0].blocks"},
        {"block is an int", [](V& s) { block(s) = V(5); }, C::Malformed, "segments[0].blocks[0]"},
        {"block state unknown", [](V& s) { block(s).set("state", "bogus"); }, C::Malformed, "blocks[0].state"},
        {"block state is an int", [](V& s) { block(s).set("state", 1); }, C::Malformed, "blocks[0].state"},
        {"segment_pool_id holds strings", [](V& s) { segment(s).set("segment_pool_id", V::tuple({"a", "b"})); }, C::Malformed, "segment_pool_id"},
        {"allocator_settings is a list", [](V& s) { s.set("allocator_settings", V::list()); }, C::Malformed, "allocator_settings"},
        {"external_annotations is a dict", [](V& s) { s.set("external_annotations", V::dict()); }, C::Malformed, "external_annotations"},
        {"annotation stage MIDDLE", [](V& s) { s.set("external_annotations", V::list({V::dict({{"name", "x"}, {"stage", "MIDDLE"}})})); },
         C::Malformed, "stage"},
        // As JSON, a bare 5 is no format at all (UnknownFormat, tested in test_cli_errors); as a pickle it is
        // a snapshot of the wrong shape.
        {"top level is an int", [](V& s) { s = V(5); }, C::Malformed, "<top level>", false},
        {"top level lacks segments", [](V& s) { s.kv->erase(s.kv->begin()); }, C::Malformed, "no 'segments' key"},
        {"error text with a newline", [](V& s) { block(s).set("state", "two\nlines"); }, C::Malformed, "blocks[0].state"},

        // ---- negative and absurd sizes and times ---------------------------------------------
        {"negative entry size", [](V& s) { entry(s, 2).set("size", -1); }, C::Malformed, "trace entry #2.size: expected a non-negative"},
        {"negative total_size", [](V& s) { segment(s).set("total_size", -5); }, C::Malformed, "total_size: expected a non-negative"},
        {"negative block size", [](V& s) { block(s).set("size", -5); }, C::Malformed, "blocks[0].size: expected a non-negative"},
        {"alloc of 2^63-1 bytes", [](V& s) { entry(s, 1).set("size", kInt64Max); }, C::LimitExceeded, "8 PiB"},
        {"allocs summing past 2^63",
         [](V& s) {
             std::vector<V> e;
             for (int k = 0; k < 4; ++k)
                 e.push_back(entryV("alloc", 4096 * (k + 1), int64_t(1) << 61));
             setEntries(s, e);
         },
         C::LimitExceeded, "8 PiB"},
        {"segment of 2^62 bytes", [](V& s) { segment(s).set("total_size", int64_t(1) << 62); }, C::LimitExceeded, "8 PiB"},
        {"segments summing past 2^63",
         [](V& s) {
             V seg = segment(s);
             seg.set("total_size", kInt64Max);
             *s.find("segments")->items = {seg, seg};
         },
         C::LimitExceeded, "8 PiB"},
        {"active block of 2^63-1", [](V& s) { block(s).set("size", kInt64Max); }, C::LimitExceeded, "8 PiB"},
        {"segment_free of 2^63-1", [](V& s) { entry(s, 0) = entryV("segment_free", 1, kInt64Max, 5); }, C::LimitExceeded, "8 PiB"},
        {"time_us 2^62", [](V& s) { entry(s, 2).set("time_us", int64_t(1) << 62); }, std::nullopt, "impossible time"},
        {"time_us -2^63+1", [](V& s) { entry(s, 2).set("time_us", -kInt64Max); }, std::nullopt, "impossible time"},
        {"oom with absurd device_free", [](V& s) { entry(s, 2) = entryV("oom", 0, 1 << 30, 5); entry(s, 2).set("device_free", kInt64Max); },
         std::nullopt, ""},
        {"device index -1", [](V& s) { segment(s).set("device", -1); }, C::Malformed, "segments[0].device"},

        // ---- traces that make no sense --------------------------------------------------------
        {"three frees without an allocation",
         [](V& s) {
             auto& t = *traceOf(s).items;
             for (int k = 0; k < 3; ++k)
                 t.push_back(entryV("free_completed", 999 * 4096 + k, 64, 2'000'000'000'000'000));
         },
         std::nullopt, "3 frees of addresses"},
        {"double free",
         [](V& s) {
             setEntries(s, {entryV("alloc", 8192, 100, 1), entryV("free_completed", 8192, 100, 2), entryV("free_completed", 8192, 100, 3)});
         },
         std::nullopt, "1 frees of an address that was already freed"},
        {"reused live address",
         [](V& s) { setEntries(s, {entryV("alloc", 8192, 100, 1), entryV("alloc", 8192, 200, 2), entryV("free_completed", 8192, 200, 3)}); },
         std::nullopt, "1 allocations reused a live address"},
        {"time going backwards",
         [](V& s) {
             setEntries(s, {entryV("alloc", 8192, 100, 1000), entryV("alloc", 9000, 100, 500), entryV("alloc", 10000, 100, 400),
                            entryV("alloc", 11000, 100, 2000)});
         },
         std::nullopt, "2 entries are earlier than the entry before them"},
        {"free_requested without free_completed", [](V& s) { setEntries(s, {entryV("alloc", 8192, 100, 1), entryV("free_requested", 8192, 100, 2)}); },
         std::nullopt, ""},
        {"free_completed without free_requested", [](V& s) { setEntries(s, {entryV("alloc", 8192, 100, 1), entryV("free_completed", 8192, 100, 2)}); },
         std::nullopt, ""},
        {"unknown action", [](V& s) { entry(s, 2).set("action", "teleport"); }, std::nullopt, "unknown action 'teleport'"},
        {"segment_alloc beyond the final segments",
         [](V& s) { setEntries(s, {entryV("segment_alloc", int64_t(1) << 41, 1 << 30, 1)}); },
         std::nullopt, "segment events free more than the final segments hold"},
        {"oom without device_free", [](V& s) { setEntries(s, {entryV("oom", 0, 1 << 30, 1)}); }, std::nullopt, ""},
        {"empty trace", [](V& s) { setEntries(s, {}); }, std::nullopt, ""},
        {"empty trace and no segments", [](V& s) { s = snapshotV({}, {}); }, std::nullopt, ""},
        {"no device_traces at all", [](V& s) { s = V::dict({{"segments", V::list()}}); }, std::nullopt, ""},
        {"entries without addr or size", [](V& s) { setEntries(s, {V::dict({{"action", "alloc"}}), V::dict({{"action", "free_completed"}})}); },
         std::nullopt, ""},
    };
    return all;
}

} // namespace

class TestWrongFields : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    void check(const Case& c, const Outcome& o, const char* encoding)
    {
        const std::string ctx = std::string(c.name) + " (" + encoding + "): " + describe(o);
        QVERIFY2(problemWith(o).empty(), (ctx + " -- " + problemWith(o)).c_str());
        if (c.code) {
            QVERIFY2(o.code == c.code, ctx.c_str());
            QVERIFY2(o.what.find(c.needle) != std::string::npos, ctx.c_str());
        } else {
            QVERIFY2(o.loaded(), ctx.c_str());
            if (*c.needle)
                QVERIFY2(o.hasWarning(c.needle), ctx.c_str());
        }
    }

private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void snapshot_data()
    {
        QTest::addColumn<int>("index");
        for (size_t i = 0; i < cases().size(); ++i)
            QTest::newRow(cases()[i].name) << int(i);
    }
    void snapshot()
    {
        QFETCH(int, index);
        const Case& c = cases()[size_t(index)];
        V snap = healthySnapshot().clone();
        c.mutate(snap);
        check(c, loadBytes((m_dir.path() + "/case.pickle").toStdString(), toPickle(snap)), "pickle");
        if (c.jsonToo)
            check(c, loadBytes((m_dir.path() + "/case.json").toStdString(), toJson(snap)), "JSON");
    }

    // The baseline the mutations start from is clean.
    void healthyHasNoWarnings()
    {
        const Outcome o = loadBytes((m_dir.path() + "/ok.pickle").toStdString(), toPickle(healthySnapshot()));
        QVERIFY2(o.loaded() && o.trace->warnings.empty(), describe(o).c_str());
    }

    // Kineto and timeline exports: the same questions for their fields.
    void kinetoFields_data()
    {
        QTest::addColumn<QString>("args");
        QTest::addColumn<int>("code"); // -1: loads
        QTest::addColumn<QString>("needle");
        QTest::newRow("Bytes INT64_MIN") << R"("Device Type":1,"Bytes":-9223372036854775808,"Addr":1)" << int(LoadErrorCode::Malformed) << "Bytes";
        QTest::newRow("Bytes 2^63-1") << R"("Device Type":1,"Bytes":9223372036854775807,"Addr":1)" << int(LoadErrorCode::Malformed) << "Bytes";
        QTest::newRow("Bytes 1e300") << R"("Device Type":1,"Bytes":1e300,"Addr":1)" << -1 << "without a Bytes";
        QTest::newRow("Bytes a string") << R"("Device Type":1,"Bytes":"5","Addr":1)" << -1 << "without a Bytes";
        QTest::newRow("Total Allocated 2^62") << R"("Device Type":1,"Bytes":5,"Addr":1,"Total Allocated":4611686018427387904)"
                                             << int(LoadErrorCode::Malformed) << "Total Allocated";
        QTest::newRow("Total Reserved -2^62") << R"("Device Type":1,"Bytes":5,"Addr":1,"Total Reserved":-4611686018427387904)"
                                             << int(LoadErrorCode::Malformed) << "Total Reserved";
        QTest::newRow("Device Id 2^40") << R"("Device Type":1,"Device Id":1099511627776,"Bytes":5,"Addr":1)" << -1 << "";
        QTest::newRow("Device Type -7") << R"("Device Type":-7,"Bytes":5,"Addr":1)" << -1 << "";
    }
    void kinetoFields()
    {
        QFETCH(QString, args);
        QFETCH(int, code);
        QFETCH(QString, needle);
        const std::string json = R"({"traceEvents":[{"name":"[memory]","ts":9.2e15,"args":{)" + args.toStdString() +
                                 R"(}},{"ph":"X","name":"op","ts":9223372036854775,"dur":9223372036854775}]})";
        const Outcome o = loadBytes((m_dir.path() + "/k.json").toStdString(), toBytes(json));
        QVERIFY2(problemWith(o).empty(), (describe(o) + " -- " + problemWith(o)).c_str());
        if (code >= 0) {
            QVERIFY2(o.code == LoadErrorCode(code), describe(o).c_str());
            QVERIFY2(o.what.find(needle.toStdString()) != std::string::npos, describe(o).c_str());
        } else {
            QVERIFY2(o.loaded(), describe(o).c_str());
            if (!needle.isEmpty())
                QVERIFY2(o.hasWarning(needle.toStdString()), describe(o).c_str());
        }
    }
    void kinetoOddities()
    {
        // Frees without allocations and operators that end past the end of time.
        const std::string json = R"({"traceEvents":[
            {"ph":"X","name":"op","pid":1,"tid":1,"ts":9223372036854775,"dur":9223372036854775},
            {"name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":1,"Bytes":-64,"Addr":1}},
            {"name":"[memory]","pid":1,"tid":1,"ts":2,"args":{"Device Type":1,"Bytes":-64,"Addr":2}},
            {"name":"[memory]","pid":1,"tid":1,"ts":9223372036854775,"args":{"Device Type":1,"Bytes":64,"Addr":3}}]})";
        const Outcome o = loadBytes((m_dir.path() + "/k.json").toStdString(), toBytes(json));
        QVERIFY2(o.loaded() && problemWith(o).empty(), describe(o).c_str());
        QVERIFY2(o.hasWarning("2 frees of addresses"), describe(o).c_str());
    }
    void timelineFields_data()
    {
        QTest::addColumn<QString>("rows");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("needle");
        QTest::newRow("bytes INT64_MIN") << "[[1, 4, -9223372036854775808, 1]]" << int(LoadErrorCode::Malformed) << "bytes";
        QTest::newRow("bytes 2^62") << "[[1, 2, 4611686018427387904, 1]]" << int(LoadErrorCode::Malformed) << "bytes";
        QTest::newRow("time INT64_MIN") << "[[-9223372036854775808, 2, 8, 1], [5, 4, -8, 1]]" << -1 << "";
        QTest::newRow("time INT64_MAX") << "[[9223372036854775807, 2, 8, 1], [5, 4, -8, 1]]" << -1 << "";
        QTest::newRow("category huge") << "[[1, 2, 8, 9223372036854775807]]" << -1 << "category index outside";
        QTest::newRow("action negative") << "[[1, -9223372036854775808, 8, 1]]" << -1 << "unknown action";
        QTest::newRow("destroy without create") << "[[1, 4, -8, 1], [2, 4, -8, 1]]" << -1 << "2 frees of addresses";
        // (A first row that is not 4 numbers is not recognised as a timeline at all: UnknownFormat.)
        QTest::newRow("row of 3") << "[[1, 2, 8, 1], [1, 2, 8]]" << int(LoadErrorCode::Malformed) << "row 1 has 3";
        QTest::newRow("string in row") << "[[1, 2, 8, 1], [1, 2, \"8\", 1]]" << int(LoadErrorCode::Malformed) << "a string in row 1";
    }
    void timelineFields()
    {
        QFETCH(QString, rows);
        QFETCH(int, code);
        QFETCH(QString, needle);
        const Outcome o = loadBytes((m_dir.path() + "/t.raw.json").toStdString(), toBytes(rows.toStdString()));
        QVERIFY2(problemWith(o).empty(), (describe(o) + " -- " + problemWith(o)).c_str());
        if (code >= 0) {
            QVERIFY2(o.code == LoadErrorCode(code), describe(o).c_str());
            QVERIFY2(o.what.find(needle.toStdString()) != std::string::npos, describe(o).c_str());
        } else {
            QVERIFY2(o.loaded(), describe(o).c_str());
            if (!needle.isEmpty())
                QVERIFY2(o.hasWarning(needle.toStdString()), describe(o).c_str());
        }
    }
};

QTEST_GUILESS_MAIN(TestWrongFields)
#include "test_wrong_fields.moc"
