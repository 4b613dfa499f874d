// load(): every kind of input is recognised by content (never by name), compressed or not, and
// what is not recognised gets an error that says what was seen and what is supported.
#include "core/load.h"

#include "fixture_util.h"
#include "temp_files.h"

#include <nlohmann/json.hpp>

#include <QDir>
#include <QtTest>

#include <fstream>
#include <iterator>

using namespace poolscope;
using namespace poolscope::testutil;

namespace {

const char* kSnapshotJson = R"({"segments": [], "device_traces": [[]]})";
const char* kSegmentList = R"([{"device": 0, "address": 4096, "total_size": 2097152, "allocated_size": 0,
  "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
  "blocks": [{"address": 4096, "size": 2097152, "state": "inactive", "frames": []}]}])";
// Metadata before traceEvents holds brackets and quotes inside strings: the skimmer must not trip.
// (Plain literals: moc misreads raw strings with unbalanced brackets.)
const char* kKinetoObject = "{\"schemaVersion\": 1, \"deviceProperties\": [{\"name\": \"a \\\"}]{[\\\" b\", "
                            "\"x\": [[1], {\"y\": \"]\"}]}],\n"
                            "  \"traceEvents\": [{\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, \"ts\": 5,\n"
                            "  \"args\": {\"Device Type\": 1, \"Device Id\": 0, \"Bytes\": 512, \"Addr\": 4096}}]}";
const char* kKinetoArray = R"([{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5,
  "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Addr": 4096}}])";
const char* kTimeline = "[[-1, 1, 100, 0], [1000, 2, 50, 4]]";

} // namespace

class TestLoadDispatch : public QObject {
    Q_OBJECT

    TempFiles m_files;
    std::string file(const std::string& name, const Bytes& data) { return m_files.file(name, data); }

private slots:
    void eachKind_data()
    {
        QTest::addColumn<QByteArray>("content");
        QTest::addColumn<int>("format");
        QTest::addColumn<QString>("detail");
        const auto pickle = snapshotPickle();
        QTest::newRow("pickle") << QByteArray(reinterpret_cast<const char*>(pickle.data()), qsizetype(pickle.size()))
                                << int(SourceFormat::SnapshotPickle) << "pickle";
        QTest::newRow("html") << QByteArray::fromStdString(memoryVizHtml(pickle)) << int(SourceFormat::SnapshotHtml)
                              << "memory_viz HTML";
        QTest::newRow("snapshot json") << QByteArray(kSnapshotJson) << int(SourceFormat::SnapshotJson) << "";
        QTest::newRow("snapshot json, BOM + whitespace")
            << QByteArray("\xEF\xBB\xBF \n\t") + kSnapshotJson << int(SourceFormat::SnapshotJson) << "";
        QTest::newRow("bare segment list") << QByteArray(kSegmentList) << int(SourceFormat::SnapshotJson) << "";
        QTest::newRow("kineto object") << QByteArray(kKinetoObject) << int(SourceFormat::KinetoTrace) << "Chrome trace JSON";
        QTest::newRow("kineto array") << QByteArray(kKinetoArray) << int(SourceFormat::KinetoTrace)
                                      << "Chrome trace JSON (bare event array)";
        QTest::newRow("timeline raw") << QByteArray(kTimeline) << int(SourceFormat::MemoryTimelineRaw)
                                      << "export_memory_timeline raw JSON";
    }
    void eachKind()
    {
        QFETCH(QByteArray, content);
        QFETCH(int, format);
        QFETCH(QString, detail);
        const Bytes plain(content.begin(), content.end());
        struct Variant {
            const char* name;
            Bytes data;
            const char* suffix;
        };
        const Variant variants[] = {{"plain.bin", plain, ""},
                                    {"z.bin", zstdCompress(plain), ", zstd-compressed"},
                                    {"g.pickle", gzipCompress(plain), ", gzip-compressed"}};
        for (const auto& v : variants) {
            const std::string path = file(v.name, v.data);
            Progress progress;
            auto trace = load(path, {}, progress);
            QCOMPARE(int(trace->format), format);
            QCOMPARE(trace->path, path);
            QCOMPARE(trace->inputBytes, int64_t(plain.size()));
            QVERIFY2(trace->formatDetail.starts_with(detail.toStdString()), trace->formatDetail.c_str());
            QVERIFY2(trace->formatDetail.ends_with(v.suffix), trace->formatDetail.c_str());
            QCOMPARE(progress.stage.load(), int(LoadStage::Done));
        }
    }

    void unknownFormats_data()
    {
        QTest::addColumn<QByteArray>("content");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("text") << QByteArray("hello world") << "first bytes 68 65 6C 6C";
        QTest::newRow("json object") << QByteArray(R"({"foo": {"bar": [1, 2]}, "baz": 3})") << "\"foo\", \"baz\"";
        QTest::newRow("coalesced timeline") << QByteArray("[[0, 1000, 2000, 3000, 4000], [[0,0,0,0,0,0,0,0,0]]]")
                                            << ".raw.json";
        QTest::newRow("array of strings") << QByteArray(R"(["a", "b"])") << "neither an object nor an array";
        QTest::newRow("objects of another kind") << QByteArray(R"([{"id": 1}])") << "\"id\"";
        QTest::newRow("whitespace") << QByteArray(" \n ") << "only whitespace";
    }
    void unknownFormats()
    {
        QFETCH(QByteArray, content);
        QFETCH(QString, mentions);
        const std::string path = file("mystery.json", Bytes(content.begin(), content.end()));
        const LoadError e = loadError(path);
        QCOMPARE(e.code(), LoadErrorCode::UnknownFormat);
        QCOMPARE(e.file(), path);
        const std::string what = e.what();
        QVERIFY2(what.find(mentions.toStdString()) != std::string::npos, e.what());
        QVERIFY2(what.find("supported:") != std::string::npos, e.what());
    }

    // Protocols 0 and 1 have no PROTO header: a file that starts with '(', '}' or ']' is read as such
    // a pickle, and where it is none the error says what it was read as.
    void textThatLooksLikeAnOldPickle()
    {
        const LoadError e = loadError(file("notes.txt", toBytes("(hello world)\n")));
        QVERIFY(e.code() != LoadErrorCode(-1));
        QVERIFY2(std::string(e.what()).find("read as a pickle of protocol 0 or 1 (its first byte is '(')") != std::string::npos, e.what());
        QVERIFY2(e.offset() >= 0, e.what());
    }

    void emptyFile()
    {
        const LoadError e = loadError(file("empty.pickle", {}));
        QCOMPARE(e.code(), LoadErrorCode::UnknownFormat);
        QVERIFY2(e.message().find("empty") != std::string::npos, e.what());
        // Compressed emptiness is empty too.
        const LoadError z = loadError(file("empty.zst", zstdCompress({})));
        QCOMPARE(z.code(), LoadErrorCode::UnknownFormat);
    }

    // Sniffing a cut file never misfires: once the first byte says JSON, every prefix is Truncated or
    // Malformed, not "unknown format", and never a crash. A cut HTML page is fine past the base64.
    void prefixesOfEachKind()
    {
        const std::string html = memoryVizHtml(snapshotPickle());
        const size_t htmlDataEnd = html.find('"', html.find("\"base64\": \"") + 11);
        for (const std::string& full : {std::string(kKinetoObject), std::string(kSegmentList), std::string(kTimeline), html}) {
            const bool isHtml = full == html;
            for (size_t cut = 1; cut < full.size(); cut += cut < 160 ? 1 : 5) { // every byte of the heads
                const std::string path = file("prefix", toBytes(full.substr(0, cut)));
                if (isHtml && cut > htmlDataEnd) {
                    QCOMPARE(load(path)->format, SourceFormat::SnapshotHtml);
                    continue;
                }
                const LoadError e = loadError(path);
                const bool ok = e.code() == LoadErrorCode::Truncated || e.code() == LoadErrorCode::Malformed ||
                                (isHtml && e.code() == LoadErrorCode::UnknownFormat);
                QVERIFY2(ok, qPrintable(QString("cut %1: %2").arg(cut).arg(e.what())));
            }
        }
    }

    void missingFile()
    {
        const LoadError e = loadError(m_files.path("absent.pickle"));
        QCOMPARE(e.code(), LoadErrorCode::FileNotFound);
    }

    void offsetsInCompressedInputsSaySo()
    {
        std::string cut = kKinetoObject;
        cut.resize(cut.size() - 10);
        const LoadError e = loadError(file("cut.json.gz", gzipCompress(toBytes(cut))));
        QCOMPARE(e.code(), LoadErrorCode::Truncated);
        QVERIFY2(e.message().find("decompressed") != std::string::npos, e.what());
        const LoadError plain = loadError(file("cut.json", toBytes(cut)));
        QCOMPARE(plain.code(), LoadErrorCode::Truncated);
        QVERIFY2(plain.message().find("decompressed") == std::string::npos, plain.what());
    }

    // A real dump in every wrapping the loader accepts gives the same numbers as expected.json.
    void corpusPickleInEveryWrapping()
    {
        const QString dir = QStringLiteral(POOLSCOPE_CORPUS_DIR);
        const std::string name = "k_ctx128_fullstep.pickle";
        if (!QDir(dir).exists(QString::fromStdString(name)))
            QSKIP("corpus not present");
        std::ifstream in(dir.toStdString() + "/" + name, std::ios::binary);
        const Bytes pickle((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ifstream ex(dir.toStdString() + "/expected.json");
        const auto expected = nlohmann::json::parse(ex).at(name).at("devices").at(0);

        const std::pair<const char*, Bytes> wrappings[] = {{"a.bin", pickle},
                                                           {"b.bin", zstdCompress(pickle, 1)},
                                                           {"c.bin", gzipCompress(pickle, 1)},
                                                           {"d.bin", toBytes(memoryVizHtml(pickle))}};
        for (const auto& [file_, data] : wrappings) {
            auto trace = load(file(file_, data));
            // The decoded input: the pickle itself, or the HTML page around it.
            QCOMPARE(trace->inputBytes, int64_t(trace->format == SourceFormat::SnapshotHtml ? data.size() : pickle.size()));
            const DeviceTrace* d = trace->findDevice(expected.at("device").get<int>());
            QVERIFY(d);
            QCOMPARE(int64_t(d->eventCount()), expected.at("entries").get<int64_t>());
            QCOMPARE(d->initialAllocated, expected.at("initial_allocated").get<int64_t>());
            QCOMPARE(d->peakAllocated, expected.at("peak_allocated").get<int64_t>());
            QCOMPARE(d->endReserved, expected.at("end_reserved").get<int64_t>());
        }
    }

    void cancelledBeforeParsing()
    {
        const std::string path = file("k.json", toBytes(kKinetoArray));
        Progress progress;
        progress.cancel = true;
        try {
            load(path, {}, progress);
            QFAIL("not cancelled");
        } catch (const LoadError& e) {
            QCOMPARE(e.code(), LoadErrorCode::Cancelled);
        }
    }
};

QTEST_APPLESS_MAIN(TestLoadDispatch)
#include "test_load_dispatch.moc"
