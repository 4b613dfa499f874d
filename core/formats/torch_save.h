#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace poolscope {

// `torch.save(torch.cuda.memory._snapshot(), "snap.pt")` writes a zip archive (PyTorch's
// PyTorchStreamWriter): <name>/data.pkl holds the object pickled (protocol 2), beside <name>/version,
// <name>/byteorder and the storages a tensor would need (a snapshot dict has none). Returns the bytes
// of data.pkl, read through the archive's central directory (zip64 included); entries are stored as
// PyTorch writes them, or deflated where a tool repacked the archive (bounded by the size the
// directory declares). `dataOffset` is set to data.pkl's offset in the archive where it is stored, -1
// where it was inflated. Throws LoadError naming the byte offset: UnknownFormat where the archive
// holds no data.pkl (listing what it holds), Truncated or Malformed where its records are cut or
// inconsistent, UnsupportedVersion for a compression other than stored or deflate.
std::span<const uint8_t> torchSaveDataPickle(std::span<const uint8_t> zip, const std::string& nameForErrors, std::vector<uint8_t>& inflated,
                                             int64_t& dataOffset);

} // namespace poolscope
