// A snapshot written with torch.save (a zip archive whose <name>/data.pkl is the dict pickled) reads
// as the same snapshot pickled directly: stored as PyTorch writes it, deflated by a repacking tool,
// and with zip64 records, and so does torch.save's format before PyTorch 1.6 (pickles one after the
// other); a damaged file gets an error naming the byte and what was expected.
#include "core/load.h"

#include "fixture_util.h"
#include "temp_files.h"

#include <QtTest>

#include <algorithm>
#include <fstream>
#include <iterator>

using namespace poolscope;
using namespace poolscope::testutil;

namespace {

Bytes readFile(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(f), {});
}

// What torch.save puts beside data.pkl (a dict with no tensors has no data/ records).
std::vector<ZipEntry> torchSaveEntries(const Bytes& pickle)
{
    return {{"snapshot/data.pkl", pickle},
            {"snapshot/byteorder", toBytes("little")},
            {"snapshot/version", toBytes("3\n")},
            {"snapshot/.data/serialization_id", toBytes("0596203398212478830700000047208717385290")}};
}

} // namespace

class TestTorchSave : public QObject {
    Q_OBJECT

    TempFiles m_files;
    std::string file(const std::string& name, const Bytes& data) { return m_files.file(name, data); }

private slots:
    void readsAsThePickle_data()
    {
        QTest::addColumn<bool>("deflate");
        QTest::addColumn<bool>("zip64");
        QTest::newRow("stored") << false << false;
        QTest::newRow("deflated") << true << false;
        QTest::newRow("zip64") << false << true;
    }
    void readsAsThePickle()
    {
        QFETCH(bool, deflate);
        QFETCH(bool, zip64);
        // The training fixture in protocol 2, the protocol torch.save pickles with.
        const Bytes pickle = readFile(POOLSCOPE_TEST_DATA "/snapshots/train_p2.pickle");
        QVERIFY(pickle.size() > 1000);
        const auto direct = load(POOLSCOPE_TEST_DATA "/snapshots/train_p2.pickle");
        const auto saved = load(file("snap.pt", zipArchive(torchSaveEntries(pickle), deflate, zip64)));
        QVERIFY2(saved->formatDetail.find("torch.save zip archive") != std::string::npos, saved->formatDetail.c_str());
        QCOMPARE(saved->devices.size(), direct->devices.size());
        for (size_t d = 0; d < direct->devices.size(); ++d) {
            const DeviceTrace& a = direct->devices[d];
            const DeviceTrace& b = saved->devices[d];
            QCOMPARE(b.events.count(), a.events.count());
            QCOMPARE(b.allocations.size(), a.allocations.size());
            QCOMPARE(b.segments.size(), a.segments.size());
            for (size_t i = 0; i < a.allocations.size(); ++i) {
                QCOMPARE(b.allocations[i].address, a.allocations[i].address);
                QCOMPARE(b.allocations[i].size, a.allocations[i].size);
                QCOMPARE(b.allocations[i].allocEvent, a.allocations[i].allocEvent);
            }
        }
    }

    // torch.save before PyTorch 1.6: the magic number, the protocol version, the writer's type sizes,
    // the object, the storage keys, pickled one after the other.
    void legacyFormat()
    {
        const Bytes pickle = readFile(POOLSCOPE_TEST_DATA "/snapshots/train_p2.pickle");
        Bytes legacy = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};
        const Bytes version = toBytes(std::string_view("\x80\x02M\xe9\x03.", 6));
        const Bytes sysInfo = toBytes(std::string_view("\x80\x02}q\x00X\x10\x00\x00\x00protocol_versionq\x01M\xe9\x03s.", 33));
        const Bytes keys = toBytes(std::string_view("\x80\x02]q\x00.", 6));
        for (const Bytes* b : {&version, &sysInfo, &pickle, &keys})
            legacy.insert(legacy.end(), b->begin(), b->end());
        const auto direct = load(POOLSCOPE_TEST_DATA "/snapshots/train_p2.pickle");
        const auto saved = load(file("legacy.pt", legacy));
        QVERIFY2(saved->formatDetail.find("legacy torch.save") != std::string::npos, saved->formatDetail.c_str());
        QCOMPARE(saved->devices.at(0).allocations.size(), direct->devices.at(0).allocations.size());
        QCOMPARE(saved->devices.at(0).events.count(), direct->devices.at(0).events.count());
        // Cut inside the type sizes: the error names that pickle and a byte inside it.
        const Bytes cut(legacy.begin(), legacy.begin() + 15 + 6 + 20);
        const LoadError e = loadError(file("legacy_cut.pt", cut));
        QCOMPARE(e.code(), LoadErrorCode::Truncated);
        QVERIFY2(std::string(e.what()).find("type sizes") != std::string::npos, e.what());
        QVERIFY2(e.offset() >= 21 && e.offset() <= 41, e.what());
    }

    // A stored data.pkl's bytes are the archive's: an error inside the pickle names its byte in the file.
    void anErrorInsideNamesTheArchivesByte()
    {
        Bytes pickle = readFile(POOLSCOPE_TEST_DATA "/snapshots/train_p2.pickle");
        pickle.resize(pickle.size() / 2); // no STOP: the pickle is cut
        const Bytes zip = zipArchive(torchSaveEntries(pickle));
        const int64_t at = int64_t(std::search(zip.begin(), zip.end(), pickle.begin(), pickle.begin() + 16) - zip.begin());
        QVERIFY(at > 0);
        const LoadError e = loadError(file("cut_pickle.pt", zip));
        QCOMPARE(e.code(), LoadErrorCode::Truncated);
        QVERIFY2(e.offset() >= at && e.offset() <= at + int64_t(pickle.size()), e.what());
    }

    // A model or a checkpoint saved with torch.save is the same kind of archive: its pickle rebuilds
    // objects (refused: nothing is executed) and its archive holds their tensors. The error says so.
    void aCheckpointIsNoSnapshot()
    {
        static const char kRebuild[] = "\x80\x02" "ccollections\nOrderedDict\n" "q\x00)Rq\x01.";
        const Bytes rebuild = toBytes(std::string_view(kRebuild, sizeof kRebuild - 1));
        const Bytes zip = zipArchive({{"model/data.pkl", rebuild},
                                      {"model/data/0", Bytes(16, 0)},
                                      {"model/data/1", Bytes(16, 0)},
                                      {"model/version", toBytes("3\n")}});
        const LoadError e = loadError(file("model.pt", zip));
        QCOMPARE(e.code(), LoadErrorCode::UnknownFormat);
        QVERIFY2(std::string(e.what()).find("a torch.save archive of objects (2 tensor storages: a model or a checkpoint?)") != std::string::npos, e.what());
        QVERIFY2(std::string(e.what()).find("GLOBAL") != std::string::npos, e.what());
        QVERIFY2(e.offset() > 0, e.what());
    }

    void damagedArchives_data()
    {
        const Bytes pickle = readFile(POOLSCOPE_TEST_DATA "/snapshots/train_p2.pickle");
        const Bytes zip = zipArchive(torchSaveEntries(pickle));
        QTest::addColumn<QByteArray>("content");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("cut short") << QByteArray(reinterpret_cast<const char*>(zip.data()), int(zip.size() / 2)) << int(LoadErrorCode::Truncated)
                                   << "no end of central directory record";
        const Bytes model = zipArchive({{"model/model.json", toBytes("{}")}, {"model/version", toBytes("3")}});
        QTest::newRow("no data.pkl") << QByteArray(reinterpret_cast<const char*>(model.data()), int(model.size())) << int(LoadErrorCode::UnknownFormat)
                                     << "no data.pkl in its 2 entries (model/model.json, model/version)";
        QTest::newRow("signature only") << QByteArray("PK\x03\x04rest", 8) << int(LoadErrorCode::Truncated) << "torch.save zip archive";
        Bytes badMethod = zip; // the central record's method field of data.pkl, the first entry
        const size_t central = size_t(std::search(badMethod.begin(), badMethod.end(), std::begin("PK\x01\x02"), std::end("PK\x01\x02") - 1) - badMethod.begin());
        badMethod[central + 10] = 12; // bzip2
        QTest::newRow("bzip2 entry") << QByteArray(reinterpret_cast<const char*>(badMethod.data()), int(badMethod.size()))
                                     << int(LoadErrorCode::UnsupportedVersion) << "zip method 12";
    }
    void damagedArchives()
    {
        QFETCH(QByteArray, content);
        QFETCH(int, code);
        QFETCH(QString, mentions);
        const std::string path = file("damaged.pt", Bytes(content.begin(), content.end()));
        const LoadError e = loadError(path);
        QCOMPARE(int(e.code()), code);
        QCOMPARE(e.file(), path);
        QVERIFY2(e.offset() >= 0, e.what());
        QVERIFY2(std::string(e.what()).find(mentions.toStdString()) != std::string::npos, e.what());
    }
};

QTEST_APPLESS_MAIN(TestTorchSave)
#include "test_torch_save.moc"
