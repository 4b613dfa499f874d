// The direct entry reader (snapshot_entry_reader.cpp) against the general one: every pickle read both
// ways must give the same trace, or fail with the same words. Real dumps from the corpus, and pickles
// made here full of the shapes the direct reader must hand back (new strings and frame dicts, wide
// integers, floats, unknown keys, shared and empty frames lists) in every protocol the writer knows.
#include "core/formats/pickle_vm.h"
#include "core/formats/pickle_writer.h"
#include "core/formats/snapshot_assembler.h"
#include "core/formats/snapshot_decoder.h"

#include <QtTest>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

using namespace poolscope;

namespace {

struct Read {
    std::unique_ptr<Trace> trace = std::make_unique<Trace>();
    int64_t direct = 0;
    std::string error;
};

// As readSnapshotPickle does, with the decoder at hand to ask how many entries it read directly.
Read readPickle(const std::string& bytes, bool direct, size_t expectEntries = 0)
{
    Read r;
    LoadOptions options;
    ValueArena arena(options.memoryBudgetBytes);
    SnapshotAssembler assembler(*r.trace);
    SnapshotDecoder decoder(arena, assembler, "test.pickle", /*framesListsAreUnique=*/false);
    decoder.readEntriesDirectly(direct);
    decoder.expectEntries(expectEntries);
    Progress progress;
    try {
        const PickleResult result = runPickle({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "test.pickle",
                                              arena, &decoder, options, &progress);
        decoder.decodeRoot(result.root);
        assembler.finish();
    } catch (const LoadError& e) {
        r.error = e.what();
    }
    r.direct = decoder.entriesReadDirectly();
    return r;
}

QString frameText(const Trace& t, StackId s)
{
    QString out;
    if (!s.valid())
        return QStringLiteral("<none>");
    for (FrameId f : t.frames.stack(s)) {
        const Frame& fr = t.frames.frame(f);
        out += QString::fromStdString(fr.filename + ":" + fr.name + ":" + std::to_string(fr.line) + ";");
    }
    return out;
}

// The first difference between two traces, or empty.
QString differences(const Trace& a, const Trace& b)
{
    if (a.devices.size() != b.devices.size())
        return QStringLiteral("devices %1 vs %2").arg(a.devices.size()).arg(b.devices.size());
    if (a.warnings != b.warnings)
        return QStringLiteral("warnings differ");
    for (size_t d = 0; d < a.devices.size(); ++d) {
        const DeviceTrace& x = a.devices[d];
        const DeviceTrace& y = b.devices[d];
        if (x.eventCount() != y.eventCount())
            return QStringLiteral("device %1: %2 vs %3 events").arg(d).arg(x.eventCount()).arg(y.eventCount());
        for (size_t i = 0; i < x.eventCount(); ++i) {
            if (x.events.action[i] != y.events.action[i] || x.events.addr[i] != y.events.addr[i] ||
                x.events.size[i] != y.events.size[i] || x.events.stream[i] != y.events.stream[i] ||
                x.events.timeUs[i] != y.events.timeUs[i])
                return QStringLiteral("device %1 event %2 differs").arg(d).arg(i);
            if (frameText(a, x.events.stack[i]) != frameText(b, y.events.stack[i]))
                return QStringLiteral("device %1 event %2: stack %3 vs %4")
                    .arg(d)
                    .arg(i)
                    .arg(frameText(a, x.events.stack[i]), frameText(b, y.events.stack[i]));
        }
        if (x.unknownActions != y.unknownActions)
            return QStringLiteral("device %1: unknown actions differ").arg(d);
        if (x.allocations.size() != y.allocations.size() || x.peakAllocated != y.peakAllocated || x.peakIndex != y.peakIndex)
            return QStringLiteral("device %1: allocations differ").arg(d);
    }
    return {};
}

std::string fileBytes(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

enum class Damage { None, NegativeSize, StringFrame, Truncated };

// A snapshot of `n` entries whose shapes vary with the entry's index; strings and frame dicts are
// shared by pointer, so the writer memoizes them as PyTorch's dumps do.
std::string oddSnapshot(int n, int protocol, Damage damage)
{
    auto s = [](const char* text) { return PyObj::str(text); };
    const auto kAction = s("action"), kAddr = s("addr"), kSize = s("size"), kStream = s("stream"), kTime = s("time_us"),
               kFrames = s("frames"), kDeviceFree = s("device_free"), kContext = s("compile_context"),
               kMeta = s("user_metadata"), kMystery = s("mystery");
    const PyObjPtr actions[] = {s("alloc"), s("free_requested"), s("free_completed")};
    const auto snapshotAction = s("defragment"), oomAction = s("oom"), context = s("N/A");
    const auto kFile = s("filename"), kName = s("name"), kLine = s("line");
    std::vector<PyObjPtr> frames;
    for (int f = 0; f < 20; ++f)
        frames.push_back(PyObj::dict({{kFile, s(f % 2 ? "model.py" : "??")},
                                      {kName, PyObj::str("fn" + std::to_string(f))},
                                      {kLine, PyObj::integer(f * 10)}}));
    const auto lateFrame = PyObj::dict({{kFile, s("late.py")}, {kName, s("late")}, {kLine, PyObj::integer(7)}});

    std::vector<PyObjPtr> entries;
    PyObjPtr previousList = PyObj::none();
    for (int i = 0; i < n; ++i) {
        std::vector<std::pair<PyObjPtr, PyObjPtr>> kv;
        PyObjPtr action = actions[i % 3];
        if (i == 1700 || i == 1800)
            action = snapshotAction; // a new action string, then the same one memoized
        if (i == n - 1)
            action = oomAction;
        kv.push_back({kAction, action});
        // Every 17th address negative and wide: LONG1 with its sign extended (read as uint64 both ways).
        kv.push_back({kAddr, PyObj::integer(i % 17 == 0 ? -(int64_t(1) << 40) - i : 0x7f0000000000 + int64_t(i / 3) * 512)});
        const int64_t sizes[] = {100, 1000, 100000, int64_t(1) << 40, 0};
        PyObjPtr size = PyObj::integer(sizes[i % 5]);
        if (i == 1234)
            size = PyObj::boolean(true);
        if (damage == Damage::NegativeSize && i == 1500)
            size = PyObj::integer(-4096);
        kv.push_back({kSize, size});
        kv.push_back({kStream, i % 97 == 0 ? PyObj::unsignedInteger((uint64_t(1) << 63) | 5) : PyObj::integer(i % 41 == 0 ? -1 : 0)});
        PyObjPtr time = PyObj::integer(1748730221115811 + i);
        if (i % 50 == 0)
            time = PyObj::none();
        if (i % 333 == 0)
            time = PyObj::floating(1.7e15);
        kv.push_back({kTime, time});
        PyObjPtr list;
        switch (i % 3) {
        case 0: {
            std::vector<PyObjPtr> items;
            for (int k = 0; k < i % 7; ++k) // 0: empty list, 1: a single APPEND
                items.push_back(frames[size_t(i + k) % frames.size()]);
            if (i == 2500)
                items.push_back(lateFrame); // a frame dict first seen mid-stream
            if (damage == Damage::StringFrame && i == 1602)
                items.push_back(kFile);
            list = PyObj::list(std::move(items));
            break;
        }
        case 1: list = previousList; break; // the previous entry's list again: a memo reference
        default: list = PyObj::none(); break;
        }
        previousList = list;
        kv.push_back({kFrames, list});
        if (i % 11 == 0)
            kv.push_back({kContext, context});
        if (i % 13 == 0)
            kv.push_back({kMeta, PyObj::str("step " + std::to_string(i))}); // a new string: general reader
        if (i == 2000)
            kv.push_back({kMystery, PyObj::integer(1)});
        if (action == oomAction)
            kv.push_back({kDeviceFree, PyObj::integer(123456)});
        entries.push_back(PyObj::dict(std::move(kv)));
    }
    const auto root = PyObj::dict({{s("segments"), PyObj::list({})},
                                   {s("device_traces"), PyObj::list({PyObj::list(std::move(entries))})}});
    std::ostringstream out;
    writePickle(root, out, protocol);
    std::string bytes = out.str();
    if (damage == Damage::Truncated)
        bytes.resize(bytes.size() * 7 / 10);
    return bytes;
}

// Pickle bytes written opcode by opcode (protocol 2, BINPUT/LONG_BINPUT), for shapes no pickler
// writes: a memo slot put again, an object appended as a trace entry after serving as a frame dict.
class RawPickle {
public:
    RawPickle() { m_b = "\x80\x02"; }
    void op(char c) { m_b += c; }
    uint32_t put() // memoizes what was just pushed, at the next index
    {
        return putAt(m_next++);
    }
    uint32_t putAt(uint32_t index)
    {
        if (index < 256) {
            m_b += 'q';
            m_b += char(index);
        } else {
            m_b += 'r';
            le(index, 4);
        }
        return index;
    }
    void get(uint32_t index)
    {
        if (index < 256) {
            m_b += 'h';
            m_b += char(index);
        } else {
            m_b += 'j';
            le(index, 4);
        }
    }
    uint32_t str(std::string_view s)
    {
        m_b += 'X';
        le(s.size(), 4);
        m_b += s;
        return put();
    }
    void small(uint8_t v)
    {
        m_b += 'K';
        m_b += char(v);
    }
    void bigint(uint32_t v)
    {
        m_b += 'J';
        le(v, 4);
    }
    const std::string& bytes() const { return m_b; }

private:
    void le(uint64_t v, int n)
    {
        for (int k = 0; k < n; ++k)
            m_b += char((v >> (8 * k)) & 0xff);
    }
    std::string m_b;
    uint32_t m_next = 0;
};

enum class MemoTwist { None, FrameDictPutAgain, FrameDictConsumedAsEntry };

// 3000 trace entries whose frames lists are two shared frame dicts [B, A]; after entry 1500 the
// memo slot of A is made to hold something else (`twist`), and the entries after it refer to A's
// slot again. The direct reader keys frames lists by memo index: it must see the change as the
// general reader does.
std::string memoTwistSnapshot(MemoTwist twist)
{
    RawPickle p;
    p.op('}');
    p.put();
    p.op('(');
    p.str("segments");
    p.op(']');
    p.put();
    p.str("device_traces");
    p.op(']');
    p.put();
    p.op(']');
    p.put();
    // The keys and the frame dicts, made inside a tuple that is popped: memoized, not list items.
    p.op('(');
    const uint32_t kAction = p.str("action"), kAlloc = p.str("alloc"), kAddr = p.str("addr"), kSize = p.str("size"),
                   kFrames = p.str("frames"), kFile = p.str("filename"), kName = p.str("name"), kLine = p.str("line"),
                   kContext = p.str("compile_context");
    auto frameDict = [&](const char* file, const char* name, uint8_t line, std::optional<uint32_t> at, bool entryKeys) {
        p.op('}');
        const uint32_t index = at ? p.putAt(*at) : p.put();
        p.op('(');
        p.get(kFile);
        p.str(file);
        p.get(kName);
        p.str(name);
        p.get(kLine);
        p.small(line);
        if (entryKeys) { // an entry's keys too
            p.get(kAction);
            p.get(kAlloc);
            p.get(kSize);
            p.small(1);
        }
        p.op('u');
        return index;
    };
    // A second in every frames list: a list whose first item looks like an entry would be streamed.
    const uint32_t a = frameDict("a.py", "fa", 3, std::nullopt, twist == MemoTwist::FrameDictConsumedAsEntry);
    const uint32_t b = frameDict("b.py", "fb", 4, std::nullopt, false);
    p.op('t');
    p.op('0');
    p.op('('); // the entries
    for (uint32_t i = 0; i < 3000; ++i) {
        if (i == 1500 && twist == MemoTwist::FrameDictConsumedAsEntry) {
            // A itself appended to the trace, at the end of a batch: consumed and released there,
            // by either reader, before the next entry refers to it as a frame again.
            p.get(a);
            p.op('e');
            p.op('(');
        }
        p.op('}');
        p.put();
        p.op('(');
        p.get(kAction);
        p.get(kAlloc);
        p.get(kAddr);
        p.bigint(0x10000 + i * 512);
        p.get(kSize);
        p.bigint(512);
        p.get(kFrames);
        p.op(']');
        p.put();
        p.op('(');
        p.get(b);
        p.get(a);
        p.op('e');
        if (i == 1500 && twist == MemoTwist::FrameDictPutAgain) {
            p.get(kContext); // an ignored key whose value is a new dict put into A's slot
            frameDict("c.py", "fc", 5, a, false);
        }
        p.op('u');
    }
    p.op('e'); // the entries into device_traces[0]
    p.op('a'); // device_traces[0] into device_traces
    p.op('u');
    p.op('.');
    return p.bytes();
}

} // namespace

class TestEntryReader : public QObject {
    Q_OBJECT
private slots:
    void oddShapesReadAlike_data()
    {
        QTest::addColumn<int>("protocol");
        QTest::addColumn<bool>("worker");
        for (int p : {2, 3, 4, 5})
            QTest::newRow(qPrintable(QStringLiteral("protocol %1").arg(p))) << p << false;
        QTest::newRow("protocol 4, pairing worker") << 4 << true;
    }
    void oddShapesReadAlike()
    {
        QFETCH(int, protocol);
        QFETCH(bool, worker);
        const int n = 3000;
        const std::string bytes = oddSnapshot(n, protocol, Damage::None);
        // expectEntries at the worker's threshold starts the pairing worker on 3000 entries.
        const Read direct = readPickle(bytes, true, worker ? SnapshotDecoder::kPairingWorkerMinEntries : 0);
        const Read general = readPickle(bytes, false);
        QVERIFY2(direct.error.empty(), direct.error.c_str());
        QVERIFY2(general.error.empty(), general.error.c_str());
        QCOMPARE(int64_t(general.trace->devices[0].eventCount()), int64_t(n));
        QCOMPARE(general.direct, int64_t(0));
        // The odd entries (about one in ten) go the general way, the rest directly.
        QVERIFY2(direct.direct > 2600, qPrintable(QString::number(direct.direct)));
        const QString diff = differences(*direct.trace, *general.trace);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        QCOMPARE(direct.trace->devices[0].unknownActions.at("defragment"), int64_t(2));
        QVERIFY(!direct.trace->devices[0].ooms.empty());
        QCOMPARE(direct.trace->devices[0].ooms.back().deviceFree, int64_t(123456));
    }

    // Plain entries (no oddity after the first batch) go directly, all of them.
    void plainEntriesGoDirectly()
    {
        auto s = [](const char* text) { return PyObj::str(text); };
        const auto kAction = s("action"), kAddr = s("addr"), kSize = s("size"), kFrames = s("frames");
        const auto alloc = s("alloc"), freeCompleted = s("free_completed");
        const auto frame = PyObj::dict({{s("filename"), s("a.py")}, {s("name"), s("f")}, {s("line"), PyObj::integer(3)}});
        std::vector<PyObjPtr> entries;
        for (int i = 0; i < 2500; ++i)
            entries.push_back(PyObj::dict({{kAction, i % 2 ? freeCompleted : alloc},
                                           {kAddr, PyObj::integer(0x1000 + (i / 2) * 512)},
                                           {kSize, PyObj::integer(512)},
                                           {kFrames, PyObj::list({frame, frame})}}));
        const auto root = PyObj::dict({{s("segments"), PyObj::list({})},
                                       {s("device_traces"), PyObj::list({PyObj::list(std::move(entries))})}});
        std::ostringstream out;
        writePickle(root, out, 4);
        const Read direct = readPickle(out.str(), true);
        const Read general = readPickle(out.str(), false);
        QVERIFY2(direct.error.empty(), direct.error.c_str());
        // All but the first (which tells that the list streams) and the second (whose action string,
        // free_completed, is new).
        QCOMPARE(direct.direct, int64_t(2498));
        const QString diff = differences(*direct.trace, *general.trace);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        QCOMPARE(int64_t(direct.trace->devices[0].allocations.size()), int64_t(1250));
    }

    void damageReportedAlike_data()
    {
        QTest::addColumn<int>("damage");
        QTest::addColumn<QString>("words");
        QTest::newRow("negative size") << int(Damage::NegativeSize) << "trace entry #1500.size: expected a non-negative byte count";
        QTest::newRow("string in frames") << int(Damage::StringFrame) << "trace entry #1602.frames[";
        QTest::newRow("truncated") << int(Damage::Truncated) << "truncated";
    }
    void damageReportedAlike()
    {
        QFETCH(int, damage);
        QFETCH(QString, words);
        const std::string bytes = oddSnapshot(3000, 4, Damage(damage));
        const Read direct = readPickle(bytes, true);
        const Read general = readPickle(bytes, false);
        QVERIFY2(general.error.find(words.toStdString()) != std::string::npos, general.error.c_str());
        QCOMPARE(QString::fromStdString(direct.error), QString::fromStdString(general.error));
    }

    // Entries read directly under a MARK that something other than APPENDS closes (a TUPLE here) were
    // not list items after all: an error, not entries taken into the trace.
    void directItemsOutsideAppendsRefused()
    {
        const std::string good = oddSnapshot(1500, 4, Damage::None);
        // The second batch's closing APPENDS ('e' right before the list's end) becomes TUPLE ('t').
        std::string bytes = good;
        const size_t lastAppends = bytes.rfind("eau."); // entries' APPENDS, the trace list's APPEND, SETITEMS, STOP
        QVERIFY(lastAppends != std::string::npos);
        bytes[lastAppends] = 't';
        const Read direct = readPickle(bytes, true);
        QVERIFY(direct.direct > 0);
        QVERIFY2(direct.error.find("closes a MARK over list items") != std::string::npos, direct.error.c_str());
    }

    // Recent PyTorch writes compile_context and user_metadata as a fresh string object in every entry
    // (memoized, never shared): the direct reader takes them in stride instead of handing every entry
    // to the general reader, and a later reference to one of those strings still reads its text.
    void freshStringsPerEntryReadDirectly()
    {
        auto s = [](const char* text) { return PyObj::str(text); };
        const auto kAction = s("action"), kAddr = s("addr"), kSize = s("size"), kStream = s("stream"), kTime = s("time_us"),
                   kFrames = s("frames"), kContext = s("compile_context"), kMeta = s("user_metadata");
        const auto alloc = s("alloc"), freeCompleted = s("free_completed");
        std::vector<PyObjPtr> entries;
        PyObjPtr lastMeta;
        for (int i = 0; i < 6000; ++i) {
            lastMeta = PyObj::str(i % 2 ? "" : "step " + std::to_string(i / 100));
            entries.push_back(PyObj::dict({{kAction, i % 2 ? freeCompleted : alloc},
                                           {kAddr, PyObj::integer(0x7f0000000000 + int64_t(i / 2) * 512)},
                                           {kSize, PyObj::integer(4096)},
                                           {kStream, PyObj::integer(0)},
                                           {kTime, PyObj::integer(1748730221115811 + i)},
                                           {kContext, PyObj::str("N/A")},
                                           {kMeta, lastMeta},
                                           {kFrames, PyObj::list({})}}));
        }
        // The last string referenced again from outside the trace (memo sharing across the file).
        const auto root = PyObj::dict({{s("segments"), PyObj::list({})},
                                       {s("device_traces"), PyObj::list({PyObj::list(std::move(entries))})},
                                       {s("extra"), lastMeta}});
        std::ostringstream out;
        writePickle(root, out, 4);
        const Read direct = readPickle(out.str(), true);
        const Read general = readPickle(out.str(), false);
        QVERIFY2(direct.error.empty(), direct.error.c_str());
        QVERIFY2(general.error.empty(), general.error.c_str());
        QVERIFY2(direct.direct > 5990, qPrintable(QString::number(direct.direct)));
        const QString diff = differences(*direct.trace, *general.trace);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
    }

    // The direct reader keys frames lists by their frame dicts' memo indices. A slot put again, or a
    // frame dict consumed as an entry (its slot released), must not leave the old stack behind: the
    // trace reads as the general reader reads it, or fails with its words.
    void memoSlotChangesSeen_data()
    {
        QTest::addColumn<int>("twist");
        QTest::addColumn<QString>("error");
        QTest::newRow("plain") << int(MemoTwist::None) << QString();
        QTest::newRow("frame dict's slot put again") << int(MemoTwist::FrameDictPutAgain) << QString();
        QTest::newRow("frame dict consumed as an entry") << int(MemoTwist::FrameDictConsumedAsEntry)
                                                         << QStringLiteral("refers back to a trace entry after it was consumed");
    }
    void memoSlotChangesSeen()
    {
        QFETCH(int, twist);
        QFETCH(QString, error);
        const std::string bytes = memoTwistSnapshot(MemoTwist(twist));
        const Read direct = readPickle(bytes, true);
        const Read general = readPickle(bytes, false);
        QCOMPARE(QString::fromStdString(direct.error), QString::fromStdString(general.error));
        if (!error.isEmpty()) {
            QVERIFY2(general.error.find(error.toStdString()) != std::string::npos, general.error.c_str());
            return;
        }
        QVERIFY2(general.error.empty(), general.error.c_str());
        QVERIFY2(direct.direct > 2900, qPrintable(QString::number(direct.direct)));
        const QString diff = differences(*direct.trace, *general.trace);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        const DeviceTrace& d = direct.trace->devices.at(0);
        QCOMPARE(frameText(*direct.trace, d.events.stack[10]), QStringLiteral("b.py:fb:4;a.py:fa:3;"));
        if (MemoTwist(twist) == MemoTwist::FrameDictPutAgain)
            QCOMPARE(frameText(*direct.trace, d.events.stack[2000]), QStringLiteral("b.py:fb:4;c.py:fc:5;"));
    }

    void corpusReadsAlike_data()
    {
        QTest::addColumn<QString>("file");
        const std::filesystem::path dir(POOLSCOPE_CORPUS_DIR);
        if (!std::filesystem::is_directory(dir)) {
            QTest::newRow("corpus absent") << QString();
            return;
        }
        for (const auto& e : std::filesystem::directory_iterator(dir)) {
            const auto ext = e.path().extension().string();
            if (ext == ".pickle" || ext == ".pkl")
                QTest::newRow(e.path().filename().string().c_str()) << QString::fromStdString(e.path().string());
        }
    }
    void corpusReadsAlike()
    {
        QFETCH(QString, file);
        if (file.isEmpty())
            QSKIP("corpus not available");
        const std::string bytes = fileBytes(file.toStdString());
        const Read direct = readPickle(bytes, true);
        const Read general = readPickle(bytes, false);
        QCOMPARE(QString::fromStdString(direct.error), QString::fromStdString(general.error));
        const QString diff = differences(*direct.trace, *general.trace);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        size_t events = 0;
        for (const DeviceTrace& d : direct.trace->devices)
            events += d.eventCount();
        if (events > 5000) // all but a few entries of a real dump have the usual shape
            QVERIFY2(double(direct.direct) > 0.95 * double(events), qPrintable(QStringLiteral("%1 of %2").arg(direct.direct).arg(events)));
    }
};

QTEST_GUILESS_MAIN(TestEntryReader)
#include "test_entry_reader.moc"
