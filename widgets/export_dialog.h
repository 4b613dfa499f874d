#pragma once
#include <QSize>
#include <QString>

#include <functional>

class QWidget;

namespace poolscope {

// Asks where to export an image (PNG, SVG or PDF; the folder remembered across exports), writes it
// with `write` at the review size, and says what happened: a warning on failure, else the returned
// "Wrote FILE" text for the caller's status line. Empty when the user cancelled.
QString exportImageInteractively(QWidget* parent, const QString& title, const QString& suggestedName,
                                 const std::function<bool(const QString& path, QSize size, QString* error)>& write);

} // namespace poolscope
