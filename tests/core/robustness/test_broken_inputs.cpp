// Damaged files of every format PoolScope reads: cut at many offsets, single bits flipped at many
// positions, runs of random bytes. Each one either loads into a consistent Trace (the invariants of
// tests/fuzz/trace_invariants.h) or fails with a one-line LoadError; nothing else may escape load().
// (What `info` and `report` make of such files is checked through the binary in test_cli_errors.)
#include "core/formats/fixture_util.h"
#include "robustness_util.h"

#include <QtTest>

#include <filesystem>
#include <random>

using namespace poolscope;
using namespace poolscope::robust;

namespace {

// Sanitized builds run ~10x slower: fewer samples there keep the suite inside CTest's timeout.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kScale = 3;
#else
constexpr size_t kScale = 1;
#endif

struct Input {
    std::string name;
    Bytes bytes;
    bool everyPrefixFails = true; // false where a prefix can be a complete file (HTML after the payload)
};

// Trailing whitespace is not part of the data: cutting it off leaves a complete file.
size_t meaningfulSize(const Bytes& b)
{
    size_t n = b.size();
    while (n > 0 && (b[n - 1] == '\n' || b[n - 1] == ' ' || b[n - 1] == '\r' || b[n - 1] == '\t'))
        --n;
    return n;
}

std::vector<Input> inputs()
{
    std::vector<Input> in;
    const std::filesystem::path data = std::filesystem::path(POOLSCOPE_TEST_DATA) / "snapshots";
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(data))
        if (e.is_regular_file() && e.path().filename() != "facts.json")
            files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files)
        in.push_back({f.filename().string(), readFile(f.string())});

    const V snap = healthySnapshot();
    in.push_back({"generated_p2.pickle", toPickle(snap, 2)});
    in.push_back({"generated.json", toJson(snap)});
    in.push_back({"kineto.json", toBytes(kinetoJson())});
    in.push_back({"timeline.raw.json", toBytes(timelineJson())});
    in.push_back({"kineto.json.gz", testutil::gzipCompress(toBytes(kinetoJson()))});
    in.push_back({"timeline.raw.json.zst", testutil::zstdCompress(toBytes(timelineJson()))});
    in.push_back({"memory_viz.html", toBytes(testutil::memoryVizHtml(toPickle(snap))), false});
    return in;
}

// Up to `limit` positions spread over [0, n), always including the first and last 64.
std::vector<size_t> positions(size_t n, size_t limit)
{
    std::vector<size_t> p;
    if (n <= limit) {
        for (size_t i = 0; i < n; ++i)
            p.push_back(i);
        return p;
    }
    for (size_t i = 0; i < 64; ++i) {
        p.push_back(i);
        p.push_back(n - 1 - i);
    }
    const size_t step = n / (limit - 128);
    for (size_t i = 64; i < n - 64; i += std::max<size_t>(step, 1))
        p.push_back(i);
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    return p;
}

struct Tally {
    int loaded = 0;
    int failed = 0;
    std::map<std::string, int> codes;
    void add(const Outcome& o)
    {
        if (o.loaded())
            ++loaded;
        else {
            ++failed;
            ++codes[codeName(*o.code)];
        }
    }
    std::string str() const
    {
        std::string s = std::to_string(loaded) + " loaded, " + std::to_string(failed) + " failed (";
        for (const auto& [c, n] : codes)
            s += c + " " + std::to_string(n) + " ";
        return s + ")";
    }
};

} // namespace

class TestBrokenInputs : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::string path(const std::string& name) const { return (m_dir.path() + "/" + QString::fromStdString(name)).toStdString(); }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        QVERIFY(inputs().size() >= 15);
    }

    // Every input loads intact first, or the damage tests below would prove nothing.
    void intactInputsLoad_data()
    {
        QTest::addColumn<int>("index");
        const auto in = inputs();
        for (size_t i = 0; i < in.size(); ++i)
            QTest::newRow(in[i].name.c_str()) << int(i);
    }
    void intactInputsLoad()
    {
        QFETCH(int, index);
        const Input input = inputs()[size_t(index)];
        const Outcome o = loadBytes(path(input.name), input.bytes);
        if (input.name == "evil_reduce.pickle") { // the one fixture that is an attack
            QVERIFY2(o.code == LoadErrorCode::CodeExecution, describe(o).c_str());
            return;
        }
        QVERIFY2(o.loaded(), describe(o).c_str());
        QVERIFY2(problemWith(o).empty(), problemWith(o).c_str());
    }

    void truncation_data() { intactInputsLoad_data(); }
    void truncation()
    {
        QFETCH(int, index);
        const Input input = inputs()[size_t(index)];
        const size_t end = meaningfulSize(input.bytes);
        Tally tally;
        for (size_t cut : positions(input.bytes.size(), 1200 / kScale)) {
            const Bytes prefix(input.bytes.begin(), input.bytes.begin() + std::ptrdiff_t(cut));
            const Outcome o = loadBytes(path(input.name), prefix);
            tally.add(o);
            const std::string problem = problemWith(o);
            QVERIFY2(problem.empty(), (input.name + " cut at " + std::to_string(cut) + ": " + problem).c_str());
            if (input.everyPrefixFails && cut < end && input.name != "evil_reduce.pickle")
                QVERIFY2(!o.loaded(), (input.name + " cut at " + std::to_string(cut) + " of " +
                                       std::to_string(input.bytes.size()) + " still loads").c_str());
        }
        qInfo("%s: %zu bytes, truncations: %s", input.name.c_str(), input.bytes.size(), tally.str().c_str());
    }

    void bitFlips_data() { intactInputsLoad_data(); }
    void bitFlips()
    {
        QFETCH(int, index);
        const Input input = inputs()[size_t(index)];
        Tally tally;
        for (size_t pos : positions(input.bytes.size(), 1500 / kScale)) {
            for (uint8_t mask : {uint8_t(1u << (pos % 8)), uint8_t(0x80u >> (pos % 3))}) {
                Bytes b = input.bytes;
                b[pos] ^= mask;
                const Outcome o = loadBytes(path(input.name), b);
                tally.add(o);
                const std::string problem = problemWith(o);
                QVERIFY2(problem.empty(), (input.name + " bit flip at " + std::to_string(pos) + ": " + problem).c_str());
            }
        }
        qInfo("%s: bit flips: %s", input.name.c_str(), tally.str().c_str());
    }

    // Runs of random bytes and random splices: deterministic, so a failure reproduces.
    void randomDamage_data() { intactInputsLoad_data(); }
    void randomDamage()
    {
        QFETCH(int, index);
        const Input input = inputs()[size_t(index)];
        std::mt19937_64 rng(0x5eed + uint64_t(index));
        Tally tally;
        for (int round = 0; round < int(400 / kScale); ++round) {
            Bytes b = input.bytes;
            const int kind = round % 4;
            if (kind == 0 || kind == 1) { // overwrite 1-16 bytes with random or extreme values
                const size_t at = rng() % b.size();
                const size_t len = std::min<size_t>(1 + rng() % 16, b.size() - at);
                for (size_t k = 0; k < len; ++k)
                    b[at + k] = kind == 0 ? uint8_t(rng()) : (rng() % 2 ? 0xFF : 0x00);
            } else if (kind == 2) { // delete a range
                const size_t at = rng() % b.size();
                const size_t len = std::min<size_t>(1 + rng() % 64, b.size() - at);
                b.erase(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(at + len));
            } else { // duplicate a range elsewhere
                const size_t from = rng() % b.size();
                const size_t len = std::min<size_t>(1 + rng() % 64, b.size() - from);
                const Bytes chunk(b.begin() + std::ptrdiff_t(from), b.begin() + std::ptrdiff_t(from + len));
                b.insert(b.begin() + std::ptrdiff_t(rng() % b.size()), chunk.begin(), chunk.end());
            }
            const Outcome o = loadBytes(path(input.name), b);
            tally.add(o);
            const std::string problem = problemWith(o);
            QVERIFY2(problem.empty(), (input.name + " random damage round " + std::to_string(round) + ": " + problem).c_str());
        }
        qInfo("%s: random damage: %s", input.name.c_str(), tally.str().c_str());
    }
};

QTEST_GUILESS_MAIN(TestBrokenInputs)
#include "test_broken_inputs.moc"
