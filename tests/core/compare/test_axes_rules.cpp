// The rules under the axes, on hand-made profiles: how tensors relate (sharding divides each,
// freezing drops whole ones), how call sites pair (by full stacks, then by the user's frames, by
// prefix where an OOM cut a run short), and when cast-shaped allocations count as autocast.
#include "core/compare/axes.h"
#include "core/compare/site_pairs.h"
#include "core/compare/tensor_relation.h"
#include "core/whatif/trace_model.h"

#include <QtTest>

using namespace poolscope;

namespace {

constexpr uint64_t kFullSite = 0x1234, kOtherFullSite = 0x9999, kUserSite = 0x5678;

uint64_t key(Phase phase, uint64_t site) { return siteWhere(phase, 0) | (site & kSiteHashMask); }

SiteAllocation alloc(int64_t size, SizeLaw law = SizeLaw::Linear, bool castShaped = false, EventIndex event = 0)
{
    SiteAllocation a;
    a.size = size;
    a.law = law;
    a.castShaped = castShaped;
    a.event = event;
    return a;
}

void put(RunProfile& p, uint64_t fullSite, std::vector<SiteAllocation> allocations, Phase phase = Phase::Forward)
{
    const uint64_t k = key(phase, fullSite);
    p.sites[k] = std::move(allocations);
    p.siteNames[k] = "model.py:forward";
    p.userSiteOf[k] = key(phase, kUserSite);
}

} // namespace

class TestAxesRules : public QObject {
    Q_OBJECT
private slots:
    void tensorRelations();
    void sitesPairByUserFramesWhenWrapped();
    void anOomBlockPairsByPrefix();
    void castsCountOnlyTheExtraAllocations();
    void castsNeedAnElementSizeChange();
    void ratioText();
    void phaseBlocksMergeAcrossUnknown();
    void tokenRatiosFitBatchAndSequence();
};

void TestAxesRules::tensorRelations()
{
    // ZeRO over 4 ranks: ceil(n / 4) elements of each fp32 tensor, n not a multiple of 4.
    const std::vector<int64_t> full = {10 * 4, 1000 * 4, 4097 * 4}, shard = {3 * 4, 250 * 4, 1025 * 4};
    TensorRelation r = relate(full, shard);
    QCOMPARE(r.kind, Relation::Scaled);
    QCOMPARE(wholeDivisor(r.factor), 4);
    QCOMPARE(relate(full, full).kind, Relation::Same);
    // Frozen layers: fewer gradient tensors, the rest as large as before.
    r = relate(full, {10 * 4, 4097 * 4});
    QCOMPARE(r.kind, Relation::Fewer);
    QCOMPARE(relate({10 * 4, 4097 * 4}, full).kind, Relation::More);
    QCOMPARE(relate(full, {7000 * 4, 9999 * 4}).kind, Relation::Different);
    QCOMPARE(relate({}, {}).kind, Relation::Empty);
    QCOMPARE(wholeDivisor(0.5), 2);
    QCOMPARE(wholeDivisor(0.4), 0);
    QCOMPARE(without(full, {1000 * 4}), (std::vector<int64_t>{10 * 4, 4097 * 4}));
}

void TestAxesRules::sitesPairByUserFramesWhenWrapped()
{
    // B runs the same code under torch.utils.checkpoint: other full stacks, the same user frames.
    RunProfile a, b;
    put(a, kFullSite, {alloc(100, SizeLaw::Linear, false, 1), alloc(400, SizeLaw::Quadratic, false, 2)});
    put(b, kOtherFullSite, {alloc(200, SizeLaw::Linear, false, 1), alloc(1600, SizeLaw::Quadratic, false, 2)});
    const SitePairing p = pairSites(a, b);
    QCOMPARE(p.pairedAllocations, 2);
    QCOMPARE(p.unpairedSites, 0);
    QCOMPARE(p.linear.front().ratio, 2.0);
    QCOMPARE(p.quadratic.front().ratio, 4.0);
}

void TestAxesRules::anOomBlockPairsByPrefix()
{
    RunProfile a, b;
    put(a, kFullSite, {alloc(100), alloc(100), alloc(100)});
    put(b, kFullSite, {alloc(200)});
    QCOMPARE(pairSites(a, b).pairedAllocations, 0); // not the same program run: left out
    b.endsInOom = true;
    b.oomWhere = siteWhere(Phase::Forward, 0);
    const SitePairing p = pairSites(a, b);
    QCOMPARE(p.pairedAllocations, 1);
    QCOMPARE(p.linear.front().ratio, 2.0);
}

void TestAxesRules::castsCountOnlyTheExtraAllocations()
{
    // A (fp32) makes an activation of a weight's half size by coincidence, B (autocast) makes it too
    // and adds the weights' casts at the same site: only B's two extra allocations count.
    RunProfile a, b;
    put(a, kFullSite, {alloc(2048, SizeLaw::Linear, true, 1), alloc(8192, SizeLaw::Linear, false, 2), alloc(2048, SizeLaw::Linear, true, 3)});
    put(b, kFullSite,
        {alloc(512, SizeLaw::Fixed, true, 1), alloc(1024, SizeLaw::Linear, true, 2), alloc(768, SizeLaw::Fixed, true, 3),
         alloc(4096, SizeLaw::Linear, false, 4), alloc(1024, SizeLaw::Linear, true, 5)});
    const SitePairing p = pairSites(a, b);
    QCOMPARE(p.castsA.count, 0);
    QCOMPARE(p.castsB.count, 2);
    QCOMPARE(p.castsB.distinctSizes, 2);
}

void TestAxesRules::castsNeedAnElementSizeChange()
{
    RunProfile a, b;
    a.blocks = b.blocks = {PhaseBlock{Phase::Forward, 0, 10, 0}};
    SitePairing sites;
    sites.castsB = CastEvidence{8, 8 << 20, 3};
    // Every paired tensor kept its size: the cast-shaped extras are not autocast's.
    sites.linear = {RatioCluster{1.0, 100 << 20, 50, "model.py:forward", 1 << 20, 1 << 20}};
    AxisInference none = inferAxes(a, b, sites);
    QVERIFY(none.axes.empty());
    // Most of them halved, integer inputs kept theirs: autocast in B.
    sites.linear = {RatioCluster{0.5, 80 << 20, 40, "model.py:forward", 2 << 20, 1 << 20},
                    RatioCluster{1.0, 20 << 20, 10, "model.py:forward", 1 << 20, 1 << 20}};
    sites.input = {RatioCluster{1.0, 1 << 10, 2, "data.py:to_device", 512, 512}};
    AxisInference autocast = inferAxes(a, b, sites);
    QCOMPARE(autocast.axes.size(), size_t(1));
    QCOMPARE(autocast.axes.front().name, std::string("precision"));
    QCOMPARE(autocast.axes.front().b, std::string("autocast (16-bit)"));
}

void TestAxesRules::ratioText()
{
    QCOMPARE(poolscope::ratioText(2.0), std::string("x2"));
    QCOMPARE(poolscope::ratioText(0.5), std::string("x0.5"));
    QCOMPARE(poolscope::ratioText(1.333), std::string("x1.33"));
    QCOMPARE(poolscope::ratioText(0.25), std::string("x0.25"));
    QVERIFY(nearRatio(2.03, 2.0));
    QVERIFY(!nearRatio(2.1, 2.0));
}

void TestAxesRules::phaseBlocksMergeAcrossUnknown()
{
    // A frame-less stretch inside a forward is still that forward; a step run twice is said once.
    Trace trace;
    trace.devices.emplace_back();
    const DeviceTrace& dev = trace.devices[0];
    Classification c;
    using R = PhaseTimeline::Run;
    c.phases.runs = {R{Phase::Forward, 0, 9}, R{Phase::Unknown, 10, 12}, R{Phase::Forward, 13, 20}, R{Phase::Backward, 21, 30},
                     R{Phase::OptimizerStep, 31, 40}, R{Phase::Forward, 41, 50}, R{Phase::Backward, 51, 60}, R{Phase::OptimizerStep, 61, 70}};
    const PoolSeries series = computePoolSeries(dev, c);
    const RunProfile p = profileRun({trace, dev, c, series}, TraceModel{});
    QCOMPARE(p.blocks.size(), size_t(6));
    QCOMPARE(p.blocks.front().last, EventIndex(20));
    QCOMPARE(p.blocks[3].ordinal, 1); // the second forward
    QCOMPARE(p.steps, 2);
    QCOMPARE(p.passes, 2);
    QCOMPARE(blockSequence(p.blocks), std::string("forward, backward, optimizer step (x2)"));
}

namespace {

RatioCluster cluster(double ratio, int64_t mib)
{
    return RatioCluster{ratio, mib << 20, 10, "model.py:forward", 1 << 20, int64_t(double(1 << 20) * ratio)};
}

std::string tokenAxes(const SitePairing& sites)
{
    AxisInference out;
    inferTokenAxes(sites, 0, out);
    std::string s;
    for (const auto& a : out.axes)
        s += (s.empty() ? "" : ", ") + a.phrase;
    return s;
}

} // namespace

void TestAxesRules::tokenRatiosFitBatchAndSequence()
{
    SitePairing seq;
    // Score gradients the laws took for linear carry more bytes than the linear tensors: the fit
    // still reads s x2, since x4 is x2 squared.
    seq.linear = {cluster(4.0, 17000), cluster(2.0, 15000)};
    seq.quadratic = {cluster(4.0, 30000)};
    seq.input = {cluster(2.0, 1)};
    QCOMPARE(tokenAxes(seq), std::string("sequence x2"));
    // A shorter sequence; a weight-sized buffer the laws took for linear keeps its size.
    SitePairing shorter;
    shorter.linear = {cluster(0.5, 1300), cluster(0.25, 180), cluster(1.0, 62)};
    shorter.quadratic = {cluster(0.25, 320), cluster(0.5, 24)};
    shorter.input = {cluster(0.5, 1)};
    QCOMPARE(tokenAxes(shorter), std::string("sequence x0.5"));
    // The score tensors scaled as the rest: the batch.
    SitePairing batch;
    batch.linear = {cluster(2.0, 1000)};
    batch.quadratic = {cluster(2.0, 500)};
    QCOMPARE(tokenAxes(batch), std::string("micro-batch x2"));
    // Both: linear x4, scores x8.
    SitePairing both;
    both.linear = {cluster(4.0, 1000)};
    both.quadratic = {cluster(8.0, 500)};
    QCOMPARE(tokenAxes(both), std::string("sequence x2, micro-batch x2"));
    // No score tensors: only the product shows.
    SitePairing flash;
    flash.linear = {cluster(2.0, 1000)};
    QCOMPARE(tokenAxes(flash), std::string("tokens x2 (batch or sequence: the traces cannot tell)"));
    // Nothing moved.
    SitePairing same;
    same.linear = {cluster(1.0, 1000)};
    same.quadratic = {cluster(1.0, 100)};
    QCOMPARE(tokenAxes(same), std::string());
}

QTEST_APPLESS_MAIN(TestAxesRules)
#include "test_axes_rules.moc"
