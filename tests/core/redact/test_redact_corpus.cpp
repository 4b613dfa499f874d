// `poolscope redact` on every real dump of ../shared/corpus (skipped where it is absent), as a user
// runs it: no path, file, function, user name or annotation of the user's program survives in the
// bytes of a --rename-code copy; the copy is a snapshot python's pickle reads in PyTorch's shape;
// `report --no-pools --json` says the same but for the file name and the frame lines; a
// --frames python copy holds no native frame and a --frames none copy no frame but the same history.
#include "core/engine/document.h"
#include "core/load.h"
#include "core/redact/code_names.h"
#include "core/redact/redact.h"
#include "core/redact/redacted_copy.h"
#include "core/report/report.h"

#include "core/run_poolscope.h"
#include "support/check_pickle.h"
#include "support/corpus.h"

#include <QtTest>

#include <fstream>
#include <regex>
#include <set>

using namespace poolscope;

namespace {

std::string readBytes(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `report --no-pools --json` of a trace, without what a redaction changes by design: the file's
// name and the frame lines quoted for the largest allocations and for an OOM's request ("site").
QJsonValue stripped(const QJsonValue& v)
{
    if (v.isObject()) {
        QJsonObject o;
        const QJsonObject in = v.toObject();
        for (auto it = in.begin(); it != in.end(); ++it)
            if (it.key() != "file" && it.key() != "frame" && it.key() != "site")
                o.insert(it.key(), stripped(it.value()));
        return o;
    }
    if (v.isArray()) {
        QJsonArray a;
        for (const auto& x : v.toArray())
            a.append(stripped(x));
        return a;
    }
    return v;
}

QByteArray numbersReport(std::shared_ptr<const Trace> trace)
{
    DocumentOptions options;
    options.eagerTimelines = false;
    const auto doc = Document::fromTrace(std::move(trace), options);
    const std::string json = reportJsonText(buildReport(*doc, ReportOptions{}));
    return QJsonDocument(stripped(QJsonDocument::fromJson(QByteArray::fromStdString(json)).object()).toObject()).toJson();
}

std::string slashes(std::string s)
{
    std::replace(s.begin(), s.end(), '\\', '/');
    return s;
}

// Every string of the user's program the dump holds: paths and folders above a library's root,
// user files (whole and base name), their functions, native symbols of the user's extensions, user
// names from home folders, and annotation names other than PyTorch's step markers.
std::set<std::string> userStrings(const Trace& t)
{
    std::set<std::string> libraryParts; // what a kept library path or name legitimately holds
    for (size_t i = 0; i < t.frames.frameCount(); ++i) {
        const Frame& f = t.frames.frame(FrameId(uint32_t(i)));
        if (auto lib = libraryRelativePath(f.filename)) {
            libraryParts.insert(f.name);
            std::string part;
            for (char c : *lib + "/")
                if (c == '/') {
                    libraryParts.insert(part);
                    part.clear();
                } else
                    part += c;
        }
    }
    std::set<std::string> out;
    static const std::regex kHome(R"(^(?:[A-Za-z]:)?/(?:home|Users|users)/([^/]+)/)");
    for (size_t i = 0; i < t.frames.frameCount(); ++i) {
        const Frame& f = t.frames.frame(FrameId(uint32_t(i)));
        const std::string path = slashes(f.filename);
        std::smatch m;
        if (std::regex_search(path, m, kHome) && m[1].length() >= 3)
            out.insert(m[1].str());
        const auto lib = libraryRelativePath(f.filename);
        if (lib && *lib == f.filename) {
            if ((f.filename.empty() || f.filename == "??") && !isLibrarySymbol(f.name))
                out.insert(f.name);
            continue;
        }
        if (path.find('/') != std::string::npos)
            out.insert(f.filename); // the whole original path never travels
        // The folders above a library's root and every part of a user file's path.
        std::string above = path;
        if (lib) {
            std::string rel = *lib; // without the marker of its root, as the original path ends
            for (std::string_view marker : {"/site-packages/", "/lib/python3/"})
                if (rel.rfind(marker, 0) == 0)
                    rel = rel.substr(marker.size());
            if (path.size() >= rel.size() && path.compare(path.size() - rel.size(), rel.size(), rel) == 0)
                above = path.substr(0, path.size() - rel.size());
        }
        std::string part;
        for (char c : above + "/")
            if (c == '/') {
                if (part.size() >= 4 && !libraryParts.count(part))
                    out.insert(part);
                part.clear();
            } else
                part += c;
        if (!lib && f.filename != "<op>" && !isNeutralFunctionName(f.name) && f.name.size() >= 4 && !libraryParts.count(f.name))
            out.insert(f.name);
    }
    static const std::regex kMarker(
        R"(^(ProfilerStep#\d+|Optimizer\.(step|zero_grad)#(SGD|Adam|AdamW)\.(step|zero_grad)|enumerate\(DataLoader\)#_SingleProcessDataLoaderIter\.__next__)$)");
    for (const Annotation& a : t.annotations)
        if (!std::regex_match(a.name, kMarker) && a.name.size() >= 4)
            out.insert(a.name);
    return out;
}

std::set<std::string> copyStrings(const Trace& t)
{
    std::set<std::string> out;
    for (size_t i = 0; i < t.frames.frameCount(); ++i) {
        out.insert(t.frames.frame(FrameId(uint32_t(i))).filename);
        out.insert(t.frames.frame(FrameId(uint32_t(i))).name);
    }
    for (const Annotation& a : t.annotations)
        out.insert(a.name);
    return out;
}

} // namespace

class TestRedactCorpus : public QObject {
    Q_OBJECT
private slots:
    void renamedCopy_data();
    void renamedCopy();
    void framesOptions_data() { renamedCopy_data(); }
    void framesOptions();
};

void TestRedactCorpus::renamedCopy_data()
{
    testing::addCorpusRows();
}

void TestRedactCorpus::renamedCopy()
{
    QFETCH(QString, name);
    if (name.isEmpty())
        QSKIP("../shared/corpus not available");
    const QString file = testing::corpusPath(name);
    const auto original = load(file.toStdString());
    QTemporaryDir dir;
    const bool json = original->format == SourceFormat::SnapshotJson;
    const QString out = dir.filePath(json ? "copy.json" : "copy.pickle");
    const auto r = testing::runPoolscope({"redact", file, "-o", out, "--rename-code"});
    if (original->format == SourceFormat::KinetoTrace || original->format == SourceFormat::MemoryTimelineRaw) {
        QCOMPARE(r.exitCode, 2); // one clear line, no copy
        QVERIFY2(r.err.contains("cannot be redacted") && r.err.contains(name.toUtf8()), r.err.constData());
        QVERIFY(!QFileInfo::exists(out));
        return;
    }
    QVERIFY2(r.exitCode == 0, r.err.constData());

    const auto copy = load(out.toStdString());
    const std::string bytes = readBytes(out.toStdString());
    const auto kept = copyStrings(*copy);
    // The copy's bytes without any frame: PyTorch's own keys and values ("active_allocated" holds a
    // user's function "allocate"), where a user string found is a coincidence, not a leak.
    RedactOptions bare;
    bare.renameCode = true;
    bare.frames = FrameKeep::None;
    const QString skeletonPath = dir.filePath("skeleton.pickle");
    writeRedactedCopy(*redact(*original, bare), skeletonPath.toStdString());
    const std::string skeleton = readBytes(skeletonPath.toStdString());
    const auto gone = userStrings(*original);
    int checked = 0;
    for (const std::string& s : gone) {
        QVERIFY2(!kept.count(s), ("survived as a string: " + s).c_str());
        bool part = false;
        for (const std::string& k : kept)
            part = part || k.find(s) != std::string::npos;
        if (!part && s.size() >= 4 && skeleton.find(s) == std::string::npos) {
            QVERIFY2(bytes.find(s) == std::string::npos, ("survived in the bytes: " + s).c_str());
            ++checked;
        }
    }
    QVERIFY(bytes.find("compile_context") == std::string::npos && bytes.find("user_metadata") == std::string::npos);
    qInfo("%s: %zu user strings, %d searched in the bytes, %zu distinct frames", qPrintable(name), gone.size(), checked,
          copy->frames.frameCount());

    // PyTorch's structure still reads (python's pickle, no torch), and the numbers are the same.
    if (!json)
        QCOMPARE(testing::checkPickle({"snapshot", out}), QString());
    QCOMPARE(copy->frames.frameCount(), original->frames.frameCount());
    QCOMPARE(numbersReport(copy), numbersReport(original));
}

void TestRedactCorpus::framesOptions()
{
    QFETCH(QString, name);
    if (name.isEmpty())
        QSKIP("../shared/corpus not available");
    const auto original = load(testing::corpusPath(name).toStdString());
    if (original->format == SourceFormat::KinetoTrace || original->format == SourceFormat::MemoryTimelineRaw)
        QSKIP("not an allocator snapshot");
    const QByteArray numbers = numbersReport(original);
    QTemporaryDir dir;
    for (FrameKeep keep : {FrameKeep::Python, FrameKeep::None}) {
        RedactOptions options;
        options.frames = keep;
        const auto copy = redact(*original, options);
        const std::string out = dir.filePath("copy.pickle").toStdString();
        writeRedactedCopy(*copy, out);
        const auto back = load(out);
        if (keep == FrameKeep::None) {
            QCOMPARE(back->frames.frameCount(), size_t(0));
        } else {
            for (size_t i = 0; i < back->frames.frameCount(); ++i)
                QVERIFY(isPythonRecordedFrame(back->frames.frame(FrameId(uint32_t(i)))));
        }
        for (size_t d = 0; d < back->devices.size(); ++d) {
            QCOMPARE(back->devices[d].events.action, original->devices[d].events.action);
            QCOMPARE(back->devices[d].events.size, original->devices[d].events.size);
        }
        QCOMPARE(numbersReport(back), numbers);
    }
}

QTEST_GUILESS_MAIN(TestRedactCorpus)
#include "test_redact_corpus.moc"
