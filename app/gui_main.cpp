// `poolscope [FILE] [--rules FILE]`: the desktop window.
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/util/load_error.h"
#include "widgets/main_window.h"

#include <QApplication>
#include <QIcon>
#include <QMessageBox>

#include <cstdlib>
#include <iostream>

namespace poolscope::app {

int runGui(int argc, char** argv, const std::string& file, const std::string& rulesFile)
{
    // Without a display Qt would abort with a platform-plugin message; say what to do instead.
    if (!std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY") && !std::getenv("QT_QPA_PLATFORM")) {
        std::cerr << "poolscope: no display to open a window on (DISPLAY/WAYLAND_DISPLAY unset); "
                     "use `poolscope render FILE -o OUT.png` or `poolscope report FILE` without one\n";
        return 2;
    }
    // The same rules as every command; a bad rules file is named before any window appears.
    std::shared_ptr<const RuleSet> rules;
    try {
        rules = loadRules(rulesFile);
    } catch (const LoadError& e) {
        std::cerr << "poolscope: " << e.what() << "\n";
        return 2;
    }
    QApplication app(argc, argv);
    QCoreApplication::setOrganizationName(QStringLiteral("PoolScope"));
    QCoreApplication::setApplicationName(QStringLiteral("PoolScope"));
    QCoreApplication::setApplicationVersion(QStringLiteral(POOLSCOPE_VERSION));
    // Ties the window to the installed poolscope.desktop (its icon in a Wayland dock, its name).
    QGuiApplication::setDesktopFileName(QStringLiteral("poolscope"));
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/poolscope.svg")));
    poolscope::MainWindow window;
    window.setRules(std::move(rules));
    window.show();
    if (!file.empty())
        window.openFile(QString::fromLocal8Bit(file.c_str()));
    return app.exec();
}

} // namespace poolscope::app
