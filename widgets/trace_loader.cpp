#include "widgets/trace_loader.h"


#include <QtConcurrent/QtConcurrentRun>

namespace poolscope {

TraceLoader::TraceLoader(QObject* parent) : QObject(parent)
{
    m_poll.setInterval(50);
    connect(&m_poll, &QTimer::timeout, this, &TraceLoader::poll);
}

TraceLoader::~TraceLoader()
{
    // The job may still read its Progress; it owns a reference, so only make it stop early.
    if (m_job.progress)
        m_job.progress->cancel = true;
    if (m_job.watcher)
        m_job.watcher->waitForFinished();
}

QString TraceLoader::stageName(int stage)
{
    switch (LoadStage(stage)) {
    case LoadStage::Reading:
        return tr("Reading");
    case LoadStage::Decompressing:
        return tr("Decompressing");
    case LoadStage::Parsing:
        return tr("Parsing");
    case LoadStage::Building:
        return tr("Building the model");
    case LoadStage::Done:
        return tr("Classifying pools");
    }
    return tr("Loading");
}

void TraceLoader::setRules(std::shared_ptr<const RuleSet> rules, const QString& problem)
{
    m_rules = std::move(rules);
    m_rulesProblem = problem;
}

void TraceLoader::start(const QString& path)
{
    if (m_job.progress)
        m_job.progress->cancel = true; // the old job becomes stale; its result will be dropped
    const quint64 id = m_nextId++;
    auto progress = std::make_shared<Progress>();
    auto* watcher = new QFutureWatcher<Result>(this);
    const std::string file = path.toStdString();
    DocumentOptions options;
    options.rules = m_rules;
    options.rulesProblem = m_rulesProblem.toStdString();
    connect(watcher, &QFutureWatcher<Result>::finished, this, [this, id, watcher] { finished(id, watcher); });
    m_job = Job{id, progress, watcher};
    m_path = path;
    watcher->setFuture(QtConcurrent::run([file, progress, options]() mutable -> Result {
        Result r;
        try {
            options.cancel = &progress->cancel;
            r.trace = Document::open(file, options, *progress);
            r.cancelled = !r.trace;
        } catch (const LoadError& e) {
            r.cancelled = e.code() == LoadErrorCode::Cancelled;
            r.error = QString::fromStdString(e.what());
        } catch (const std::bad_alloc&) {
            r.error = QString::fromStdString(file) + QStringLiteral(": out of memory while loading");
        } catch (const std::exception& e) {
            r.error = QString::fromStdString(file) + QStringLiteral(": ") + QString::fromStdString(e.what());
        }
        return r;
    }));
    m_poll.start();
    if (!m_running) {
        m_running = true;
        emit runningChanged(true);
    }
    emit progressChanged(int(LoadStage::Reading), 0, 0);
}

void TraceLoader::cancel()
{
    if (m_job.progress)
        m_job.progress->cancel = true;
}

void TraceLoader::poll()
{
    if (!m_job.progress)
        return;
    const Progress& p = *m_job.progress;
    emit progressChanged(p.stage.load(), p.bytesDone.load(), p.bytesTotal.load());
}

void TraceLoader::finished(quint64 id, QFutureWatcher<Result>* watcher)
{
    const Result r = watcher->result();
    watcher->deleteLater();
    if (id != m_job.id)
        return; // stale: a newer start() superseded it
    const QString path = m_path;
    m_job = Job{};
    m_poll.stop();
    m_running = false;
    emit runningChanged(false);
    if (r.cancelled)
        emit cancelled(path);
    else if (r.trace)
        emit loaded(r.trace, path);
    else
        emit failed(r.error, path);
}

} // namespace poolscope

// Compiled here rather than in mocs_compilation.cpp: one translation unit per header keeps
// headers that clash with Qt keywords (a method named emit) out of the Qt moc TU.
#include "moc_trace_loader.cpp"
