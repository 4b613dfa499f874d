#include "app/terminal_progress.h"

#include "core/util/units.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unistd.h>

namespace poolscope::app {
namespace {

std::mutex& drawLock()
{
    static std::mutex m;
    return m;
}

const char* stageWords(int stage)
{
    switch (LoadStage(stage)) {
    case LoadStage::Reading: return "reading";
    case LoadStage::Decompressing: return "decompressing";
    case LoadStage::Parsing: return "parsing";
    case LoadStage::Building: return "building the model";
    case LoadStage::Done: return "classifying pools";
    }
    return "loading";
}

} // namespace

bool TerminalProgress::stderrIsTerminal()
{
    if (const char* force = std::getenv("POOLSCOPE_PROGRESS"); force && *force)
        return force[0] == '1';
    return isatty(STDERR_FILENO) != 0;
}

TerminalProgress::TerminalProgress(std::string label) : m_label(std::move(label)), m_enabled(stderrIsTerminal())
{
    if (!m_enabled)
        return;
    if (const char* force = std::getenv("POOLSCOPE_PROGRESS"); force && force[0] == '1')
        draw(m_label + ": starting"); // asked for: say so at once, however fast the load turns out
    m_ticker = std::thread([this] {
        // Quiet for the first half second: a small dump loads before a line would be worth reading
        // (unless POOLSCOPE_PROGRESS=1 asked for the line, as tests do).
        const char* force = std::getenv("POOLSCOPE_PROGRESS");
        const int quietTicks = force && force[0] == '1' ? 0 : 5;
        for (int tick = 0; !m_stop.load(); ++tick) {
            std::this_thread::sleep_for(std::chrono::milliseconds(tick == 0 && quietTicks == 0 ? 1 : 100));
            if (tick < quietTicks || m_custom.load() || m_stop.load())
                continue;
            const int64_t done = m_progress.bytesDone.load(), total = m_progress.bytesTotal.load();
            std::string text = m_label + ": " + stageWords(m_progress.stage.load());
            if (total > 0 && m_progress.stage.load() < int(LoadStage::Building))
                text += " " + std::to_string(int(100.0 * double(done) / double(total))) + "% of " + formatBytes(total);
            draw(text);
        }
    });
}

TerminalProgress::~TerminalProgress()
{
    m_stop = true;
    if (m_ticker.joinable())
        m_ticker.join();
    if (m_enabled && m_width > 0) {
        std::lock_guard lock(drawLock());
        std::fprintf(stderr, "\r%s\r", std::string(m_width, ' ').c_str());
        std::fflush(stderr);
    }
}

void TerminalProgress::show(const std::string& text)
{
    if (!m_enabled)
        return;
    m_custom = true;
    draw(m_label + ": " + text);
}

void TerminalProgress::draw(const std::string& text)
{
    std::lock_guard lock(drawLock());
    const size_t width = std::min<size_t>(text.size(), 120);
    std::fprintf(stderr, "\r%s%s", text.substr(0, width).c_str(), m_width > width ? std::string(m_width - width, ' ').c_str() : "");
    std::fflush(stderr);
    m_width = std::max(m_width, width);
}

} // namespace poolscope::app
