#pragma once
// The real dumps of ../shared/corpus (POOLSCOPE_CORPUS_DIR) as a Qt Test data table: one row per
// dump, or one "no corpus" row with an empty name where the folder is absent, which the test turns
// into a clean QSKIP.
#include "core/load.h"

#include <QDir>
#include <QFileInfo>
#include <QStringList>
#include <QTest>

#include <memory>

namespace poolscope::testing {

// The dumps, by name: every file of the folder but its README.md and expected.json.
inline QStringList corpusFiles()
{
    const QDir dir(POOLSCOPE_CORPUS_DIR);
    QStringList out;
    for (const QString& f : dir.entryList(QDir::Files, QDir::Name))
        if (f != "README.md" && f != "expected.json")
            out << f;
    return out;
}

inline QString corpusPath(const QString& name) { return QString(POOLSCOPE_CORPUS_DIR) + "/" + name; }

// One dump of the corpus, read; null where the corpus (or that file) is absent: the test skips.
inline std::shared_ptr<const Trace> loadCorpus(const QString& name)
{
    const QString path = corpusPath(name);
    if (!QFileInfo::exists(path))
        return nullptr;
    return load(path.toStdString());
}

// In a _data slot: a QString column "name", one row per dump.
inline void addCorpusRows()
{
    QTest::addColumn<QString>("name");
    const QStringList files = corpusFiles();
    if (files.isEmpty())
        QTest::newRow("no corpus") << QString();
    for (const QString& f : files)
        QTest::newRow(qPrintable(f)) << f;
}

} // namespace poolscope::testing
