#include "widgets/export_dialog.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QMessageBox>
#include <QObject>
#include <QSettings>

namespace poolscope {

QString exportImageInteractively(QWidget* parent, const QString& title, const QString& suggestedName,
                                 const std::function<bool(const QString& path, QSize size, QString* error)>& write)
{
    QSettings s;
    const QString path = QFileDialog::getSaveFileName(parent, title, QFileInfo(s.value(QStringLiteral("exportDir")).toString(), suggestedName).filePath(),
                                                      QObject::tr("PNG image (*.png);;SVG drawing (*.svg);;PDF document (*.pdf)"));
    if (path.isEmpty())
        return {};
    s.setValue(QStringLiteral("exportDir"), QFileInfo(path).absolutePath());
    QString error;
    if (!write(path, QSize(1600, 900), &error)) {
        QMessageBox::warning(parent, title, error);
        return {};
    }
    return QObject::tr("Wrote %1").arg(path);
}

} // namespace poolscope
