#pragma once
// The pickle opcodes that import, call or look up code (GLOBAL, REDUCE, BUILD, NEWOBJ, persistent
// ids, the extension registry): a snapshot holds only dicts, lists, strings and numbers, so the
// reader refuses each of them, by name (core/formats/pickle_vm.cpp).
#include <cstdint>

namespace poolscope {

// The opcode's name where it would run code; nullptr for every other byte.
const char* codeOpcodeName(uint8_t op);

} // namespace poolscope
