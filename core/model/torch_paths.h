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
#include <optional>
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

// The path inside an installed tree, from the package on ("timm/layers/mlp.py"): after the last
// site-packages/ or dist-packages/ (a venv inside a conda env). nullopt outside one.
inline std::optional<std::string> installedPackagePath(std::string_view file)
{
    const std::string path = forwardSlashes(file);
    size_t from = std::string::npos;
    for (std::string_view marker : {std::string_view("site-packages/"), std::string_view("dist-packages/")})
        if (const size_t at = path.rfind(marker); at != std::string::npos && (from == std::string::npos || at + marker.size() > from))
            from = at + marker.size();
    if (from == std::string::npos)
        return std::nullopt;
    return path.substr(from);
}

inline bool isTorchSource(std::string_view file)
{
    if (const auto inPackage = installedPackagePath(file))
        return inPackage->starts_with("torch/");
    const std::string path = forwardSlashes(file);
    const std::string_view p(path);
    return p.starts_with("torch/") || p.find("/torch/") != std::string_view::npos;
}

} // namespace poolscope
