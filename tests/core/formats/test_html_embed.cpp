// The memory_viz HTML page: the base64 pickle inside it, its NUL padding, and clear errors.
#include "core/formats/html_embed.h"
#include "core/load.h"

#include "fixture_util.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace poolscope;
using namespace poolscope::testutil;

namespace {

std::span<const uint8_t> view(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

LoadError extractError(const std::string& html)
{
    try {
        extractHtmlPickle(view(html), "page.html");
    } catch (const LoadError& e) {
        return e;
    }
    return LoadError(LoadErrorCode(-1), "", -1, "no error");
}

} // namespace

class TestHtmlEmbed : public QObject {
    Q_OBJECT

private slots:
    void base64Basics()
    {
        QVERIFY(decodeBase64("", "x") == Bytes{});
        QVERIFY(decodeBase64("TWFu", "x") == toBytes("Man"));
        QVERIFY(decodeBase64("TWE=", "x") == toBytes("Ma"));
        QVERIFY(decodeBase64("TQ==", "x") == toBytes("M"));
        QVERIFY(decodeBase64("TW\nFu\r\n", "x") == toBytes("Man"));
        QVERIFY(decodeBase64("P\\/8=", "x") == (Bytes{0x3F, 0xFF})); // JSON's escaped slash
        try {
            decodeBase64("TWFu*A==", "x", 100);
            QFAIL("accepted '*'");
        } catch (const LoadError& e) {
            QCOMPARE(e.code(), LoadErrorCode::Malformed);
            QCOMPARE(e.offset(), int64_t(104));
            QVERIFY(e.message().find("'*'") != std::string::npos);
        }
        QVERIFY_THROWS_EXCEPTION(LoadError, decodeBase64("TQ==TQ==", "x"));
        QVERIFY_THROWS_EXCEPTION(LoadError, decodeBase64("TWFuT", "x"));
    }

    // _format_viz pads with 3 - len % 3 NULs: 1, 2 or 3 of them. All are stripped, STOP kept.
    void paddingRemoved_data()
    {
        QTest::addColumn<int>("extra");
        QTest::newRow("len%3==0") << 0;
        QTest::newRow("len%3==1") << 1;
        QTest::newRow("len%3==2") << 2;
    }
    void paddingRemoved()
    {
        QFETCH(int, extra);
        Bytes pickle = {0x80, 0x04, 0x4E}; // PROTO 4, NONE
        pickle.insert(pickle.end(), size_t(extra), 0x4E);
        pickle.push_back('.'); // STOP
        const auto html = memoryVizHtml(pickle);
        QVERIFY(extractHtmlPickle(view(html), "p.html") == pickle);
    }

    void realisticPage()
    {
        const auto pickle = snapshotPickle();
        const auto html = memoryVizHtml(pickle);
        QVERIFY(extractHtmlPickle(view(html), "p.html") == pickle);
        // Compact JSON (no spaces), as another writer might produce.
        std::string compact = html;
        const auto at = compact.find("\"base64\": \"");
        compact.replace(at, 11, "\"base64\":\"");
        QVERIFY(extractHtmlPickle(view(compact), "p.html") == pickle);
    }

    void errors()
    {
        const auto html = memoryVizHtml(snapshotPickle());
        const auto start = html.find("\"base64\": \"") + 11;

        auto bad = html;
        bad[start + 40] = '!';
        auto e = extractError(bad);
        QCOMPARE(e.code(), LoadErrorCode::Malformed);
        QCOMPARE(e.offset(), int64_t(start + 40)); // offset in the HTML file
        QCOMPARE(e.file(), std::string("page.html"));

        e = extractError(html.substr(0, start + 100));
        QCOMPARE(e.code(), LoadErrorCode::Truncated);

        e = extractError("<html><body>hello, base64 world</body></html>");
        QCOMPARE(e.code(), LoadErrorCode::UnknownFormat);
        QVERIFY(e.message().find("_memory_viz") != std::string::npos);

        e = extractError("<html><body><img src='data:image/png;base64,iVBORw0KGgo='></body></html>");
        QCOMPARE(e.code(), LoadErrorCode::UnknownFormat);
        QVERIFY2(e.message().find("PNG") != std::string::npos, e.what());

        e = extractError("<script>const local_files = [{\"name\": \"x\", \"base64\": \"aGVsbG8=\"}]</script>");
        QCOMPARE(e.code(), LoadErrorCode::Malformed); // "hello" is not a pickle
        QVERIFY(e.message().find("not a pickle") != std::string::npos);
    }

    void loadsThroughLoad()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("trace_plot.html").toStdString();
        writeFile(path, toBytes(memoryVizHtml(snapshotPickle())));
        auto trace = load(path);
        QCOMPARE(trace->format, SourceFormat::SnapshotHtml);
        QVERIFY2(trace->formatDetail.starts_with("memory_viz HTML"), trace->formatDetail.c_str());
        QCOMPARE(trace->path, path);
        QCOMPARE(trace->devices.size(), size_t(1));
        QCOMPARE(trace->devices[0].eventCount(), size_t(1));
        QCOMPARE(trace->devices[0].events.size[0], int64_t(500));
    }
};

QTEST_APPLESS_MAIN(TestHtmlEmbed)
#include "test_html_embed.moc"
