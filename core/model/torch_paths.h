#pragma once
// PyTorch's own source files, by path.
//
// The package after an installed tree decides: ".../site-packages/torch/nn/modules/module.py" is
// PyTorch's, ".../site-packages/transformers/..." is not, whatever the directories above are called
// (a capture machine with its environment in /opt/torch/.venv put "/torch/" in every installed
// package's path, and every library frame read as PyTorch's). A copy whose library paths were cut to
// the package (`poolscope redact --rename-code`: "torch/nn/modules/module.py") starts with it; a
// source checkout ("/home/u/pytorch/torch/nn/functional.py") has it as a directory. Backslashes
// (Windows) read as slashes.
#include <algorithm>
#include <string>
#include <string_view>

namespace poolscope {

// A recorded path with '/' separators: Windows captures record backslashes
// (C:\...\site-packages\torch\nn\modules\linear.py), and every path test here reads '/'.
inline std::string forwardSlashes(std::string_view file)
{
    std::string path(file);
    std::replace(path.begin(), path.end(), '\\', '/');
    return path;
}

inline bool isTorchSource(std::string_view file)
{
    const std::string path = forwardSlashes(file);
    const std::string_view p(path);
    size_t root = std::string_view::npos, rootLength = 0;
    for (std::string_view marker : {std::string_view("site-packages/"), std::string_view("dist-packages/")})
        if (const size_t at = p.rfind(marker); at != std::string_view::npos && (root == std::string_view::npos || at > root)) {
            root = at;
            rootLength = marker.size();
        }
    if (root != std::string_view::npos)
        return p.substr(root + rootLength).starts_with("torch/");
    return p.starts_with("torch/") || p.find("/torch/") != std::string_view::npos;
}

} // namespace poolscope
