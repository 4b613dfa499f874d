#include "core/classify/stack_root.h"

namespace poolscope {

bool pythonWithoutEntry(const FrameTable& frames, StackId stack)
{
    if (!stack.valid())
        return false;
    bool python = false;
    for (FrameId f : frames.stack(stack)) {
        const Frame& fr = frames.frame(f);
        const std::string& file = fr.filename;
        const bool py = file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0;
        if (!py)
            continue;
        python = true;
        if (fr.name == "<module>" || fr.name == "_bootstrap" || fr.name == "_bootstrap_inner")
            return false;
    }
    return python;
}

} // namespace poolscope
