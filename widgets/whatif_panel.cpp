#include "widgets/whatif_panel.h"

#include "core/util/units.h"
#include "widgets/pool_palette.h"
#include "widgets/whatif_range.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>
#include <QGridLayout>
#include <QSignalBlocker>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>

namespace poolscope {
namespace {

// Each pool's predicted bytes after every event, for the predicted stack: up to this many events
// (12 pools x 8 bytes each: ~190 MB at two million).
constexpr size_t kPoolSeriesEvents = 2'000'000;

QString bytesText(qint64 b) { return QString::fromStdString(formatBytes(b)); }

Ratio ratioOf(const QDoubleSpinBox* box)
{
    return parseRatio(QString::number(box->value(), 'f', 3).toStdString()).value_or(Ratio{});
}

} // namespace

WhatIfPanel::WhatIfPanel(QWidget* parent) : QWidget(parent)
{
    buildUi();
    setTrace(nullptr, 0);
}

WhatIfPanel::~WhatIfPanel()
{
    cancelJob();
    if (m_watcher)
        m_watcher->waitForFinished();
}

void WhatIfPanel::buildUi()
{
    auto scaleBox = [this](const QString& tip) {
        auto* box = new QDoubleSpinBox(this);
        box->setRange(0.125, 64.0);
        box->setDecimals(3);
        box->setSingleStep(0.25);
        box->setValue(1.0);
        box->setPrefix(QStringLiteral("x"));
        box->setToolTip(tip);
        return box;
    };
    m_batch = scaleBox(tr("Micro-batch size factor: every allocation that follows the tokens scales with it"));
    m_seq = scaleBox(tr("Sequence length factor: linear terms scale with s, the attention-score matrices with s squared"));
    m_activation = scaleBox(tr("A plain factor on the activation pool"));
    m_checkpoint = new QComboBox(this);
    for (auto k : {CheckpointKind::None, CheckpointKind::Full, CheckpointKind::Selective, CheckpointKind::Sqrt})
        m_checkpoint->addItem(QString::fromUtf8(checkpointName(k).data()), int(k));
    m_optimizer = new QComboBox(this);
    m_optimizer->addItem(tr("as recorded"), int(OptimizerKind::Keep));
    for (auto k : {OptimizerKind::AdamW, OptimizerKind::Adam, OptimizerKind::Sgd, OptimizerKind::SgdMomentum,
                   OptimizerKind::Lion, OptimizerKind::Adafactor, OptimizerKind::Adam8bit})
        m_optimizer->addItem(QString::fromUtf8(optimizerName(k).data()), int(k));
    m_sharding = new QComboBox(this);
    for (auto k : {ShardingKind::None, ShardingKind::Zero1, ShardingKind::Zero2, ShardingKind::Zero3, ShardingKind::FsdpFull,
                   ShardingKind::FsdpGradOp, ShardingKind::FsdpHybrid})
        m_sharding->addItem(QString::fromUtf8(shardingName(k).data()), int(k));
    m_ranks = new QSpinBox(this);
    m_ranks->setRange(1, 65536);
    m_ranks->setValue(8);
    m_ranks->setToolTip(tr("Data-parallel ranks (hybrid sharding: the ranks of one shard group)"));
    m_offload = new QCheckBox(tr("Offload optimizer"), this);
    m_offload->setToolTip(tr("The optimizer's state and step run on the CPU"));
    m_autocast = new QComboBox(this);
    m_autocast->addItem(tr("as recorded"), int(AutocastKind::Keep));
    m_autocast->addItem(QStringLiteral("bf16"), int(AutocastKind::Bf16));
    m_autocast->addItem(QStringLiteral("fp16"), int(AutocastKind::Fp16));
    m_autocast->addItem(tr("off (fp32)"), int(AutocastKind::Off));
    m_autocast->setToolTip(tr("torch.autocast: matmuls in 16 bits with a cast of each weight per forward, or off"));
    // Its first item is renamed per document to say what was recorded: the box follows its text
    // (sized once at the first show, it cut "as recorded (no autocast casts)" to "as recorde").
    m_autocast->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    // Where the autocast region is (the command line's --autocast-region): the cast cache keeps each
    // weight's cast until the region exits, so one region over several steps casts the weights once.
    m_autocastRegion = new QComboBox(this);
    m_autocastRegion->setObjectName(QStringLiteral("autocastRegion"));
    m_autocastRegion->addItem(tr("each forward"), false);
    m_autocastRegion->addItem(tr("whole run"), true);
    m_autocastRegion->setToolTip(tr("The autocast region of bf16/fp16: around each forward (weights cast once per forward, kept "
                                    "until their backward) or one region around every step (weights cast once, kept to the end)"));
    m_autocastRegion->setEnabled(false);
    m_trainable = new QDoubleSpinBox(this);
    m_trainable->setRange(0.001, 1.0);
    m_trainable->setDecimals(3);
    m_trainable->setSingleStep(0.05);
    m_trainable->setValue(1.0);
    m_trainable->setToolTip(tr("Share of each weight that trains (LoRA-like adapters): gradients and optimizer state follow it"));
    m_freeze = new QLineEdit(this);
    m_freeze->setObjectName(QStringLiteral("freeze"));
    m_freeze->setPlaceholderText(tr("regex over gradients' frames (! inverts)"));
    m_freeze->setToolTip(tr("Gradients whose frames match are not made, nor their optimizer state (e.g. Embedding, or !LayerNorm)"));
    m_accumulate = new QSpinBox(this);
    m_accumulate->setRange(1, 4096);
    m_accumulate->setPrefix(QStringLiteral("x"));
    m_accumulate->setToolTip(tr("Gradient accumulation: micro-batch / K, K forward and backward passes per step"));
    m_capacity = new QLineEdit(this);
    m_capacity->setObjectName(QStringLiteral("capacity"));
    m_capacity->setPlaceholderText(tr("e.g. 80GiB"));
    m_capacity->setToolTip(tr("Device memory to judge the fit against (empty: the recorded OOM's device)"));
    // The allocator's settings in PyTorch's names; the replay applies them over the run's own.
    m_expandable = new QComboBox(this);
    m_expandable->setObjectName(QStringLiteral("expandableSegments"));
    m_expandable->addItem(tr("as recorded"), QString());
    m_expandable->addItem(tr("on"), QStringLiteral("True"));
    m_expandable->addItem(tr("off"), QStringLiteral("False"));
    m_expandable->setToolTip(tr("expandable_segments: one growing segment per stream, mapped in 20 MiB pages"));
    m_maxSplit = new QSpinBox(this);
    m_maxSplit->setObjectName(QStringLiteral("maxSplitSizeMb"));
    m_maxSplit->setRange(0, 1 << 20);
    m_maxSplit->setSpecialValueText(tr("as recorded"));
    m_maxSplit->setSuffix(QStringLiteral(" MiB"));
    m_maxSplit->setSingleStep(64);
    m_maxSplit->setToolTip(tr("max_split_size_mb: blocks at or above it are never split (PyTorch requires more than 20)"));
    m_gcThreshold = new QDoubleSpinBox(this);
    m_gcThreshold->setObjectName(QStringLiteral("gcThreshold"));
    m_gcThreshold->setRange(0.0, 0.99);
    m_gcThreshold->setDecimals(2);
    m_gcThreshold->setSingleStep(0.05);
    m_gcThreshold->setSpecialValueText(tr("as recorded"));
    m_gcThreshold->setToolTip(tr("garbage_collection_threshold: free old cached segments once reserved passes this share of the "
                                 "capacity (PyTorch: only with set_per_process_memory_fraction)"));
    m_roundup = new QComboBox(this);
    m_roundup->setObjectName(QStringLiteral("roundupDivisions"));
    m_roundup->addItem(tr("as recorded"), 0);
    for (int d : {1, 2, 4, 8, 16})
        m_roundup->addItem(QString::number(d), d);
    m_roundup->setToolTip(tr("roundup_power2_divisions: round requests up to one of N steps between powers of two"));
    m_runButton = new QPushButton(tr("Predict"), this);
    m_liveBox = new QCheckBox(tr("as knobs change"), this);
    m_liveBox->setToolTip(tr("Predict on every change (offered for traces that replay in about 100 ms)"));
    m_stackBox = new QCheckBox(tr("predicted stack"), this);
    m_stackBox->setToolTip(tr("Draw each pool's predicted top over the chart, not only the predicted totals"));
    connect(m_runButton, &QPushButton::clicked, this, &WhatIfPanel::run);
    connect(m_sharding, &QComboBox::currentIndexChanged, this,
            [this] { m_ranks->setEnabled(ShardingKind(m_sharding->currentData().toInt()) != ShardingKind::None); });
    connect(m_autocast, &QComboBox::currentIndexChanged, this, [this] {
        const auto k = AutocastKind(m_autocast->currentData().toInt());
        m_autocastRegion->setEnabled(k == AutocastKind::Bf16 || k == AutocastKind::Fp16);
    });
    connect(m_stackBox, &QCheckBox::toggled, this, &WhatIfPanel::predictedStackToggled);
    connect(m_liveBox, &QCheckBox::toggled, this, [this](bool on) {
        m_live = on;
        if (on)
            knobChanged();
    });
    m_liveTimer = new QTimer(this);
    m_liveTimer->setSingleShot(true);
    m_liveTimer->setInterval(150);
    connect(m_liveTimer, &QTimer::timeout, this, &WhatIfPanel::run);
    for (QDoubleSpinBox* b : {m_batch, m_seq, m_activation, m_trainable})
        connect(b, &QDoubleSpinBox::valueChanged, this, &WhatIfPanel::knobChanged);
    for (QSpinBox* b : {m_ranks, m_accumulate})
        connect(b, &QSpinBox::valueChanged, this, &WhatIfPanel::knobChanged);
    for (QComboBox* c : {m_checkpoint, m_optimizer, m_sharding, m_autocast, m_autocastRegion, m_expandable, m_roundup})
        connect(c, &QComboBox::currentIndexChanged, this, &WhatIfPanel::knobChanged);
    connect(m_maxSplit, &QSpinBox::valueChanged, this, &WhatIfPanel::knobChanged);
    connect(m_gcThreshold, &QDoubleSpinBox::valueChanged, this, &WhatIfPanel::knobChanged);
    connect(m_offload, &QCheckBox::toggled, this, &WhatIfPanel::knobChanged);
    for (QLineEdit* e : {m_freeze, m_capacity})
        connect(e, &QLineEdit::editingFinished, this, &WhatIfPanel::knobChanged);

    // The knobs in two columns of label and field, compact, beside the answer.
    auto* knobs = new QGridLayout;
    knobs->setHorizontalSpacing(6);
    knobs->setVerticalSpacing(3);
    auto label = [this](const QString& text) { return new QLabel(text, this); };
    int row = 0;
    auto pair = [&](const QString& a, QWidget* wa, const QString& b, QWidget* wb) {
        knobs->addWidget(label(a), row, 0);
        knobs->addWidget(wa, row, 1);
        if (wb) {
            knobs->addWidget(label(b), row, 2);
            knobs->addWidget(wb, row, 3);
        }
        ++row;
    };
    pair(tr("Micro-batch"), m_batch, tr("Sequence"), m_seq);
    pair(tr("Activations"), m_activation, tr("Accumulate"), m_accumulate);
    pair(tr("Autocast"), m_autocast, tr("region"), m_autocastRegion);
    pair(tr("Checkpoint"), m_checkpoint, tr("Optimizer"), m_optimizer);
    pair(tr("Trainable"), m_trainable, QString(), nullptr);
    knobs->addWidget(label(tr("Sharding")), row, 0);
    knobs->addWidget(m_sharding, row, 1);
    knobs->addWidget(label(tr("ranks")), row, 2);
    knobs->addWidget(m_ranks, row, 3);
    ++row;
    knobs->addWidget(label(tr("Freeze")), row, 0);
    knobs->addWidget(m_freeze, row, 1, 1, 3);
    ++row;
    knobs->addWidget(label(tr("Capacity")), row, 0);
    knobs->addWidget(m_capacity, row, 1);
    knobs->addWidget(m_offload, row, 2, 1, 2);
    ++row;
    pair(tr("Expandable"), m_expandable, tr("Split limit"), m_maxSplit);
    pair(tr("GC threshold"), m_gcThreshold, tr("Round-up"), m_roundup);
    auto* actions = new QHBoxLayout;
    actions->addWidget(m_runButton);
    actions->addWidget(m_liveBox);
    actions->addWidget(m_stackBox);
    auto* reset = new QPushButton(tr("Reset"), this);
    reset->setObjectName(QStringLiteral("resetKnobs"));
    reset->setToolTip(tr("Every knob back to the run as recorded, and the prediction off the chart"));
    connect(reset, &QPushButton::clicked, this, &WhatIfPanel::resetKnobs);
    actions->addWidget(reset);
    actions->addStretch(1);
    knobs->addLayout(actions, row, 0, 1, 4);
    knobs->setRowStretch(row + 1, 1);
    knobs->setColumnStretch(1, 1);
    knobs->setColumnStretch(3, 1);

    m_verdict = new QLabel(this);
    m_verdict->setObjectName(QStringLiteral("whatIfVerdict"));
    m_verdict->setWordWrap(true);
    m_verdict->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_model = new WhatIfResultModel(this);
    m_table = new QTableView(this);
    m_table->setModel(m_model);
    m_table->verticalHeader()->hide();
    m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 4);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(WhatIfResultModel::Quantity, QHeaderView::Stretch);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_notes = new QPlainTextEdit(this);
    m_notes->setObjectName(QStringLiteral("whatIfNotes"));
    m_notes->setReadOnly(true);
    m_notes->setMaximumBlockCount(200);
    auto* answer = new QVBoxLayout;
    answer->addWidget(m_verdict);
    answer->addWidget(m_table, 3);
    answer->addWidget(m_notes, 2);

    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addLayout(knobs, 0);
    layout->addLayout(answer, 1);
    m_ranks->setEnabled(false);
}

void WhatIfPanel::setTrace(std::shared_ptr<const Document> trace, size_t deviceIndex)
{
    cancelJob();
    m_trace = std::move(trace);
    m_device = deviceIndex;
    m_result.reset();
    m_model->setResult(nullptr);
    m_notes->clear();
    const bool usable = m_trace && m_device < m_trace->deviceCount() && m_trace->device(m_device).device().eventCount() > 0;
    m_runButton->setEnabled(usable);
    // "As recorded" says what was recorded: autocast leaves its weight casts (the cast cache) in the
    // trace. Their bytes cannot tell bf16 from fp16, so neither is named.
    QString recorded = tr("as recorded");
    if (usable && m_trace->device(m_device).classified())
        recorded = m_trace->device(m_device).poolPeaks().bytes[size_t(Pool::CastCache)] > 0 ? tr("as recorded (16-bit autocast)")
                                                                                           : tr("as recorded (no autocast casts)");
    m_autocast->setItemText(m_autocast->findData(int(AutocastKind::Keep)), recorded);
    // QComboBox renews its size hint on a renamed item but not its minimum, and a narrow dock
    // squeezes the box to that stale minimum: hold it at the new text's width.
    m_autocast->setMinimumWidth(m_autocast->sizeHint().width());
    m_lastReplayUs = -1;
    updateLive();
    m_verdict->setText(!m_trace ? tr("Open a dump to ask what if.")
                       : !usable ? tr("This device has no trace events to replay.")
                       : m_live  ? tr("Turn a knob: the trace is replayed through the allocator and the answer drawn on the chart.")
                                 : tr("Set the knobs and press Predict: the trace is replayed through the allocator."));
    setRunning(false);
    emit predictionChanged(nullptr);
}

Scenario WhatIfPanel::scenario() const
{
    Scenario s;
    s.batchScale = ratioOf(m_batch);
    s.seqScale = ratioOf(m_seq);
    s.activationScale = ratioOf(m_activation);
    s.checkpoint = CheckpointKind(m_checkpoint->currentData().toInt());
    s.optimizer = OptimizerKind(m_optimizer->currentData().toInt());
    s.sharding = ShardingKind(m_sharding->currentData().toInt());
    s.ranks = s.sharding == ShardingKind::None ? 1 : m_ranks->value();
    s.offloadOptimizer = m_offload->isChecked();
    s.autocast = AutocastKind(m_autocast->currentData().toInt());
    s.autocastWholeRun = m_autocastRegion->isEnabled() && m_autocastRegion->currentData().toBool();
    s.trainable = ratioOf(m_trainable);
    s.freeze = m_freeze->text().trimmed().toStdString();
    s.accumulate = m_accumulate->value();
    if (const int64_t bytes = parseBytes(m_capacity->text().trimmed().toStdString()); bytes > 0)
        s.capacity = bytes;
    QStringList conf;
    if (const QString v = m_expandable->currentData().toString(); !v.isEmpty())
        conf << QStringLiteral("expandable_segments:") + v;
    if (m_maxSplit->value() > 0)
        conf << QStringLiteral("max_split_size_mb:%1").arg(std::max(m_maxSplit->value(), 21));
    if (m_gcThreshold->value() > 0)
        conf << QStringLiteral("garbage_collection_threshold:%1").arg(m_gcThreshold->value(), 0, 'g', 3);
    if (const int d = m_roundup->currentData().toInt(); d > 0)
        conf << QStringLiteral("roundup_power2_divisions:%1").arg(d);
    s.allocConf = conf.join(',').toStdString();
    return s;
}

void WhatIfPanel::setScenario(const Scenario& s)
{
    // Setting the knobs from code is no knob turned by a user: no live run for each of them.
    m_settingScenario = true;
    m_batch->setValue(s.batchScale.value());
    m_seq->setValue(s.seqScale.value());
    m_activation->setValue(s.activationScale.value());
    m_checkpoint->setCurrentIndex(m_checkpoint->findData(int(s.checkpoint)));
    m_optimizer->setCurrentIndex(m_optimizer->findData(int(s.optimizer)));
    m_sharding->setCurrentIndex(m_sharding->findData(int(s.sharding)));
    if (s.sharding != ShardingKind::None)
        m_ranks->setValue(s.ranks);
    m_offload->setChecked(s.offloadOptimizer);
    m_capacity->setText(s.capacity ? QString::fromStdString(formatBytes(*s.capacity)).remove(' ') : QString());
    m_autocast->setCurrentIndex(m_autocast->findData(int(s.autocast)));
    m_autocastRegion->setCurrentIndex(m_autocastRegion->findData(s.autocastWholeRun));
    m_trainable->setValue(s.trainable.value());
    m_freeze->setText(QString::fromStdString(s.freeze));
    m_accumulate->setValue(s.accumulate);
    // PYTORCH_CUDA_ALLOC_CONF back into the allocator knobs (a roundup list has no knob: left as recorded).
    m_expandable->setCurrentIndex(0);
    m_maxSplit->setValue(0);
    m_gcThreshold->setValue(0);
    m_roundup->setCurrentIndex(0);
    for (const QString& item : QString::fromStdString(s.allocConf).split(',', Qt::SkipEmptyParts)) {
        const QString key = item.section(':', 0, 0).trimmed();
        const QString value = item.section(':', 1).trimmed();
        if (key == QLatin1String("expandable_segments"))
            m_expandable->setCurrentIndex(std::max(0, m_expandable->findData(value)));
        else if (key == QLatin1String("max_split_size_mb"))
            m_maxSplit->setValue(value.toInt());
        else if (key == QLatin1String("garbage_collection_threshold"))
            m_gcThreshold->setValue(value.toDouble());
        else if (key == QLatin1String("roundup_power2_divisions"))
            m_roundup->setCurrentIndex(std::max(0, m_roundup->findData(value.toInt())));
    }
    m_settingScenario = false;
}

void WhatIfPanel::resetKnobs()
{
    setScenario(Scenario{});
    m_ranks->setValue(8);
    // The answer goes with the knobs: the chart shows the run as recorded again.
    setTrace(m_trace, m_device);
}

bool WhatIfPanel::predictedStack() const { return m_stackBox->isChecked(); }

void WhatIfPanel::knobChanged()
{
    if (m_settingScenario || !m_live || !m_trace)
        return;
    m_liveTimer->start(); // restarts: a run once the knobs stop moving
}

void WhatIfPanel::updateLive()
{
    // ~100 ms: measured once a replay ran, estimated from the events before (a few million a second).
    constexpr int64_t kLiveUs = 100'000;
    constexpr size_t kLiveEvents = 300'000;
    const size_t events = m_trace && m_device < m_trace->deviceCount() ? m_trace->device(m_device).device().eventCount() : 0;
    const bool fast = m_lastReplayUs >= 0 ? m_lastReplayUs <= kLiveUs : (events > 0 && events <= kLiveEvents);
    const QSignalBlocker quiet(m_liveBox);
    m_liveBox->setEnabled(fast);
    m_liveBox->setChecked(fast);
    m_live = fast;
}

void WhatIfPanel::run()
{
    if (!m_trace || m_device >= m_trace->deviceCount())
        return;
    const Scenario s = scenario();
    if (const std::string problem = s.validate(); !problem.empty()) {
        m_verdict->setText(QString::fromStdString(problem));
        emit failed(QString::fromStdString(problem));
        return;
    }
    cancelJob();
    const quint64 id = ++m_jobId;
    auto cancel = std::make_shared<std::atomic<bool>>(false);
    m_cancel = cancel;
    auto* watcher = new QFutureWatcher<Outcome>(this);
    m_watcher = watcher;
    connect(watcher, &QFutureWatcher<Outcome>::finished, this, [this, id, watcher] { jobFinished(id, watcher); });
    auto trace = m_trace;
    const size_t device = m_device;
    watcher->setFuture(QtConcurrent::run([trace, device, s, cancel]() -> Outcome {
        Outcome o;
        try {
            const DeviceDocument& dev = trace->device(device);
            WhatIfOptions options;
            options.keepSeries = true; // the chart draws the predicted run
            options.keepPoolSeries = dev.device().eventCount() <= kPoolSeriesEvents;
            options.cancel = cancel.get();
            // The document builds the model once per device and keeps it for every later question.
            o.result = std::make_shared<const WhatIfResult>(runWhatIf(trace->trace(), dev.device(), *dev.traceModel(), s, options));
        } catch (const std::exception& e) {
            o.error = QString::fromStdString(e.what());
        }
        return o;
    }));
    m_verdict->setText(tr("Replaying %1 events...").arg(m_trace->device(m_device).device().eventCount()));
    setRunning(true);
}

void WhatIfPanel::jobFinished(quint64 id, QFutureWatcher<Outcome>* watcher)
{
    watcher->deleteLater();
    if (watcher == m_watcher)
        m_watcher = nullptr;
    if (id != m_jobId)
        return; // stale: a newer run or another trace took over
    setRunning(false);
    const Outcome o = watcher->result();
    if (!o.error.isEmpty()) {
        m_verdict->setText(tr("The prediction failed: %1").arg(o.error));
        emit failed(o.error);
        return;
    }
    if (!o.result || o.result->cancelled)
        return;
    m_result = o.result;
    const bool wasLive = m_live;
    m_lastReplayUs = m_result->replayUs;
    if (m_lastReplayUs > 100'000 && wasLive) // slower than it looked: back to Predict
        updateLive();
    showResult();
    emit predictionChanged(m_result);
    emit finished();
}

void WhatIfPanel::showResult()
{
    const WhatIfResult& r = *m_result;
    m_model->setResult(m_result);
    QString verdict = QStringLiteral("<b>%1</b>: ").arg(QString::fromStdString(r.scenario.describe()).toHtmlEscaped());
    if (!r.capacity) {
        verdict += hasPeakRange(r)
                       ? tr("peak allocated %1, peak reserved %2 (%3 over the same guess); no capacity known (no OOM recorded): "
                            "enter one to judge the fit.")
                             .arg(predictedPeakText(r).toHtmlEscaped(), bytesText(r.peakReserved), reservedRangeText(r))
                       : tr("peak %1 allocated, %2 reserved; no capacity known (no OOM recorded): enter one to judge the fit.")
                             .arg(bytesText(r.peakAllocated), bytesText(r.peakReserved));
    } else if (r.oom) {
        verdict += tr("<span style='color:#b00020'>OOM</span> at %1: event %2 tried to allocate %3 with %4 allocated.")
                       .arg(bytesText(*r.capacity))
                       .arg(r.oom->index)
                       .arg(bytesText(r.oom->wantedBytes), bytesText(r.oom->allocated));
    } else if (!r.fits()) {
        verdict += tr("<span style='color:#b00020'>does not fit</span> in %1: %2 over at the reserved peak (%3).")
                       .arg(bytesText(*r.capacity), bytesText(r.overCapacity()), bytesText(r.peakReserved));
    } else {
        verdict += tr("<span style='color:#1b5e20'>fits</span> in %1 with %2 to spare at the reserved peak.")
                       .arg(bytesText(*r.capacity), bytesText(*r.capacity - r.peakReserved));
    }
    // With a capacity the fit is the sentence; the peak with its range still says how sure it is.
    // And the reserved peak's range and the fit at each end: a run fits when its reserved peak does.
    if (r.capacity && hasPeakRange(r))
        verdict += tr("<br>Peak allocated %1; peak reserved %2 over the same guess.<br>%3")
                       .arg(predictedPeakText(r).toHtmlEscaped(), reservedRangeText(r), fitRangeSentence(r).toHtmlEscaped());
    auto phase = [](Phase p) { return QString::fromUtf8(phaseName(p).data()).replace('_', ' '); };
    verdict += tr("<br>Peak at event %1 (%2); recorded at event %3 (%4).")
                   .arg(r.peakAt)
                   .arg(phase(r.peakPhase))
                   .arg(r.recordedPeakAt)
                   .arg(phase(r.recordedPeakPhase));
    m_verdict->setText(verdict);
    QStringList notes;
    if (hasPeakRange(r))
        notes << peakRangeExplanation(r);
    if (!r.recompute.empty())
        notes << tr("Recompute: %1").arg(QString::fromStdString(r.recompute));
    notes << tr("Reserved but unallocated at the reserved peak: %1").arg(bytesText(r.fragmentation()));
    notes << tr("Allocator: %1").arg(QString::fromStdString(r.allocatorBaseline));
    if (r.allocatorChanged)
        notes << tr("Replayed with: %1 (the dashed line is its reserved bytes)").arg(QString::fromStdString(r.allocatorReplayed));
    if (r.oom && r.capacity && r.oom->requestedLive + r.oom->requested > *r.capacity)
        notes << tr("Allocated alone (%1 alive + the %2 request) is over the capacity: no allocator setting helps")
                     .arg(bytesText(r.oom->requestedLive), bytesText(r.oom->requested));
    if (r.fragmentationDetail.known)
        for (const QString& line : QString::fromStdString(fragmentationText(r.fragmentationDetail, "")).split('\n', Qt::SkipEmptyParts))
            notes << line;
    if (r.identity)
        notes << tr("Replay check: allocated equal after %1 of %2 events; reserved after %3 of %4")
                     .arg(r.events - r.allocatedMismatches)
                     .arg(r.events)
                     .arg(r.reservedMatches)
                     .arg(r.reservedCompared);
    for (const auto& n : r.notes)
        notes << QStringLiteral("- ") + QString::fromStdString(n);
    m_notes->setPlainText(notes.join('\n'));
}

void WhatIfPanel::cancelJob()
{
    ++m_jobId; // whatever is running is stale now
    if (m_cancel)
        m_cancel->store(true);
    m_cancel.reset();
}

void WhatIfPanel::setRunning(bool running)
{
    if (running == m_running)
        return;
    m_running = running;
    m_runButton->setText(running ? tr("Predicting...") : tr("Predict"));
    emit runningChanged(running);
}

} // namespace poolscope
