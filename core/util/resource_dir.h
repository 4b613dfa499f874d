#pragma once
#include <string>

namespace poolscope {

// Where a binary finds its data (the default classifier rules, the capture helper). The installed
// share/poolscope mirrors the source tree's resources/ (classifier/rules.json, capture/...), so one
// relative path serves both.
struct ResourceLayout {
    std::string executable;          // this binary, absolute ("" when unknown)
    std::string buildDir;            // the build tree it was compiled in
    std::string sourceResources;     // <source>/resources
    std::string installedRelative;   // from the binary's folder to the installed data, e.g. ../share/poolscope
};

// The installed data beside the binary when it is there (also for a prefix inside the build tree);
// else the source tree's resources for a binary that runs from its build tree, so a developer's edit
// of rules.json takes effect without a rebuild; else the installed location even if it is missing
// (a moved or partial install: callers then use what is compiled in). An unknown executable means
// the source tree.
std::string resolveResourcesDir(const ResourceLayout& layout);

// The same for this process (/proc/self/exe and the paths compiled in), computed once.
const std::string& resourcesDir();

// The capture helper users copy next to their training script (resources/capture/poolscope_capture.py).
std::string captureHelperPath();

} // namespace poolscope
