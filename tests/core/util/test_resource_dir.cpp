// resolveResourcesDir: an installed binary reads the installed rules and capture helper, a binary in
// its build tree reads the source tree's, and neither depends on the other being present.
#include "core/util/resource_dir.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>

using namespace poolscope;

class TestResourceDir : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    std::string at(const char* rel) const { return (m_dir.path() + QLatin1Char('/') + QLatin1String(rel)).toStdString(); }
    void makeDir(const char* rel) const { QVERIFY(QDir().mkpath(QString::fromStdString(at(rel)))); }
    void touch(const char* rel) const
    {
        QFile f(QString::fromStdString(at(rel)));
        QVERIFY(f.open(QIODevice::WriteOnly));
    }
    ResourceLayout layout(const char* exe) const { return {at(exe), at("build"), at("src/resources"), "../share/poolscope"}; }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        makeDir("src/resources/classifier");
        makeDir("build/app");
        touch("build/app/poolscope");
    }

    void installedBinaryReadsInstalledData()
    {
        makeDir("usr/bin");
        makeDir("usr/share/poolscope");
        touch("usr/bin/poolscope");
        QCOMPARE(resolveResourcesDir(layout("usr/bin/poolscope")), at("usr/share/poolscope"));
    }

    void buildTreeBinaryReadsSourceTree()
    {
        QCOMPARE(resolveResourcesDir(layout("build/app/poolscope")), at("src/resources"));
        QCOMPARE(resolveResourcesDir(layout("build/tests/core/util/core_util_test_x")), at("src/resources"));
    }

    // `cmake --install build --prefix build/stage`: installed, although inside the build tree.
    void installPrefixInsideBuildTree()
    {
        makeDir("build/stage/bin");
        makeDir("build/stage/share/poolscope");
        touch("build/stage/bin/poolscope");
        QCOMPARE(resolveResourcesDir(layout("build/stage/bin/poolscope")), at("build/stage/share/poolscope"));
    }

    // A binary elsewhere whose data is missing gets the installed path (callers then fall back to
    // what is compiled in), never the source tree of the machine it was built on.
    void installedWithoutDataNeverReadsSourceTree()
    {
        makeDir("opt/bin");
        QCOMPARE(resolveResourcesDir(layout("opt/bin/poolscope")), at("opt/share/poolscope"));
        // "build2" starts with "build" but is not inside it.
        makeDir("build2/app");
        QCOMPARE(resolveResourcesDir(layout("build2/app/poolscope")), at("build2/share/poolscope"));
    }

    // A symlink on PATH (/usr/local/bin/poolscope -> /opt/poolscope/bin/poolscope) finds the data
    // beside the real binary.
    void symlinkedBinaryFindsItsTarget()
    {
        makeDir("real/bin");
        makeDir("real/share/poolscope");
        touch("real/bin/poolscope");
        makeDir("links");
        std::filesystem::create_symlink(at("real/bin/poolscope"), at("links/poolscope"));
        QCOMPARE(resolveResourcesDir(layout("links/poolscope")), at("real/share/poolscope"));
    }

    void unknownExecutableMeansSourceTree()
    {
        ResourceLayout l = layout("build/app/poolscope");
        l.executable.clear();
        QCOMPARE(resolveResourcesDir(l), at("src/resources"));
    }

    // This test binary runs from the build tree: the source tree's rules and capture helper.
    void thisProcessReadsTheSourceTree()
    {
        QCOMPARE(resourcesDir(), std::string(POOLSCOPE_SOURCE_DIR "/resources"));
        QVERIFY(QFile::exists(QString::fromStdString(resourcesDir() + "/classifier/rules.json")));
        QVERIFY(QFile::exists(QString::fromStdString(captureHelperPath())));
    }
};

QTEST_GUILESS_MAIN(TestResourceDir)
#include "test_resource_dir.moc"
