// The limits that keep a hostile file from exhausting memory or time, each with a clear LoadError:
// decompression bombs (ratio and budget), nesting depth, memo size, declared string lengths, string
// and list sizes, the number of trace entries, and amplification through pickle memo sharing, all
// against LoadOptions (memoryBudgetBytes, maxDecompressionRatio, maxNesting).
#include "core/formats/fixture_util.h"
#include "robustness_util.h"

#include <QtTest>

#include <zlib.h>
#include <zstd.h>

using namespace poolscope;
using namespace poolscope::robust;

namespace {

// Pickle bytes opcode by opcode.
struct P {
    Bytes b;
    P& op(uint8_t o) { b.push_back(o); return *this; }
    P& le(uint64_t v, int n) { for (int k = 0; k < n; ++k) b.push_back(uint8_t(v >> (8 * k))); return *this; }
    P& raw(std::string_view s) { b.insert(b.end(), s.begin(), s.end()); return *this; }
    P& proto(int p = 4) { return op(0x80).op(uint8_t(p)); }
    P& str(std::string_view s) { return op(0x8c).op(uint8_t(s.size())).raw(s); }
    P& stop() { return op('.'); }
};

LoadOptions withBudget(int64_t bytes)
{
    LoadOptions o;
    o.memoryBudgetBytes = bytes;
    return o;
}

// `total` zero bytes through zstd's streaming API, never holding them all: with or without the size
// in the frame header.
Bytes zstdZeros(int64_t total, bool declareSize)
{
    ZSTD_CCtx* ctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(ctx, ZSTD_c_compressionLevel, 1);
    if (declareSize)
        ZSTD_CCtx_setPledgedSrcSize(ctx, uint64_t(total));
    else
        ZSTD_CCtx_setParameter(ctx, ZSTD_c_contentSizeFlag, 0);
    const Bytes zeros(size_t(1) << 20, 0);
    Bytes out;
    Bytes buf(ZSTD_CStreamOutSize());
    for (int64_t done = 0; done < total;) {
        const size_t n = size_t(std::min<int64_t>(int64_t(zeros.size()), total - done));
        done += int64_t(n);
        ZSTD_inBuffer in{zeros.data(), n, 0};
        const auto mode = done == total ? ZSTD_e_end : ZSTD_e_continue;
        size_t remaining = 0;
        do {
            ZSTD_outBuffer o{buf.data(), buf.size(), 0};
            remaining = ZSTD_compressStream2(ctx, &o, &in, mode);
            out.insert(out.end(), buf.begin(), buf.begin() + std::ptrdiff_t(o.pos));
        } while (in.pos < in.size || (mode == ZSTD_e_end && remaining != 0));
    }
    ZSTD_freeCCtx(ctx);
    return out;
}

Bytes gzipZeros(int64_t total)
{
    z_stream zs{};
    deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);
    const Bytes zeros(size_t(1) << 20, 0);
    Bytes out;
    Bytes buf(size_t(1) << 16);
    for (int64_t done = 0; done < total;) {
        const size_t n = size_t(std::min<int64_t>(int64_t(zeros.size()), total - done));
        done += int64_t(n);
        zs.next_in = const_cast<Bytef*>(zeros.data());
        zs.avail_in = uInt(n);
        const int flush = done == total ? Z_FINISH : Z_NO_FLUSH;
        int rc = Z_OK;
        do {
            zs.next_out = buf.data();
            zs.avail_out = uInt(buf.size());
            rc = deflate(&zs, flush);
            out.insert(out.end(), buf.begin(), buf.end() - zs.avail_out);
        } while (zs.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    }
    deflateEnd(&zs);
    return out;
}

// A snapshot (pickle or JSON) whose one trace list holds `n` entries sharing one frames list.
Bytes manyEntries(int n, bool json)
{
    const V frames = V::list({frameV("train.py", 1, "step")});
    std::vector<V> entries;
    for (int k = 0; k < n; ++k)
        entries.push_back(entryV(k % 2 ? "free_completed" : "alloc", int64_t(4096) * (k / 2 + 1), 512, 1000 + k, frames));
    const V snap = snapshotV({}, entries);
    return json ? toJson(snap) : toPickle(snap);
}

} // namespace

class TestLimits : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::string path(const char* name) const { return (m_dir.path() + "/" + name).toStdString(); }

    void expect(const Outcome& o, LoadErrorCode code, const char* needle)
    {
        QVERIFY2(o.code == code, describe(o).c_str());
        QVERIFY2(o.what.find(needle) != std::string::npos, describe(o).c_str());
        QVERIFY2(problemWith(o).empty(), problemWith(o).c_str());
    }

private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    // ---- decompression -------------------------------------------------------------------------

    void zstdBombWithDeclaredSize()
    {
        const Bytes bomb = zstdZeros(int64_t(256) << 20, true);
        QVERIFY(bomb.size() < 64 * 1024);
        // "declares": refused from the frame header's declared size, before anything is decoded.
        expect(loadBytes(path("bomb.zst"), bomb), LoadErrorCode::LimitExceeded, "declares");
    }
    void zstdBombWithoutDeclaredSize()
    {
        const Bytes bomb = zstdZeros(int64_t(256) << 20, false);
        expect(loadBytes(path("bomb.zst"), bomb), LoadErrorCode::LimitExceeded, "maxDecompressionRatio");
    }
    void gzipBomb()
    {
        const Bytes bomb = gzipZeros(int64_t(256) << 20);
        QVERIFY(bomb.size() < 512 * 1024);
        expect(loadBytes(path("bomb.gz"), bomb), LoadErrorCode::LimitExceeded, "decompression bomb");
    }
    void gzipBombOfConcatenatedMembers()
    {
        const Bytes member = gzipZeros(int64_t(8) << 20);
        Bytes bomb;
        for (int k = 0; k < 64; ++k)
            bomb.insert(bomb.end(), member.begin(), member.end());
        expect(loadBytes(path("bomb.gz"), bomb), LoadErrorCode::LimitExceeded, "decompression bomb");
    }
    void decompressionStopsAtTheBudget()
    {
        // A legitimate ratio, but more than the budget allows.
        LoadOptions options = withBudget(int64_t(4) << 20);
        options.maxDecompressionRatio = 1 << 20;
        const Bytes z = testutil::zstdCompress(Bytes(size_t(8) << 20, 'x'), 3, true, false);
        expect(loadBytes(path("big.zst"), z, options), LoadErrorCode::LimitExceeded, "memory budget");
    }
    void ratioIsConfigurable()
    {
        // 2 MiB of JSON-ish text compresses ~1000x: refused at ratio 50, accepted at a generous one.
        const Bytes text = toBytes("[" + std::string(size_t(2) << 20, ' ') + "]");
        const Bytes z = testutil::zstdCompress(text, 19, true, false);
        LoadOptions strict;
        strict.maxDecompressionRatio = 2;
        expect(loadBytes(path("ratio.zst"), z, strict), LoadErrorCode::LimitExceeded, "maxDecompressionRatio");
        LoadOptions lax;
        lax.maxDecompressionRatio = 100000;
        const Outcome ok = loadBytes(path("ratio.zst"), z, lax);
        QVERIFY2(ok.loaded(), describe(ok).c_str());
    }
    void plainFileLargerThanBudget()
    {
        const Bytes big = toBytes("[" + std::string(size_t(3) << 20, ' ') + "]");
        expect(loadBytes(path("big.json"), big, withBudget(int64_t(1) << 20)), LoadErrorCode::LimitExceeded, "memory budget");
    }

    // ---- nesting -------------------------------------------------------------------------------

    void deepJsonNesting_data()
    {
        QTest::addColumn<QByteArray>("prefix");
        QTest::addColumn<QByteArray>("suffix");
        QTest::newRow("snapshot JSON") << QByteArray(R"({"segments":)") << QByteArray("}");
        QTest::newRow("Kineto args") << QByteArray(R"({"traceEvents":[{"name":"x","args":{"a":)") << QByteArray("}}]}");
        QTest::newRow("bare array") << QByteArray("[") << QByteArray("]");
    }
    void deepJsonNesting()
    {
        QFETCH(QByteArray, prefix);
        QFETCH(QByteArray, suffix);
        const int depth = 200000;
        std::string s = prefix.toStdString() + std::string(size_t(depth), '[') + std::string(size_t(depth), ']') + suffix.toStdString();
        const Outcome o = loadBytes(path("deep.json"), toBytes(s));
        QVERIFY2(o.code, describe(o).c_str());
        QVERIFY2(problemWith(o).empty(), problemWith(o).c_str());
        if (prefix != "[") // the bare array is sniffed as a timeline export, which allows depth 2
            expect(o, LoadErrorCode::LimitExceeded, "nested deeper than 64");
    }
    void maxNestingIsConfigurable()
    {
        const Bytes json = toJson(healthySnapshot()); // depth 5: root, traces, trace, entry, frames, frame
        LoadOptions tight;
        tight.maxNesting = 4;
        expect(loadBytes(path("n.json"), json, tight), LoadErrorCode::LimitExceeded, "nested deeper than 4");
        LoadOptions enough;
        enough.maxNesting = 6;
        const Outcome ok = loadBytes(path("n.json"), json, enough);
        QVERIFY2(ok.loaded(), describe(ok).c_str());
    }
    void deepPickleMarks()
    {
        P p;
        p.proto();
        for (int k = 0; k < 100000; ++k)
            p.op('(');
        expect(loadBytes(path("marks.pickle"), p.b), LoadErrorCode::LimitExceeded, "MARKs nested deeper than 64");
    }
    void deepPickleListsWithoutMarks()
    {
        // [[[[...]]]] built with EMPTY_LIST and APPEND only: no MARK, so no mark limit; nothing may recurse.
        P p;
        p.proto();
        const int depth = 200000;
        for (int k = 0; k < depth; ++k)
            p.op(']');
        for (int k = 1; k < depth; ++k)
            p.op('a');
        p.stop();
        const Outcome o = loadBytes(path("lists.pickle"), p.b);
        expect(o, LoadErrorCode::Malformed, "segments[0]");
    }
    void selfReferencingList()
    {
        // l = []; l.append(l): a cycle, as pickle can express it. The reader must not loop.
        P p;
        p.proto().op(']').op(0x94).op('h').op(0).op('a').stop();
        const Outcome o = loadBytes(path("cycle.pickle"), p.b);
        expect(o, LoadErrorCode::Malformed, "segments[0]");
    }

    // ---- memo, declared lengths ----------------------------------------------------------------

    void hugeMemoIndex_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("needle");
        auto add = [](const char* name, const P& p, LoadErrorCode c, const char* needle) {
            QTest::newRow(name) << QByteArray(reinterpret_cast<const char*>(p.b.data()), qsizetype(p.b.size())) << int(c) << needle;
        };
        add("LONG_BINPUT 2^32-1", P().proto().op('N').op('r').le(0xFFFFFFFFu, 4).stop(), LoadErrorCode::LimitExceeded, "memo index 4294967295");
        add("PUT 2^63", P().proto(2).op('N').op('p').raw("9223372036854775808\n").stop(), LoadErrorCode::LimitExceeded, "implausibly large");
        add("PUT huge decimal", P().proto(2).op('N').op('p').raw("99999999999999999999999\n").stop(), LoadErrorCode::Malformed, "PUT");
        add("LONG_BINGET never stored", P().proto().op('j').le(0x7FFFFFFF, 4).stop(), LoadErrorCode::Malformed, "never stored");
        add("BINGET empty memo", P().proto().op('h').op(0).stop(), LoadErrorCode::Malformed, "never stored");
    }
    void hugeMemoIndex()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(int, code);
        QFETCH(QString, needle);
        const Outcome o = loadBytes(path("memo.pickle"), Bytes(bytes.begin(), bytes.end()));
        expect(o, LoadErrorCode(code), needle.toStdString().c_str());
    }
    void memoGrowthIsCharged()
    {
        // Each LONG_BINPUT may jump 1M slots ahead: 5 bytes of file, 16 MiB of memo. The budget stops it.
        P p;
        p.proto().op('N');
        for (uint32_t k = 1; k <= 200; ++k)
            p.op('r').le(k * (1u << 20), 4);
        p.stop();
        expect(loadBytes(path("memo.pickle"), p.b, withBudget(int64_t(256) << 20)), LoadErrorCode::LimitExceeded, "memory budget");
    }
    void hugeDeclaredLengths_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        auto add = [](const char* name, const P& p) {
            QTest::newRow(name) << QByteArray(reinterpret_cast<const char*>(p.b.data()), qsizetype(p.b.size()));
        };
        add("BINUNICODE 4 GiB", P().proto().op('X').le(0xFFFFFFFFu, 4).raw("abc"));
        add("BINUNICODE8 2^63", P().proto().op(0x8d).le(uint64_t(1) << 63, 8).raw("abc"));
        add("BINUNICODE8 2^64-1", P().proto().op(0x8d).le(~uint64_t(0), 8).raw("abc"));
        add("BINBYTES8 2^62", P().proto().op(0x8e).le(uint64_t(1) << 62, 8).raw("abc"));
        add("BYTEARRAY8 2^40", P().proto(5).op(0x96).le(uint64_t(1) << 40, 8).raw("abc"));
        add("BINBYTES 2^31", P().proto().op('B').le(0x80000000u, 4).raw("abc"));
        add("LONG4 2^31-1", P().proto().op(0x8b).le(0x7FFFFFFF, 4).raw("abc"));
        add("LONG1 255", P().proto().op(0x8a).op(255).raw("abc"));
        add("FRAME 2^64-1", P().proto().op(0x95).le(~uint64_t(0), 8).op('N'));
        add("SHORT_BINUNICODE past end", P().proto().op(0x8c).op(200).raw("abc"));
    }
    void hugeDeclaredLengths()
    {
        QFETCH(QByteArray, bytes);
        const Outcome o = loadBytes(path("len.pickle"), Bytes(bytes.begin(), bytes.end()));
        expect(o, LoadErrorCode::Truncated, "truncated");
    }

    // ---- sizes of strings, lists, traces ---------------------------------------------------------

    void longStringOverBudget()
    {
        const std::string big(size_t(3) << 20, 'a');
        V snap = healthySnapshot();
        snap.set("allocator_settings", V::dict({{"note", big}}));
        expect(loadBytes(path("s.pickle"), toPickle(snap), withBudget(int64_t(4) << 20)), LoadErrorCode::LimitExceeded, "memory budget");
        expect(loadBytes(path("s.json"), toJson(snap), withBudget(int64_t(4) << 20)), LoadErrorCode::LimitExceeded, "memory budget");
    }
    void longListOverBudget()
    {
        // 1M one-byte Nones on the stack, then one list: 16 MiB of values from 1 MiB of file.
        P p;
        p.proto().op(']').op('(');
        for (int k = 0; k < 1000000; ++k)
            p.op('N');
        p.op('e').stop();
        expect(loadBytes(path("l.pickle"), p.b, withBudget(int64_t(8) << 20)), LoadErrorCode::LimitExceeded, "memory budget");
    }
    void entryCountIsBoundedByTheBudget_data()
    {
        QTest::addColumn<bool>("json");
        QTest::newRow("pickle") << false;
        QTest::newRow("JSON") << true;
    }
    void entryCountIsBoundedByTheBudget()
    {
        // 20000 entries: ~0.7 MB of pickle, ~2 MB of JSON, 3.7 MiB once built.
        QFETCH(bool, json);
        const Bytes data = manyEntries(20000, json);
        const char* name = json ? "e.json" : "e.pickle";
        QVERIFY(int64_t(data.size()) < (int64_t(3) << 20));
        const Outcome ok = loadBytes(path(name), data);
        QVERIFY2(ok.loaded(), describe(ok).c_str());
        QCOMPARE(ok.trace->devices.at(0).eventCount(), size_t(20000));
        // JSON interns its strings, so the entries' own charge is what runs out; the pickle also spends the
        // budget on its memo and on the 1000 entry dicts a batch holds, so either charge may be the last.
        expect(loadBytes(path(name), data, withBudget(int64_t(3) << 20)), LoadErrorCode::LimitExceeded,
               json ? "more trace entries than the memory budget allows" : "memory budget");
    }
    void kinetoEventCountIsBounded()
    {
        std::string json = R"({"traceEvents":[)";
        for (int k = 0; k < 40000; ++k)
            json += std::string(k ? "," : "") + R"({"name":"[memory]","ts":)" + std::to_string(k) +
                    R"(,"args":{"Device Type":1,"Bytes":)" + (k % 2 ? "-64" : "64") + R"(,"Addr":)" + std::to_string(4096 + 64 * (k / 2)) + "}}";
        json += "]}";
        QVERIFY(json.size() < (size_t(4) << 20));
        const Outcome ok = loadBytes(path("k.json"), toBytes(json));
        QVERIFY2(ok.loaded(), describe(ok).c_str());
        expect(loadBytes(path("k.json"), toBytes(json), withBudget(int64_t(4) << 20)), LoadErrorCode::LimitExceeded, "events");
    }
    void timelineRowCountIsBounded()
    {
        std::string json = "[";
        for (int k = 0; k < 100000; ++k)
            json += std::string(k ? "," : "") + "[" + std::to_string(k) + "," + (k % 2 ? "4,-8" : "2,8") + ",4]";
        json += "]";
        const Outcome ok = loadBytes(path("t.raw.json"), toBytes(json));
        QVERIFY2(ok.loaded(), describe(ok).c_str());
        expect(loadBytes(path("t.raw.json"), toBytes(json), withBudget(int64_t(4) << 20)), LoadErrorCode::LimitExceeded, "rows");
    }

    // ---- amplification through memo sharing ------------------------------------------------------

    void sharedSegmentRepeated()
    {
        // One segment dict with 2000 blocks, referenced 5000 times: 10M blocks from ~100 KB of pickle.
        // The blocks are charged to the budget, so decoding stops after ~32 MiB of them.
        std::vector<V> blocks;
        for (int k = 0; k < 2000; ++k)
            blocks.push_back(blockV(int64_t(4096) * k, 4096, "inactive"));
        const V seg = segmentV(0, int64_t(4096) * 2000, blocks);
        const Bytes pickle = toPickle(V::dict({{"segments", V::list(std::vector<V>(5000, seg))}, {"device_traces", V::list()}}));
        QVERIFY(pickle.size() < 200 * 1024);
        expect(loadBytes(path("amp.pickle"), pickle, withBudget(int64_t(32) << 20)), LoadErrorCode::LimitExceeded, "memory budget");
    }
    void sharedTraceListRepeated()
    {
        // One list of 2000 entries (never streamed: built with MARK ... LIST), as the trace of 1000 devices.
        std::vector<V> entries;
        for (int k = 0; k < 2000; ++k)
            entries.push_back(entryV("alloc", int64_t(4096) * k, 512));
        const V trace = V::builtWhole(entries); // MARK ... LIST: built from the stack, not streamed
        const Bytes pickle = toPickle(V::dict({{"segments", V::list()}, {"device_traces", V::list(std::vector<V>(1000, trace))}}));
        const Outcome o = loadBytes(path("amp.pickle"), pickle, withBudget(int64_t(64) << 20));
        QVERIFY2(o.code, describe(o).c_str());
        QVERIFY2(problemWith(o).empty(), problemWith(o).c_str());
    }
    void tooManyDevices()
    {
        std::vector<V> lists(5000, V::list());
        for (auto& l : lists)
            l = V::list();
        const Bytes json = toJson(V::dict({{"segments", V::list()}, {"device_traces", V::list(lists)}}));
        expect(loadBytes(path("dev.json"), json), LoadErrorCode::LimitExceeded, "devices");
        V seg = segmentV(0, 1024, {});
        seg.set("device", 1 << 30);
        expect(loadBytes(path("dev.pickle"), toPickle(snapshotV({seg}, {}))), LoadErrorCode::Malformed, "device");
    }
    void kinetoTooManyDevices()
    {
        std::string json = R"({"traceEvents":[)";
        for (int k = 0; k < 2000; ++k)
            json += std::string(k ? "," : "") + R"({"name":"[memory]","ts":1,"args":{"Device Type":1,"Device Id":)" + std::to_string(k) +
                    R"(,"Bytes":64,"Addr":4096}})";
        json += "]}";
        expect(loadBytes(path("kdev.json"), toBytes(json)), LoadErrorCode::LimitExceeded, "devices");
    }
    void sharedSettingsDictStaysSmall()
    {
        // allocator_settings with 5000 keys, each the same 2000-item dict: 10M items to render from ~40 KB
        // of pickle. The text of each is capped (1 KiB), so the work stays proportional to the file.
        std::vector<std::pair<V, V>> inner;
        for (int k = 0; k < 2000; ++k)
            inner.emplace_back(V(std::to_string(k)), V(k));
        const V shared = V::dict(inner);
        std::vector<std::pair<V, V>> settings;
        for (int k = 0; k < 5000; ++k)
            settings.emplace_back(V("key" + std::to_string(k)), shared);
        V snap = healthySnapshot();
        snap.set("allocator_settings", V::dict(settings));
        const Outcome o = loadBytes(path("settings.pickle"), toPickle(snap), withBudget(int64_t(512) << 20));
        QVERIFY2(o.loaded() && problemWith(o).empty(), describe(o).c_str());
        QCOMPARE(o.trace->allocatorSettings.size(), size_t(5000));
        for (const auto& [k, v] : o.trace->allocatorSettings)
            QVERIFY2(v.size() < 1100, k.c_str());
    }
};

QTEST_GUILESS_MAIN(TestLimits)
#include "test_limits.moc"
