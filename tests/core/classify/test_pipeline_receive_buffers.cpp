// A pipeline stage's receive buffers (rules.json `pipeline-stage-receive-buffers`): torch.distributed.
// pipelining makes one per micro-batch in _prepare_forward_infra (activations from the previous
// stage) and in _create_grad_recv_info (gradients from the next stage), both through
// _make_tensor_from_meta, once, in the first step's set-up right after the shape-inference forward,
// and keeps them for every later step. Their stack names no phase, so they inherited the shape
// inference's "forward" and, alive to the end, read as activations the forward kept. The frame is
// PyTorch's own (it survives --rename-code and --frames python), so each copy must call them input.
#include "core/classify/shipped_rules.h"

#include "core/classify/classifier.h"
#include "core/redact/ablation.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

class TestPipelineReceiveBuffers : public QObject {
    Q_OBJECT
private slots:
    void receiveBuffersAreInput_data()
    {
        QTest::addColumn<QString>("variant");
        for (const char* v : {"all", "renamed", "python"})
            QTest::newRow(v) << QString(v);
    }
    void receiveBuffersAreInput()
    {
        QFETCH(QString, variant);
        const ScenarioFixture f = makeScenario(StackScenario::PipelineOneFOneB);
        std::shared_ptr<const Trace> trace = f.trace;
        if (variant != "all") {
            RedactOptions o;
            o.markers = scenarioRules().get();
            o.renameCode = variant == "renamed";
            if (variant == "python")
                o.frames = FrameKeep::Python;
            trace = redact(*f.trace, o);
        }
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *scenarioRules());
        QCOMPARE(c.size(), f.truth.size());
        // Every block the truth calls input here is a receive buffer: 8 micro-batches x 2 kinds.
        int buffers = 0;
        int64_t bytes = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            if (f.truth[i] != Pool::Input)
                continue;
            ++buffers;
            bytes += dev.allocations[i].size;
            const std::string got = std::string(poolName(c.pool[i])) + " by " + c.rules[c.rule[i]].name;
            QVERIFY2(c.pool[i] == Pool::Input, ("receive buffer #" + std::to_string(i) + ": " + got).c_str());
            QCOMPARE(c.rules[c.rule[i]].name, std::string("pipeline-stage-receive-buffers"));
        }
        QCOMPARE(buffers, 16);
        QCOMPARE(bytes, int64_t(16) * 1024 * 512 * 4);
        // The rule reads the allocation site only: nothing the stage's forward or backward makes
        // (activations, the input gradients kept in the buffers' .grad) is called a buffer.
        for (size_t i = 0; i < c.size(); ++i)
            if (f.truth[i] != Pool::Input)
                QVERIFY2(c.pool[i] != Pool::Input, ("#" + std::to_string(i) + " is no receive buffer").c_str());
    }
};

QTEST_GUILESS_MAIN(TestPipelineReceiveBuffers)
#include "test_pipeline_receive_buffers.moc"
