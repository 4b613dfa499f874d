// The input layer: memory-mapped plain files, zstd/gzip recognised by content and decoded with
// limits, truncation and corruption reported with offsets, progress and cancellation.
#include "core/formats/input.h"

#include "fixture_util.h"

#include <QTemporaryDir>
#include <QtTest>

#include <random>

using namespace poolscope;
using namespace poolscope::testutil;

namespace {

// Compressible but not trivial: pseudo-random words, deterministic.
Bytes sampleText(size_t n, uint32_t seed = 7)
{
    static const char* kWords[] = {"alloc ", "free_requested ", "segment_alloc ", "0x7f00 ", "train.py:42 ", "\n"};
    std::mt19937 rng(seed);
    Bytes out;
    out.reserve(n + 32);
    while (out.size() < n) {
        const char* w = kWords[rng() % 6];
        out.insert(out.end(), w, w + std::strlen(w));
    }
    out.resize(n);
    return out;
}

Bytes asBytes(std::span<const uint8_t> s) { return Bytes(s.begin(), s.end()); }

LoadErrorCode decodeError(const Bytes& data, const LoadOptions& options = {}, std::string* what = nullptr,
                          int64_t* offset = nullptr)
{
    Progress progress;
    try {
        decodeBuffer(data, "mem.bin", options, progress);
    } catch (const LoadError& e) {
        if (what)
            *what = e.what();
        if (offset)
            *offset = e.offset();
        return e.code();
    }
    return LoadErrorCode(-1);
}

} // namespace

class TestInput : public QObject {
    Q_OBJECT

private slots:
    void sniffsByContent()
    {
        const uint8_t zstd[] = {0x28, 0xB5, 0x2F, 0xFD, 0x00};
        const uint8_t gzip[] = {0x1F, 0x8B, 0x08};
        const uint8_t pickle[] = {0x80, 0x04, 0x95};
        QCOMPARE(sniffCompression(zstd), Compression::Zstd);
        QCOMPARE(sniffCompression(gzip), Compression::Gzip);
        QCOMPARE(sniffCompression(pickle), Compression::None);
        QCOMPARE(sniffCompression(std::span<const uint8_t>(zstd, 3)), Compression::None);
        QCOMPARE(sniffCompression({}), Compression::None);
    }

    void plainFileIsMappedWhole()
    {
        QTemporaryDir dir;
        const auto data = sampleText(300000);
        // The name says .zst; the content is plain: content wins.
        const std::string path = dir.filePath("dump.pickle.zst").toStdString();
        writeFile(path, data);
        Progress progress;
        auto in = openInput(path, {}, progress);
        QCOMPARE(in->compression, Compression::None);
        QCOMPARE(in->fileSize, int64_t(data.size()));
        QVERIFY(asBytes(in->bytes()) == data);
        QCOMPARE(progress.bytesDone.load(), int64_t(data.size()));
    }

    void zstdRoundTrip_data()
    {
        QTest::addColumn<bool>("declareSize");
        QTest::addColumn<bool>("checksum");
        QTest::newRow("size+checksum") << true << true;
        QTest::newRow("streamed, no size") << false << false;
    }
    void zstdRoundTrip()
    {
        QFETCH(bool, declareSize);
        QFETCH(bool, checksum);
        QTemporaryDir dir;
        const auto data = sampleText(3 << 20);
        const auto packed = zstdCompress(data, 3, checksum, declareSize);
        const std::string path = dir.filePath("dump.bin").toStdString(); // no telling extension
        writeFile(path, packed);
        Progress progress;
        auto in = openInput(path, {}, progress);
        QCOMPARE(in->compression, Compression::Zstd);
        QCOMPARE(in->fileSize, int64_t(packed.size()));
        QCOMPARE(in->bytes().size(), data.size());
        QVERIFY(asBytes(in->bytes()) == data);
        QCOMPARE(progress.stage.load(), int(LoadStage::Decompressing));
        QCOMPARE(progress.bytesTotal.load(), int64_t(packed.size()));
        QCOMPARE(progress.bytesDone.load(), int64_t(packed.size()));
    }

    void zstdConcatenatedFrames()
    {
        const auto a = sampleText(100000, 1), b = sampleText(70000, 2);
        auto packed = zstdCompress(a);
        const auto second = zstdCompress(b);
        packed.insert(packed.end(), second.begin(), second.end());
        Progress progress;
        auto in = decodeBuffer(packed, "two.zst", {}, progress);
        Bytes expected = a;
        expected.insert(expected.end(), b.begin(), b.end());
        QVERIFY(asBytes(in->bytes()) == expected);
    }

    void gzipRoundTrip()
    {
        QTemporaryDir dir;
        const auto data = sampleText(2 << 20);
        const auto packed = gzipCompress(data);
        const std::string path = dir.filePath("trace.json").toStdString();
        writeFile(path, packed);
        Progress progress;
        auto in = openInput(path, {}, progress);
        QCOMPARE(in->compression, Compression::Gzip);
        QVERIFY(asBytes(in->bytes()) == data);
        QCOMPARE(progress.bytesDone.load(), int64_t(packed.size()));
    }

    void gzipMultiMember()
    {
        const auto a = sampleText(50000, 3), b = sampleText(1, 4), c = sampleText(80000, 5);
        Bytes packed;
        for (const auto* part : {&a, &b, &c}) {
            const auto m = gzipCompress(*part);
            packed.insert(packed.end(), m.begin(), m.end());
        }
        Progress progress;
        auto in = decodeBuffer(packed, "multi.gz", {}, progress);
        Bytes expected = a;
        expected.insert(expected.end(), b.begin(), b.end());
        expected.insert(expected.end(), c.begin(), c.end());
        QVERIFY(asBytes(in->bytes()) == expected);
    }

    void gzipTrailingBytes()
    {
        const auto data = sampleText(10000);
        auto packed = gzipCompress(data);
        auto padded = packed;
        padded.insert(padded.end(), 512, 0); // zero padding is ignored, as gzip(1) does
        Progress progress;
        QVERIFY(asBytes(decodeBuffer(padded, "p.gz", {}, progress)->bytes()) == data);

        auto junk = packed;
        junk.push_back('x');
        int64_t offset = -1;
        QCOMPARE(decodeError(junk, {}, nullptr, &offset), LoadErrorCode::Malformed);
        QCOMPARE(offset, int64_t(packed.size()));
    }

    void truncatedAtEveryOffset_data()
    {
        QTest::addColumn<bool>("zstd");
        QTest::newRow("zstd") << true;
        QTest::newRow("gzip") << false;
    }
    void truncatedAtEveryOffset()
    {
        QFETCH(bool, zstd);
        const auto data = sampleText(40000);
        const auto packed = zstd ? zstdCompress(data) : gzipCompress(data);
        QVERIFY(packed.size() > 200);
        const size_t magic = zstd ? 4 : 2;
        int truncated = 0;
        for (size_t cut = magic; cut < packed.size(); ++cut) {
            const Bytes prefix(packed.begin(), packed.begin() + ptrdiff_t(cut));
            std::string what;
            int64_t offset = -2;
            const auto code = decodeError(prefix, {}, &what, &offset);
            if (code != LoadErrorCode::Truncated && code != LoadErrorCode::Malformed)
                QFAIL(qPrintable(QString("cut at %1: no truncation error (%2)").arg(cut).arg(QString::fromStdString(what))));
            QVERIFY2(offset >= 0 && offset <= int64_t(cut), qPrintable(QString::fromStdString(what)));
            QVERIFY(what.find("mem.bin") != std::string::npos);
            truncated += code == LoadErrorCode::Truncated;
        }
        // A prefix of a valid stream is, nearly always, recognised as cut short rather than as corrupt.
        QVERIFY(truncated > int(packed.size() * 9 / 10));
    }

    void corruptionIsReported()
    {
        const auto data = sampleText(40000);
        for (bool zstd : {true, false}) {
            const auto packed = zstd ? zstdCompress(data) : gzipCompress(data);
            int detected = 0;
            for (size_t at = 12; at < packed.size(); at += 7) {
                auto bad = packed;
                bad[at] ^= 0x5A;
                Progress progress;
                try {
                    auto in = decodeBuffer(bad, "bad", {}, progress);
                    // Deflate can decode a flipped literal; the CRC/checksum must catch it, else the
                    // output is at least bounded.
                    QVERIFY(in->bytes().size() < 200 * packed.size() + (1 << 20));
                } catch (const LoadError& e) {
                    QVERIFY(e.code() == LoadErrorCode::Malformed || e.code() == LoadErrorCode::Truncated);
                    ++detected;
                }
            }
            QVERIFY2(detected > 0, zstd ? "zstd" : "gzip");
        }
    }

    void bombIsRefused_data()
    {
        QTest::addColumn<bool>("zstd");
        QTest::newRow("zstd") << true;
        QTest::newRow("gzip") << false;
    }
    void bombIsRefused()
    {
        QFETCH(bool, zstd);
        const Bytes zeros(48 << 20, 0);
        QTemporaryDir dir;
        const std::string path = dir.filePath("bomb").toStdString();
        // zstd declares the content size in the header: refused before decoding. The streamed
        // variant (no size) must be stopped while decoding.
        for (bool declare : {true, false}) {
            if (!zstd && declare)
                continue;
            writeFile(path, zstd ? zstdCompress(zeros, 3, true, declare) : gzipCompress(zeros, 9));
            Progress progress;
            try {
                openInput(path, {}, progress);
                QFAIL("a 48 MiB bomb in a tiny file was decoded");
            } catch (const LoadError& e) {
                QCOMPARE(e.code(), LoadErrorCode::LimitExceeded);
                QCOMPARE(e.file(), path);
                QVERIFY2(e.message().find("maxDecompressionRatio") != std::string::npos, e.what());
            }
        }
        // With a generous ratio, the memory budget is the limit that speaks.
        LoadOptions options;
        options.maxDecompressionRatio = 1'000'000;
        options.memoryBudgetBytes = 4 << 20;
        writeFile(path, zstd ? zstdCompress(zeros, 3, true, false) : gzipCompress(zeros, 9));
        Progress progress;
        try {
            openInput(path, options, progress);
            QFAIL("decoded past the memory budget");
        } catch (const LoadError& e) {
            QCOMPARE(e.code(), LoadErrorCode::LimitExceeded);
            QVERIFY2(e.message().find("memoryBudgetBytes") != std::string::npos, e.what());
        }
        // And a limit just above the real size lets it through.
        options.memoryBudgetBytes = int64_t(zeros.size());
        QCOMPARE(openInput(path, options, progress)->bytes().size(), zeros.size());
    }

    void plainFileOverBudget()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("big").toStdString();
        writeFile(path, sampleText(5000));
        LoadOptions options;
        options.memoryBudgetBytes = 4000;
        Progress progress;
        QVERIFY_THROWS_EXCEPTION(LoadError, openInput(path, options, progress));
    }

    void cancelStopsDecoding()
    {
        const auto packed = zstdCompress(sampleText(1 << 20));
        for (const auto& data : {packed, gzipCompress(sampleText(1 << 20))}) {
            Progress progress;
            progress.cancel = true;
            try {
                decodeBuffer(data, "c", {}, progress);
                QFAIL("not cancelled");
            } catch (const LoadError& e) {
                QCOMPARE(e.code(), LoadErrorCode::Cancelled);
            }
        }
    }

    void openErrors()
    {
        QTemporaryDir dir;
        Progress progress;
        const std::string missing = dir.filePath("nope.pickle").toStdString();
        try {
            openInput(missing, {}, progress);
            QFAIL("opened a missing file");
        } catch (const LoadError& e) {
            QCOMPARE(e.code(), LoadErrorCode::FileNotFound);
            QVERIFY(std::string(e.what()).find("nope.pickle") != std::string::npos);
        }
        try {
            openInput(dir.path().toStdString(), {}, progress);
            QFAIL("opened a directory");
        } catch (const LoadError& e) {
            QCOMPARE(e.code(), LoadErrorCode::ReadFailed);
        }
        const std::string empty = dir.filePath("empty").toStdString();
        writeFile(empty, {});
        auto in = openInput(empty, {}, progress);
        QCOMPARE(in->bytes().size(), size_t(0));
        QCOMPARE(in->compression, Compression::None);
    }

    void decodeBufferCopiesPlain()
    {
        const auto data = sampleText(1000);
        Progress progress;
        auto in = decodeBuffer(data, "x", {}, progress);
        QVERIFY(asBytes(in->bytes()) == data);
        QVERIFY(in->bytes().data() != data.data());
        QCOMPARE(decodeBuffer({}, "x", {}, progress)->bytes().size(), size_t(0));
    }
};

QTEST_APPLESS_MAIN(TestInput)
#include "test_input.moc"
