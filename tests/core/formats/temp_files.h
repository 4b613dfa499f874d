#pragma once
// What the format tests that write their inputs share: a temporary folder to write them in, and the
// error load() gives for one of them.
#include "core/load.h"

#include "fixture_util.h"

#include <QTemporaryDir>

#include <string>

namespace poolscope::testutil {

class TempFiles {
public:
    // The path `name` has in the folder (nothing written).
    std::string path(const std::string& name) const { return m_dir.filePath(QString::fromStdString(name)).toStdString(); }
    // Writes `data` as `name` in the folder; returns its path.
    std::string file(const std::string& name, const Bytes& data)
    {
        const std::string p = path(name);
        writeFile(p, data);
        return p;
    }

private:
    QTemporaryDir m_dir;
};

// The LoadError load() throws for `path`; one with code -1 and "no error" where it loads.
inline LoadError loadError(const std::string& path)
{
    try {
        load(path);
    } catch (const LoadError& e) {
        return e;
    }
    return LoadError(LoadErrorCode(-1), "", -1, "no error");
}

} // namespace poolscope::testutil
