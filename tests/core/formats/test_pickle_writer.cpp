// PickleWriter against CPython's pickler: every file we write must load in python3 to the expected
// value and pickle.dumps() of that value must give our bytes back exactly (framing, memo, batching).
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/model/trace_builder.h"
#include "support/check_pickle.h"

#include <QtTest>

#include <fstream>
#include <limits>
#include <sstream>

using namespace poolscope;

namespace {

std::string pickled(const PyObjPtr& obj, int protocol)
{
    std::ostringstream out;
    writePickle(obj, out, protocol);
    return out.str();
}

QString writeTemp(QTemporaryDir& dir, const QString& name, const std::string& bytes)
{
    const QString path = dir.filePath(name);
    std::ofstream f(path.toStdString(), std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    return path;
}

using P = PyObj;

PyObjPtr intList(int64_t n)
{
    std::vector<PyObjPtr> items;
    for (int64_t i = 0; i < n; ++i)
        items.push_back(P::integer(i));
    return P::list(std::move(items));
}

PyObjPtr intDict(int64_t n)
{
    std::vector<std::pair<PyObjPtr, PyObjPtr>> items;
    for (int64_t i = 0; i < n; ++i)
        items.emplace_back(P::str("k" + std::to_string(i)), P::integer(i * 3));
    return P::dict(std::move(items));
}

// A small trace with everything writeSnapshot writes: two devices, shared frames, an OOM.
Trace sampleTrace()
{
    Trace t;
    t.allocatorSettings = {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False"},
                           {"max_split_size", "-1"},
                           {"garbage_collection_threshold", "0.000000"},
                           {"expandable_segments", "False"},
                           {"roundup_power2_divisions", "1:0,2:4"}};
    const FrameId f1 = t.frames.internFrame("/home/u/train.py", "train_step", 42);
    const FrameId f2 = t.frames.internFrame("??", "torch::autograd::Engine::evaluate_function(...)", 0);
    const FrameId f3 = t.frames.internFrame("", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", 0);
    const FrameId a[] = {f3, f2, f1};
    const FrameId b[] = {f3, f1};
    const StackId sa = t.frames.internStack(a);
    const StackId sb = t.frames.internStack(b);
    DeviceTrace d0;
    d0.device = 0;
    const uint64_t base = 0x7f2d40000000ull;
    d0.events.push(Action::SegmentAlloc, base, 20 << 20, 0, 1748730219596671, sa);
    d0.events.push(Action::Alloc, base, 5 << 20, 0, 1748730219596680, sa);
    d0.events.push(Action::Alloc, base + (5 << 20), 1 << 20, 0, 1748730219596690, sb);
    d0.events.push(Action::FreeRequested, base, 5 << 20, 0, 1748730219596700, sb);
    d0.events.push(Action::FreeCompleted, base, 5 << 20, 0, 1748730219596701, sb);
    d0.events.push(Action::Oom, 1 << 20, 80LL << 30, 0, 1748730219596800, sa);
    Segment s;
    s.address = base;
    s.totalSize = 20 << 20;
    s.allocatedSize = 1 << 20;
    s.activeSize = 1 << 20;
    s.requestedSize = 1 << 20;
    s.stack = sa;
    s.blocks.push_back(Block{base, 5 << 20, 0, BlockState::Inactive, {}});
    s.blocks.push_back(Block{base + (5 << 20), 1 << 20, 1 << 20, BlockState::ActiveAllocated, sb});
    s.blocks.push_back(Block{base + (6 << 20), 14 << 20, 0, BlockState::Inactive, {}});
    d0.segments.push_back(s);
    DeviceTrace d2; // device 1 has no trace: its list must be empty
    d2.device = 2;
    d2.events.push(Action::Alloc, base + (1ull << 40), 512, 7, kNoTime, StackId{});
    std::vector<std::string> warnings;
    finalizeDevice(d0, warnings);
    finalizeDevice(d2, warnings);
    t.devices.push_back(std::move(d0));
    t.devices.push_back(std::move(d2));
    t.annotations.push_back({"Optimizer.step#AdamW.step", true, 0, 1748730219596750});
    t.annotations.push_back({"Optimizer.step#AdamW.step", false, 0, 1748730219596760});
    return t;
}

} // namespace

class TestPickleWriter : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void matchesCPython_data();
    void matchesCPython();
    void sharingAndLongMemo();
    void framesAroundLargeStrings();
    void protocolTwoHasNoFrames();
    void rejectsWrongCounts();
    void snapshotRoundTrip_data();
    void snapshotRoundTrip();
    void snapshotJson();
    void corpusRewrite_data();
    void corpusRewrite();
};

void TestPickleWriter::initTestCase()
{
    if (testing::python3().isEmpty())
        QSKIP("python3 not found: the writer is checked against CPython's pickler");
}

void TestPickleWriter::matchesCPython_data()
{
    QTest::addColumn<int>("protocol");
    QTest::addColumn<QString>("name");
    for (int proto : {2, 4, 5})
        for (const char* name : {"scalars", "ints", "strings", "tuples", "lists", "dicts", "bigList", "nested"})
            QTest::newRow(qPrintable(QString("%1/p%2").arg(name).arg(proto))) << proto << QString(name);
}

void TestPickleWriter::matchesCPython()
{
    QFETCH(int, protocol);
    QFETCH(QString, name);
    PyObjPtr obj;
    QString expr;
    if (name == "scalars") {
        obj = P::list({P::none(), P::boolean(true), P::boolean(false), P::floating(1.5), P::floating(-0.0), P::floating(1e300)});
        expr = "[None, True, False, 1.5, -0.0, 1e300]";
    } else if (name == "ints") {
        const int64_t values[] = {0, 1, 255, 256, 65535, 65536, -1, -255, -256, -65536, std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min(), int64_t(1) << 31, -(int64_t(1) << 31) - 1,
                                  139774509711360, 1748730219595970, -(int64_t(1) << 40), std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min()};
        std::vector<PyObjPtr> items;
        QStringList py;
        for (int64_t v : values) {
            items.push_back(P::integer(v));
            py << QString::number(v);
        }
        items.push_back(P::unsignedInteger(std::numeric_limits<uint64_t>::max()));
        items.push_back(P::unsignedInteger(uint64_t(1) << 63));
        py << "18446744073709551615" << "9223372036854775808";
        obj = P::list(std::move(items));
        expr = "[" + py.join(",") + "]";
    } else if (name == "strings") {
        obj = P::list({P::str("segments"), P::str(std::string(255, 'a')), P::str(std::string(256, 'b')),
                       P::str("unicode: \xc3\xa9 \xe4\xb8\xad"), P::str("with\nnewline")});
        expr = "['segments', 'a'*255, 'b'*256, 'unicode: \\u00e9 \\u4e2d', 'with\\nnewline']";
    } else if (name == "tuples") {
        obj = P::list({P::tuple({}), P::tuple({P::integer(1)}), P::tuple({P::integer(1), P::integer(2)}),
                       P::tuple({P::integer(1), P::integer(2), P::integer(3)}),
                       P::tuple({P::integer(1), P::integer(2), P::integer(3), P::integer(4)}),
                       P::tuple({P::tuple({P::str("in")}), P::list({})})});
        expr = "[(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), (('in',), [])]";
    } else if (name == "lists") {
        obj = P::list({intList(0), intList(1), intList(2), intList(999), intList(1000), intList(1001), intList(2500)});
        expr = "[list(range(n)) for n in (0, 1, 2, 999, 1000, 1001, 2500)]";
    } else if (name == "dicts") {
        obj = P::list({intDict(0), intDict(1), intDict(2), intDict(1000), intDict(1001), intDict(2000)});
        expr = "[{'k%d' % i: i * 3 for i in range(n)} for n in (0, 1, 2, 1000, 1001, 2000)]";
    } else if (name == "bigList") {
        obj = intList(200000); // many frames
        expr = "list(range(200000))";
    } else if (name == "nested") {
        obj = P::dict({{P::str("a"), P::list({intDict(3), P::tuple({P::none(), P::floating(2.25)})})},
                       {P::str("bb"), P::dict({{P::str("cc"), P::list({P::list({P::list({})})})}})}});
        expr = "{'a': [{'k0': 0, 'k1': 3, 'k2': 6}, (None, 2.25)], 'bb': {'cc': [[[]]]}}";
    }
    QTemporaryDir dir;
    const QString file = writeTemp(dir, "case.pickle", pickled(obj, protocol));
    QCOMPARE(testing::checkPickle({"roundtrip", file, QString::number(protocol), expr}), QString());
}

void TestPickleWriter::sharingAndLongMemo()
{
    // One frame-like dict referenced 700 times, behind more than 256 memo entries: BINGET, then
    // LONG_BINGET, and python sees one object.
    auto frame = P::dict({{P::str("name"), P::str("forward")}, {P::str("line"), P::integer(39)}});
    std::vector<PyObjPtr> items;
    for (int i = 0; i < 300; ++i)
        items.push_back(P::str("filler" + std::to_string(i)));
    for (int i = 0; i < 700; ++i)
        items.push_back(P::list({frame, frame}));
    auto shared = P::str("shared-string");
    items.push_back(P::tuple({shared, shared}));
    auto obj = P::list(std::move(items));
    for (int proto : {2, 4}) {
        QTemporaryDir dir;
        const QString file = writeTemp(dir, "shared.pickle", pickled(obj, proto));
        const QString expr = "['filler%d' % i for i in range(300)] + [[{'name': 'forward', 'line': 39}] * 2] * 700 + [('shared-string',) * 2]";
        const QString check = "obj[300][0] is obj[999][1] and obj[-1][0] is obj[-1][1] and obj[300] is not obj[301]";
        QCOMPARE(testing::checkPickle({"roundtrip", file, QString::number(proto), expr, check}), QString());
    }
}

void TestPickleWriter::framesAroundLargeStrings()
{
    // A string of 64 KiB or more closes the frame (dropping a header under 4 bytes) and is written
    // outside any frame; an exactly 64 KiB one is large too.
    auto obj = P::list({P::str(std::string(70000, 'x')), P::integer(1), P::str(std::string(65536, 'y')),
                        P::str(std::string(65535, 'z')), intList(30000)});
    for (int proto : {4, 5}) {
        QTemporaryDir dir;
        const QString file = writeTemp(dir, "large.pickle", pickled(obj, proto));
        QCOMPARE(testing::checkPickle({"roundtrip", file, QString::number(proto), "['x'*70000, 1, 'y'*65536, 'z'*65535, list(range(30000))]"}),
                 QString());
    }
}

void TestPickleWriter::protocolTwoHasNoFrames()
{
    const std::string bytes = pickled(intList(100000), 2);
    QCOMPARE(uint8_t(bytes[0]), uint8_t(0x80));
    QCOMPARE(uint8_t(bytes[1]), uint8_t(2));
    QCOMPARE(uint8_t(bytes[2]), uint8_t(']')); // EMPTY_LIST right after PROTO, no FRAME
    QCOMPARE(uint8_t(bytes[3]), uint8_t('q')); // BINPUT 0
    QCOMPARE(bytes.back(), '.');
    const std::string p4 = pickled(intList(100000), 4);
    QCOMPARE(uint8_t(p4[2]), uint8_t(0x95)); // FRAME
}

void TestPickleWriter::rejectsWrongCounts()
{
    std::ostringstream out;
    PickleWriter w(out, 4);
    w.beginList(2);
    w.integer(1);
    QVERIFY_THROWS_EXCEPTION(std::logic_error, w.endList());
    w.integer(2);
    w.endList();
    w.finish();
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, PickleWriter(out, 1));
}

void TestPickleWriter::snapshotRoundTrip_data()
{
    QTest::addColumn<int>("protocol");
    QTest::newRow("p2") << 2;
    QTest::newRow("p4") << 4;
    QTest::newRow("p5") << 5;
}

void TestPickleWriter::snapshotRoundTrip()
{
    QFETCH(int, protocol);
    const Trace t = sampleTrace();
    std::ostringstream out;
    writeSnapshot(t, out, protocol);
    QTemporaryDir dir;
    const QString file = writeTemp(dir, "snap.pickle", out.str());
    const QString expr =
        "{'segments': [{'device': 0, 'address': 0x7f2d40000000, 'total_size': 20971520, 'allocated_size': 1048576, "
        "'active_size': 1048576, 'requested_size': 1048576, 'stream': 0, 'segment_type': 'large', 'segment_pool_id': (0, 0), "
        "'is_expandable': False, 'blocks': ["
        "{'address': 0x7f2d40000000, 'size': 5242880, 'requested_size': 0, 'state': 'inactive', 'frames': []}, "
        "{'address': 0x7f2d40500000, 'size': 1048576, 'requested_size': 1048576, 'state': 'active_allocated', 'frames': [F3, F1]}, "
        "{'address': 0x7f2d40600000, 'size': 14680064, 'requested_size': 0, 'state': 'inactive', 'frames': []}], "
        "'frames': [F3, F2, F1]}], "
        "'device_traces': [["
        "{'action': 'segment_alloc', 'addr': 0x7f2d40000000, 'size': 20971520, 'stream': 0, 'time_us': 1748730219596671, 'frames': [F3, F2, F1]}, "
        "{'action': 'alloc', 'addr': 0x7f2d40000000, 'size': 5242880, 'stream': 0, 'time_us': 1748730219596680, 'frames': [F3, F2, F1]}, "
        "{'action': 'alloc', 'addr': 0x7f2d40500000, 'size': 1048576, 'stream': 0, 'time_us': 1748730219596690, 'frames': [F3, F1]}, "
        "{'action': 'free_requested', 'addr': 0x7f2d40000000, 'size': 5242880, 'stream': 0, 'time_us': 1748730219596700, 'frames': [F3, F1]}, "
        "{'action': 'free_completed', 'addr': 0x7f2d40000000, 'size': 5242880, 'stream': 0, 'time_us': 1748730219596701, 'frames': [F3, F1]}, "
        "{'action': 'oom', 'device_free': 1048576, 'size': 85899345920, 'stream': 0, 'time_us': 1748730219596800, 'frames': [F3, F2, F1]}], "
        "[], [{'action': 'alloc', 'addr': 0x7f2d40000000 + (1 << 40), 'size': 512, 'stream': 7, 'frames': []}]], "
        "'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:False', 'expandable_segments': False, "
        "'garbage_collection_threshold': 0.0, 'max_split_size': -1, 'roundup_power2_divisions': {'1': 0, '2': 4}}, "
        "'external_annotations': [{'stage': 'START', 'name': 'Optimizer.step#AdamW.step', 'device': 0, 'time_us': 1748730219596750}, "
        "{'stage': 'END', 'name': 'Optimizer.step#AdamW.step', 'device': 0, 'time_us': 1748730219596760}]}";
    const QString frames = "F1 = {'name': 'train_step', 'filename': '/home/u/train.py', 'line': 42}; "
                           "F2 = {'name': 'torch::autograd::Engine::evaluate_function(...)', 'filename': '?\?', 'line': 0}; "
                           "F3 = {'name': 'c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc', 'filename': '', 'line': 0}";
    // Frame dicts are shared objects, as in PyTorch's dumps.
    // Frame dicts are shared objects, as in PyTorch's dumps; so are the frames lists of one request
    // (segment_alloc + alloc) and of one free (free_requested + free_completed).
    const QString check = "obj['device_traces'][0][0]['frames'][2] is obj['device_traces'][0][3]['frames'][1] "
                          "and obj['segments'][0]['frames'][0] is obj['device_traces'][0][2]['frames'][0] "
                          "and obj['device_traces'][0][0]['frames'] is obj['device_traces'][0][1]['frames'] "
                          "and obj['device_traces'][0][3]['frames'] is obj['device_traces'][0][4]['frames'] "
                          "and obj['device_traces'][0][2]['frames'] is not obj['device_traces'][0][3]['frames']";
    QCOMPARE(testing::checkPickle({"roundtrip", file, QString::number(protocol), "(lambda: (exec(\"" + frames + "\", globals()), " + expr + ")[1])()", check}),
             QString());

    // And PoolScope's own reader gets the same numbers back.
    auto back = load(file.toStdString());
    QCOMPARE(back->devices.size(), size_t(3)); // device_traces[1] is an empty list: a device without events
    QVERIFY(back->findDevice(2) && back->findDevice(2)->eventCount() == 1);
    const DeviceTrace& d = *back->findDevice(0);
    const DeviceTrace& orig = t.devices[0];
    QCOMPARE(d.eventCount(), orig.eventCount());
    QCOMPARE(d.events.addr, orig.events.addr);
    QCOMPARE(d.events.size, orig.events.size);
    QCOMPARE(d.events.timeUs, orig.events.timeUs);
    QCOMPARE(d.peakAllocated, orig.peakAllocated);
    QCOMPARE(d.initialAllocated, orig.initialAllocated);
    QCOMPARE(d.endReserved, orig.endReserved);
    QCOMPARE(d.ooms.size(), size_t(1));
    QCOMPARE(back->annotations.size(), size_t(2));
    QCOMPARE(back->frames.frameCount(), t.frames.frameCount());
}

void TestPickleWriter::snapshotJson()
{
    const Trace t = sampleTrace();
    QTemporaryDir dir;
    std::ostringstream p, j;
    writeSnapshot(t, p, 4);
    writeSnapshotJson(t, j);
    const QString pf = writeTemp(dir, "snap.pickle", p.str());
    const QString jf = writeTemp(dir, "snap.json", j.str());
    QCOMPARE(testing::checkPickle({"json", jf, pf}), QString());
    auto back = load(jf.toStdString());
    QCOMPARE(back->devices.at(0).eventCount(), t.devices[0].eventCount());
    QCOMPARE(back->devices.at(0).peakAllocated, t.devices[0].peakAllocated);
}

void TestPickleWriter::corpusRewrite_data()
{
    QTest::addColumn<QString>("name");
    for (const char* f : {"k_ctx128_fullstep.pickle", "k_ctx256_forward_mixed.pickle", "cranberrii_snapshot.pickle", "muduard_2dev.pickle"})
        QTest::newRow(f) << QString(f);
}

void TestPickleWriter::corpusRewrite()
{
    // A real dump read by PoolScope and written back holds the same dict (everything the model keeps
    // is everything these dumps have), and reads back to identical numbers.
    QFETCH(QString, name);
    const QString file = QString(POOLSCOPE_CORPUS_DIR) + "/" + name;
    if (!QFileInfo::exists(file))
        QSKIP("corpus not available");
    auto trace = load(file.toStdString());
    QTemporaryDir dir;
    std::ostringstream out;
    writeSnapshot(*trace, out, 4);
    const QString ours = writeTemp(dir, "rewritten.pickle", out.str());
    QCOMPARE(testing::checkPickle({"compare", file, ours}), QString());
    auto back = load(ours.toStdString());
    QCOMPARE(back->devices.size(), trace->devices.size());
    for (size_t i = 0; i < trace->devices.size(); ++i) {
        const auto& a = trace->devices[i];
        const auto& b = back->devices[i];
        QCOMPARE(b.eventCount(), a.eventCount());
        QCOMPARE(b.initialAllocated, a.initialAllocated);
        QCOMPARE(b.peakAllocated, a.peakAllocated);
        QCOMPARE(b.peakIndex, a.peakIndex);
        QCOMPARE(b.endReserved, a.endReserved);
        QCOMPARE(b.allocations.size(), a.allocations.size());
    }
    qInfo("%s: %lld bytes original, %lld rewritten", qPrintable(name), qint64(QFileInfo(file).size()), qint64(out.str().size()));
}

QTEST_GUILESS_MAIN(TestPickleWriter)
#include "test_pickle_writer.moc"
