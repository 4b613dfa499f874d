#pragma once
// Opens a dump in the window as a user does (File ▸ Open: loaded off the GUI thread) and waits,
// up to a minute, for the document to be there. A failure is recorded in the calling test.
#include "widgets/main_window.h"

#include <QSignalSpy>
#include <QTest>

namespace poolscope::testing {

inline void openAndWait(MainWindow& w, const QString& path)
{
    QSignalSpy changed(&w, &MainWindow::documentChanged);
    w.openFile(path);
    QTRY_COMPARE_WITH_TIMEOUT(changed.count(), 1, 60000);
}

} // namespace poolscope::testing
