#include "core/redact/code_names.h"

#include "core/classify/rules.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <regex>
#include <vector>

namespace poolscope {
namespace {

std::string slashes(std::string_view path)
{
    std::string s(path);
    std::replace(s.begin(), s.end(), '\\', '/');
    return s;
}

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char& c : out)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool endsWith(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

std::vector<std::string_view> segments(std::string_view path)
{
    std::vector<std::string_view> out;
    size_t pos = 0;
    while (pos <= path.size()) {
        const size_t slash = std::min(path.find('/', pos), path.size());
        out.push_back(path.substr(pos, slash - pos));
        pos = slash + 1;
    }
    return out;
}

std::string join(const std::vector<std::string_view>& parts, size_t from)
{
    std::string out;
    for (size_t i = from; i < parts.size(); ++i) {
        if (parts[i].empty())
            continue;
        if (!out.empty())
            out += '/';
        out += parts[i];
    }
    return out;
}

bool isNativeSource(std::string_view file)
{
    for (std::string_view ext : {".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".cu", ".cuh", ".inl", ".S"})
        if (endsWith(file, ext))
            return true;
    return false;
}

// A Python install's own folder ("python3.10", "Python310", "cpython-3.10.19-windows-x86_64-none",
// a conda source tree "python-3.12.7" or build "python-split_1728047642222").
bool isPythonDir(std::string_view segment)
{
    static const std::regex kPythonDir(R"(^(python[0-9][0-9.]*|python-[0-9][0-9.]*|python-split_[0-9]+|cpython-[0-9].*|pypy[0-9.]*)$)");
    const std::string s = lower(segment);
    return std::regex_match(s, kPythonDir);
}

std::string extensionOf(std::string_view file)
{
    const size_t slash = file.find_last_of("/\\");
    const size_t dot = file.rfind('.');
    if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash))
        return {};
    std::string ext(file.substr(dot));
    // Only an extension that names a language travels; anything else could be a user's word.
    for (std::string_view known : {".py", ".pyw", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".cu", ".cuh"})
        if (ext == known)
            return ext;
    return {};
}

// torch.optim's classes and the optimizers of well-known packages: PyTorch writes their class into
// "Optimizer.step#AdamW.step"; a class of the user's own is their word.
constexpr std::array kLibraryOptimizers = {"SGD",       "Adam",       "AdamW",     "Adamax",          "Adagrad",   "Adadelta",
                                           "RMSprop",   "Rprop",      "NAdam",     "RAdam",           "LBFGS",     "SparseAdam",
                                           "ASGD",      "Adafactor",  "FusedAdam", "FusedLAMB",       "FusedSGD",  "DeepSpeedCPUAdam",
                                           "AdamW8bit", "PagedAdamW", "Lion",      "ZeroRedundancyOptimizer"};

} // namespace

bool isInterpreterPseudoFile(std::string_view file)
{
    static const std::regex kPseudo(R"(^<(frozen [A-Za-z0-9_.]+|string|stdin|eval_with_key>\.\d+|op)>?$)");
    return !file.empty() && file.front() == '<' && std::regex_match(file.begin(), file.end(), kPseudo);
}

std::optional<std::string> libraryRelativePath(std::string_view filename)
{
    const std::string path = slashes(filename);
    if (path.empty() || path == "??")
        return path;
    if (isInterpreterPseudoFile(path))
        return path;
    const auto parts = segments(path);
    // Installed packages: the last site-packages / dist-packages wins (a venv inside a conda env).
    for (size_t i = parts.size(); i-- > 0;)
        if (parts[i] == "site-packages" || parts[i] == "dist-packages")
            return i + 1 < parts.size() ? std::optional("/site-packages/" + join(parts, i + 1)) : std::nullopt;
    // Python's standard library: <prefix>/lib/python3.X/..., <Python310>/Lib/..., cpython-*/lib/...
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const std::string seg = lower(parts[i]);
        if ((seg == "lib" || seg == "lib64") && isPythonDir(parts[i + 1]) && i + 2 < parts.size())
            return "/lib/python3/" + join(parts, i + 2);
        if ((seg == "lib" || seg == "lib64") && i > 0 && isPythonDir(parts[i - 1]))
            return "/lib/python3/" + join(parts, i + 1);
    }
    // A conda environment on Windows keeps its standard library in <env>\Lib\ (capital L, as Windows
    // installs write it), beside Lib\site-packages, with no Python directory above it.
    if (parts.size() > 2 && parts[0].size() == 2 && parts[0][1] == ':')
        for (size_t i = 1; i + 1 < parts.size(); ++i)
            if (parts[i] == "Lib")
                return "/lib/python3/" + join(parts, i + 1);
    if (isNativeSource(path)) {
        // PyTorch's sources wherever it was built, CPython's wherever conda built it.
        for (size_t i = 0; i < parts.size(); ++i) {
            if ((parts[i] == "torch" && i + 1 < parts.size() && parts[i + 1] == "csrc") || parts[i] == "aten" || parts[i] == "c10" ||
                parts[i] == "caffe2")
                return join(parts, i);
            if (isPythonDir(parts[i]) || parts[i] == "build-static")
                for (size_t j = i + 1; j < parts.size(); ++j)
                    if (parts[j] == "Objects" || parts[j] == "Python" || parts[j] == "Modules" || parts[j] == "Include" ||
                        parts[j] == "Parser")
                        return join(parts, j);
        }
        if (parts.size() == 1)
            return path; // a bare name: PyTorch's build records its own sources so
        return std::nullopt;
    }
    // A torch tree outside site-packages (a source checkout, an editable install): from torch/ on, when
    // what follows is one of PyTorch's own packages (a user's folder named "torch" is not enough).
    static const std::regex kTorchEntry(
        R"(^(nn|optim|autograd|utils|cuda|_dynamo|_inductor|distributed|amp|fx|_functorch|func|jit|export|profiler|backends|_prims|_refs|_decomp|_subclasses|_higher_order_ops|ao|sparse|nested|multiprocessing|compiler|_library|_logging|[A-Za-z_]+\.py)$)");
    for (size_t i = parts.size(); i-- > 0;)
        if (parts[i] == "torch" && i + 1 < parts.size() && endsWith(path, ".py") && std::regex_match(std::string(parts[i + 1]), kTorchEntry))
            return "/site-packages/" + join(parts, i);
    return std::nullopt;
}

bool isLibrarySymbol(std::string_view s)
{
    if (s.empty() || s == "??")
        return true;
    for (std::string_view ns : {"c10::", "at::", "torch::", "caffe2::", "std::", "__gnu_cxx::", "pybind11::", "cudnn", "cublas",
                                "nccl", "autograd::", "THP", "(anonymous namespace)::"})
        if (s.find(ns) != std::string_view::npos)
            return true;
    for (std::string_view p : {"_Py", "Py", "_start", "__libc", "__clone", "start_thread", "main", "cuda", "cuMem", "cuLaunch",
                               "_object", "method_vectorcall", "cfunction_", "slot_tp_", "vectorcall", "call_function",
                               "function_code", "do_call_core", "pymain", "0x"})
        if (startsWith(s, p))
            return true;
    // CPython's own C functions without a Py prefix: its deallocators (tb_dealloc is what frees the
    // tensors an OOM's traceback held, which the classifier reads) and its operator slots. Exact
    // names, so that a user's C extension function stays renamed.
    for (std::string_view n : {"tb_dealloc", "frame_dealloc", "subtype_dealloc", "func_dealloc", "cell_dealloc", "list_dealloc",
                               "dict_dealloc", "tupledealloc", "gen_dealloc", "meth_dealloc", "method_dealloc", "code_dealloc",
                               "object_dealloc", "gen_iternext", "gen_send_ex", "gen_send_ex2"})
        if (s == n)
            return true;
    for (std::string_view p : {"slot_nb_", "slot_sq_", "slot_mp_"})
        if (startsWith(s, p))
            return true;
    return false;
}

bool isNeutralFunctionName(std::string_view name)
{
    if (name.size() > 4 && startsWith(name, "__") && endsWith(name, "__"))
        return true;
    for (std::string_view n : {"<module>", "<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
        if (name == n)
            return true;
    return false;
}

namespace {
std::string numbered(std::map<std::string, std::string, std::less<>>& table, const std::string& key, const std::string& stem,
                     std::string_view suffix)
{
    auto it = table.find(key);
    if (it != table.end())
        return it->second;
    std::string token = stem + std::to_string(table.size() + 1) + std::string(suffix);
    table.emplace(key, token);
    return token;
}
} // namespace

std::string CodeTokens::file(const std::string& originalPath, std::string_view extension)
{
    return numbered(m_files, slashes(originalPath), "user/file", extension);
}

std::string CodeTokens::function(const std::string& original) { return numbered(m_functions, original, "fn", ""); }
std::string CodeTokens::symbol(const std::string& original) { return numbered(m_symbols, original, "native_fn", ""); }
std::string CodeTokens::optimizerClass(const std::string& original) { return numbered(m_optimizers, original, "Optimizer", ""); }

std::string CodeTokens::annotation(const std::string& original, std::string_view prefix)
{
    auto it = m_annotations.find(original);
    if (it != m_annotations.end())
        return it->second;
    std::string token = std::string(prefix) + "#" + std::to_string(m_annotations.size() + 1);
    m_annotations.emplace(original, token);
    return token;
}

Frame CodeTokens::renameFrame(const Frame& frame)
{
    Frame out = frame;
    if (frame.filename == "<op>") { // Kineto's operators (core/formats/kineto.cpp)
        out.name = renameOperator(frame.name);
        return out;
    }
    if (auto lib = libraryRelativePath(frame.filename)) {
        out.filename = *lib;
        // Library code keeps its function names; a native frame with no file keeps a library symbol only.
        if ((lib->empty() || *lib == "??") && !isLibrarySymbol(frame.name))
            out.name = symbol(frame.name);
        return out;
    }
    out.filename = file(frame.filename, extensionOf(frame.filename));
    if (!isNeutralFunctionName(frame.name))
        out.name = isNativeSource(frame.filename) || !frame.isPython() ? symbol(frame.name) : function(frame.name);
    return out;
}

std::string CodeTokens::renameOperator(const std::string& name)
{
    static const std::regex kPyTorchOp(R"(^([A-Z][A-Za-z0-9]*Backward[0-9]*|aten::.*|prim::.*|c10d::.*|autograd::.*|cuda[A-Z].*|cu[A-Z].*|Memset .*|Memcpy .*|void .*|volta_.*|ampere_.*|sm[0-9]+_.*|enumerate\(DataLoader\)#_(SingleProcess|MultiProcessing)DataLoaderIter\.__next__|Optimizer\.(step|zero_grad)#.*)$)");
    if (isLibrarySymbol(name) || std::regex_match(name, kPyTorchOp))
        return startsWith(name, "Optimizer.") ? renameAnnotation(name) : name;
    return renameAnnotation(name);
}

std::string CodeTokens::renameAnnotation(const std::string& name)
{
    const RuleSet& markers = m_markers;
    // ProfilerStep#N (torch.profiler) and the capture helper's own scopes (resources/capture) are markers, not the user's words.
    static const std::regex kStep(
        R"(^(ProfilerStep#\d+|poolscope::(forward|backward|optimizer_step|zero_grad|unit)|enumerate\(DataLoader\)#_(SingleProcess|MultiProcessing)DataLoaderIter\.__next__)$)");
    static const std::regex kOptimizer(R"(^Optimizer\.(step|zero_grad)#([A-Za-z_][A-Za-z0-9_]*)\.(step|zero_grad)$)");
    if (std::regex_match(name, kStep))
        return name;
    std::smatch m;
    if (std::regex_match(name, m, kOptimizer)) {
        const std::string cls = m[2].str();
        const bool library = std::find(kLibraryOptimizers.begin(), kLibraryOptimizers.end(), cls) != kLibraryOptimizers.end();
        const std::string kept = library ? cls : optimizerClass(cls);
        return "Optimizer." + m[1].str() + "#" + kept + "." + m[3].str();
    }
    // A marker the rules read as a phase: the phase's own name opens the same window, and a token
    // keeps distinct markers distinct (windows pair START and END by name).
    auto phaseOf = [&](std::string_view text) -> std::optional<Phase> {
        for (const auto& a : markers.annotationPatterns())
            if (a.regex >= 0 && size_t(a.regex) < markers.regexes().size() && markers.regexes()[size_t(a.regex)].search(text))
                return a.phase;
        return std::nullopt;
    };
    if (auto phase = phaseOf(name)) {
        const std::string renamed = annotation(name, phaseName(*phase));
        if (phaseOf(renamed) == phase)
            return renamed;
    }
    return annotation(name, "annotation");
}

} // namespace poolscope
