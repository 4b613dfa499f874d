#pragma once
// Private to core/classify: whether a stack's Python frames reach the program's entry.
#include "core/model/trace.h"

namespace poolscope {

// A Python stack is gathered from the thread that allocated. The program's own threads reach its
// entry (a `<module>` frame: the script, `python -m`, a notebook cell) or threading's bootstrap
// (a Python thread); code the autograd engine calls back on its device thread (a gradient hook of
// DeepSpeed, FSDP or DDP, a user's register_hook) has only the hook's own frames, no entry. Such an
// event runs inside the pass that called it, not in the training loop's code after it.
// True when the stack holds a Python frame and none of them is an entry.
bool pythonWithoutEntry(const FrameTable& frames, StackId stack);

} // namespace poolscope
