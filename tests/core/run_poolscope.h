#pragma once
// Runs the built `poolscope` executable the way a user would, for the suites that test the CLI.
#include <QProcess>
#include <QStringList>

namespace poolscope::testing {

struct CliResult {
    int exitCode = -1; // -1: crashed, or did not finish in two minutes
    QByteArray out, err;
};

inline QString poolscopeBinary()
{
    const QByteArray env = qgetenv("POOLSCOPE_TEST_BINARY"); // lets a developer point at another build
    return env.isEmpty() ? QStringLiteral(POOLSCOPE_BINARY) : QString::fromLocal8Bit(env);
}

inline CliResult runPoolscope(const QStringList& args)
{
    QProcess p;
    p.start(poolscopeBinary(), args);
    if (!p.waitForFinished(120000)) {
        p.kill();
        p.waitForFinished();
        return {};
    }
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(), p.readAllStandardError()};
}

} // namespace poolscope::testing
