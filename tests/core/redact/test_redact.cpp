// Redaction on a small trace of our own: which names go, which stay, that tokens are stable, that the
// frames options drop what they say, that every number stays, and that the written copy is a
// snapshot python's pickle (and so PyTorch's viewer) reads.
#include "core/classify/rules.h"
#include "core/load.h"
#include "core/model/trace_builder.h"
#include "core/redact/code_names.h"
#include "core/redact/redact.h"
#include "core/redact/redacted_copy.h"

#include "core/run_poolscope.h"
#include "support/check_pickle.h"

#include <QtTest>

#include <fstream>
#include <set>

using namespace poolscope;

namespace {

const char* kUserFile = "/home/alice/secret_project/train_loop.py";
const char* kUserFile2 = "C:\\Users\\alice\\secret_project\\model_zoo.py";
const char* kTransformers = "/home/alice/.venv/lib/python3.11/site-packages/transformers/cache_utils.py";
const char* kTorchModule = "/home/alice/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py";
const char* kStdlib = "/usr/lib/python3.11/runpy.py";

Trace sampleTrace()
{
    Trace t;
    t.path = "sample.pickle";
    t.formatDetail = "pickle protocol 4";
    const FrameId user = t.frames.internFrame(kUserFile, "alices_train_step", 42);
    const FrameId user2 = t.frames.internFrame(kUserFile, "alices_train_step", 57);
    const FrameId model = t.frames.internFrame(kUserFile2, "forward", 12);
    const FrameId init = t.frames.internFrame(kUserFile2, "__init__", 3);
    const FrameId cache = t.frames.internFrame(kTransformers, "update", 100);
    const FrameId module = t.frames.internFrame(kTorchModule, "_call_impl", 1520);
    const FrameId runpy = t.frames.internFrame(kStdlib, "_run_code", 86);
    const FrameId cpp = t.frames.internFrame("??", "at::native::empty_cuda(...)", 0);
    const FrameId cpython = t.frames.internFrame("/usr/local/src/conda/python-3.12.7/Objects/call.c", "_PyObject_MakeTpCall", 240);
    const FrameId ext = t.frames.internFrame("??", "alice_ext::fused_kernel_launch", 0);
    const FrameId s1[] = {cpp, cpython, cache, module, model, user, runpy};
    const FrameId s2[] = {ext, cpp, module, user2, runpy};
    const FrameId s3[] = {cpp, init, user};
    const StackId a = t.frames.internStack(s1), b = t.frames.internStack(s2), c = t.frames.internStack(s3);
    DeviceTrace d;
    d.device = 0;
    const uint64_t base = 0x7f0000000000ull;
    d.events.push(Action::SegmentAlloc, base, 8 << 20, 0, 1000, a);
    d.events.push(Action::Alloc, base, 1 << 20, 0, 1001, c);
    d.events.push(Action::Alloc, base + (1 << 20), 2 << 20, 0, 1002, a);
    d.events.push(Action::Alloc, base + (3 << 20), 512, 7, 1003, b);
    d.events.push(Action::FreeRequested, base + (1 << 20), 2 << 20, 0, 1004, b);
    d.events.push(Action::FreeCompleted, base + (1 << 20), 2 << 20, 0, 1005, b);
    d.events.push(Action::Oom, 64 << 20, 1 << 20, 0, 1006, a);
    Segment s;
    s.address = base;
    s.totalSize = 8 << 20;
    s.allocatedSize = (1 << 20) + 512;
    s.activeSize = s.allocatedSize;
    s.requestedSize = s.allocatedSize;
    s.stack = a;
    s.blocks.push_back(Block{base, 1 << 20, 1 << 20, BlockState::ActiveAllocated, c});
    s.blocks.push_back(Block{base + (1 << 20), 2 << 20, 0, BlockState::Inactive, {}});
    s.blocks.push_back(Block{base + (3 << 20), 512, 512, BlockState::ActiveAllocated, b});
    s.blocks.push_back(Block{base + (3 << 20) + 512, (5 << 20) - 512, 0, BlockState::Inactive, {}});
    d.segments.push_back(s);
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    t.devices.push_back(std::move(d));
    for (const char* name : {"ProfilerStep#3", "Optimizer.step#AdamW.step", "Optimizer.step#AlicesAdam.step",
                             "alice_forward_pass", "alice_dataloader_fetch", "alice_forward_pass"}) {
        t.annotations.push_back({name, true, 0, 1000});
        t.annotations.push_back({name, false, 0, 1006});
    }
    return t;
}

const RuleSet& rules()
{
    static const RuleSet r = RuleSet::fromFile(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json");
    return r;
}

std::vector<Frame> framesOf(const Trace& t, StackId s)
{
    std::vector<Frame> out;
    for (FrameId f : t.frames.stack(s))
        out.push_back(t.frames.frame(f));
    return out;
}

} // namespace

class TestRedact : public QObject {
    Q_OBJECT
private slots:
    void libraryPaths();
    void interpreterSymbols();
    void renameCode();
    void annotations();
    void pythonFrames();
    void noFrames();
    void writtenCopies_data();
    void writtenCopies();
    void cliErrors();
};

void TestRedact::libraryPaths()
{
    QCOMPARE(libraryRelativePath(kTransformers).value_or("-"), std::string("/site-packages/transformers/cache_utils.py"));
    QCOMPARE(libraryRelativePath("C:\\research\\x\\.venv\\Lib\\site-packages\\torch\\nn\\functional.py").value_or("-"),
             std::string("/site-packages/torch/nn/functional.py"));
    QCOMPARE(libraryRelativePath("/opt/miniconda3/envs/pt/lib/python3.10/runpy.py").value_or("-"), std::string("/lib/python3/runpy.py"));
    QCOMPARE(libraryRelativePath("C:\\Users\\z\\AppData\\Roaming\\uv\\python\\cpython-3.10.19-windows-x86_64-none\\lib\\copy.py").value_or("-"),
             std::string("/lib/python3/copy.py"));
    // A conda environment's standard library on Windows: <env>\Lib\, no Python directory above it.
    QCOMPARE(libraryRelativePath("C:\\Users\\z\\miniconda3\\envs\\dm\\Lib\\copy.py").value_or("-"), std::string("/lib/python3/copy.py"));
    QVERIFY(!libraryRelativePath("C:\\dev\\proj\\lib\\blocks.py")); // a folder of the user's called lib
    QCOMPARE(libraryRelativePath("/croot/python-split_1728047642222/work/build-static/Python/bytecodes.c").value_or("-"),
             std::string("Python/bytecodes.c"));
    QCOMPARE(libraryRelativePath("/home/ci/pytorch/torch/csrc/autograd/engine.cpp").value_or("-"),
             std::string("torch/csrc/autograd/engine.cpp"));
    QCOMPARE(libraryRelativePath("RegisterCUDA.cpp").value_or("-"), std::string("RegisterCUDA.cpp"));
    QCOMPARE(libraryRelativePath("<frozen runpy>").value_or("-"), std::string("<frozen runpy>"));
    // The user's own code, including a vendored copy of a library and a folder that only looks like Python's.
    QVERIFY(!libraryRelativePath(kUserFile));
    QVERIFY(!libraryRelativePath("/mnt/x/select_n/lib/transformers/models/llama/modeling_llama.py"));
    QVERIFY(!libraryRelativePath("/home/a/proj/lib/python_utils/helpers.py"));
    QVERIFY(!libraryRelativePath("<ipython-input-3-alice>"));
    QVERIFY(!libraryRelativePath("/home/alice/myext/kernels/fused.cu"));
    QCOMPARE(libraryRelativePath("/home/ci/pytorch/torch/nn/modules/module.py").value_or("-"),
             std::string("/site-packages/torch/nn/modules/module.py")); // a source checkout
    QVERIFY(!libraryRelativePath("/home/alice/torch/experiments/train.py")); // a folder of hers named torch
}

// CPython's own C functions stay (tb_dealloc frees what an OOM's traceback held, and the classifier
// reads it: the synth dp-oom scenario renamed moved 35.7 % of its bytes while it was tokenised); a
// user extension's look-alike is still the user's.
void TestRedact::interpreterSymbols()
{
    for (const char* s : {"tb_dealloc", "frame_dealloc", "subtype_dealloc", "slot_nb_multiply", "gen_iternext", "_PyEval_EvalFrameDefault"})
        QVERIFY2(isLibrarySymbol(s), s);
    for (const char* s : {"mymodule_dealloc", "tb_dealloc_hook", "compute_kernel", "slot_machine"})
        QVERIFY2(!isLibrarySymbol(s), s);
}

void TestRedact::renameCode()
{
    const Trace original = sampleTrace();
    RedactOptions options;
    options.renameCode = true;
    options.markers = &rules();
    RedactStats stats;
    const auto copy = redact(original, options, &stats);
    QCOMPARE(copy->frames.frameCount(), original.frames.frameCount());
    std::set<std::string> strings;
    for (size_t i = 0; i < copy->frames.frameCount(); ++i) {
        const Frame& f = copy->frames.frame(FrameId(uint32_t(i)));
        const Frame& o = original.frames.frame(FrameId(uint32_t(i)));
        QCOMPARE(f.line, o.line); // line numbers kept
        strings.insert(f.filename);
        strings.insert(f.name);
    }
    for (const std::string& s : strings) {
        QVERIFY2(s.find("alice") == std::string::npos, s.c_str());
        QVERIFY2(s.find("secret") == std::string::npos, s.c_str());
        QVERIFY2(s.find("train_loop") == std::string::npos, s.c_str());
        QVERIFY2(s.find("model_zoo") == std::string::npos, s.c_str());
        QVERIFY2(s.find(".venv") == std::string::npos, s.c_str());
    }
    // Library code keeps its function names and the path inside its package; PyTorch's symbols stay.
    QVERIFY(strings.count("/site-packages/transformers/cache_utils.py"));
    QVERIFY(strings.count("/site-packages/torch/nn/modules/module.py"));
    QVERIFY(strings.count("/lib/python3/runpy.py"));
    QVERIFY(strings.count("Objects/call.c"));
    QVERIFY(strings.count("_call_impl") && strings.count("update") && strings.count("at::native::empty_cuda(...)"));
    QVERIFY(strings.count("__init__")); // Python's protocol names say nothing about the program
    // Same file, same token; same function, same token; the user's `forward` is a user name too.
    const auto s1 = framesOf(*copy, copy->devices[0].events.stack[2]);
    const auto s3 = framesOf(*copy, copy->devices[0].events.stack[1]);
    const auto s2 = framesOf(*copy, copy->devices[0].events.stack[3]);
    QCOMPARE(s1.size(), size_t(7));
    QCOMPARE(s1[5].filename, s3[2].filename);
    QCOMPARE(s1[5].name, s3[2].name);
    QCOMPARE(s1[5].filename, s2[3].filename);
    QVERIFY(s1[5].filename != s1[4].filename);
    QVERIFY(s1[4].name != "forward");
    QVERIFY(s1[5].isPython() && s1[4].isPython());
    QVERIFY(s2[0].name != "alice_ext::fused_kernel_launch"); // a user extension's symbol
    QCOMPARE(s2[1].name, std::string("at::native::empty_cuda(...)"));
    QCOMPARE(stats.framesDropped, size_t(0));
    QVERIFY(stats.framesRenamed >= 5);
    QVERIFY(stats.pathsCut >= 3);
    // Every number stays.
    const DeviceTrace& a = original.devices[0];
    const DeviceTrace& b = copy->devices[0];
    QCOMPARE(b.events.addr, a.events.addr);
    QCOMPARE(b.events.size, a.events.size);
    QCOMPARE(b.events.timeUs, a.events.timeUs);
    QCOMPARE(b.events.stream, a.events.stream);
    QCOMPARE(b.allocations.size(), a.allocations.size());
    QCOMPARE(b.peakAllocated, a.peakAllocated);
    QCOMPARE(b.ooms.size(), size_t(1));
}

void TestRedact::annotations()
{
    RedactOptions options;
    options.renameCode = true;
    options.markers = &rules();
    const auto copy = redact(sampleTrace(), options);
    std::vector<std::string> names;
    for (size_t i = 0; i < copy->annotations.size(); i += 2) {
        QCOMPARE(copy->annotations[i].name, copy->annotations[i + 1].name); // START and END still pair
        names.push_back(copy->annotations[i].name);
    }
    QCOMPARE(names[0], std::string("ProfilerStep#3"));
    QCOMPARE(names[1], std::string("Optimizer.step#AdamW.step"));
    QCOMPARE(names[2], std::string("Optimizer.step#Optimizer1.step")); // the user's optimizer class goes
    QVERIFY2(names[3].rfind("forward#", 0) == 0, names[3].c_str());  // a phase marker still opens forward
    QVERIFY2(names[4].rfind("annotation#", 0) == 0, names[4].c_str());
    QCOMPARE(names[5], names[3]); // the same name gets the same token
    // Without --rename-code annotations stay as they were.
    QCOMPARE(redact(sampleTrace(), RedactOptions{})->annotations[6].name, std::string("alice_forward_pass"));
}

void TestRedact::pythonFrames()
{
    RedactOptions options;
    options.frames = FrameKeep::Python;
    const Trace original = sampleTrace();
    RedactStats stats;
    const auto copy = redact(original, options, &stats);
    QCOMPARE(stats.framesDropped, size_t(3)); // the ATen and the extension symbol, CPython's call.c
    const auto s1 = framesOf(*copy, copy->devices[0].events.stack[2]);
    QCOMPARE(s1.size(), size_t(5));
    QCOMPARE(s1.front().filename, std::string(kTransformers)); // order kept, names untouched without --rename-code
    QCOMPARE(s1.back().filename, std::string(kStdlib));
    for (size_t i = 0; i < copy->frames.frameCount(); ++i)
        QVERIFY(isPythonRecordedFrame(copy->frames.frame(FrameId(uint32_t(i)))));
    QCOMPARE(copy->devices[0].allocations.size(), original.devices[0].allocations.size());
}

void TestRedact::noFrames()
{
    RedactOptions options;
    options.frames = FrameKeep::None;
    const Trace original = sampleTrace();
    const auto copy = redact(original, options);
    QCOMPARE(copy->frames.frameCount(), size_t(0));
    const DeviceTrace& d = copy->devices[0];
    for (StackId s : d.events.stack)
        QVERIFY(copy->frames.stack(s).empty());
    for (const Segment& s : d.segments)
        for (const Block& b : s.blocks)
            QVERIFY(copy->frames.stack(b.stack).empty());
    // The history stays: every event, in order.
    QCOMPARE(d.events.action, original.devices[0].events.action);
    QCOMPARE(d.events.addr, original.devices[0].events.addr);
    QCOMPARE(d.allocated, original.devices[0].allocated);
}

void TestRedact::writtenCopies_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("frames");
    QTest::newRow("pickle") << "copy.pickle" << "all";
    QTest::newRow("pickle python") << "copy.pickle" << "python";
    QTest::newRow("pickle none") << "copy.pickle" << "none";
    QTest::newRow("zstd") << "copy.pickle.zst" << "all";
    QTest::newRow("gzip") << "copy.pickle.gz" << "all";
    QTest::newRow("json") << "copy.json" << "all";
    QTest::newRow("json gz") << "copy.json.gz" << "python";
}

void TestRedact::writtenCopies()
{
    QFETCH(QString, name);
    QFETCH(QString, frames);
    QTemporaryDir dir;
    Trace original = sampleTrace();
    if (name.contains(".json"))
        original.format = SourceFormat::SnapshotJson;
    RedactOptions options;
    options.renameCode = true;
    options.frames = *parseFrameKeep(frames.toStdString());
    options.markers = &rules();
    const auto copy = redact(original, options);
    const std::string out = dir.filePath(name).toStdString();
    writeRedactedCopy(*copy, out);
    const auto back = load(out);
    QCOMPARE(back->format, original.format);
    QCOMPARE(back->devices.size(), size_t(1));
    const DeviceTrace& a = original.devices[0];
    const DeviceTrace& b = back->devices[0];
    QCOMPARE(b.events.action, a.events.action);
    QCOMPARE(b.events.addr, a.events.addr);
    QCOMPARE(b.events.size, a.events.size);
    QCOMPARE(b.events.timeUs, a.events.timeUs);
    QCOMPARE(b.segments.size(), a.segments.size());
    QCOMPARE(b.segments[0].blocks.size(), a.segments[0].blocks.size());
    QCOMPARE(b.initialAllocated, a.initialAllocated);
    QCOMPARE(b.peakAllocated, a.peakAllocated);
    QCOMPARE(b.ooms.size(), a.ooms.size());
    QCOMPARE(back->annotations.size(), original.annotations.size());
    if (name.endsWith(".pickle")) {
        QCOMPARE(testing::checkPickle({"snapshot", QString::fromStdString(out), frames}), QString());
        std::ifstream in(out, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        QVERIFY(bytes.find("alice") == std::string::npos);
        QVERIFY(bytes.find("secret") == std::string::npos);
    }
}

void TestRedact::cliErrors()
{
    using testing::runPoolscope;
    QTemporaryDir dir;
    const QString in = dir.filePath("in.pickle");
    writeRedactedCopy(sampleTrace(), in.toStdString());
    const QString out = dir.filePath("out.pickle");

    auto r = runPoolscope({"redact", in});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("--output is required"), r.err.constData());
    r = runPoolscope({"redact", in, "-o", out, "--frames", "some"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("--frames: expects one of all, python, none, got 'some'"), r.err.constData());
    r = runPoolscope({"redact", in, "-o", in});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("is the input itself"), r.err.constData());
    r = runPoolscope({"redact", dir.filePath("missing.pickle"), "-o", out});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("missing.pickle"), r.err.constData());
    r = runPoolscope({"redact", in, "-o", dir.filePath("no/such/folder/out.pickle")});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("out.pickle"), r.err.constData());
    QVERIFY(!QFileInfo::exists(out));

    r = runPoolscope({"redact", in, "-o", out, "--rename-code", "--frames", "python"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    QVERIFY2(r.out.contains("wrote"), r.out.constData());
    QCOMPARE(load(out.toStdString())->devices[0].eventCount(), sampleTrace().devices[0].eventCount());
}

QTEST_GUILESS_MAIN(TestRedact)
#include "test_redact.moc"
