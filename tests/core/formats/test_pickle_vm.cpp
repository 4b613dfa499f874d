// The pickle reader at opcode level: every opcode PyTorch dumps use, memo sharing, integer widths,
// refusal of every opcode that imports or calls, and truncation at every byte.
#include "core/formats/pickle_vm.h"

#include <QtTest>

#include <cstring>

using namespace poolscope;

namespace {

// Builds pickle bytes opcode by opcode.
struct P {
    std::string b;
    P& op(uint8_t o) { b.push_back(char(o)); return *this; }
    P& u8(uint8_t v) { return op(v); }
    P& le(uint64_t v, int n) { for (int k = 0; k < n; ++k) b.push_back(char((v >> (8 * k)) & 0xFF)); return *this; }
    P& raw(std::string_view s) { b.append(s); return *this; }
    P& proto(int p) { return op(0x80).u8(uint8_t(p)); }
    P& shortStr(std::string_view s) { return op(0x8c).u8(uint8_t(s.size())).raw(s); }
    P& binInt1(uint8_t v) { return op('K').u8(v); }
    P& stop() { return op('.'); }
    std::span<const uint8_t> span() const { return {reinterpret_cast<const uint8_t*>(b.data()), b.size()}; }
};

struct Run {
    ValueArena arena{int64_t(1) << 30};
    PickleResult result;
};

std::unique_ptr<Run> run(const P& p, ListSink* sink = nullptr)
{
    auto r = std::make_unique<Run>();
    LoadOptions options;
    r->result = runPickle(p.span(), "test.pickle", r->arena, sink, options, nullptr);
    return r;
}

LoadErrorCode errorOf(const P& p, std::string* message = nullptr)
{
    try {
        run(p);
    } catch (const LoadError& e) {
        if (message)
            *message = e.what();
        return e.code();
    }
    return LoadErrorCode::Cancelled; // "no error": a value no reader test expects
}

} // namespace

class TestPickleVm : public QObject {
    Q_OBJECT
private slots:
    void scalars_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<qlonglong>("expected");
        auto add = [](const char* name, const P& p, qlonglong v) { QTest::newRow(name) << QByteArray::fromStdString(p.b) << v; };
        add("BININT1", P().proto(4).op('K').u8(200).stop(), 200);
        add("BININT2", P().proto(4).op('M').le(0xBEEF, 2).stop(), 0xBEEF);
        add("BININT negative", P().proto(4).op('J').le(uint32_t(-5), 4).stop(), -5);
        add("LONG1 6-byte address", P().proto(4).op(0x8a).u8(6).le(0x7f1fea000000ull, 6).stop(), 0x7f1fea000000ll);
        add("LONG1 7-byte time_us", P().proto(4).op(0x8a).u8(7).le(1748730219595970ull, 7).stop(), 1748730219595970ll);
        add("LONG1 zero width", P().proto(4).op(0x8a).u8(0).stop(), 0);
        add("LONG1 negative", P().proto(4).op(0x8a).u8(2).le(0xFF00, 2).stop(), -256);
        add("LONG1 9 bytes fits int64", P().proto(4).op(0x8a).u8(9).le(0x7fffffffffffffffull, 8).u8(0).stop(), 0x7fffffffffffffffll);
        add("LONG4", P().proto(4).op(0x8b).le(3, 4).le(0x123456, 3).stop(), 0x123456);
        add("INT text", P().op('I').raw("-77\n").stop(), -77);
        add("LONG text", P().op('L').raw("1234567890123L\n").stop(), 1234567890123ll);
        add("NEWTRUE", P().proto(2).op(0x88).stop(), 1);
        add("NEWFALSE", P().proto(2).op(0x89).stop(), 0);
    }
    void scalars()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(qlonglong, expected);
        P p;
        p.b = bytes.toStdString();
        auto r = run(p);
        QVERIFY(r->result.root.isInteger());
        QCOMPARE(qlonglong(r->result.root.i), expected);
    }

    void unsignedBeyondInt64()
    {
        auto r = run(P().proto(4).op(0x8a).u8(9).le(0xFFFFFFFFFFFFFFFFull, 8).u8(0).stop());
        QCOMPARE(r->result.root.kind, PyKind::UInt);
        QCOMPARE(uint64_t(r->result.root.i), 0xFFFFFFFFFFFFFFFFull);
    }

    void integerTooWideIsAClearError()
    {
        std::string msg;
        QCOMPARE(errorOf(P().proto(4).op(0x8a).u8(10).le(1, 8).le(1, 2).stop(), &msg), LoadErrorCode::LimitExceeded);
        QVERIFY2(msg.find("does not fit in 64 bits") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find("test.pickle: byte 2") != std::string::npos, msg.c_str());
    }

    void stringsAndFloats()
    {
        auto r = run(P().proto(4).op(0x95).le(40, 8).op(']').op(0x94).op('(')
                         .shortStr("short").op('X').le(3, 4).raw("abc").op(0x8d).le(4, 8).raw("wide")
                         .op('C').u8(2).raw("\x01\x02").op('G').raw(std::string("\x3f\xf8\0\0\0\0\0\0", 8))
                         .op('N').op('e').stop());
        const auto items = r->arena.items(r->result.root);
        QCOMPARE(items.size(), size_t(6));
        QCOMPARE(r->arena.str(items[0]), std::string_view("short"));
        QCOMPARE(r->arena.str(items[1]), std::string_view("abc"));
        QCOMPARE(r->arena.str(items[2]), std::string_view("wide"));
        QCOMPARE(items[3].kind, PyKind::Bytes);
        QCOMPARE(items[4].asFloat(), 1.5);
        QCOMPARE(items[5].kind, PyKind::None);
    }

    void containers()
    {
        // {'a': (1, 2), 'b': [3], 'c': (), 'd': (1,), 'e': (1, 2, 3), 'f': {}} built with every container opcode.
        auto r = run(P().proto(2).op('}').op('q').u8(0).op('(')
                         .shortStr("a").binInt1(1).binInt1(2).op(0x86)
                         .shortStr("b").op(']').binInt1(3).op('a')
                         .shortStr("c").op(')')
                         .shortStr("d").binInt1(1).op(0x85)
                         .shortStr("e").op('(').binInt1(1).binInt1(2).binInt1(3).op('t')
                         .shortStr("f").op('(').op('d')
                         .op('u').shortStr("g").op('(').binInt1(9).op('l').op('s').stop());
        const PyValue root = r->result.root;
        QCOMPARE(root.kind, PyKind::Dict);
        QCOMPARE(r->arena.items(*r->arena.get(root, "a")).size(), size_t(2));
        QCOMPARE(r->arena.items(*r->arena.get(root, "b")).front().i, int64_t(3));
        QCOMPARE(r->arena.get(root, "c")->kind, PyKind::Tuple);
        QCOMPARE(r->arena.items(*r->arena.get(root, "d")).size(), size_t(1));
        QCOMPARE(r->arena.items(*r->arena.get(root, "e")).size(), size_t(3));
        QCOMPARE(r->arena.get(root, "f")->kind, PyKind::Dict);
        QCOMPARE(r->arena.items(*r->arena.get(root, "g")).front().i, int64_t(9));
    }

    void memoIsSharedNotCopied()
    {
        // One frame dict referenced 5000 times through BINGET/LONG_BINGET, in batches of 1000 as CPython writes.
        P p;
        p.proto(4).op(']').op(0x94);
        p.op('(').op('}').op(0x94).op('(').shortStr("filename").shortStr("x.py").shortStr("line").binInt1(3).op('u');
        for (int k = 1; k < 1000; ++k)
            p.op('h').u8(1);
        p.op('e');
        for (int batch = 0; batch < 4; ++batch) {
            p.op('(');
            for (int k = 0; k < 1000; ++k)
                p.op('j').le(1, 4);
            p.op('e');
        }
        p.op('p').raw("7\n").op('0').op('g').raw("7\n").stop(); // text PUT, POP, GET
        auto r = run(p);
        const auto items = r->arena.items(r->result.root);
        QCOMPARE(items.size(), size_t(5000));
        for (const auto& v : items)
            QCOMPARE(v.ref, items.front().ref);
        QVERIFY(r->arena.containerCount() < 5); // the list and one dict, not 5000 dicts
    }

    // Numbers are not memoized by CPython, but a PUT after one is legal: the memo keeps its value whole
    // (MemoSlot holds only kinds and refs; numbers go to a side table).
    void memoizedNumbersKeepTheirValue()
    {
        P p;
        p.proto(2).op(0x8a).u8(8).le(0x7fffffffffffff01ull, 8).op('q').u8(0); // LONG1, BINPUT 0
        p.op('G').le(0x1f85eb51b81e0940ull, 8).op('q').u8(1);                   // BINFLOAT 3.14, BINPUT 1
        p.op(0x88).op('q').u8(2);                                               // NEWTRUE, BINPUT 2
        p.op(0x87);                                                             // TUPLE3
        p.op('h').u8(0).op('h').u8(1).op('h').u8(2).op(0x87).op(0x86).stop();   // the three again, TUPLE2
        auto r = run(p);
        const auto outer = r->arena.items(r->result.root);
        QCOMPARE(outer.size(), size_t(2));
        const auto first = r->arena.items(outer[0]);
        const auto again = r->arena.items(outer[1]);
        for (size_t k = 0; k < 3; ++k) {
            QCOMPARE(int(again[k].kind), int(first[k].kind));
            QCOMPARE(again[k].i, first[k].i);
        }
        QCOMPARE(again[0].i, int64_t(0x7fffffffffffff01ll));
        QCOMPARE(again[1].asFloat(), 3.14);
        QCOMPARE(int(again[2].kind), int(PyKind::Bool));
    }

    void refusesEveryCodeOpcode_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("opcode");
        auto add = [](const char* name, const P& p) { QTest::newRow(name) << QByteArray::fromStdString(p.b) << QString(name); };
        add("GLOBAL", P().proto(2).op('c').raw("os\nsystem\n").shortStr("echo pwned").op(0x85).op('R').stop());
        add("STACK_GLOBAL", P().proto(4).shortStr("os").shortStr("system").op(0x93).stop());
        add("REDUCE", P().proto(2).op('N').op(')').op('R').stop());
        add("BUILD", P().proto(2).op('}').op('}').op('b').stop());
        add("NEWOBJ", P().proto(2).op('N').op(')').op(0x81).stop());
        add("NEWOBJ_EX", P().proto(4).op('N').op(')').op('}').op(0x92).stop());
        add("INST", P().op('(').op('i').raw("os\nsystem\n").stop());
        add("OBJ", P().op('(').op('N').op('o').stop());
        add("PERSID", P().op('P').raw("x\n").stop());
        add("BINPERSID", P().proto(2).op('N').op('Q').stop());
        add("EXT1", P().proto(2).op(0x82).u8(1).stop());
        add("EXT2", P().proto(2).op(0x83).le(1, 2).stop());
        add("EXT4", P().proto(2).op(0x84).le(1, 4).stop());
    }
    void refusesEveryCodeOpcode()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, opcode);
        P p;
        p.b = bytes.toStdString();
        std::string msg;
        QCOMPARE(errorOf(p, &msg), LoadErrorCode::CodeExecution);
        QVERIFY2(msg.find("tried to run code") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find(opcode.toStdString()) != std::string::npos, msg.c_str());
    }

    void globalNamesWhatItImports()
    {
        std::string msg;
        errorOf(P().proto(2).op('c').raw("os\nsystem\n").stop(), &msg);
        QVERIFY2(msg.find("os.system") != std::string::npos, msg.c_str());
    }

    void malformedInputsAreClearErrors_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<int>("code");
        auto add = [](const char* name, const P& p, LoadErrorCode c) { QTest::newRow(name) << QByteArray::fromStdString(p.b) << int(c); };
        add("empty", P(), LoadErrorCode::Truncated);
        add("no STOP", P().proto(4).op('N'), LoadErrorCode::Truncated);
        add("protocol 6", P().proto(6).op('N').stop(), LoadErrorCode::UnsupportedVersion);
        add("unknown opcode", P().proto(4).op(0xff).stop(), LoadErrorCode::Malformed);
        add("memo get of nothing", P().proto(4).op('h').u8(3).stop(), LoadErrorCode::Malformed);
        add("APPENDS without MARK", P().proto(4).op(']').op('e').stop(), LoadErrorCode::Malformed);
        add("APPEND into dict", P().proto(4).op('}').op('N').op('a').stop(), LoadErrorCode::Malformed);
        add("SETITEMS odd", P().proto(4).op('}').op('(').op('N').op('u').stop(), LoadErrorCode::Malformed);
        add("pop empty", P().proto(4).op('0').stop(), LoadErrorCode::Malformed);
        add("STOP with two values", P().proto(4).op('N').op('N').stop(), LoadErrorCode::Malformed);
        add("string longer than file", P().proto(4).op('X').le(1u << 30, 4).raw("ab").stop(), LoadErrorCode::Truncated);
        add("BINUNICODE8 huge", P().proto(4).op(0x8d).le(~0ull, 8).stop(), LoadErrorCode::Truncated);
        add("huge memo index", P().proto(4).op('N').op('r').le(0xFFFFFFF0u, 4).stop(), LoadErrorCode::LimitExceeded);
        P deep;
        deep.proto(4);
        for (int k = 0; k < 100; ++k)
            deep.op('(');
        add("nesting", deep.stop(), LoadErrorCode::LimitExceeded);
    }
    void malformedInputsAreClearErrors()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(int, code);
        P p;
        p.b = bytes.toStdString();
        std::string msg;
        QCOMPARE(int(errorOf(p, &msg)), code);
        QVERIFY2(msg.rfind("test.pickle", 0) == 0, msg.c_str());
    }

    void junkAfterStopIsIgnored()
    {
        // memory_viz HTML pads the embedded pickle with NULs to a multiple of 3.
        auto r = run(P().proto(4).binInt1(7).stop().raw(std::string("\0\0", 2)));
        QCOMPARE(r->result.root.i, int64_t(7));
        QCOMPARE(r->result.protocol, 4);
    }

    void truncationAtEveryByteNeverCrashes()
    {
        P p;
        p.proto(4).op(0x95).le(60, 8).op('}').op(0x94).op('(').shortStr("segments").op(']').op(0x94).op('(')
            .op('}').op(0x94).op('(').shortStr("address").op(0x8a).u8(6).le(0x7f0000000000ull, 6)
            .shortStr("total_size").op('J').le(2097152, 4).op('u').op('h').u8(2).op('e').op('u').stop();
        run(p); // the whole thing is valid
        for (size_t cut = 0; cut + 1 < p.b.size(); ++cut) {
            P q;
            q.b = p.b.substr(0, cut);
            const auto code = errorOf(q);
            QVERIFY2(code == LoadErrorCode::Truncated || code == LoadErrorCode::Malformed,
                     ("cut at " + std::to_string(cut)).c_str());
        }
    }

    void budgetBoundsMemory()
    {
        P p;
        p.proto(4).op(']').op('(');
        for (int k = 0; k < 10000; ++k)
            p.op('X').le(100, 4).raw(std::string(100, 'x'));
        p.op('e').stop();
        ValueArena arena(64 * 1024);
        LoadOptions options;
        QVERIFY_THROWS_EXCEPTION(LoadError, runPickle(p.span(), "big", arena, nullptr, options, nullptr));
    }
};

QTEST_APPLESS_MAIN(TestPickleVm)
#include "test_pickle_vm.moc"
