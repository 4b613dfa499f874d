// Quantised fine-tuning stacks as short dumps with known pools: state and weights that are not a
// parameter's size. The classifier has to read them from the run's structure (made in or for the
// optimizer's step and living across steps; made before the first forward and kept), whatever the
// ratio of their bytes to a parameter's.
//
// The allocation sites follow bitsandbytes' own source (0.43-0.45), innermost frame first:
//   optim/optimizer.py: Optimizer8bit.step -> (first step, per parameter with a .grad, in
//     param-group order) Optimizer2State.init_state: a parameter under min_8bit_size (4096
//     elements) keeps two fp32 states (get_state_buffer -> torch.zeros_like(p, float32)); a larger
//     one moves the two quantisation maps to the device once (name2qmap["dynamic"/"udynamic"] =
//     create_dynamic_map(...).to(p.device): 256 fp32 each), then state1 and state2 as uint8
//     (zeros_like(p, uint8): one byte per element) and, block-wise, absmax1/absmax2 = torch.zeros
//     (ceil(n / 2048), float32). update_step's kernels (optimizer_update_8bit_blockwise,
//     optimizer_update_32bit) work in place: the step allocates nothing else. Paged variants
//     (PagedAdamW8bit) take the states of parameters of 1e5 elements or more from F.get_paged
//     (cudaMallocManaged): those never reach the caching allocator and are not in a snapshot.
//   functional.py quantize_4bit (Params4bit._quantize on .to(device), through transformers'
//     Bnb4BitHfQuantizer.create_quantized_param): the bf16 weight copied to the device, absmax =
//     torch.zeros(ceil(n / 64), float32), out = torch.zeros((n + 1) // 2, uint8) (two NF4 values a
//     byte), code = get_4bit_type("nf4") (16 fp32); compress_statistics (double quantisation):
//     offset = absmax.mean(), quantize_blockwise(absmax, blocksize=256) -> uint8 qabsmax of the
//     blocks and its own fp32 absmax, the fp32 absmax deleted; the bf16 copy goes when _quantize
//     returns. dequantize_4bit makes the whole weight (torch.empty(shape, bf16)) for each matmul:
//     MatMul4Bit.forward uses it and saves only the packed weight, MatMul4Bit.backward dequantises
//     again for grad_A.
//   peft utils/other.py prepare_model_for_kbit_training: every fp16/bf16 parameter that is not
//     Params4bit becomes fp32 (param.data = param.data.to(torch.float32)): norms, the embedding,
//     the head.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_peft_trainer.h"
#include "core/synth/synth_recorder.h"

#include <stdexcept>
#include <vector>

namespace poolscope::synth_detail {
namespace {

const std::string kBnb = kSite + "bitsandbytes/";

// Optimizer8bit.step under torch.optim's profiling wrapper and torch.no_grad's decorator.
Frames bnbStep(const Frames& inner, const Frames& loop)
{
    return inner + Frames{{kBnb + "optim/optimizer.py", "step", 287},
                          {kTorch + "utils/_contextlib.py", "decorate_context", 116},
                          {kTorch + "optim/optimizer.py", "wrapper", 484}} +
           loop;
}

// Optimizer2State.init_state for one parameter of `numel` elements (block-wise, 8-bit). Returns
// nothing: the state lives as long as the optimizer.
void initState8bit(Recorder& r, int64_t numel, const Frames& loop, bool& mapsMoved, bool paged)
{
    auto init = [&](int line) { return bnbStep(Frames{{kBnb + "optim/optimizer.py", "init_state", line}}, loop); };
    const Frames buffer = bnbStep(Frames{{kBnb + "optim/optimizer.py", "get_state_buffer", 344}, {kBnb + "optim/optimizer.py", "init_state", 468}},
                                  loop);
    if (numel < 4096) { // under min_8bit_size: 32-bit states, one fp32 block of the parameter's numel each
        r.alloc(numel * 4, buffer, Pool::OptimizerState);
        r.alloc(numel * 4, buffer, Pool::OptimizerState);
        return;
    }
    if (!mapsMoved) { // the signed and unsigned dynamic maps, moved once
        r.alloc(256 * 4, init(475), Pool::OptimizerState);
        r.alloc(256 * 4, init(476), Pool::OptimizerState);
        mapsMoved = true;
    }
    if (!paged || numel < 100000) { // paged: from cudaMallocManaged, outside the caching allocator
        r.alloc(numel, buffer, Pool::OptimizerState);
        r.alloc(numel, buffer, Pool::OptimizerState);
    }
    const int64_t blocks = (numel + 2047) / 2048;
    r.alloc(blocks * 4, init(487), Pool::OptimizerState);
    r.alloc(blocks * 4, init(488), Pool::OptimizerState);
}

// --- a model trained with bitsandbytes' AdamW8bit --------------------------------------------------

// An fp32 model of four blocks (LayerNorm weight and bias, Linears h x h, h x 4h, 4h x h with their
// biases) after an embedding table, moved with model.to(); bnb.optim.AdamW8bit over all of it;
// three steps, zero_grad(set_to_none=True) after each step.
SynthResult bnbAdam8bit(int scale, bool paged)
{
    Recorder r;
    const int64_t h = 512 * scale, tokens = 1024, vocab = 8000, f32 = 4;
    std::vector<int64_t> params; // numel, in model.parameters() order
    params.push_back(vocab * h);  // the embedding
    for (int l = 0; l < 4; ++l)
        for (int64_t n : {h, h, h * h, h, 4 * h * h, 4 * h, 4 * h * h, h})
            params.push_back(n);
    for (int64_t n : params)
        r.alloc(n * f32, moveFrames(kApplyParam), Pool::Parameter);
    const Frames loop = {{kUser + "run.py", "main", 48}, {kUser + "run.py", "<module>", 77}};
    const Frames forwardCall = Frames{{kUser + "model.py", "forward", 60}} + kModuleCall + loop;
    const Frames backwardCall = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                       {kTorch + "autograd/__init__.py", "backward", 267},
                                       {kTorch + "_tensor.py", "backward", 521},
                                       {kUser + "run.py", "main", 50},
                                       {kUser + "run.py", "<module>", 77}};
    const std::string optimizer = paged ? "PagedAdamW8bit" : "AdamW8bit";
    bool mapsMoved = false;
    std::vector<uint64_t> grads(params.size(), 0);
    for (int step = 0; step < 3; ++step) {
        // The batch.
        const uint64_t batch = r.alloc(tokens * 8, Frames{{kUser + "run.py", "main", 45}, {kUser + "run.py", "<module>", 77}}, Pool::Input);
        // Forward: each operator's input kept for backward; per block LayerNorm (output, mean,
        // rstd), the first Linear's output, GELU's output, the second's output and GELU's, the
        // third's output and the residual. `param` is the first parameter whose gradient the
        // node that releases the saved tensor makes (the node's weight, then its bias).
        struct Saved {
            uint64_t addr;
            int64_t bytes;
            std::vector<size_t> params;
        };
        std::vector<Saved> saved;
        auto keep = [&](int64_t bytes, int line, std::vector<size_t> ps) {
            saved.push_back(Saved{r.alloc(bytes, inModel(line, forwardCall), Pool::Activation), bytes, std::move(ps)});
        };
        keep(tokens * h * f32, 20, {0}); // the embedding's output; its node makes the table's gradient
        for (size_t l = 0; l < 4; ++l) {
            const size_t p = 1 + 8 * l; // ln.weight, ln.bias, fc1.w, fc1.b, fc2.w, fc2.b, fc3.w, fc3.b
            keep(tokens * f32, 30, {});
            keep(tokens * f32, 30, {p, p + 1}); // mean and rstd; LayerNorm's node makes its weight's and bias's gradients
            keep(tokens * h * f32, 30, {p + 2, p + 3});
            keep(tokens * h * f32, 31, {});
            keep(tokens * h * f32, 32, {p + 4, p + 5});
            keep(tokens * 4 * h * f32, 33, {});
            keep(tokens * 4 * h * f32, 34, {p + 6, p + 7});
            const uint64_t out = r.alloc(tokens * h * f32, inModel(35, forwardCall), Pool::Temporary);
            keep(tokens * h * f32, 36, {});
            r.free(out, inModel(36, forwardCall));
        }
        const uint64_t logits = r.alloc(tokens * vocab * f32, inModel(38, forwardCall), Pool::Activation);
        const uint64_t loss = r.alloc(4, inModel(40, forwardCall), Pool::Activation);
        // loss.backward().
        const uint64_t root = r.alloc(4, backwardCall, Pool::Temporary);
        const uint64_t dlogits = r.alloc(tokens * vocab * f32, engineAlloc("LogSoftmaxBackward0"), Pool::Temporary);
        r.free(root, kEngineFree);
        r.free(logits, engineRelease("LogSoftmaxBackward0"));
        uint64_t flowing = r.alloc(tokens * h * f32, engineAlloc("MmBackward0"), Pool::Temporary);
        r.free(dlogits, kEngineFree);
        for (size_t k = saved.size(); k-- > 0;) {
            const Saved& s = saved[k];
            const uint64_t g = r.alloc(s.bytes, engineAlloc("MmBackward0"), Pool::Temporary);
            for (size_t p : s.params)
                if (!grads[p])
                    grads[p] = r.alloc(params[p] * f32, accumulateGrad(), Pool::Gradient);
            r.free(s.addr, engineRelease("MmBackward0"));
            r.free(flowing, kEngineFree);
            flowing = g;
        }
        r.free(flowing, kEngineFree);
        r.free(loss, loop);
        r.free(batch, loop);
        // optimizer.step(): the state on the first step, parameter by parameter; in place after.
        r.annotate("Optimizer.step#" + optimizer + ".step", true);
        if (step == 0)
            for (int64_t n : params)
                initState8bit(r, n, loop, mapsMoved, paged);
        r.annotate("Optimizer.step#" + optimizer + ".step", false);
        // optimizer.zero_grad(set_to_none=True).
        for (uint64_t& g : grads) {
            r.free(g, Frames{{kTorch + "optim/optimizer.py", "zero_grad", 980}} + loop);
            g = 0;
        }
    }
    return r.finish();
}


// --- QLoRA: an NF4 base with LoRA adapters, gradient checkpointing, paged AdamW 8-bit ----------

// from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit, nf4, double quant,
// compute dtype bf16)): each Linear of the decoder layers becomes Params4bit, quantised on its way
// to the device; the embedding, the norms and the head stay bf16 (accelerate's
// set_module_tensor_to_device). prepare_model_for_kbit_training casts those to fp32 and turns on
// transformers' gradient checkpointing (reentrant: each layer's forward under no_grad, its input
// kept, recomputed in backward on the engine's thread); get_peft_model adds lora_A / lora_B (r = 64,
// fp32) to q_proj and v_proj; the Trainer's optim="paged_adamw_8bit". Two steps.
SynthResult qlora(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale, tokens = 1024, rank = 64, vocab = 8000, bf = 2, f32 = 4;
    const PeftTrainerFrames pf;
    const std::string& tf = pf.tf;
    const std::string& peft = pf.peft;
    const Frames fromPretrained = Frames{{tf + "modeling_utils.py", "_load_state_dict_into_meta_model", 915},
                                         {tf + "modeling_utils.py", "_load_pretrained_model", 4329},
                                         {tf + "modeling_utils.py", "from_pretrained", 3916}} +
                                  kMain;
    const Frames load = Frames{{kSite + "accelerate/utils/modeling.py", "set_module_tensor_to_device", 329}} + fromPretrained;
    const Frames toDevice = Frames{{kBnb + "nn/modules.py", "_quantize", 289}, {kBnb + "nn/modules.py", "to", 330},
                                   {tf + "quantizers/quantizer_bnb_4bit.py", "create_quantized_param", 213}} +
                            fromPretrained;
    auto quantize = [&](int line) { return Frames{{kBnb + "functional.py", "quantize_4bit", line}} + toDevice; };
    const Frames blockwise = Frames{{kBnb + "functional.py", "quantize_blockwise", 735}} + quantize(1080);
    bool dynamicMap = false;
    // Params4bit._quantize for a weight of n elements: what stays is the packed weight and its
    // quant state (the uint8 absmax, its fp32 absmax, the offset, the NF4 code).
    auto quantized = [&](int64_t n) {
        const uint64_t w = r.alloc(n * bf, toDevice, Pool::Parameter); // self.data.contiguous().to(device)
        const int64_t blocks = (n + 63) / 64;
        const uint64_t absmax = r.alloc(blocks * f32, quantize(1014), Pool::Parameter);
        r.alloc((n + 1) / 2, quantize(1018), Pool::Parameter);                                             // packed NF4
        r.alloc(16 * f32, Frames{{kBnb + "functional.py", "get_4bit_type", 1001}} + quantize(1072), Pool::Parameter); // code
        r.alloc(f32, quantize(1076), Pool::Parameter);                                                     // offset = absmax.mean()
        if (!dynamicMap) {
            r.alloc(256 * f32, blockwise, Pool::Parameter); // name2qmap["dynamic"].to(device)
            dynamicMap = true;
        }
        r.alloc((blocks + 255) / 256 * f32, Frames{{kBnb + "functional.py", "quantize_blockwise", 748}} + quantize(1080), Pool::Parameter);
        r.alloc(blocks, Frames{{kBnb + "functional.py", "quantize_blockwise", 751}} + quantize(1080), Pool::Parameter);
        r.free(absmax, quantize(1081)); // del absmax
        r.free(w, Frames{{kBnb + "nn/modules.py", "to", 330}} + fromPretrained);
    };
    const int layers = 4;
    std::vector<int64_t> floatParams; // bytes in bf16: embedding, per layer two norms, final norm, head
    std::vector<uint64_t> floatBlocks;
    floatBlocks.push_back(r.alloc(vocab * h * bf, load, Pool::Parameter));
    floatParams.push_back(vocab * h * bf);
    for (int l = 0; l < layers; ++l) {
        for (int64_t n : {h * h, h * h, h * h, h * h, 4 * h * h, 4 * h * h, 4 * h * h})
            quantized(n); // q, k, v, o, gate, up, down
        for (int k = 0; k < 2; ++k) {
            floatBlocks.push_back(r.alloc(h * bf, load, Pool::Parameter));
            floatParams.push_back(h * bf);
        }
    }
    floatBlocks.push_back(r.alloc(h * bf, load, Pool::Parameter));
    floatParams.push_back(h * bf);
    floatBlocks.push_back(r.alloc(vocab * h * bf, load, Pool::Parameter)); // lm_head (untied, kept in bf16 by the quantiser)
    floatParams.push_back(vocab * h * bf);
    // prepare_model_for_kbit_training: the bf16 parameters become fp32 (the new block first).
    const Frames cast = Frames{{peft + "utils/other.py", "prepare_model_for_kbit_training", 139}} + kMain;
    for (size_t k = 0; k < floatBlocks.size(); ++k) {
        r.alloc(floatParams[k] * 2, cast, Pool::Parameter);
        r.free(floatBlocks[k], cast);
    }
    // get_peft_model: lora_A (r x h) and lora_B (h x r) on q_proj and v_proj.
    const Frames& adapter = pf.adapter;
    const size_t adapters = size_t(layers) * 4;
    for (size_t k = 0; k < adapters; ++k)
        r.alloc(rank * h * f32, adapter, Pool::Parameter);
    const Frames& loop = pf.loop;
    const Frames& model = pf.model;
    auto ckpt = [&](int line) { return pf.ckpt(line); };
    auto recompute = [&](int line) { return pf.recompute(line); };
    // Linear4bit.forward -> bnb.matmul_4bit -> MatMul4Bit.apply -> forward: the weight dequantised.
    auto dequantForward = [&](const Frames& layer) {
        return Frames{{kBnb + "functional.py", "dequantize_4bit", 1236},
                      {kBnb + "autograd/_functions.py", "forward", 479},
                      {kTorch + "autograd/function.py", "apply", 574},
                      {kBnb + "autograd/_functions.py", "matmul_4bit", 579},
                      {kBnb + "nn/modules.py", "forward", 484}} +
               kModuleCall + layer;
    };
    // MatMul4Bit.backward on the engine's thread: dequantised again for grad_A.
    const Frames dequantBackward = Frames{{kBnb + "functional.py", "dequantize_4bit", 1236},
                                          {kBnb + "autograd/_functions.py", "backward", 512},
                                          {kTorch + "autograd/function.py", "apply", 306}} +
                                   kEngine;
    const Frames& backwardCall = pf.backwardCall;
    const int64_t act = tokens * h * bf;
    // One decoder layer's Linears, run through dequantised weights; `keepSaved` holds what the
    // graph saves when grad is on (the recompute), nothing under checkpoint's no_grad forward.
    auto layerOps = [&](const Frames& at, std::vector<std::pair<uint64_t, int64_t>>* keepSaved) {
        auto made = [&](int64_t bytes, Pool pool) {
            const uint64_t a = r.alloc(bytes, at, keepSaved ? Pool::Activation : pool);
            if (keepSaved)
                keepSaved->push_back({a, bytes});
            return a;
        };
        std::vector<uint64_t> scratch;
        for (int64_t n : {h * h, h * h, h * h}) { // q, k, v
            const uint64_t w = r.alloc(n * bf, dequantForward(at), Pool::Temporary);
            scratch.push_back(made(act, Pool::Temporary));
            r.free(w, dequantForward(at));
        }
        scratch.push_back(made(tokens * rank * f32, Pool::Temporary)); // lora_A(x) on q
        scratch.push_back(made(tokens * rank * f32, Pool::Temporary)); // lora_A(x) on v
        const uint64_t scores = r.alloc(int64_t(8) * tokens * tokens * bf, at, Pool::Temporary);
        r.free(scores, at);
        const uint64_t wo = r.alloc(h * h * bf, dequantForward(at), Pool::Temporary);
        scratch.push_back(made(act, Pool::Temporary));
        r.free(wo, dequantForward(at));
        for (int64_t out : {4 * act, 4 * act, act}) { // gate, up, down: 4h x h weights each
            const uint64_t w = r.alloc(4 * h * h * bf, dequantForward(at), Pool::Temporary);
            scratch.push_back(made(out, Pool::Temporary));
            r.free(w, dequantForward(at));
        }
        if (!keepSaved)
            for (uint64_t a : scratch)
                r.free(a, at);
    };
    std::vector<uint64_t> grads(adapters, 0);
    bool mapsMoved = false;
    for (int step = 0; step < 2; ++step) {
        std::vector<uint64_t> inputs;
        inputs.push_back(r.alloc(tokens * h * f32, Frames{{kTorch + "nn/modules/sparse.py", "forward", 163}} + kModuleCall + model,
                                 Pool::Activation));
        for (int l = 0; l < layers; ++l) {
            layerOps(ckpt(320), nullptr);
            inputs.push_back(r.alloc(act, ckpt(760), Pool::Activation)); // the layer's output
        }
        const uint64_t logits = r.alloc(tokens * vocab * f32, Frames{{tf + "models/llama/modeling_llama.py", "forward", 1205}} + kModuleCall + model,
                                        Pool::Activation);
        const uint64_t loss = r.alloc(4, model, Pool::Activation);
        const uint64_t root = r.alloc(4, backwardCall, Pool::Temporary);
        r.free(root, kEngineFree);
        const uint64_t dlogits = r.alloc(tokens * vocab * f32, engineAlloc("LogSoftmaxBackward0"), Pool::Temporary);
        r.free(logits, engineRelease("LogSoftmaxBackward0"));
        uint64_t flowing = r.alloc(act, engineAlloc("MmBackward0"), Pool::Temporary);
        r.free(dlogits, kEngineFree);
        for (int l = layers; l-- > 0;) {
            std::vector<std::pair<uint64_t, int64_t>> saved;
            layerOps(recompute(320), &saved);
            // The inner backward, last operator first: each Linear4bit's grad_A through its weight
            // dequantised again; the adapters' gradients at the LoRA products (saved[3], saved[4]).
            for (size_t k = saved.size(); k-- > 0;) {
                const bool lora = k == 3 || k == 4; // a plain Linear's product: no weight to dequantise
                const uint64_t w = lora ? 0 : r.alloc((k >= 6 ? 4 * h * h : h * h) * bf, dequantBackward, Pool::Temporary);
                const uint64_t g = r.alloc(saved[k].second, engineAlloc("MmBackward0"), Pool::Temporary);
                if (w)
                    r.free(w, dequantBackward);
                if (lora) {
                    const size_t a = size_t(l) * 4 + (k == 3 ? 0 : 2);
                    for (size_t j = a; j < a + 2; ++j)
                        if (!grads[j])
                            grads[j] = r.alloc(rank * h * f32, accumulateGrad(), Pool::Gradient);
                }
                r.free(saved[k].first, engineRelease("MmBackward0"));
                r.free(g, kEngineFree);
            }
            r.free(inputs[size_t(l) + 1], engineRelease("CheckpointFunctionBackward"));
            const uint64_t next = r.alloc(act, engineAlloc("CheckpointFunctionBackward"), Pool::Temporary);
            r.free(flowing, kEngineFree);
            flowing = next;
        }
        r.free(inputs[0], engineRelease("EmbeddingBackward0"));
        r.free(flowing, kEngineFree);
        r.free(loss, loop);
        // PagedAdamW8bit over the adapters: 8-bit states on the first step (an adapter of r x h
        // elements is under 1e5 at these widths, so its states are not paged).
        const Frames stepLoop = Frames{{kSite + "accelerate/optimizer.py", "step", 171}} + loop;
        r.annotate("Optimizer.step#PagedAdamW8bit.step", true);
        if (step == 0)
            for (size_t k = 0; k < adapters; ++k)
                initState8bit(r, rank * h, stepLoop, mapsMoved, true);
        r.annotate("Optimizer.step#PagedAdamW8bit.step", false);
        for (uint64_t& g : grads) {
            r.free(g, Frames{{kTorch + "optim/optimizer.py", "zero_grad", 980}} + loop);
            g = 0;
        }
    }
    return r.finish();
}

} // namespace

SynthResult synthesizeQuantizedScenario(StackScenario scenario, int scale)
{
    switch (scenario) {
    case StackScenario::BnbAdam8bit: return bnbAdam8bit(scale, false);
    case StackScenario::BnbPagedAdam8bit: return bnbAdam8bit(scale, true);
    case StackScenario::Qlora: return qlora(scale);
    default: break;
    }
    throw std::invalid_argument("not a quantised fine-tuning scenario");
}

} // namespace poolscope::synth_detail
