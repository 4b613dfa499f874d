// transformers' static-cache generate() with its decoding forward compiled under
// mode="reduce-overhead" (CUDA graph trees in a private pool), as a short dump with known pools. What
// the real stack does: synth_compiled.cpp's head.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_inductor.h"
#include "core/synth/synth_recorder.h"

#include <stdexcept>
#include <vector>

namespace poolscope::synth_detail {
namespace {
using namespace inductor;

// --- decoding under mode="reduce-overhead" ---------------------------------------------------------

// transformers' generate() with cache_implementation="static": the model in bf16, a StaticCache
// made before the prompt, the prompt's forward run eagerly, then each decoding step through the
// forward that generate() compiles (CompileConfig: fullgraph, mode="reduce-overhead"). Step one
// warms the CUDA graph tree up, step two records it, the rest replay it. Inference with
// reduce-overhead is what these dumps mostly are: it is the mode's documented use (launch-bound
// small batches: decoding, gpt-fast, transformers' static-cache generation, which turns it on by
// itself), and a training step rarely fits its constraints (no input mutation, static shapes).
class CudaGraphDecode {
public:
    explicit CudaGraphDecode(int scale) : h(512 * scale), ffn(1376 * scale) {}

    SynthResult run()
    {
        r.graphPoolId(0, 1); // torch.cuda.graph_pool_handle()
        loadModel();
        const std::string t = kSite + "transformers/";
        const Frames generate = Frames{{t + "generation/utils.py", "generate", 2255}} + kMain;
        // input_ids and the attention mask from the tokenizer, moved to the device by the caller.
        const uint64_t ids = r.alloc(kBatch * kPrompt * 8, Frames{{kUser + "run.py", "main", 31}} + kMain, Pool::Input);
        const uint64_t mask = r.alloc(kBatch * kPrompt * 8, Frames{{kUser + "run.py", "main", 31}} + kMain, Pool::Input);
        // StaticCache.__init__: a key and a value tensor per layer, zeros of the maximum length,
        // marked as static addresses (the graphs use them in place).
        const Frames cache = Frames{{t + "cache_utils.py", "__init__", 1174}, {t + "generation/utils.py", "_get_cache", 1689},
                                    {t + "generation/utils.py", "_prepare_cache_for_generation", 1803}} +
                             generate;
        for (int64_t l = 0; l < kLayers; ++l)
            for (int kv = 0; kv < 2; ++kv)
                r.alloc(kBatch * kMaxLen * h * bf, cache, Pool::KvCache);
        const Frames sample = Frames{{t + "generation/utils.py", "_sample", 3290}} + generate;
        uint64_t seq = ids;
        // The prompt: an eager forward (prefill is not compiled); logits for the last position only.
        prefill(sample);
        for (int step = 0; step < 8; ++step) {
            // prepare_inputs_for_generation: the last token and its position, made contiguous.
            const Frames prep = Frames{{t + "generation/utils.py", "prepare_inputs_for_generation", 420}} + sample;
            uint64_t tok = r.alloc(kBatch * 8, prep, Pool::Input);
            uint64_t pos = r.alloc(kBatch * 8, prep, Pool::Input);
            uint64_t cachePos = r.alloc(8, Frames{{t + "generation/utils.py", "_update_model_kwargs_for_generation", 966}} + sample, Pool::Input);
            uint64_t logits = decode(step, sample, tok, pos, cachePos);
            // next_token_logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32); the
            // processors, argmax, the next token appended to input_ids (a new tensor each step).
            const Frames at = Frames{{t + "generation/utils.py", "_sample", 3318}} + generate;
            uint64_t scores = r.alloc(kBatch * kVocab * f32, at, Pool::Temporary);
            if (step < 1)
                r.free(logits, at); // the warm-up's output goes with `outputs`; the recorded one is the graph's
            uint64_t next = r.alloc(kBatch * 8, Frames{{t + "generation/utils.py", "_sample", 3337}} + generate, Pool::Temporary);
            r.free(scores, Frames{{t + "generation/utils.py", "_sample", 3337}} + generate);
            const Frames cat = Frames{{t + "generation/utils.py", "_sample", 3345}} + generate;
            const uint64_t longer = r.alloc(kBatch * (kPrompt + step + 1) * 8, cat, Pool::Input);
            r.free(seq, cat);
            seq = longer;
            r.free(next, cat);
            r.free(tok, cat);
            r.free(pos, cat);
            r.free(cachePos, cat);
        }
        (void)mask;
        return r.finish();
    }

private:
    static constexpr int64_t kLayers = 4, kVocab = 16000, kPrompt = 128, kMaxLen = 512, kBatch = 4, bf = 2, f32 = 4;
    const int64_t h, ffn;
    Recorder r;

    void loadModel()
    {
        // from_pretrained(torch_dtype=bfloat16) then .to("cuda"): per layer q, k, v, o, gate, up,
        // down and two norms; the embedding, the final norm, the head.
        for (int64_t l = 0; l < kLayers; ++l)
            for (int64_t numel : {h * h, h * h, h * h, h * h, ffn * h, ffn * h, h * ffn, h, h})
                r.alloc(numel * bf, moveFrames(kApplyParam), Pool::Parameter);
        for (int64_t numel : {kVocab * h, h, kVocab * h})
            r.alloc(numel * bf, moveFrames(kApplyParam), Pool::Parameter);
    }

    void prefill(const Frames& sample)
    {
        const std::string m = kSite + "transformers/models/llama/modeling_llama.py";
        const Frames model = Frames{{m, "forward", 571}} + kModuleCall + Frames{{m, "forward", 835}} + kModuleCall + sample;
        const int64_t n = kBatch * kPrompt;
        uint64_t hidden = r.alloc(n * h * bf, Frames{{kTorch + "nn/modules/sparse.py", "forward", 190}} + kModuleCall + model, Pool::Temporary);
        for (int64_t l = 0; l < kLayers; ++l) {
            const Frames layer = Frames{{m, "forward", 325}} + kModuleCall + model;
            // Attention: q, k, v; the cache written in place (index_copy_); sdpa; o_proj; the MLP.
            std::vector<uint64_t> qkv;
            for (int k = 0; k < 3; ++k)
                qkv.push_back(r.alloc(n * h * bf, Frames{{m, "forward", 271}} + kModuleCall + layer, Pool::Temporary));
            const uint64_t attn = r.alloc(n * h * bf, Frames{{kTorch + "nn/functional.py", "scaled_dot_product_attention", 5560}} + layer, Pool::Temporary);
            for (uint64_t& a : qkv)
                r.free(a, layer);
            const uint64_t o = r.alloc(n * h * bf, Frames{{m, "forward", 297}} + kModuleCall + layer, Pool::Temporary);
            r.free(attn, layer);
            const uint64_t mid = r.alloc(n * h * bf, layer, Pool::Temporary);
            r.free(o, layer);
            r.free(hidden, layer);
            const uint64_t gate = r.alloc(n * ffn * bf, Frames{{m, "forward", 188}} + kModuleCall + layer, Pool::Temporary);
            const uint64_t up = r.alloc(n * ffn * bf, Frames{{m, "forward", 188}} + kModuleCall + layer, Pool::Temporary);
            const uint64_t down = r.alloc(n * h * bf, Frames{{m, "forward", 188}} + kModuleCall + layer, Pool::Temporary);
            r.free(gate, layer);
            r.free(up, layer);
            hidden = r.alloc(n * h * bf, layer, Pool::Temporary);
            r.free(down, layer);
            r.free(mid, layer);
        }
        // The head on the last position (logits_to_keep=1); generate copies them to fp32 and drops them.
        const uint64_t logits = r.alloc(kBatch * kVocab * bf, Frames{{m, "forward", 850}} + kModuleCall + sample, Pool::Activation);
        r.free(hidden, Frames{{m, "forward", 850}} + kModuleCall + sample);
        const uint64_t scores = r.alloc(kBatch * kVocab * f32, sample, Pool::Temporary);
        r.free(logits, sample);
        r.free(scores, sample);
    }

    // One decoding step through the compiled forward. Returns the logits block (step 0: the warm-up's
    // output in the pool; step 1: the graph's static output; later: the same block, no allocation).
    uint64_t decode(int step, const Frames& sample, uint64_t tok, uint64_t pos, uint64_t cachePos)
    {
        if (step >= 2)
            return m_static; // a replay: inputs copied into the static buffers, no allocator call
        const std::string cg = kTorch + "_inductor/cudagraph_trees.py";
        const std::string m = kSite + "transformers/models/llama/modeling_llama.py";
        const Frames outer = Frames{{kTorch + "_inductor/compile_fx.py", "run", 1459}, // cudagraphify's run
                                    {kAot + "utils.py", "call_func_at_runtime_with_args", 126},
                                    {kAot + "runtime_wrappers.py", "runtime_wrapper", 343},
                                    {kTorch + "_functorch/aot_autograd.py", "forward", 1201},
                                    {kTorch + "_dynamo/eval_frame.py", "_fn", 745},
                                    {m, "forward", 831},
                                    {kTorch + "_dynamo/eval_frame.py", "_fn", 574}} +
                             kModuleCall + sample;
        const bool warmup = step == 0;
        const Frames node = warmup ? Frames{{cg, "run", 700}, {cg, "run_eager", 2060}, {cg, "_run", 1957}, {cg, "run", 1850}}
                                   : Frames{{cg, "_record", 1120}, {cg, "__init__", 1002}, {cg, "record_function", 2091}, {cg, "_run", 1968}, {cg, "run", 1850}};
        const Frames tree = node + Frames{{cg, "run", 390}, {cg, "deferred_cudagraphify", 400}} + outer; // (frames outside the node)
        auto in = [&](int line) { return compiledGraph(kDecodeModule, line) + tree; };
        auto buf = [&](int64_t bytes, int line, Pool pool) { return r.alloc(bytes, kEmptyStrided + in(line), pool); };
        auto del = [&](uint64_t a, int line) { r.free(a, kCppFree + in(line)); };
        // Warm-up outputs are the forward's own; what is made while recording is the graph's
        // (its static output, and its buffers while captured: the pool's memory).
        const Pool scratch = warmup ? Pool::Temporary : Pool::Other, output = warmup ? Pool::Activation : Pool::Other;
        r.graphPool(true);
        std::vector<uint64_t> copies;
        if (!warmup) {
            // _allocate_and_copy_recording_inputs: the non-static inputs copied into the pool; the
            // call's args.clear() and `del` let them go inside the graph.
            const Frames copy = kCppAlloc + Frames{{cg, "static_input", 240}, {cg, "_allocate_and_copy_recording_inputs", 1802}, {cg, "__init__", 993},
                                                   {cg, "record_function", 2091}, {cg, "_run", 1968}, {cg, "run", 1850},
                                                   {cg, "run", 390}, {cg, "deferred_cudagraphify", 400}} +
                                outer;
            for (int k = 0; k < 3; ++k)
                copies.push_back(r.alloc(k < 2 ? kBatch * 8 : 8, copy, Pool::Other));
        }
        (void)tok;
        (void)pos;
        (void)cachePos;
        const int64_t n = kBatch; // one token per sequence
        uint64_t hidden = buf(n * h * bf, 200, scratch);
        for (uint64_t c : copies)
            del(c, 201);
        for (int64_t l = 0; l < kLayers; ++l) {
            const int base = 210 + int(l) * 60;
            uint64_t norm = buf(n * h * bf, base, scratch);
            uint64_t qkv = buf(3 * n * h * bf, base + 2, scratch);
            del(norm, base + 3);
            // Attention over the static cache, updated in place by the graph.
            uint64_t scores = buf(n * kMaxLen * f32 * 8, base + 8, scratch);
            uint64_t attn = buf(n * h * bf, base + 10, scratch);
            del(scores, base + 11);
            del(qkv, base + 11);
            uint64_t mid = buf(n * h * bf, base + 14, scratch);
            del(attn, base + 15);
            del(hidden, base + 15);
            uint64_t gate = buf(n * ffn * bf, base + 20, scratch);
            uint64_t act = buf(n * ffn * bf, base + 22, scratch);
            del(gate, base + 23);
            uint64_t down = buf(n * h * bf, base + 25, scratch);
            del(act, base + 26);
            hidden = buf(n * h * bf, base + 28, scratch);
            del(down, base + 29);
            del(mid, base + 29);
        }
        uint64_t norm = buf(n * h * bf, 460, scratch);
        del(hidden, 461);
        const uint64_t logits = buf(kBatch * kVocab * bf, 463, output);
        del(norm, 464);
        r.graphPool(false);
        if (!warmup)
            m_static = logits;
        return logits;
    }

    uint64_t m_static = 0;
};

} // namespace

SynthResult cudaGraphDecode(int scale) { return CudaGraphDecode(scale).run(); }

} // namespace poolscope::synth_detail
