// The files that make "Open with PoolScope" work (resources/mime/poolscope.xml, resources/poolscope.desktop)
// as a file manager sees them: the MIME database that update-mime-database builds from our XML, read by
// Qt's QMimeDatabase (KDE's file managers use it; tests/install/test_package.sh checks GIO, GNOME's, on
// the installed package). Snapshots must be recognised by their first bytes, whatever wrote them.
#include "core/formats/pickle_writer.h"

#include <QDir>
#include <QFile>
#include <QMimeDatabase>
#include <QProcess>
#include <QRegularExpression>
#include <QHash>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <set>
#include <sstream>

using namespace poolscope;

namespace {

const QString kSnapshot = QStringLiteral("application/x-pytorch-memory-snapshot");
const QString kZstd = QStringLiteral("application/x-zstd-compressed-pytorch-memory-snapshot");
const QString kGzip = QStringLiteral("application/x-gzip-compressed-pytorch-memory-snapshot");
const QString kSource = QStringLiteral(POOLSCOPE_SOURCE_DIR);

QByteArray pickled(const PyObjPtr& root, int protocol)
{
    std::ostringstream out;
    writePickle(root, out, protocol);
    const std::string s = out.str();
    return QByteArray(s.data(), qsizetype(s.size()));
}

// What torch.cuda.memory._snapshot() returns, with its keys in the given order.
PyObjPtr snapshotDict(const std::vector<std::string>& keys)
{
    std::vector<std::pair<PyObjPtr, PyObjPtr>> items;
    for (const auto& k : keys)
        items.push_back({PyObj::str(k), PyObj::list({})});
    return PyObj::dict(items);
}

// torch.cuda.memory_snapshot(): the bare list of segment dicts.
PyObjPtr segmentList()
{
    return PyObj::list({PyObj::dict({{PyObj::str("device"), PyObj::integer(0)},
                                     {PyObj::str("address"), PyObj::integer(0x7f0000000000)},
                                     {PyObj::str("total_size"), PyObj::integer(2 << 20)}})});
}

// The same pickle without its FRAME (protocol 4/5 readers accept both; pickletools.optimize and
// other writers leave frames out).
QByteArray unframed(QByteArray bytes)
{
    if (bytes.size() > 11 && uint8_t(bytes[2]) == 0x95)
        bytes.remove(2, 9);
    return bytes;
}

QByteArray readAll(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

class TestDesktopIntegration : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    int m_file = 0;

    // The type a file manager gives `bytes` saved under `name` (each in a folder of its own).
    QString typeOf(const QByteArray& bytes, const QString& name)
    {
        const QString dir = m_dir.path() + QStringLiteral("/files/%1").arg(m_file++);
        QDir().mkpath(dir);
        QFile f(dir + QLatin1Char('/') + name);
        if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size())
            return QStringLiteral("<could not write>");
        f.close();
        return QMimeDatabase().mimeTypeForFile(f.fileName()).name();
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        const QString mime = m_dir.path() + QStringLiteral("/share/mime");
        QVERIFY(QDir().mkpath(mime + QStringLiteral("/packages")));
        QVERIFY(QFile::copy(kSource + QStringLiteral("/resources/mime/poolscope.xml"),
                            mime + QStringLiteral("/packages/poolscope.xml")));
        // Before the first QMimeDatabase, which reads the folders once per process (and before
        // update-mime-database, which warns about a folder outside them).
        qputenv("XDG_DATA_HOME", (m_dir.path() + QStringLiteral("/home")).toLocal8Bit());
        qputenv("XDG_DATA_DIRS", (m_dir.path() + QStringLiteral("/share:/usr/share")).toLocal8Bit());
        // update-mime-database (shared-mime-info) is what a package install runs; it also rejects a
        // malformed file. Without it Qt reads packages/*.xml itself.
        const QString updater = QStandardPaths::findExecutable(QStringLiteral("update-mime-database"));
        if (!updater.isEmpty()) {
            QProcess p;
            p.start(updater, {mime});
            QVERIFY(p.waitForFinished(60000));
            const QByteArray err = p.readAllStandardError();
            QVERIFY2(p.exitCode() == 0 && err.isEmpty(), err.constData());
            QVERIFY(QFile::exists(mime + QStringLiteral("/mime.cache")));
        } else {
            qWarning("update-mime-database not found (shared-mime-info): Qt reads the XML directly");
        }
        QVERIFY2(QMimeDatabase().mimeTypeForName(kSnapshot).isValid(), "our MIME type was not loaded");
    }

    void snapshotsAreKnownByContent_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        for (int protocol = 2; protocol <= 5; ++protocol) {
            const QByteArray p = QByteArray::number(protocol);
            QTest::newRow("protocol " + p + ", segments first") << pickled(snapshotDict({"segments", "device_traces"}), protocol);
            QTest::newRow("protocol " + p + ", device_traces first") << pickled(snapshotDict({"device_traces", "segments"}), protocol);
            QTest::newRow("protocol " + p + ", segments alone") << pickled(snapshotDict({"segments"}), protocol);
            QTest::newRow("protocol " + p + ", three keys") << pickled(snapshotDict({"segments", "device_traces", "allocator_settings"}), protocol);
        }
        for (int protocol = 4; protocol <= 5; ++protocol) {
            const QByteArray p = QByteArray::number(protocol);
            QTest::newRow("protocol " + p + " without a frame") << unframed(pickled(snapshotDict({"segments", "device_traces"}), protocol));
            QTest::newRow("protocol " + p + " without a frame, device_traces") << unframed(pickled(snapshotDict({"device_traces"}), protocol));
        }
        for (int protocol : {2, 3, 4, 5})
            QTest::newRow("bare list of segments, protocol " + QByteArray::number(protocol)) << pickled(segmentList(), protocol);
        // PyTorch's C++ pickler (torch::jit::Pickler, _memory_snapshot_pickled): protocol 2, no memo on
        // the dict, each string memoized after it.
        static const char cpp[] = "\x80\x02}(X\x08\x00\x00\x00segmentsq\x00]q\x01X\x0d\x00\x00\x00" "device_tracesq\x02]q\x03u.";
        QTest::newRow("C++ pickler") << QByteArray(cpp, sizeof cpp - 1);
    }

    void snapshotsAreKnownByContent()
    {
        QFETCH(QByteArray, bytes);
        // No file name helps: neither a bare name nor .pickle/.pkl, which no other type claims.
        QCOMPARE(typeOf(bytes, QStringLiteral("dump")), kSnapshot);
        QCOMPARE(typeOf(bytes, QStringLiteral("dump.pickle")), kSnapshot);
        QCOMPARE(typeOf(bytes, QStringLiteral("dump.pkl")), kSnapshot);
    }

    void otherPicklesAreNot_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        for (int protocol = 2; protocol <= 5; ++protocol) {
            const QByteArray p = QByteArray::number(protocol);
            QTest::newRow("protocol " + p + ", other first key") << pickled(snapshotDict({"state_dict", "segments"}), protocol);
            QTest::newRow("protocol " + p + ", a key segments begins") << pickled(snapshotDict({"segment", "device_traces"}), protocol);
            QTest::newRow("protocol " + p + ", snapshot inside a list")
                << pickled(PyObj::list({snapshotDict({"segments", "device_traces"})}), protocol);
            QTest::newRow("protocol " + p + ", a string") << pickled(PyObj::str("segments"), protocol);
        }
        QTest::newRow("list of dicts without address")
            << pickled(PyObj::list({PyObj::dict({{PyObj::str("device"), PyObj::integer(0)}, {PyObj::str("size"), PyObj::integer(1)}})}), 4);
    }

    void otherPicklesAreNot()
    {
        QFETCH(QByteArray, bytes);
        const QString type = typeOf(bytes, QStringLiteral("data.pickle"));
        QVERIFY2(type != kSnapshot, qPrintable(type));
    }

    // The project's fixtures, written by CPython's pickle (tests/data/make_fixtures.py).
    void fixturesAreKnownByContent()
    {
        const QDir dir(kSource + QStringLiteral("/tests/data/snapshots"));
        const QStringList files = dir.entryList({QStringLiteral("*.pickle")}, QDir::Files);
        QVERIFY(files.size() >= 8);
        for (const QString& f : files)
            QVERIFY2(typeOf(readAll(dir.filePath(f)), QStringLiteral("dump")) == kSnapshot, qPrintable(f));
    }

    // Dumps captured by real PyTorch runs, when ../shared/corpus is present.
    void corpusIsKnownByContent()
    {
        const QDir dir(QStringLiteral(POOLSCOPE_CORPUS_DIR));
        const QStringList files = dir.entryList({QStringLiteral("*.pickle"), QStringLiteral("*.pkl")}, QDir::Files);
        if (files.isEmpty())
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        for (const QString& f : files) {
            QFile in(dir.filePath(f));
            QVERIFY(in.open(QIODevice::ReadOnly));
            QVERIFY2(typeOf(in.read(4096), QStringLiteral("dump")) == kSnapshot, qPrintable(f));
        }
    }

    // Compressed dumps hide their first key: they are known by name, as a kind of their compression.
    void compressedDumpsAreKnownByName()
    {
        const QDir dir(kSource + QStringLiteral("/tests/data/snapshots"));
        const QByteArray zst = readAll(dir.filePath(QStringLiteral("train.pickle.zst")));
        const QByteArray gz = readAll(dir.filePath(QStringLiteral("train.pickle.gz")));
        QVERIFY(!zst.isEmpty() && !gz.isEmpty());
        QCOMPARE(typeOf(zst, QStringLiteral("train.pickle.zst")), kZstd);
        QCOMPARE(typeOf(zst, QStringLiteral("train.pkl.zst")), kZstd);
        QCOMPARE(typeOf(gz, QStringLiteral("train.pickle.gz")), kGzip);
        QCOMPARE(typeOf(gz, QStringLiteral("memory_snapshot.pkl.gz")), kGzip);
        QVERIFY(QMimeDatabase().mimeTypeForName(kZstd).inherits(QStringLiteral("application/zstd")));
        QVERIFY(QMimeDatabase().mimeTypeForName(kGzip).inherits(QStringLiteral("application/gzip")));
        // Any other compressed file stays what it was.
        QCOMPARE(typeOf(zst, QStringLiteral("train.zst")), QStringLiteral("application/zstd"));
        QCOMPARE(typeOf(gz, QStringLiteral("logs.tar.gz")), QStringLiteral("application/x-compressed-tar"));
        // A name that says snapshot is enough where the first bytes say nothing else.
        QCOMPARE(typeOf(QByteArray("not a pickle"), QStringLiteral("rank0_snapshot.pickle")), kSnapshot);
        QCOMPARE(typeOf(QByteArray("not a pickle"), QStringLiteral("poolscope-20250101-rank0-oom.pickle")), kSnapshot);
    }

    // The desktop entry offers PoolScope for exactly the types the XML defines, and passes the
    // freedesktop validator (desktop-file-utils) where it is installed.
    void desktopEntryOpensOurTypes()
    {
        const QString desktop = kSource + QStringLiteral("/resources/poolscope.desktop");
        QHash<QString, QString> entry; // the [Desktop Entry] group: one key=value per line
        for (const QByteArray& line : readAll(desktop).split('\n'))
            if (const qsizetype eq = line.indexOf('='); eq > 0)
                entry.insert(QString::fromUtf8(line.left(eq)), QString::fromUtf8(line.mid(eq + 1)));
        const QString listed = entry.value(QStringLiteral("MimeType"));
        std::set<QString> offered;
        for (const QString& t : listed.split(QLatin1Char(';'), Qt::SkipEmptyParts))
            offered.insert(t);
        std::set<QString> defined;
        const QString xml = QString::fromUtf8(readAll(kSource + QStringLiteral("/resources/mime/poolscope.xml")));
        static const QRegularExpression typeRe(QStringLiteral("<mime-type type=\"([^\"]+)\""));
        for (auto it = typeRe.globalMatch(xml); it.hasNext();)
            defined.insert(it.next().captured(1));
        QCOMPARE(defined.size(), size_t(3));
        QVERIFY2(offered == defined, qPrintable(listed));
        QCOMPARE(entry.value(QStringLiteral("Icon")), QStringLiteral("poolscope"));
        QCOMPARE(entry.value(QStringLiteral("Exec")), QStringLiteral("poolscope %f"));

        const QString validator = QStandardPaths::findExecutable(QStringLiteral("desktop-file-validate"));
        if (validator.isEmpty())
            QSKIP("desktop-file-validate not installed (desktop-file-utils)");
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(validator, {desktop});
        QVERIFY(p.waitForFinished(60000));
        const QByteArray out = p.readAll();
        QVERIFY2(p.exitCode() == 0 && out.isEmpty(), out.constData()); // hints count as failures too
    }
};

QTEST_GUILESS_MAIN(TestDesktopIntegration)
#include "test_desktop_integration.moc"
