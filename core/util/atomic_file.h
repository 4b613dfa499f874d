#pragma once
#include <fstream>
#include <stdexcept>
#include <string>

namespace poolscope {

// The output could not be written (folder missing, permission, disk full): the user's to fix, not a bug.
struct WriteError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Writes a file so that readers only ever see the old content or the complete new one: the bytes go
// to a temporary file beside the target, which replaces the target by rename() on commit(). A writer
// that fails or is abandoned (exception, crash before commit) leaves the target untouched and, unless
// the process died, no temporary behind.
class AtomicFile {
public:
    explicit AtomicFile(std::string path); // throws WriteError naming the file when it cannot create the temporary
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    std::ostream& stream() { return m_out; }
    // Flushes, checks every write succeeded, and renames over the target; throws WriteError on failure (the
    // target is then unchanged).
    void commit();
    const std::string& temporaryPath() const { return m_tmp; }

private:
    std::string m_path;
    std::string m_tmp;
    std::ofstream m_out;
    bool m_committed = false;
};

} // namespace poolscope
