// The compressed writers (.zst and .gz): what goes in comes back out of the project's own reader
// whatever the mix of write sizes, and a failure names the file being written, also when the
// ostream in between swallowed the exception into badbit.
#include "core/formats/gzip_output.h"
#include "core/formats/input.h"
#include "core/formats/zstd_output.h"
#include "core/util/atomic_file.h"

#include <QtTest>

#include <memory>
#include <random>
#include <sstream>

using namespace poolscope;

namespace {

enum class Codec { Zstd, Gzip };

std::unique_ptr<CompressedOutputBuffer> makeBuffer(Codec c, std::ostream& sink, const std::string& path)
{
    if (c == Codec::Zstd)
        return std::make_unique<ZstdOutputBuffer>(sink, path);
    return std::make_unique<GzipOutputBuffer>(sink, path);
}

std::string decoded(const std::string& compressed, Compression expected)
{
    Progress progress;
    const auto in = decodeBuffer({reinterpret_cast<const uint8_t*>(compressed.data()), compressed.size()}, "mem",
                                 LoadOptions{}, progress);
    if (in->compression != expected)
        throw std::runtime_error("not the expected compression");
    const auto b = in->bytes();
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A sink that takes `room` bytes and then fails, as a full disk does.
class FullDisk : public std::streambuf {
public:
    explicit FullDisk(size_t room) : m_room(room) {}

protected:
    std::streamsize xsputn(const char*, std::streamsize n) override
    {
        const auto took = std::min<std::streamsize>(n, std::streamsize(m_room));
        m_room -= size_t(took);
        return took;
    }
    int_type overflow(int_type ch) override
    {
        if (m_room == 0)
            return traits_type::eof();
        --m_room;
        return traits_type::not_eof(ch);
    }

private:
    size_t m_room;
};

} // namespace

class TestCompressedOutput : public QObject {
    Q_OBJECT
private slots:
    void roundTrip_data()
    {
        QTest::addColumn<int>("codec");
        QTest::newRow("zstd") << int(Codec::Zstd);
        QTest::newRow("gzip") << int(Codec::Gzip);
    }
    void roundTrip()
    {
        QFETCH(int, codec);
        // Single characters (overflow), small writes (buffered), one write larger than the buffer
        // (compressed where it lies), and the buffer's edges in between.
        std::mt19937 rng(11);
        std::string expected;
        std::ostringstream sink;
        {
            auto buf = makeBuffer(Codec(codec), sink, "out.bin");
            std::ostream os(buf.get());
            for (int i = 0; i < 3000; ++i) {
                const char c = char('a' + rng() % 26);
                os.put(c);
                expected += c;
            }
            std::string big(3u << 20, '\0');
            for (char& c : big)
                c = char(rng() % 7 == 0 ? rng() : 'x');
            for (size_t n : {size_t(17), size_t(1) << 18, size_t(1) << 19}) {
                os.write(big.data(), std::streamsize(n));
                expected.append(big.data(), n);
            }
            os.write(big.data(), std::streamsize(big.size()));
            expected += big;
            os.flush();
            QVERIFY(os.good());
            buf->close();
            buf->close(); // a second close adds nothing
        }
        QVERIFY(sink.str().size() < expected.size() / 2);
        QCOMPARE(decoded(sink.str(), Codec(codec) == Codec::Zstd ? Compression::Zstd : Compression::Gzip), expected);
    }

    void emptyStreamIsComplete_data() { roundTrip_data(); }
    void emptyStreamIsComplete()
    {
        QFETCH(int, codec);
        std::ostringstream sink;
        {
            auto buf = makeBuffer(Codec(codec), sink, "empty.bin"); // the destructor finishes it
        }
        QVERIFY(!sink.str().empty());
        QCOMPARE(decoded(sink.str(), Codec(codec) == Codec::Zstd ? Compression::Zstd : Compression::Gzip), std::string());
    }

    void fullDiskNamesTheFile_data() { roundTrip_data(); }
    void fullDiskNamesTheFile()
    {
        QFETCH(int, codec);
        FullDisk disk(1000);
        std::ostream sink(&disk);
        auto buf = makeBuffer(Codec(codec), sink, "/data/run1/snapshot.copy");
        std::ostream os(buf.get());
        std::mt19937 rng(3);
        std::string noise(8u << 20, '\0');
        for (char& c : noise)
            c = char(rng());
        // zstd with worker threads may hold a few MiB before the first byte reaches the sink.
        for (int i = 0; i < 8 && !os.bad(); ++i)
            os.write(noise.data(), std::streamsize(noise.size()));
        // std::ostream caught the WriteError and set badbit; close() reports it, naming the file.
        QVERIFY(os.bad());
        try {
            buf->close();
            QFAIL("close() on a full disk did not throw");
        } catch (const WriteError& e) {
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(what.startsWith("/data/run1/snapshot.copy: "), e.what());
            QVERIFY2(what.contains("could not be written"), e.what());
        }
        // Still failing, not finishing a broken stream, when asked again.
        QVERIFY_THROWS_EXCEPTION(WriteError, buf->close());
    }
};

QTEST_GUILESS_MAIN(TestCompressedOutput)
#include "test_compressed_output.moc"
