#pragma once
#include "core/formats/py_value.h"
#include "core/load.h"

#include <span>
#include <string>

namespace poolscope {

// A pickle reader that builds data and executes nothing. Protocols 0-5; every opcode that would
// import or call (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, NEWOBJ, NEWOBJ_EX, INST, OBJ, PERSID,
// BINPERSID, EXT1/2/4) is refused with LoadError{CodeExecution}. Memo entries are shared, not copied.
struct PickleResult {
    PyValue root;
    int protocol = 0;
    int64_t stopOffset = 0; // bytes after STOP (e.g. NUL padding in memory_viz HTML) are ignored
};

class InputBuffer;

// `source`, when given, is the buffer `bytes` lies in: the reader tells it which bytes it is done with.
PickleResult runPickle(std::span<const uint8_t> bytes, const std::string& name, ValueArena& arena, ListSink* sink,
                       const LoadOptions& options, Progress* progress, const InputBuffer* source = nullptr);

} // namespace poolscope
