#include "core/formats/pickle_vm.h"
#include "core/formats/snapshot_decoder.h"
#include "core/formats/snapshot_readers.h"

namespace poolscope {

void readSnapshotPickle(std::span<const uint8_t> bytes, const std::string& name, Trace& out, const LoadOptions& options,
                        Progress& progress, const InputBuffer* source)
{
    ValueArena arena(options.memoryBudgetBytes);
    SnapshotAssembler assembler(out);
    SnapshotDecoder decoder(arena, assembler, name, /*framesListsAreUnique=*/false);
    // A trace entry takes ~150 bytes of pickle (dict of memo references, a frames list); 100 errs high,
    // which costs only address space (see expectEntries).
    decoder.expectEntries(bytes.size() / 100);
    decoder.pairWhileParsing(options.pairWhileParsing);
    decoder.readEntriesDirectly(options.readEntriesDirectly);
    arena.reserveContainers(bytes.size() / 100); // memoized frames lists stay, about one per entry
    progress.stage = int(LoadStage::Parsing);
    const PickleResult result = runPickle(bytes, name, arena, &decoder, options, &progress, source);
    progress.stage = int(LoadStage::Building);
    decoder.decodeRoot(result.root);
    assembler.finish();
    // Protocols 0 and 1 write no PROTO opcode: which of the two is not told.
    const std::string protocol = result.protocol >= 2 ? std::to_string(result.protocol) : std::string("0 or 1");
    out.formatDetail = "pickle protocol " + protocol + (out.formatDetail.empty() ? "" : ", " + out.formatDetail);
    if (result.protocol == 5)
        out.versionHints.push_back("written by Python 3.14+ (pickle protocol 5)");
    else if (result.protocol == 2)
        out.versionHints.push_back("written by PyTorch's C++ pickler (protocol 2)");
}

} // namespace poolscope
