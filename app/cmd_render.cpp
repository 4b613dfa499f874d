// `poolscope render`: the review image without a display (offscreen Qt platform).
#include "app/args.h"
#include "app/commands.h"
#include "app/whatif_args.h"

#include "app/rules_config.h"

#include "core/compare/compare_documents.h"
#include "core/report/report.h"
#include "core/timeline/moment.h"
#include "core/util/atomic_file.h"
#include "core/sites/site_key.h"
#include "core/util/units.h"
#include "widgets/compare_view.h"
#include "widgets/main_window.h"
#include "widgets/review_image.h"
#include "widgets/timeline_plot.h"
#include "widgets/whatif_review.h"

#include <QApplication>
#include <QFileInfo>
#include <QSaveFile>
#include <QSettings>
#include <QTemporaryDir>

#include <cstdlib>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>
#include <iostream>
#include <memory>
#include <algorithm>
#include <stdexcept>
#include <unordered_map>

namespace poolscope::app {
namespace {

// A usable XDG_RUNTIME_DIR: a directory of ours that only we can enter. Qt's QStandardPaths asks for
// it while the platform starts and warns on stderr when it is missing or open to others (a batch
// job, a container, CI): noise on every `render`, which writes no runtime file at all.
bool usableRuntimeDir(const char* dir)
{
    struct stat st {};
    return dir && *dir && ::stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 0777) == 0700;
}

// Qt needs a platform even to paint into an image; offscreen needs no display.
std::unique_ptr<QApplication> paintingApplication()
{
    if (!std::getenv("QT_QPA_PLATFORM") && !std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY"))
        setenv("QT_QPA_PLATFORM", "offscreen", 1);
    if (!usableRuntimeDir(std::getenv("XDG_RUNTIME_DIR"))) {
        // A private folder for this process (mkdtemp makes it 0700), removed when it exits.
        static std::string dir = (std::filesystem::temp_directory_path() / "poolscope-runtime-XXXXXX").string();
        if (::mkdtemp(dir.data())) {
            setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
            std::atexit([] {
                std::error_code ec;
                std::filesystem::remove_all(dir, ec);
            });
        }
    }
    static int argc = 1;
    static char name[] = "poolscope";
    static char* argv[] = {name, nullptr};
    return std::make_unique<QApplication>(argc, argv);
}

std::optional<QSize> parseSize(const std::string& text)
{
    const auto x = text.find('x');
    try {
        if (x != std::string::npos) {
            size_t used = 0, usedH = 0;
            const int w = std::stoi(text.substr(0, x), &used);
            const int h = std::stoi(text.substr(x + 1), &usedH);
            if (used == x && x + 1 + usedH == text.size() && w >= 320 && h >= 240 && w <= 8000 && h <= 8000)
                return QSize(w, h);
        }
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

// The whole desktop window at the moment, as a user would see it (docs, bug reports). Settings go to a
// throw-away folder so that neither the user's saved layout shapes the picture nor the picture the layout.
int renderWindow(std::shared_ptr<const Document> doc, const QString& path, size_t device, EventIndex event,
                 QSize size, const QString& outPath, int64_t capacity)
{
    QTemporaryDir settings;
    QSettings::setDefaultFormat(QSettings::IniFormat);
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings.path());
    MainWindow w;
    w.resize(size);
    w.show();
    QCoreApplication::processEvents(); // the first-show layout (dock sizes) settles before the picture
    w.setDocument(std::move(doc), path);
    w.selectDevice(device);
    if (capacity >= 0)
        w.setCapacity(capacity, {});
    w.setCursorEvent(event);
    w.flushPanels();
    QCoreApplication::processEvents();
    w.flushPanels();
    // The panels' last texts ask for their height (a posted layout request), and the answer resizes
    // what lies below them: settle both rounds, or the picture shows a verdict squeezed to two lines
    // that the open window shows whole a moment later.
    for (int round = 0; round < 3; ++round)
        QCoreApplication::processEvents();
    QSaveFile file(outPath); // renamed into place on commit: never a half-written screenshot
    if (!file.open(QIODevice::WriteOnly) || !w.grab().save(&file, "PNG") || !file.commit())
        throw WriteError("could not write " + outPath.toStdString() + ": " + file.errorString().toStdString());
    std::cout << "wrote " << outPath.toStdString() << " (window, event " << event << ")\n";
    return 0;
}

// render --by-site: the call sites holding the most bytes at the moment, as rows under the
// breakdown (the first user frame, as `report` names it; long paths shortened from the left).
void appendTopSites(ReviewContent& content, const DeviceDocument& dev, EventIndex at)
{
    const SiteNames names(dev.trace());
    std::unordered_map<SiteKey, int64_t> bytes;
    int64_t total = 0;
    for (AllocId id : dev.alive().aliveAfter(at)) {
        const Allocation& a = dev.device().allocations[id.value];
        bytes[names.key(a)] += a.size;
        total += a.size;
    }
    std::vector<std::pair<int64_t, SiteKey>> order;
    for (const auto& [k, b] : bytes)
        order.emplace_back(b, k);
    std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first != y.first ? x.first > y.first : x.second < y.second; });
    content.rows.append(QStringList{QString(), QString(), QString()});
    content.rows.append(QStringList{QObject::tr("top call sites"), QString(), QString()});
    for (size_t k = 0; k < order.size() && k < 6; ++k) {
        QString label = QString::fromStdString(names.label(order[k].second));
        if (label.size() > 46)
            label = QStringLiteral("…") + label.right(45);
        content.rows.append(QStringList{label, QString::fromStdString(formatBytes(order[k].first)),
                                        total > 0 ? QString::number(100.0 * double(order[k].first) / double(total), 'f', 1) + QStringLiteral("%") : QString()});
    }
}

// `render A --compare B`: the comparison's review image (B's stack filled, A's as outlines on one
// aligned axis, the per-pool table, the axes and the verdict).
int renderComparison(const std::string& fileA, const std::string& fileB, const std::string& rulesFile, std::optional<int> device,
                     const std::string& at, QSize size, bool dark, const QString& outPath)
{
    std::optional<CompareMoment> moment;
    if (!at.empty() && !(moment = parseCompareMoment(at)))
        throw UsageError("--at with --compare expects peak, oom, end, forward_end, backward_end or step_end, got '" + at + "'");
    const auto docA = openDocument(fileA, rulesFile);
    const auto docB = openDocument(fileB, rulesFile);
    const DocumentComparison c = compareDevicesWithChart(docA->pickDevice(device), docB->pickDevice(device), moment);
    const auto qapp = paintingApplication();
    QString why;
    if (!saveComparisonImage(outPath, c.comparison, c.chart, size, dark, &why))
        throw WriteError(why.toStdString());
    std::cout << "wrote " << outPath.toStdString() << " (" << c.comparison.runA << " vs " << c.comparison.runB << ")\n";
    return 0;
}

CommandBody defineRender(CLI::App& app)
{
    struct State {
        std::string file, at, size = "1600x900", rulesFile, compareWith, out;
        std::optional<int> device;
        bool dark = false, indexAxis = false, window = false, whatIf = false, predictedStack = false, bySite = false;
        WhatIfKnobs knobs;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the dump (with --compare: run A)")->required();
    app.add_option("-o,--output", s->out, "the image to write: .png, .svg or .pdf")
        ->required()
        ->type_name("OUT")
        ->check(valueCheck(
            [](const std::string& v) { return reviewImageFormats().contains(QFileInfo(QString::fromStdString(v)).suffix().toLower()); },
            "OUT", "a file ending in .png, .svg or .pdf"));
    addDeviceOption(app, s->device);
    app.add_option("--at", s->at, "the moment: peak, oom, end or an event INDEX (with --compare: a paired moment; default: the OOM, else the peak)")
        ->type_name("MOMENT");
    app.add_option("--size", s->size, "the image's size in pixels")
        ->capture_default_str()
        ->check(valueCheck([](const std::string& v) { return bool(parseSize(v)); }, "WIDTHxHEIGHT",
                           "WIDTHxHEIGHT between 320x240 and 8000x8000"))
        ->type_name("WxH");
    app.add_flag("--index-axis", s->indexAxis, "events on the horizontal axis instead of wall time");
    app.add_flag("--dark", s->dark, "dark colours (for dark slides and pages)");
    auto* window = app.add_flag("--window", s->window, "a screenshot of the whole desktop window instead (PNG)");
    auto* compare = app.add_option("--compare", s->compareWith, "the comparison of FILE (A) with B instead")->type_name("B");
    addRulesOption(app, s->rulesFile);
    auto* whatIf = app.add_flag("--whatif", s->whatIf, "the predicted run under `poolscope whatif`'s knobs drawn over the recorded one");
    app.add_flag("--predicted-stack", s->predictedStack, "with --whatif: the predicted pools as a stack too")->needs(whatIf);
    addWhatIfKnobs(app, s->knobs);
    for (CLI::Option* knob : s->knobs.options)
        if (knob != s->knobs.capacityOption) // the capacity line is drawn with or without a prediction
            knob->needs(whatIf)->group("What-if knobs (with --whatif)");
    auto* bySite = app.add_flag("--by-site", s->bySite, "the top call sites at the moment under the breakdown (see report --by-site)");
    bySite->excludes(window)->excludes(whatIf)->excludes(compare);
    compare->excludes(window)->excludes(whatIf);
    whatIf->excludes(window);
    return [s] {
        std::optional<Scenario> scenario;
        if (s->whatIf)
            scenario = whatIfScenario(s->knobs);
        const QSize size = *parseSize(s->size);
        const QString outPath = QString::fromStdString(s->out);
        if (s->window && QFileInfo(outPath).suffix().toLower() != QLatin1String("png"))
            throw UsageError("--window writes a screenshot: -o must end in .png");
        int64_t capacity = s->knobs.capacity.empty() ? -1 : parseBytes(s->knobs.capacity);
        const std::vector<std::string> files{s->file};
        const std::optional<std::string> out = s->out;
        const std::string& at = s->at;
        const bool dark = s->dark, indexAxis = s->indexAxis, predictedStack = s->predictedStack;
        if (!s->compareWith.empty())
            return renderComparison(s->file, s->compareWith, s->rulesFile, s->device, at, size, dark, outPath);
        const std::string& rulesFile = s->rulesFile;
        const bool window = s->window;
        const auto doc = openDocument(files[0], rulesFile, true, /*eagerTimelines=*/true);
        const DeviceDocument& dev = doc->pickDevice(s->device);
        const size_t device = dev.index();
        std::string error;
        const auto moment = resolveMoment(dev.device(), at.empty() ? defaultMomentSpec(dev.device()) : at, &error);
        if (!moment)
            throw std::invalid_argument(error);
        if (capacity < 0)
            capacity = dev.oomCapacity();

        const auto qapp = paintingApplication();

        const QString path = QString::fromStdString(files[0]);
        if (window)
            return renderWindow(doc, path, device, std::max<EventIndex>(0, moment->event), size, outPath, capacity);

        TimelinePlot plot;
        prepareReviewPlot(plot, dev, capacity, size, dark, indexAxis);
        plot.setCursorEvent(std::max<EventIndex>(0, moment->event));
        ReviewContent content = reviewContentFor(*doc, device, plot.cursorEvent(), capacity, path, dark);
        if (scenario) {
            if (dev.device().eventCount() == 0)
                throw std::invalid_argument(files[0] + ": " + dev.label() + " has no trace events to replay (segments only)");
            WhatIfOptions options;
            options.keepPoolSeries = true;
            auto result = std::make_shared<WhatIfResult>(runWhatIf(doc->trace(), dev.device(), *dev.traceModel(), *scenario, options));
            plot.setPredictedStackVisible(predictedStack);
            plot.setPrediction(result);
            plot.setCursorEvent(std::max<EventIndex>(0, result->peakAt));
            content = whatIfReviewContent(*result, path, dark);
        }
        if (s->bySite)
            appendTopSites(content, dev, plot.cursorEvent());
        QString why;
        if (!saveReviewImage(outPath, plot, content, size, &why))
            throw WriteError(why.toStdString());
        std::cout << "wrote " << *out << " (" << dev.label() << ", " << moment->label << ")\n";
        return 0;
    };
}

const CommandRegistrar kRegister({"render",
                                  "the review image (stacked pools, breakdown, verdict) without a display; --window: a "
                                  "screenshot of the whole desktop window instead; --compare B: the comparison of FILE (A) "
                                  "with B; --whatif with `poolscope whatif`'s knobs: the predicted run drawn over the "
                                  "recorded one",
                                  defineRender});

} // namespace
} // namespace poolscope::app
