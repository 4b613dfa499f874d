#pragma once
// tests/tools/check_pickle.py: what CPython's own pickle module says of a file we wrote.
#include <QProcess>
#include <QStandardPaths>
#include <QString>
#include <QStringList>

namespace poolscope::testing {

inline QString python3() { return QStandardPaths::findExecutable("python3"); }

// Runs check_pickle.py with `args`; returns its complaint, or an empty string when the check holds.
// Without python3 there is nothing to ask: empty too (a test that needs the answer checks python3()
// first and skips).
inline QString checkPickle(const QStringList& args)
{
    const QString python = python3();
    if (python.isEmpty())
        return {};
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(python, QStringList{QString(POOLSCOPE_SOURCE_DIR "/tests/tools/check_pickle.py")} + args);
    if (!p.waitForFinished(300000))
        return "python3 did not finish";
    const QString out = QString::fromUtf8(p.readAll()).trimmed();
    if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0)
        return out.isEmpty() ? QString("exit code %1").arg(p.exitCode()) : out;
    return {};
}

} // namespace poolscope::testing
