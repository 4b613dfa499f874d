#include "widgets/redact_dialog.h"

#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/redact/redacted_copy.h"

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMainWindow>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QStatusBar>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace poolscope {

RedactDialog::RedactDialog(const QString& sourcePath, QWidget* parent) : QDialog(parent)
{
    setWindowTitle(tr("Export redacted copy"));
    setObjectName(QStringLiteral("redactDialog"));
    auto* intro = new QLabel(tr("A copy of %1 to attach to a bug report. Every allocation, size, address, stream, time, "
                                "segment and OOM stays.")
                                 .arg(QFileInfo(sourcePath).fileName()),
                             this);
    intro->setWordWrap(true);
    m_rename = new QCheckBox(tr("Rename my code"), this);
    m_rename->setChecked(true);
    auto* renameHelp = new QLabel(tr("Your files, functions and annotations become tokens (line numbers stay); "
                                     "library paths lose the folders above the package, with your home folder and user name."),
                                  this);
    renameHelp->setWordWrap(true);
    renameHelp->setForegroundRole(QPalette::PlaceholderText);
    m_frames = new QComboBox(this);
    m_frames->addItem(tr("All frames"), int(FrameKeep::All));
    m_frames->addItem(tr("Python frames only (drop C++)"), int(FrameKeep::Python));
    m_frames->addItem(tr("No frames (keep the history)"), int(FrameKeep::None));
    m_target = new QLineEdit(suggestedTarget(sourcePath), this);
    auto* browse = new QPushButton(tr("Browse…"), this);
    connect(browse, &QPushButton::clicked, this, &RedactDialog::browse);
    auto* targetRow = new QHBoxLayout;
    targetRow->addWidget(m_target, 1);
    targetRow->addWidget(browse);
    auto* form = new QFormLayout;
    form->addRow(m_rename);
    form->addRow(renameHelp);
    form->addRow(tr("Frames:"), m_frames);
    form->addRow(tr("Save as:"), targetRow);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    buttons->button(QDialogButtonBox::Ok)->setText(tr("Export"));
    connect(buttons, &QDialogButtonBox::accepted, this, [this] {
        if (!m_target->text().trimmed().isEmpty())
            accept();
    });
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    setMinimumWidth(520);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(intro);
    layout->addLayout(form);
    layout->addWidget(buttons);
}

RedactOptions RedactDialog::options() const
{
    RedactOptions o;
    o.renameCode = m_rename->isChecked();
    o.frames = FrameKeep(m_frames->currentData().toInt());
    return o;
}

QString RedactDialog::target() const { return m_target->text().trimmed(); }
void RedactDialog::setRenameCode(bool on) { m_rename->setChecked(on); }
void RedactDialog::setFrames(FrameKeep keep) { m_frames->setCurrentIndex(m_frames->findData(int(keep))); }
void RedactDialog::setTarget(const QString& path) { m_target->setText(path); }

QString RedactDialog::suggestedTarget(const QString& sourcePath)
{
    const QFileInfo info(sourcePath);
    QString name = info.fileName();
    const int dot = name.indexOf(QLatin1Char('.'), 1);
    name = dot < 0 ? name + QStringLiteral(".redacted") : name.left(dot) + QStringLiteral(".redacted") + name.mid(dot);
    if (name.endsWith(QStringLiteral(".html"), Qt::CaseInsensitive)) // the copy is the pickle the page embeds
        name = name.left(name.size() - 5) + QStringLiteral(".pickle");
    return info.dir().filePath(name);
}

void RedactDialog::browse()
{
    const QString file = QFileDialog::getSaveFileName(this, tr("Save the redacted copy as"), target(),
                                                      tr("Snapshots (*.pickle *.pkl *.json *.gz *.zst);;All files (*)"));
    if (!file.isEmpty())
        m_target->setText(file);
}

namespace {

void startExport(QMainWindow* window, const Document& doc, const RedactOptions& chosen, const QString& target)
{
    auto trace = doc.tracePtr();
    // The job keeps its own copy of the marker rules: the window may open another dump meanwhile.
    auto markers = doc.rules() ? std::make_shared<const RuleSet>(*doc.rules()) : std::make_shared<const RuleSet>(RuleSet::builtin());
    auto* watcher = new QFutureWatcher<QString>(window);
    window->statusBar()->showMessage(QObject::tr("Writing a redacted copy to %1…").arg(target));
    QObject::connect(watcher, &QFutureWatcher<QString>::finished, window, [window, watcher, target] {
        const QString error = watcher->result();
        watcher->deleteLater();
        if (error.isEmpty()) {
            window->statusBar()->showMessage(QObject::tr("Wrote the redacted copy %1").arg(target), 10000);
            return;
        }
        window->statusBar()->showMessage(error, 10000);
        auto* box = new QMessageBox(QMessageBox::Warning, QObject::tr("Could not export the redacted copy"), error, QMessageBox::Ok, window);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->setObjectName(QStringLiteral("redactError"));
        box->open();
    });
    watcher->setFuture(QtConcurrent::run([trace, markers, chosen, target]() -> QString {
        try {
            RedactOptions options = chosen;
            options.markers = markers.get();
            const auto copy = redact(*trace, options); // keeps the dump's path: errors name it
            writeRedactedCopy(*copy, target.toStdString());
            return {};
        } catch (const std::exception& e) {
            QString line = QString::fromStdString(e.what()).simplified(); // one line, whatever the message held
            return line.isEmpty() ? QObject::tr("%1: the copy could not be written").arg(target) : line;
        }
    }));
}

} // namespace

QAction* addExportRedactedAction(QMenu* menu, QMainWindow* window, std::function<const Document*()> current)
{
    auto* action = menu->addAction(QObject::tr("Export re&dacted copy…"));
    action->setObjectName(QStringLiteral("exportRedactedAction"));
    action->setStatusTip(QObject::tr("Save a copy of this dump without your code's names (to share in a bug report)"));
    action->setEnabled(current() != nullptr);
    QObject::connect(menu, &QMenu::aboutToShow, action, [action, current] { action->setEnabled(current() != nullptr); });
    QObject::connect(action, &QAction::triggered, window, [window, current] {
        const Document* doc = current();
        if (!doc)
            return;
        auto* dialog = new RedactDialog(QString::fromStdString(doc->path()), window);
        dialog->setAttribute(Qt::WA_DeleteOnClose);
        QObject::connect(dialog, &QDialog::accepted, window, [window, dialog, current] {
            if (const Document* d = current())
                startExport(window, *d, dialog->options(), dialog->target());
        });
        dialog->open();
    });
    return action;
}

} // namespace poolscope
