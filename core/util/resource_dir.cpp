#include "core/util/resource_dir.h"

#include <filesystem>
#include <system_error>

namespace poolscope {
namespace fs = std::filesystem;

namespace {

// True when `path` is `dir` or lies below it, comparing whole path components.
bool isWithin(const fs::path& path, const fs::path& dir)
{
    auto d = dir.begin();
    auto p = path.begin();
    for (; d != dir.end(); ++d, ++p) {
        if (d->empty()) // a trailing separator
            continue;
        if (p == path.end() || *p != *d)
            return false;
    }
    return true;
}

fs::path normalised(const std::string& path)
{
    std::error_code ec;
    fs::path p = fs::weakly_canonical(path, ec);
    return ec ? fs::path(path).lexically_normal() : p;
}

} // namespace

std::string resolveResourcesDir(const ResourceLayout& layout)
{
    if (layout.executable.empty())
        return layout.sourceResources;
    const fs::path exe = normalised(layout.executable);
    const fs::path installed = (exe.parent_path() / layout.installedRelative).lexically_normal();
    std::error_code ec;
    if (fs::is_directory(installed, ec))
        return installed.string();
    if (!layout.buildDir.empty() && isWithin(exe, normalised(layout.buildDir)))
        return layout.sourceResources;
    return installed.string();
}

const std::string& resourcesDir()
{
    static const std::string dir = [] {
        std::error_code ec;
        const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
        return resolveResourcesDir({ec ? std::string() : exe.string(), POOLSCOPE_BUILD_DIR, POOLSCOPE_RESOURCES_DIR,
                                    POOLSCOPE_INSTALLED_RESOURCES});
    }();
    return dir;
}

std::string captureHelperPath() { return resourcesDir() + "/capture/poolscope_capture.py"; }

} // namespace poolscope
