#include "core/util/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <unistd.h>

namespace poolscope {

AtomicFile::AtomicFile(std::string path) : m_path(std::move(path))
{
    // mkstemp in the target's folder: rename() is atomic only within one file system.
    std::string pattern = m_path + ".tmp-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    const int fd = mkstemp(buf.data());
    if (fd < 0)
        throw WriteError("cannot write " + m_path + ": " + std::strerror(errno));
    ::close(fd);
    m_tmp.assign(buf.data());
    m_out.open(m_tmp, std::ios::binary | std::ios::trunc);
    if (!m_out) {
        std::remove(m_tmp.c_str());
        throw WriteError("cannot write " + m_tmp);
    }
}

AtomicFile::~AtomicFile()
{
    if (!m_committed) {
        m_out.close();
        std::remove(m_tmp.c_str());
    }
}

void AtomicFile::commit()
{
    m_out.flush();
    const bool ok = bool(m_out);
    m_out.close();
    if (!ok || m_out.fail())
        throw WriteError("writing " + m_path + " failed (disk full?); the file was left as it was");
    if (std::rename(m_tmp.c_str(), m_path.c_str()) != 0)
        throw WriteError("cannot replace " + m_path + ": " + std::strerror(errno));
    m_committed = true;
}

} // namespace poolscope
