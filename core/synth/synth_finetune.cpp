// Fine-tuning stacks as short dumps with known pools: PEFT LoRA adapters on a frozen base model,
// with transformers' gradient checkpointing. Only the adapters train, so gradients and optimizer
// state exist for a sliver of the parameters; the classifier has to read that from the run's
// structure (what the backward makes, what the step reads), not from peft's names.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_peft_trainer.h"
#include "core/synth/synth_recorder.h"

#include <algorithm>
#include <vector>

namespace poolscope::synth_detail {

// --- PEFT LoRA on a frozen base, with transformers' gradient checkpointing -----------------------

// from_pretrained loads the base in bf16 (accelerate's set_module_tensor_to_device per weight);
// get_peft_model adds lora_A/lora_B (r = 64, fp32) to q_proj and v_proj (peft/tuners/lora/layer.py
// update_layer -> _move_adapter_to_device_of_base_layer); gradient_checkpointing_enable() runs each
// decoder layer under torch.utils.checkpoint (reentrant: the layer's forward under no_grad, its
// input saved; CheckpointFunction.backward recomputes it with grad on the engine's thread and runs
// the inner backward). Only the adapters get gradients and AdamW state. Two steps.
SynthResult peftLora(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale, tokens = 1024, rank = 64, bf = 2, f32 = 4;
    const PeftTrainerFrames pf;
    const std::string& tf = pf.tf;
    const Frames load = Frames{{kSite + "accelerate/utils/modeling.py", "set_module_tensor_to_device", 329},
                               {tf + "modeling_utils.py", "_load_state_dict_into_meta_model", 915},
                               {tf + "modeling_utils.py", "_load_pretrained_model", 4329},
                               {tf + "modeling_utils.py", "from_pretrained", 3916}} +
                        kMain;
    const int layers = 4;
    struct Layer {
        std::vector<int64_t> base; // q, k, v, o, up, down (numel)
    };
    for (int l = 0; l < layers; ++l)
        for (int64_t n : {h * h, h * h, h * h, h * h, 4 * h * h, 4 * h * h})
            r.alloc(n * bf, load, Pool::Parameter);
    r.alloc(int64_t(8000) * h * bf, load, Pool::Parameter); // the embedding (tied head)
    // The adapters: lora_A (r x h) and lora_B (h x r) per q_proj and v_proj.
    const Frames& adapter = pf.adapter;
    const size_t adapters = size_t(layers) * 4;
    for (size_t k = 0; k < adapters; ++k)
        r.alloc(rank * h * f32, adapter, Pool::Parameter);
    const Frames& loop = pf.loop;
    const Frames& model = pf.model;
    auto ckpt = [&](int line) { return pf.ckpt(line); };
    auto recompute = [&](int line) { return pf.recompute(line); };
    const Frames& backwardCall = pf.backwardCall;
    const int64_t act = tokens * h * bf;
    // A decoder layer's operators in order (each output's bytes): the norm, q_proj and its lora_A,
    // k_proj, v_proj and its lora_A, the attention scores, the attention output, o_proj, the second
    // norm, up and the gated activation, down_proj. Run under no_grad in the checkpointed forward
    // (each output let go of once the next is made) and again with grad in the recompute.
    const std::vector<int64_t> layerOps = {act, act, tokens * rank * f32, act, act, tokens * rank * f32, int64_t(8) * tokens * tokens * bf,
                                           act, act, act, 4 * act, 4 * act, act};
    constexpr size_t kLoraQ = 2, kLoraV = 5;
    std::vector<uint64_t> grads(adapters, 0);
    for (int step = 0; step < 2; ++step) {
        // The embedding's output (requires grad through enable_input_require_grads), then each
        // layer under checkpoint: internals made and dropped under no_grad, the output kept (the
        // next layer's saved input).
        std::vector<uint64_t> inputs;
        inputs.push_back(r.alloc(act, Frames{{kTorch + "nn/modules/sparse.py", "forward", 163}} + kModuleCall + model, Pool::Activation));
        for (int l = 0; l < layers; ++l) {
            uint64_t prev = 0;
            for (int64_t bytes : layerOps) {
                const uint64_t out = r.alloc(bytes, ckpt(320), Pool::Temporary);
                if (prev)
                    r.free(prev, ckpt(321));
                prev = out;
            }
            inputs.push_back(r.alloc(act, ckpt(760), Pool::Activation)); // the layer's output
            r.free(prev, ckpt(760));
        }
        const uint64_t logits = r.alloc(tokens * 8000 * f32, Frames{{tf + "models/llama/modeling_llama.py", "forward", 1205}} + kModuleCall + model,
                                        Pool::Activation);
        const uint64_t loss = r.alloc(4, model, Pool::Activation);
        // backward: the head, then per layer (last first) the recompute and its inner backward.
        const uint64_t root = r.alloc(4, backwardCall, Pool::Temporary);
        r.free(root, kEngineFree);
        const uint64_t dlogits = r.alloc(tokens * 8000 * f32, engineAlloc("LogSoftmaxBackward0"), Pool::Temporary);
        r.free(logits, engineRelease("LogSoftmaxBackward0"));
        uint64_t flowing = r.alloc(act, engineAlloc("MmBackward0"), Pool::Temporary);
        r.free(dlogits, kEngineFree);
        for (int l = layers; l-- > 0;) {
            // Recompute with grad: the layer's function run again on the saved input, the same
            // operators in the same order, what the inner graph saves kept; then the recomputed
            // output is the inner backward's root.
            std::vector<std::pair<uint64_t, int64_t>> saved;
            for (int64_t bytes : layerOps)
                saved.push_back({r.alloc(bytes, recompute(320), Pool::Activation), bytes});
            const uint64_t output = r.alloc(act, recompute(760), Pool::Activation); // held for the inner backward
            // The inner backward: activations' gradients, the adapters' gradients (A and B of q and
            // v, at the two lora_A outputs), what the inner graph saved let go of.
            for (size_t k = saved.size(); k-- > 0;) {
                const uint64_t g = r.alloc(saved[k].second, engineAlloc("MmBackward0"), Pool::Temporary);
                if (k == kLoraQ || k == kLoraV) {
                    const size_t a = size_t(l) * 4 + (k == kLoraQ ? 0 : 2);
                    for (size_t j = a; j < a + 2; ++j)
                        if (!grads[j])
                            grads[j] = r.alloc(rank * h * f32, accumulateGrad(), Pool::Gradient);
                }
                r.free(saved[k].first, engineRelease("MmBackward0"));
                r.free(g, kEngineFree);
            }
            r.free(output, kEngineFree);
            r.free(inputs[size_t(l) + 1], engineRelease("CheckpointFunctionBackward"));
            const uint64_t next = r.alloc(act, engineAlloc("CheckpointFunctionBackward"), Pool::Temporary);
            r.free(flowing, kEngineFree);
            flowing = next;
        }
        r.free(inputs[0], engineRelease("EmbeddingBackward0"));
        r.free(flowing, kEngineFree);
        r.free(loss, loop);
        // AdamW over the adapters only: moments on the first step; then zero_grad(set_to_none).
        const Frames stepLoop = Frames{{kSite + "accelerate/optimizer.py", "step", 171}} + loop;
        r.annotate("Optimizer.step#AdamW.step", true);
        if (step == 0)
            for (size_t k = 0; k < adapters; ++k) {
                const Frames init = optimFrames(kTorch + "optim/adamw.py", "_init_group", 120, 196, stepLoop);
                r.alloc(rank * h * f32, init, Pool::OptimizerState);
                r.alloc(rank * h * f32, init, Pool::OptimizerState);
            }
        r.annotate("Optimizer.step#AdamW.step", false);
        for (uint64_t& g : grads) {
            r.free(g, Frames{{kTorch + "optim/optimizer.py", "zero_grad", 980}} + loop);
            g = 0;
        }
    }
    return r.finish();
}

} // namespace poolscope::synth_detail
