#include "core/formats/pickle_code_opcodes.h"

namespace poolscope {

const char* codeOpcodeName(uint8_t op)
{
    switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    default: return nullptr;
    }
}

} // namespace poolscope
