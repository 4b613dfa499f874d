#pragma once
#include "core/util/progress.h"

#include <atomic>
#include <string>
#include <thread>

namespace poolscope::app {

// A progress line on stderr while a long load runs ("loading big.pickle: parsing 43% of 2.10 GiB"),
// redrawn in place a few times a second and erased when done. Only when stderr is a terminal: scripts
// and CI logs never see it. Also for counters ("ranks: 3 of 8 dumps") through show().
class TerminalProgress {
public:
    explicit TerminalProgress(std::string label);
    ~TerminalProgress(); // stops the ticker and erases the line
    TerminalProgress(const TerminalProgress&) = delete;
    TerminalProgress& operator=(const TerminalProgress&) = delete;

    Progress& progress() { return m_progress; } // polled by the ticker while a load fills it
    void show(const std::string& text);         // a line of one's own (thread-safe)
    bool enabled() const { return m_enabled; }

    // Whether stderr is a terminal; POOLSCOPE_PROGRESS=0/1 overrides (tests force it on).
    static bool stderrIsTerminal();

private:
    void draw(const std::string& text);

    std::string m_label;
    bool m_enabled;
    Progress m_progress;
    std::atomic<bool> m_stop{false};
    std::atomic<bool> m_custom{false};
    std::thread m_ticker;
    size_t m_width = 0;
};

} // namespace poolscope::app
