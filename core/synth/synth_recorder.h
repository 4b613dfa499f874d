#pragma once
// Private to core/synth: the recorder behind the short scenario dumps (synth_stacks.cpp,
// synth_classes.cpp): allocations and frees through the allocator model, each with the frames a
// real stack leaves and its true pool, finished into a one-device Trace with its final segments.
#include "core/allocator/address_space.h"
#include "core/allocator/caching_allocator.h"
#include "core/model/trace_builder.h"
#include "core/synth/synth.h"
#include "core/synth/synth_stacks.h"

#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope::synth_detail {


inline const std::string kSite = "/usr/local/lib/python3.10/dist-packages/";
inline const std::string kTorch = kSite + "torch/";

struct Spec {
    std::string file;
    std::string name;
    int64_t line = 0;
};
using Frames = std::vector<Spec>;

inline Frames operator+(Frames a, const Frames& b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

inline const Frames kModuleCall = {{kTorch + "nn/modules/module.py", "_call_impl", 1527}, {kTorch + "nn/modules/module.py", "_wrapped_call_impl", 1518}};

inline const Frames kCppAlloc = {{"??", "torch::unwind::unwind()", 0},
                          {"??", "torch::CapturedTraceback::gather(bool, bool, bool)", 0},
                          {"CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", 0},
                          {"??", "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", 0}};
inline const Frames kCppFree = {{"??", "torch::unwind::unwind()", 0},
                         {"??", "torch::CapturedTraceback::gather(bool, bool, bool)", 0},
                         {"CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*)", 0},
                         {"??", "c10::StorageImpl::~StorageImpl()", 0},
                         {"??", "c10::TensorImpl::~TensorImpl()", 0}};

// Records one device's history through the allocator model: a default pool and, for CUDA-graph
// capture, a private pool with its own segments (pool id (1, 0)) in the same address space.
class Recorder {
public:
    Recorder() : m_main(AllocatorConfig{}), m_graph(AllocatorConfig{})
    {
        m_main.setAddressSource(&m_addresses);
        m_graph.setAddressSource(&m_addresses);
    }

    void record(bool on) { m_recording = on; }
    void keepStacks(bool on) { m_keepStacks = on; }
    void graphPool(bool on) { m_inGraph = on; }
    // The private pool's id in the segments: (1, 0) a graph's own pool (the default), (0, N) one made
    // with torch.cuda.graph_pool_handle() (CUDA graph trees, vLLM's shared pool).
    void graphPoolId(int64_t first, int64_t second)
    {
        m_graphPoolId[0] = first;
        m_graphPoolId[1] = second;
    }

    StackId stack(const Frames& frames)
    {
        std::vector<FrameId> ids;
        for (const Spec& s : frames)
            ids.push_back(m_result.trace.frames.internFrame(s.file, s.name, s.line));
        return m_result.trace.frames.internStack(ids);
    }

    uint64_t alloc(int64_t bytes, const Frames& where, Pool pool)
    {
        CachingAllocatorSim& sim = m_inGraph ? m_graph : m_main;
        const StackId st = stack(where);
        const AllocResult r = sim.malloc(bytes, 0);
        if (!r.ok)
            throw std::logic_error("synth scenario: the allocator model refused " + std::to_string(bytes) + " bytes");
        drain(sim, st);
        m_live[r.addr] = Live{bytes, m_keepStacks ? st : StackId{}, m_inGraph};
        if (m_recording) {
            push(Action::Alloc, r.addr, bytes, st);
            m_eventPool.back() = pool;
        } else {
            m_preexisting[r.addr] = pool;
        }
        return r.addr;
    }

    void free(uint64_t addr, const Frames& where)
    {
        auto it = m_live.find(addr);
        if (it == m_live.end())
            return;
        const StackId st = stack(where);
        if (m_recording) {
            push(Action::FreeRequested, addr, it->second.requested, st);
            push(Action::FreeCompleted, addr, it->second.requested, st);
        }
        (it->second.graph ? m_graph : m_main).free(addr);
        drain(it->second.graph ? m_graph : m_main, st);
        m_live.erase(it);
    }

    // torch.cuda.empty_cache(): the cached segments released (their segment_free events recorded).
    void emptyCache(const Frames& where)
    {
        m_main.emptyCache();
        drain(m_main, stack(where));
    }

    // What the OOM observer sees: the request that failed and the device's free bytes.
    void oom(int64_t bytes, const Frames& where) { push(Action::Oom, uint64_t(1) << 20, bytes, stack(where)); }
    void snapshotEntry() { push(Action::Snapshot, 0, 0, StackId{}); }
    // A record_function range edge (Optimizer.step#Adam.step, ...), as PyTorch's profiler hooks
    // write them into the snapshot's external_annotations.
    void annotate(const std::string& name, bool start)
    {
        if (!m_recording)
            return;
        m_time += 3;
        m_result.trace.annotations.push_back(Annotation{name, start, 0, m_time});
        m_time += 3;
    }

    SynthResult finish()
    {
        DeviceTrace& dev = m_dev;
        auto addSegments = [&](const CachingAllocatorSim& sim, const int64_t* poolId) {
            for (const SimSegmentInfo& s : sim.segments()) {
                Segment seg;
                seg.address = s.addr;
                seg.stream = s.stream;
                seg.isLarge = !s.small;
                seg.poolId[0] = poolId[0];
                seg.poolId[1] = poolId[1];
                for (const SimBlockInfo& b : s.blocks) {
                    Block blk;
                    blk.address = b.addr;
                    blk.size = b.size;
                    blk.requestedSize = b.allocated ? b.requested : 0;
                    blk.state = b.allocated ? BlockState::ActiveAllocated : BlockState::Inactive;
                    if (auto it = m_live.find(b.addr); it != m_live.end() && b.allocated)
                        blk.stack = it->second.stack;
                    seg.totalSize += b.size;
                    if (b.allocated) {
                        seg.allocatedSize += b.size;
                        seg.activeSize += b.size;
                        seg.requestedSize += b.requested;
                    }
                    seg.blocks.push_back(blk);
                }
                dev.segments.push_back(std::move(seg));
            }
        };
        const int64_t defaultPool[2] = {0, 0};
        addSegments(m_main, defaultPool);
        addSegments(m_graph, m_graphPoolId);
        Trace& t = m_result.trace;
        t.format = SourceFormat::SnapshotPickle;
        t.formatDetail = "synthetic (poolscope synth --scenario)";
        finalizeDevice(dev, t.warnings);
        for (const Allocation& a : dev.allocations) {
            Pool p = Pool::Unknown;
            if (a.allocEvent >= 0) {
                p = m_eventPool[size_t(a.allocEvent)];
            } else if (auto it = m_preexisting.find(a.address); it != m_preexisting.end()) {
                p = it->second;
            }
            m_result.truth.push_back(p);
        }
        m_result.stepsRun = 1;
        m_result.peakReserved = m_main.stats().peakReserved + m_graph.stats().peakReserved;
        t.devices.push_back(std::move(dev));
        return std::move(m_result);
    }

    bool recording() const { return m_recording; }

private:
    struct Live {
        int64_t requested = 0;
        StackId stack;
        bool graph = false;
    };

    void push(Action a, uint64_t addr, int64_t size, StackId st)
    {
        m_time += 7;
        m_dev.events.push(a, addr, size, 0, m_time, st);
        m_eventPool.push_back(Pool::Unknown);
        if (a == Action::Oom) {
            m_result.oom = true;
            m_result.oomIndex = EventIndex(m_dev.events.count() - 1);
        }
    }

    void drain(CachingAllocatorSim& sim, StackId st)
    {
        for (const SimEvent& e : sim.events()) {
            if (!m_recording)
                break;
            if (e.kind == SimEventKind::SegmentAlloc)
                push(Action::SegmentAlloc, e.addr, e.size, st);
            else if (e.kind == SimEventKind::SegmentFree)
                push(Action::SegmentFree, e.addr, e.size, st);
        }
        sim.clearEvents();
    }

    VirtualAddressSpace m_addresses;
    CachingAllocatorSim m_main, m_graph;
    SynthResult m_result;
    DeviceTrace m_dev;
    std::vector<Pool> m_eventPool;
    std::unordered_map<uint64_t, Pool> m_preexisting;
    std::unordered_map<uint64_t, Live> m_live;
    bool m_recording = true, m_keepStacks = true, m_inGraph = false;
    int64_t m_graphPoolId[2] = {1, 0};
    int64_t m_time = 1748730219000000;
};

// Frames shared by the class scenarios (synth_classes.cpp) and the distributed-training ones
// (synth_distributed.cpp). The user's files are called nothing a rule knows (run.py, model.py).
inline const std::string kUser = "/home/user/proj/";
inline const Frames kMain = {{kUser + "run.py", "main", 40}, {kUser + "run.py", "<module>", 77}};

// nn.Module._apply as torch 2.5 runs it for model.to(device): the parameter at one line, its .grad
// (when it holds one) at another, buffers at a third, recursing into children at a fourth.
inline Frames moveFrames(int line, const Frames& caller = kMain)
{
    return Frames{{kTorch + "nn/modules/module.py", "convert", 1357},
                  {kTorch + "nn/modules/module.py", "_apply", line},
                  {kTorch + "nn/modules/module.py", "_apply", 930},
                  {kTorch + "nn/modules/module.py", "to", 1371}} +
           caller;
}
inline constexpr int kApplyParam = 957, kApplyGrad = 998;

// The autograd engine's device thread: C++ frames only (no Python frame, whatever the capture).
inline const Frames kEngine = {{"??", "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, ...)", 0},
                       {"??", "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", 0},
                       {"??", "torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)", 0}};

inline Frames engineAlloc(const std::string& node)
{
    return kCppAlloc + Frames{{"??", "torch::autograd::generated::" + node + "::apply(std::vector<at::Tensor>&&)", 0}} + kEngine;
}
inline Frames accumulateGrad()
{
    return kCppAlloc + Frames{{"??", "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)", 0}} + kEngine;
}
// The engine dropping what a node saved, once the node ran (call_function -> release_variables).
inline Frames engineRelease(const std::string& node)
{
    return kCppFree + Frames{{"??", "torch::autograd::SavedVariable::reset_data()", 0},
                             {"??", "torch::autograd::generated::" + node + "::release_variables()", 0}} +
           kEngine;
}
// An intermediate the engine let go of as soon as the next node consumed it.
inline const Frames kEngineFree = kCppFree + kEngine;

// loss.backward() from the training loop: the Python call that starts the engine.
inline const Frames kBackwardCall = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                   {kTorch + "autograd/__init__.py", "backward", 267},
                                   {kTorch + "_tensor.py", "backward", 521}} +
                             kMain;

// A forward inside the user's module: model.py forward under nn.Module's call.
inline Frames inModel(int line, const Frames& caller)
{
    return Frames{{kUser + "model.py", "forward", line}} + kModuleCall + caller;
}

// An optimizer step frame under torch.optim.Optimizer's wrapper, called from the training loop.
inline Frames optimFrames(const std::string& file, const std::string& fn, int line, int stepLine, const Frames& loop)
{
    return Frames{{file, fn, line}, {file, "step", stepLine}, {kTorch + "optim/optimizer.py", "wrapper", 484}} + loop;
}

// synth_classes.cpp: one Llama-style decoder layer under no_grad, operator by operator (n new
// positions attending to `total`; `key`/`value` the layer's cache, grown by torch.cat at
// `cacheUpdate`). Returns the residual stream's new block.
struct DecoderSizes {
    int64_t n, total, h, heads, ffn;
};
uint64_t decoderLayer(Recorder& r, const DecoderSizes& d, uint64_t residual, uint64_t& key, uint64_t& value, const Frames& forward,
                      const Frames& cacheUpdate);
// synth_classes.cpp: the issue-22 class scenarios.
SynthResult synthesizeClassScenario(StackScenario scenario, int scale);
// synth_distributed.cpp: data-parallel training stacks (DeepSpeed ZeRO, FSDP, DDP buckets).
SynthResult synthesizeDistributedScenario(StackScenario scenario, int scale);
// synth_finetune.cpp: PEFT LoRA on a frozen base with gradient checkpointing.
SynthResult peftLora(int scale);
// synth_megatron.cpp: a Megatron-LM pretraining job (distributed optimizer, two train_steps).
SynthResult megatronPretrain(int scale);
// synth_compiled.cpp: torch.compile'd training (Inductor, AOTAutograd) and CUDA graph trees.
SynthResult compiledTraining(int scale);
SynthResult cudaGraphDecode(int scale);
// synth_multipass.cpp: pipeline parallelism, a frozen reference model, a GAN.
SynthResult synthesizeMultiPassScenario(StackScenario scenario, int scale);
// synth_quantized.cpp: bitsandbytes 8-bit optimizers and QLoRA.
SynthResult synthesizeQuantizedScenario(StackScenario scenario, int scale);
// synth_sharded.cpp: PyTorch FSDP2 (fully_shard) and DeepSpeed ZeRO stage 3.
SynthResult synthesizeShardedScenario(StackScenario scenario, int scale);
// synth_calibration.cpp: GPTQ's layer-by-layer calibration (Hessians from forward hooks).
SynthResult gptqCalibration(int scale);
// synth_evaluation.cpp: Trainer.predict collecting logits on the device after two training steps.
SynthResult trainerEvalAccumulation(int scale);
// synth_ema.cpp: a diffusion transformer trained with an EMA copy of its weights (DiT's train.py).
SynthResult ditEmaTraining(int scale);
SynthResult diffusersEmaTraining(int scale);
SynthResult deepcopyEmaTraining(int scale);
// synth_optim_in_backward.cpp: torchtune's optimizer_in_bwd (AdamW stepped per parameter in the backward).
SynthResult optimizerInBackward(int scale);
// synth_lightning.cpp: Lightning's automatic optimization (forward and backward in AdamW.step's closure).
SynthResult lightningClosure(int scale);
// synth_rollout.cpp: TRL's GRPOTrainer (generate() with a KV cache, then the policy's training step).
SynthResult grpoRollout(int scale);
// synth_offload.cpp: a diffusers pipeline with model CPU offload (each model moved in by its call).
SynthResult diffusersOffload(int scale);

} // namespace poolscope::synth_detail
