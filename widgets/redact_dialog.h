#pragma once
// File > Export redacted copy…: a copy of the open dump to share without its code (core/redact): a
// small dialog (rename code, which frames, target file), the redaction and the writing on a worker
// thread like the loader, the outcome in the status bar and an error as one line.
#include "core/redact/redact.h"

#include <QDialog>
#include <QString>

#include <functional>

class QAction;
class QCheckBox;
class QComboBox;
class QLineEdit;
class QMainWindow;
class QMenu;

namespace poolscope {

class Document;

class RedactDialog : public QDialog {
    Q_OBJECT
public:
    RedactDialog(const QString& sourcePath, QWidget* parent);

    RedactOptions options() const; // markers are the caller's to set
    QString target() const;
    void setRenameCode(bool on);
    void setFrames(FrameKeep keep);
    void setTarget(const QString& path);

    // "run.pickle.zst" -> "run.redacted.pickle.zst" beside it.
    static QString suggestedTarget(const QString& sourcePath);

private:
    void browse();
    QCheckBox* m_rename;
    QComboBox* m_frames;
    QLineEdit* m_target;
};

// Adds the action to `menu`; it is enabled whenever `current` has a document (checked as the menu
// opens). `window` parents the dialog and shows the outcome in its status bar.
QAction* addExportRedactedAction(QMenu* menu, QMainWindow* window, std::function<const Document*()> current);

} // namespace poolscope
