// Every input a fuzzer ever crashed on, replayed through the harness that found it
// (tests/fuzz/fuzz_targets.h): tests/data/fuzz_regressions/<harness>/<finding>. Each must now be
// handled: a consistent Trace or a LoadError. README.md in that folder lists what each one was.
#include "fuzz/fuzz_targets.h"
#include "robustness_util.h"

#include <QtTest>

#include <filesystem>

using namespace poolscope;

namespace {

const std::filesystem::path kRegressions = std::filesystem::path(POOLSCOPE_TEST_DATA) / "fuzz_regressions";
const char* const kHarnesses[] = {"fuzz_pickle", "fuzz_snapshot", "fuzz_kineto", "fuzz_memory_timeline", "fuzz_decompress", "fuzz_load"};

} // namespace

class TestFuzzRegressions : public QObject {
    Q_OBJECT
private slots:
    void replay_data()
    {
        QTest::addColumn<QString>("harness");
        QTest::addColumn<QString>("file");
        int rows = 0;
        for (const char* h : kHarnesses) {
            const auto dir = kRegressions / h;
            if (!std::filesystem::is_directory(dir))
                continue;
            std::vector<std::filesystem::path> files;
            for (const auto& e : std::filesystem::directory_iterator(dir))
                if (e.is_regular_file())
                    files.push_back(e.path());
            std::sort(files.begin(), files.end());
            for (const auto& f : files) {
                QTest::newRow((std::string(h) + "/" + f.filename().string()).c_str()) << QString(h) << QString::fromStdString(f.string());
                ++rows;
            }
        }
        if (rows == 0)
            QTest::newRow("none") << QString() << QString();
    }
    void replay()
    {
        QFETCH(QString, harness);
        QFETCH(QString, file);
        if (harness.isEmpty())
            QSKIP("no fuzz findings checked in");
        const robust::Bytes data = robust::readFile(file.toStdString());
        const std::string problem = fuzz::runTarget(harness.toStdString(), data);
        QVERIFY2(problem.empty(), problem.c_str());
        // And through load(), as the CLI would meet it (same file, any harness).
        QTemporaryDir dir;
        const robust::Outcome o = robust::loadBytes((dir.path() + "/input").toStdString(), data);
        QVERIFY2(robust::problemWith(o).empty(), robust::problemWith(o).c_str());
    }

    // Every harness has its folder, so a finding has an obvious place to go.
    void foldersExist()
    {
        QVERIFY2(std::filesystem::is_directory(kRegressions), kRegressions.string().c_str());
        QVERIFY(std::filesystem::exists(kRegressions / "README.md"));
    }
};

QTEST_GUILESS_MAIN(TestFuzzRegressions)
#include "test_fuzz_regressions.moc"
