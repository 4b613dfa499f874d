#include "core/redact/redacted_copy.h"

#include "core/formats/gzip_output.h"
#include "core/formats/pickle_writer.h"
#include "core/formats/snapshot_readers.h"
#include "core/formats/zstd_output.h"
#include "core/load.h"
#include "core/util/atomic_file.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <system_error>

namespace poolscope {
namespace {

namespace fs = std::filesystem;

bool endsWith(const std::string& s, std::string_view p) { return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0; }

// The protocol the dump was written with ("pickle protocol 2, zstd-compressed"): a copy in the same
// protocol reads back with the same format line. 4 (what torch.save and PyTorch's dumps use) when unknown.
int sourceProtocol(const Trace& t)
{
    const std::string key = "pickle protocol ";
    const size_t at = t.formatDetail.find(key);
    if (at == std::string::npos || at + key.size() >= t.formatDetail.size())
        return 4;
    const int p = t.formatDetail[at + key.size()] - '0';
    return p >= 2 && p <= 5 ? p : 4;
}

void writeBody(const Trace& t, std::ostream& out)
{
    const bool bareList = std::find(t.versionHints.begin(), t.versionHints.end(), kBareSegmentListHint) != t.versionHints.end();
    if (bareList && t.format != SourceFormat::SnapshotJson)
        writeSnapshotSegmentList(t, out, sourceProtocol(t));
    else if (t.format == SourceFormat::SnapshotJson)
        writeSnapshotJson(t, out);
    else
        writeSnapshot(t, out, sourceProtocol(t));
}

} // namespace

void writeRedactedCopy(const Trace& redacted, const std::string& outPath)
{
    if (redacted.format != SourceFormat::SnapshotPickle && redacted.format != SourceFormat::SnapshotJson &&
        redacted.format != SourceFormat::SnapshotHtml)
        throw std::invalid_argument(redacted.path + ": a " + std::string(formatName(redacted.format)) +
                                    " cannot be redacted: redact writes PyTorch allocator snapshots (pickle or JSON)");
    std::error_code ec;
    if (fs::is_directory(outPath, ec))
        throw WriteError(outPath + ": is a folder; name the file to write");
    std::string lower = outPath;
    for (char& c : lower)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    AtomicFile file(outPath); // readers never see half a copy; a failure leaves OUT as it was
    std::ostream& out = file.stream();
    if (endsWith(lower, ".zst") || endsWith(lower, ".zstd")) {
        ZstdOutputBuffer buf(out, outPath);
        std::ostream os(&buf);
        writeBody(redacted, os);
        buf.close();
    } else if (endsWith(lower, ".gz")) {
        GzipOutputBuffer buf(out, outPath);
        std::ostream os(&buf);
        writeBody(redacted, os);
        buf.close();
    } else {
        writeBody(redacted, out);
    }
    file.commit();
}

RedactStats redactFile(const std::string& input, const std::string& output, const RedactOptions& options, Progress& progress)
{
    std::error_code ec;
    if (fs::exists(output, ec) && fs::equivalent(input, output, ec))
        throw std::invalid_argument(output + ": is the input itself; write the redacted copy to another file");
    const auto trace = load(input, LoadOptions{}, progress);
    RedactStats stats;
    const auto copy = redact(*trace, options, &stats); // keeps the input's path: errors name it
    writeRedactedCopy(*copy, output);
    return stats;
}

} // namespace poolscope
