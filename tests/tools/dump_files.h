#pragma once
// The dumps a developer tool reads: the files given, every dump in the folders given, or with none
// the corpus folder (../shared/corpus: README.md and expected.json are not dumps). Sorted by path.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace poolscope::tools {

inline bool isDump(const std::filesystem::path& p)
{
    const std::string name = p.filename().string();
    return std::filesystem::is_regular_file(p) && name != "expected.json" && name != "README.md" && name.front() != '.';
}

// Nothing where an input does not exist (the error, naming `tool`, is on stderr).
inline std::optional<std::vector<std::filesystem::path>> dumpFiles(std::vector<std::filesystem::path> inputs, const char* tool)
{
    namespace fs = std::filesystem;
    if (inputs.empty())
        inputs.emplace_back(POOLSCOPE_CORPUS_DIR);
    std::vector<fs::path> files;
    for (const fs::path& in : inputs) {
        if (fs::is_directory(in)) {
            for (const auto& e : fs::directory_iterator(in))
                if (isDump(e.path()))
                    files.push_back(e.path());
        } else if (fs::exists(in)) {
            files.push_back(in);
        } else {
            std::cerr << tool << ": " << in.string() << ": no such file or directory\n";
            return std::nullopt;
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

} // namespace poolscope::tools
