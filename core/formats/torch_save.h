#pragma once
#include "core/load.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace poolscope {

// `torch.save(torch.cuda.memory._snapshot(), "snap.pt")` writes a zip archive (PyTorch's
// PyTorchStreamWriter): <name>/data.pkl holds the object pickled (protocol 2), beside <name>/version,
// <name>/byteorder and the storages a tensor would need (a snapshot dict has none). Returns data.pkl,
// found through the archive's central directory (zip64 included): a view into `zip` where it is
// stored, as PyTorch writes it, with `dataOffset` its offset in the archive; or, where a tool repacked
// the archive with deflate, inflated into `inflated` (bounded by the size the directory declares and
// deflate's 1032:1) with `dataOffset` -1. `storages`, where given, is set to the number of tensor
// storages the archive holds ("<name>/data/<key>" records: none in a snapshot, many in a model or a
// checkpoint). Throws LoadError naming the byte offset: UnknownFormat where the archive holds no
// data.pkl (listing what it holds), Truncated or Malformed where its records are cut or inconsistent,
// UnsupportedVersion for a compression other than stored or deflate.
std::span<const uint8_t> torchSaveDataPickle(std::span<const uint8_t> zip, const std::string& nameForErrors, std::vector<uint8_t>& inflated,
                                             int64_t& dataOffset, size_t* storages = nullptr);

// torch.save's format before PyTorch 1.6 (`_use_new_zipfile_serialization=False`): pickles one after
// the other, the magic number 0x1950a86a20f9469cfc6c, the protocol version 1001, a dict of the
// writer's type sizes, the object, then the storage keys. Whether `bytes` starts with that magic.
bool isLegacyTorchSave(std::span<const uint8_t> bytes);
// The offset of the object's pickle: past the magic and the next two pickles, read with the same
// reader (executing nothing). Throws LoadError naming the byte where one of them is damaged.
size_t legacyTorchSaveObjectOffset(std::span<const uint8_t> bytes, const std::string& nameForErrors, const LoadOptions& options);

} // namespace poolscope
