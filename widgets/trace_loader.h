#pragma once
#include "core/engine/document.h"
#include "core/util/progress.h"

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <QTimer>

#include <memory>

namespace poolscope {

// Loads and prepares a dump off the GUI thread (QtConcurrent): Document::open (load, classification,
// timelines) with the rules the application chose. Progress lives in atomics polled by a timer (no callbacks across threads); a newer
// start() or cancel() makes the running job stale, and a stale job's result is dropped by id.
class TraceLoader : public QObject {
    Q_OBJECT
public:
    explicit TraceLoader(QObject* parent = nullptr);
    ~TraceLoader() override;

    // The rules every later start() classifies with (null: unclassified; `problem` says why).
    void setRules(std::shared_ptr<const RuleSet> rules, const QString& problem = {});
    void start(const QString& path);
    void cancel();
    bool isRunning() const { return m_running; }
    QString path() const { return m_path; }

    static QString stageName(int stage);

signals:
    void progressChanged(int stage, qint64 bytesDone, qint64 bytesTotal);
    void loaded(std::shared_ptr<const poolscope::Document> document, const QString& path);
    void failed(const QString& message, const QString& path);
    void cancelled(const QString& path);
    void runningChanged(bool running);

private:
    struct Result {
        std::shared_ptr<const Document> trace;
        QString error;
        bool cancelled = false;
    };
    struct Job {
        quint64 id = 0;
        std::shared_ptr<Progress> progress;
        QFutureWatcher<Result>* watcher = nullptr;
    };
    void poll();
    void finished(quint64 id, QFutureWatcher<Result>* watcher);

    std::shared_ptr<const RuleSet> m_rules;
    QString m_rulesProblem;
    quint64 m_nextId = 1;
    Job m_job;
    QString m_path;
    bool m_running = false;
    QTimer m_poll;
};

} // namespace poolscope

Q_DECLARE_METATYPE(std::shared_ptr<const poolscope::Document>)
