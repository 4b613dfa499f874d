#pragma once
// What `redact --rename-code` keeps of a frame or an annotation, and the stable tokens that stand for
// the rest. Kept: PyTorch's and installed packages' code (cut to the package-relative path, so no
// home directory or user name travels with it), Python's own standard library and interpreter
// frames, and the step and phase markers PoolScope reads. Everything else is the user's program:
// each distinct file, function or annotation name gets a token ("same name, same token").
#include "core/classify/phase.h"
#include "core/model/frames.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace poolscope {

class RuleSet;

// The path of `filename` inside an installed package or a known library root, with '/' separators,
// behind a fixed marker of which root it was (readers tell library code from the user's by it):
// ".../site-packages/transformers/cache_utils.py" -> "/site-packages/transformers/cache_utils.py",
// "C:\\...\\Python310\\lib\\copy.py" -> "/lib/python3/copy.py", "/croot/python-split_1/work/Objects/call.c" ->
// "Objects/call.c", ".../pytorch/torch/csrc/autograd/engine.cpp" -> "torch/csrc/autograd/engine.cpp".
// nullopt: a file of the user's own program. A bare file name a native stack recorded without a
// directory ("RegisterCUDA.cpp") is library code: PyTorch's build records its own sources so.
std::optional<std::string> libraryRelativePath(std::string_view filename);

// A Python file name that Python itself writes: "<frozen runpy>", "<string>", "<eval_with_key>.3".
bool isInterpreterPseudoFile(std::string_view filename);

// A native symbol of PyTorch, CUDA, Python or the C++ runtime (kept), as opposed to a user extension's.
bool isLibrarySymbol(std::string_view symbol);

// A Python function name that says nothing about the program: dunders and Python's own "<module>",
// "<lambda>", "<listcomp>"...
bool isNeutralFunctionName(std::string_view name);

// Numbers the user's names in order of first sight; one instance per redaction.
class CodeTokens {
public:
    // `markers`: the annotation patterns that name phases (RuleSet::annotationPatterns); kept alive by the caller.
    explicit CodeTokens(const RuleSet& markers) : m_markers(markers) {}

    std::string file(const std::string& originalPath, std::string_view extension);
    std::string function(const std::string& original);
    std::string symbol(const std::string& original);
    std::string annotation(const std::string& original, std::string_view prefix);
    std::string optimizerClass(const std::string& original);

    // A frame with its user parts replaced; library frames come back cut to their package path.
    Frame renameFrame(const Frame& frame);
    // An annotation name: ProfilerStep#N, the capture helper's poolscope::forward/backward/... scopes
    // and PyTorch's Optimizer.step#/zero_grad# markers of torch.optim's classes stay (a class of the
    // user's own becomes "Optimizer1"); another marker the rules read as a phase becomes that phase's name
    // and a token ("forward#2"), so its window still opens that phase; the rest become "annotation#N".
    std::string renameAnnotation(const std::string& name);
    // A Kineto operator name: PyTorch's operators, kernels, runtime calls and autograd nodes
    // ("aten::mm", "ReluBackward1") stay; a record_function of the user's is an annotation.
    std::string renameOperator(const std::string& name);

private:
    const RuleSet& m_markers;
    std::map<std::string, std::string, std::less<>> m_files, m_functions, m_symbols, m_annotations, m_optimizers;
};

} // namespace poolscope
