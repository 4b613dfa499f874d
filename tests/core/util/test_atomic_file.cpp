// AtomicFile: the target holds the old bytes or all of the new ones, never a half-written file.
#include "core/util/atomic_file.h"

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <sstream>

using namespace poolscope;

namespace {
std::string slurp(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
} // namespace

class TestAtomicFile : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::string path(const char* name) const { return (m_dir.path() + "/" + name).toStdString(); }
    int entries() const { return int(QDir(m_dir.path()).entryList(QDir::Files).size()); }

private slots:
    void commitReplacesTheTarget()
    {
        const std::string p = path("a.bin");
        std::ofstream(p) << "old";
        {
            AtomicFile f(p);
            f.stream() << "new content";
            QCOMPARE(slurp(p), std::string("old")); // nothing visible before commit
            f.commit();
        }
        QCOMPARE(slurp(p), std::string("new content"));
        QCOMPARE(entries(), 1); // no temporary left
    }

    void abandonedWriteLeavesTheOldFile()
    {
        const std::string p = path("b.bin");
        std::ofstream(p) << "old";
        try {
            AtomicFile f(p);
            f.stream() << "half of it";
            throw std::runtime_error("writer failed midway");
        } catch (const std::runtime_error&) {
        }
        QCOMPARE(slurp(p), std::string("old"));
        QCOMPARE(entries(), 2); // a.bin from before and b.bin: no temporary
    }

    void unwritableFolderIsAClearError()
    {
        try {
            AtomicFile f("/nonexistent-folder-poolscope/x.pickle");
            QFAIL("expected an error");
        } catch (const std::runtime_error& e) {
            QVERIFY2(std::string(e.what()).find("/nonexistent-folder-poolscope/x.pickle") != std::string::npos, e.what());
        }
    }

    void failedWriteFailsCommit()
    {
        // A write that failed (disk full, I/O error) leaves the stream bad: commit must say so and
        // must not put the truncated bytes in place.
        AtomicFile f(path("c.bin"));
        f.stream() << "partial";
        f.stream().setstate(std::ios::badbit);
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, f.commit());
        QVERIFY(!QFile::exists(QString::fromStdString(path("c.bin"))));
    }
};

QTEST_GUILESS_MAIN(TestAtomicFile)
#include "test_atomic_file.moc"
