// The command line on broken and hostile files, as a user meets it: `poolscope info|report FILE` exits
// with 2 and exactly one line on stderr for a file it refuses, 0 with the oddities listed for a file it
// can read with warnings, and never dies of a signal.
#include "core/formats/fixture_util.h"
#include "robustness_util.h"

#include <QtTest>

#include <nlohmann/json.hpp>

using namespace poolscope;
using namespace poolscope::robust;

namespace {

struct Run {
    int exitCode = -1;
    bool crashed = false;
    QString out;
    QString err;
};

Run runCli(const QStringList& args)
{
    QProcess p;
    p.start(QStringLiteral(POOLSCOPE_BINARY), args);
    Run r;
    if (!p.waitForStarted(30000) || !p.waitForFinished(300000)) {
        p.kill();
        p.waitForFinished();
        r.crashed = true;
        r.err = "did not finish";
        return r;
    }
    r.crashed = p.exitStatus() != QProcess::NormalExit;
    r.exitCode = p.exitCode();
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

QString show(const Run& r)
{
    return QStringLiteral("exit %1%2\nstdout: %3\nstderr: %4").arg(r.exitCode).arg(r.crashed ? " (signal)" : "", r.out.left(2000), r.err);
}

Bytes gzipBomb()
{
    return testutil::gzipCompress(Bytes(size_t(64) << 20, 0), 9); // 64 MiB of zeros in ~64 KiB
}

} // namespace

class TestCliErrors : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString file(const char* name, const Bytes& data)
    {
        const QString p = m_dir.path() + "/" + name;
        writeFile(p.toStdString(), data);
        return p;
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        QVERIFY2(QFileInfo::exists(POOLSCOPE_BINARY), POOLSCOPE_BINARY);
    }

    void refusedFiles_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("needle");
        auto add = [](const char* name, const Bytes& b, const char* needle) {
            QTest::newRow(name) << QString(name) << QByteArray(reinterpret_cast<const char*>(b.data()), qsizetype(b.size())) << needle;
        };
        const Bytes pickle = toPickle(healthySnapshot());
        add("empty.pickle", {}, "empty");
        add("truncated.pickle", Bytes(pickle.begin(), pickle.begin() + std::ptrdiff_t(pickle.size() / 2)), "truncated");
        add("evil.pickle", readFile(std::string(POOLSCOPE_TEST_DATA) + "/snapshots/evil_reduce.pickle"), "tried to run code");
        static const char kGlobal[] = "\x80\x02" "cos\nsystem\n" "X\x02\x00\x00\x00id" "\x85R.";
        add("global.pickle", toBytes(std::string_view(kGlobal, sizeof kGlobal - 1)), "os.system");
        add("garbage.bin", toBytes("\x01\x02\x03 not a dump \xff\xfe"), "unrecognised content");
        add("bomb.gz", gzipBomb(), "decompression bomb");
        add("deep.json", toBytes(R"({"segments":)" + std::string(100000, '[') + std::string(100000, ']') + "}"), "nested deeper");
        {
            V snap = healthySnapshot().clone();
            snap.find("segments")->at(0).find("blocks")->at(0).set("state", "line one\nline two\r\x1b[31mred");
            add("newline_in_field.pickle", toPickle(snap), "blocks[0].state");
        }
        {
            V snap = healthySnapshot().clone();
            snap.find("device_traces")->at(0).at(2).set("size", int64_t(1) << 62);
            add("absurd_size.json", toJson(snap), "8 PiB");
        }
        add("truncated.zst", [&] { Bytes z = testutil::zstdCompress(pickle); z.resize(z.size() - 7); return z; }(), "truncated");
        add("bad_html.html", toBytes("<html><script>const local_files = [{\"base64\": \"gASV!!!!\"}]</script>"), "base64");
        add("kineto_no_events.json", toBytes(R"({"schemaVersion":1})"), "traceEvents");
    }
    void refusedFiles()
    {
        QFETCH(QString, name);
        QFETCH(QByteArray, bytes);
        QFETCH(QString, needle);
        const QString path = file(name.toUtf8().constData(), Bytes(bytes.begin(), bytes.end()));
        for (const char* command : {"info", "report"}) {
            const Run r = runCli({command, path});
            QVERIFY2(!r.crashed, qPrintable(show(r)));
            QVERIFY2(r.exitCode == 2, qPrintable(show(r)));
            QVERIFY2(r.err.endsWith('\n') && r.err.count('\n') == 1 && !r.err.contains('\r'), qPrintable(show(r)));
            QVERIFY2(r.err.contains(needle), qPrintable(show(r)));
            QVERIFY2(r.err.contains(path), qPrintable(show(r))); // says which file
            QVERIFY2(r.out.isEmpty(), qPrintable(show(r)));
        }
    }

    void missingAndDirectory()
    {
        for (const QString& path : {m_dir.path() + "/does-not-exist.pickle", m_dir.path()}) {
            const Run r = runCli({"info", path});
            QVERIFY2(!r.crashed && r.exitCode == 2 && r.err.count('\n') == 1, qPrintable(show(r)));
        }
    }

    // Files that load with warnings: exit 0, and both commands list what was odd.
    void warningsAreListed_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("needle");
        auto add = [](const char* name, const V& snap, bool json, const char* needle) {
            const Bytes b = json ? toJson(snap) : toPickle(snap);
            QTest::newRow(name) << QString(name) << QByteArray(reinterpret_cast<const char*>(b.data()), qsizetype(b.size())) << needle;
        };
        add("orphan_frees.pickle",
            snapshotV({}, {entryV("alloc", 4096, 64, 1), entryV("free_completed", 8192, 64, 2), entryV("free_completed", 12288, 64, 3),
                           entryV("free_completed", 16384, 64, 4)}),
            false, "3 frees of addresses");
        add("double_free.json", snapshotV({}, {entryV("alloc", 4096, 64, 1), entryV("free_completed", 4096, 64, 2), entryV("free_completed", 4096, 64, 3)}),
            true, "already freed");
        add("reused.pickle", snapshotV({}, {entryV("alloc", 4096, 64, 1), entryV("alloc", 4096, 64, 2)}), false, "reused a live address");
        add("backwards.pickle", snapshotV({}, {entryV("alloc", 4096, 64, 100), entryV("alloc", 8192, 64, 50)}), false, "earlier than the entry before");
        add("impossible_time.json", snapshotV({}, {entryV("alloc", 4096, 64, int64_t(1) << 60)}), true, "impossible time");
        add("unknown_action.pickle", snapshotV({}, {entryV("teleport", 4096, 64, 1)}), false, "unknown action 'teleport'");
    }
    void warningsAreListed()
    {
        QFETCH(QString, name);
        QFETCH(QByteArray, bytes);
        QFETCH(QString, needle);
        const QString path = file(name.toUtf8().constData(), Bytes(bytes.begin(), bytes.end()));
        for (const char* command : {"info", "report"}) {
            const Run r = runCli({command, path});
            QVERIFY2(!r.crashed && r.exitCode == 0, qPrintable(show(r)));
            QVERIFY2(r.out.contains(needle), qPrintable(show(r)));
        }
        const Run j = runCli({"info", path, "--json"});
        QVERIFY2(!j.crashed && j.exitCode == 0 && j.out.contains(needle), qPrintable(show(j)));
    }

    // A sample of damaged fixtures through the binary: loads (exit 0) or one clear line (exit 2), and
    // `report` on whatever loads does not die either.
    void damagedFilesNeverKillTheBinary()
    {
        const Bytes base = readFile(std::string(POOLSCOPE_TEST_DATA) + "/snapshots/train_p4.pickle");
        QVERIFY(base.size() > 1000);
        int loaded = 0;
        for (int k = 0; k < 16; ++k) {
            Bytes b = base;
            if (k % 2)
                b.resize(base.size() * size_t(k) / 16);
            else
                b[(base.size() * size_t(k + 1) * 7 / 113) % base.size()] ^= uint8_t(1u << (k % 8));
            const QString path = file("damaged.pickle", b);
            for (const char* command : {"info", "report"}) {
                const Run r = runCli({command, path});
                QVERIFY2(!r.crashed && (r.exitCode == 0 || r.exitCode == 2), qPrintable(show(r)));
                if (r.exitCode == 2)
                    QVERIFY2(r.err.count('\n') == 1, qPrintable(show(r)));
                loaded += r.exitCode == 0;
            }
        }
        qInfo("%d of 32 runs loaded", loaded);
    }

    // Strings come from the file as bytes: one that is not UTF-8 (a Latin-1 path, a truncated name;
    // Python pickles a lone surrogate from a surrogate-escaped path as such bytes, and json.dump writes
    // it as a lone \udcff escape) must survive every output: text, JSON (as U+FFFD) and explain, exit 0.
    void invalidUtf8SurvivesEveryOutput()
    {
        auto snapshotNamed = [](const std::string& file, const std::string& name) {
            const V frames = V::list({frameV(file, 7, name), frameV("train.py", 3, "step")});
            return snapshotV({}, {entryV("alloc", 4096, 1 << 20, 1, frames), entryV("alloc", 1 << 22, 1 << 10, 2, frames)});
        };
        const Bytes pickle = toPickle(snapshotNamed(std::string("model_\xff\xfe_caf\xe9.py"), std::string("fwd\xc3")));
        std::string json = nlohmann::json::parse(toJson(snapshotNamed("model_PLACEHOLDER.py", "fwd"))).dump();
        json.replace(json.find("PLACEHOLDER"), 11, "\\udcff\\udcfe");
        for (const bool isJson : {false, true}) {
            const QString path = file(isJson ? "latin1.json" : "latin1.pickle", isJson ? toBytes(json) : pickle);
            const Run text = runCli({"report", path});
            QVERIFY2(!text.crashed && text.exitCode == 0, qPrintable(show(text)));
            const Run j = runCli({"report", path, "--json"});
            QVERIFY2(!j.crashed && j.exitCode == 0, qPrintable(show(j)));
            const auto parsed = nlohmann::json::parse(j.out.toStdString(), nullptr, false);
            QVERIFY2(!parsed.is_discarded(), qPrintable(show(j)));
            QVERIFY2(j.out.contains(QChar(0xFFFD)), qPrintable(show(j)));
            const Run x = runCli({"explain", path, "--addr", "4096", "--json"});
            QVERIFY2(!x.crashed && x.exitCode == 0 && !nlohmann::json::parse(x.out.toStdString(), nullptr, false).is_discarded(), qPrintable(show(x)));
            const Run info = runCli({"info", path, "--json"});
            QVERIFY2(!info.crashed && info.exitCode == 0, qPrintable(show(info)));
        }
    }

    void emptyTraceLoads()
    {
        const QString path = file("empty_trace.pickle", toPickle(snapshotV({}, {})));
        const Run info = runCli({"info", path});
        QVERIFY2(!info.crashed && info.exitCode == 0 && info.out.contains("0 entries"), qPrintable(show(info)));
        const Run report = runCli({"report", path});
        QVERIFY2(!report.crashed && (report.exitCode == 0 || report.exitCode == 2), qPrintable(show(report)));
        if (report.exitCode == 2)
            QVERIFY2(report.err.count('\n') == 1, qPrintable(show(report)));
    }
};

QTEST_GUILESS_MAIN(TestCliErrors)
#include "test_cli_errors.moc"
