// A forward that nothing placed, told by making a placed forward's blocks in its order
// (structural_forward_again.h): an evaluation forward with grad on whose loss is kept with its graph,
// between a training step's backward and its optimizer step, neither rises and falls like a training
// pass nor frees what it made; without frames it was born in no phase and its graph was unknown (the
// synth leaks model frameless: 57.7 % of the bytes in another pool than with frames). What must not
// read as that model's call: the same blocks made before the first forward (the model being built),
// and a backward's scratch, the layers' sizes in reverse order.
#include "core/classify/structural_forward_again.h"
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;
using classify_detail::forwardsRepeatingAForward;

namespace {

constexpr int kLayers = 12;
constexpr int64_t kMiB = 1 << 20;
// One layer's blocks, in the order its operators make them.
constexpr int64_t kLayer[] = {1 * kMiB, 2 * kMiB, 3 * kMiB, 4 * kMiB};

enum class Stretch { Forward, Again, Reversed, Shuffled };

struct Built {
    DeviceTrace dev;
    PhaseTimeline tl;
    // The events of each stretch, [first, last].
    struct Span {
        EventIndex first, last;
    };
    std::vector<Span> spans;
};

// The stretches in order, each a model call's births (the Forward one placed as a forward, the others
// left unplaced), with one caller's block between them.
Built build(const std::vector<Stretch>& stretches)
{
    Built b;
    uint64_t next = 0x7f0000000000ull;
    int64_t time = 0;
    std::vector<Phase> phases;
    auto alloc = [&](int64_t size, Phase ph) {
        b.dev.events.push(Action::Alloc, next, size, 0, ++time, StackId{});
        next += uint64_t(size) * 2;
        phases.push_back(ph);
    };
    for (Stretch s : stretches) {
        const Phase ph = s == Stretch::Forward ? Phase::Forward : Phase::Unknown;
        const EventIndex first = EventIndex(phases.size());
        for (int l = 0; l < kLayers; ++l)
            for (int k = 0; k < 4; ++k) {
                const int at = s == Stretch::Reversed ? 3 - k : s == Stretch::Shuffled ? (k * 3 + l) % 4 : k;
                alloc(kLayer[at], ph);
            }
        b.spans.push_back(Built::Span{first, EventIndex(phases.size() - 1)});
        alloc(64 * kMiB, Phase::Unknown); // the caller's own block between calls
    }
    std::vector<std::string> warnings;
    finalizeDevice(b.dev, warnings);
    b.tl.phase = phases;
    b.tl.source.assign(phases.size(), PhaseSource::None);
    for (size_t e = 0; e < phases.size(); ++e)
        if (phases[e] == Phase::Forward)
            b.tl.source[e] = PhaseSource::Annotation;
    return b;
}

bool allForward(const Built& b, size_t stretch)
{
    for (EventIndex e = b.spans[stretch].first; e <= b.spans[stretch].last; ++e)
        if (b.tl.phase[size_t(e)] != Phase::Forward)
            return false;
    return true;
}

bool noneForward(const Built& b, size_t stretch)
{
    for (EventIndex e = b.spans[stretch].first; e <= b.spans[stretch].last; ++e)
        if (b.tl.phase[size_t(e)] == Phase::Forward)
            return false;
    return true;
}

} // namespace

class TestForwardAgain : public QObject {
    Q_OBJECT
private slots:
    void theSameCallIsAForward()
    {
        Built b = build({Stretch::Forward, Stretch::Again});
        QCOMPARE(forwardsRepeatingAForward(b.dev, b.tl), size_t(4 * kLayers));
        QVERIFY(allForward(b, 1));
        QCOMPARE(b.tl.source[size_t(b.spans[1].first)], PhaseSource::Structure);
        QCOMPARE(b.tl.phase[size_t(b.spans[1].last + 1)], Phase::Unknown); // the caller's block after it
    }

    void aLoopOfCallsIsRead()
    {
        Built b = build({Stretch::Forward, Stretch::Again, Stretch::Again});
        QCOMPARE(forwardsRepeatingAForward(b.dev, b.tl), size_t(8 * kLayers));
        QVERIFY(allForward(b, 1));
        QVERIFY(allForward(b, 2));
        // The caller's block between the two calls is its own (an evaluation's outputs collected).
        QCOMPARE(b.tl.phase[size_t(b.spans[1].last + 1)], Phase::Unknown);
    }

    void beforeTheFirstForwardIsSetUp()
    {
        Built b = build({Stretch::Again, Stretch::Forward});
        QCOMPARE(forwardsRepeatingAForward(b.dev, b.tl), size_t(0));
        QVERIFY(noneForward(b, 0));
    }

    void theLayersInReverseAreNoCall()
    {
        // Every size matches within a few births of the model's, by skipping ahead: not in step.
        Built b = build({Stretch::Forward, Stretch::Reversed});
        QCOMPARE(forwardsRepeatingAForward(b.dev, b.tl), size_t(0));
        QVERIFY(noneForward(b, 1));
    }

    void otherOrdersAreNoCall()
    {
        Built b = build({Stretch::Forward, Stretch::Shuffled});
        QCOMPARE(forwardsRepeatingAForward(b.dev, b.tl), size_t(0));
        QVERIFY(noneForward(b, 1));
    }
};

QTEST_GUILESS_MAIN(TestForwardAgain)
#include "test_forward_again.moc"
