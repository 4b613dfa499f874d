// A post-training quantisation calibration run as a short dump with known pools: GPTQ's reference
// implementation (IST-DASLab/gptq llama.py `llama_sequential` and gptq.py `GPTQ`), which projects
// copy into their own files (and AutoGPTQ, GPTQModel, SparseGPT and Wanda follow), so every name
// here is the user's. Nothing trains: no backward, no optimizer; the run keeps what no training
// run has — a Hessian per linear layer, (in x in) fp32, accumulated over every calibration sample
// by forward hooks — and moves the model onto the device one decoder layer at a time.
//
// What the reference code does, in order (all under @torch.no_grad()):
//   the embedding and the final norm moved to the device, layer 0 too; inps = torch.zeros(
//   (nsamples, seqlen, hidden), fp16); a Catcher in place of layer 0 copies each sample's embedding
//   output into inps[i], keeps the attention mask, and raises; layer 0, the embedding and the norm
//   go back to the host; torch.cuda.empty_cache(); outs = torch.zeros_like(inps). Then per layer:
//   layer = layers[i].to(dev); GPTQ(linear) for its seven linears: H = torch.zeros((columns,
//   columns)) fp32; forward hooks call add_batch(inp): H *= n / (n + 1) in place, inp =
//   sqrt(2 / n) * inp.float() (the fp32 copy, then the scaled one), H += inp.matmul(inp.t());
//   every sample through the layer (outs[j] = layer(inps[j])[0]); the hooks removed; fasterquant
//   per linear: W = weight.clone().float(), Losses and Q = zeros_like(W), H = cholesky(H),
//   cholesky_inverse, cholesky(upper) (each a new (in x in) fp32, the old one dropped), per block
//   of 128 columns W1 = W[:, i1:i2].clone(), Q1, Err1, Losses1, and W[:, i2:] -= Err1 @ Hinv[...],
//   then weight.data = Q.to(fp16) (a new weight, the old one freed) and the rest dropped; every
//   sample through the quantised layer again; layers[i] = layer.cpu(); del gptq;
//   torch.cuda.empty_cache(); inps, outs = outs, inps.
//
// True pools, as a user acts on them: the weights on the device are parameters (each layer's only
// while it is there); inps and outs, the calibration samples' hidden states carried from layer to
// layer (nsamples x seqlen x hidden), are inputs (they scale with the samples a user chooses); the
// attention mask kept for every layer is an input; the Hessians are state of the algorithm, not of
// the model nor of the batch: other; everything a forward or fasterquant makes and drops is
// temporary.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"

#include <algorithm>
#include <vector>

namespace poolscope::synth_detail {
namespace {

// The user's copy of the reference scripts.
const std::string kRepo = kUser + "gptq/";
const Frames kNoGrad = {{kTorch + "utils/_contextlib.py", "decorate_context", 115}};

Frames sequential(int line) { return Frames{{kRepo + "llama.py", "llama_sequential", line}} + kNoGrad + Frames{{kRepo + "llama.py", "<module>", 302}}; }

// transformers' LlamaDecoderLayer called from llama_sequential's sample loop.
Frames decoder(int line, const Frames& caller)
{
    return Frames{{kSite + "transformers/models/llama/modeling_llama.py", "forward", line}} + kModuleCall + caller;
}

struct Layer {
    int64_t h, ffn, tokens;
};

// One linear's output under the layer's forward; with hooks on, GPTQ.add_batch first reads its
// input: the fp32 copy, the scaled copy, and X Xᵀ added into H.
uint64_t linear(Recorder& r, int64_t inWidth, int64_t outWidth, const Layer& l, const Frames& at, bool hooks)
{
    const uint64_t out = r.alloc(l.tokens * outWidth * 2, Frames{{kTorch + "nn/modules/linear.py", "forward", 117}} + kModuleCall + at,
                                 Pool::Temporary);
    if (hooks) {
        const Frames hook = Frames{{kRepo + "gptq.py", "add_batch", 0}, {kRepo + "llama.py", "tmp", 118},
                                   {kTorch + "nn/modules/module.py", "_call_impl", 1581}} +
                            at;
        auto in = [&](int line) {
            Frames f = hook;
            f[0].line = line;
            return f;
        };
        const uint64_t f32 = r.alloc(l.tokens * inWidth * 4, in(45), Pool::Temporary);
        const uint64_t scaled = r.alloc(l.tokens * inWidth * 4, in(45), Pool::Temporary);
        r.free(f32, in(45));
        const uint64_t xxt = r.alloc(inWidth * inWidth * 4, in(47), Pool::Temporary);
        r.free(xxt, in(47));
        r.free(scaled, in(47));
    }
    return out;
}

// A LlamaDecoderLayer's forward on one sample (seqlen tokens); returns its output.
uint64_t layerForward(Recorder& r, const Layer& l, const Frames& caller, bool hooks)
{
    const int64_t T = l.tokens, h = l.h;
    auto norm = [&](int line) {
        const Frames at = Frames{{kSite + "transformers/models/llama/modeling_llama.py", "forward", 74}} + kModuleCall + decoder(line, caller);
        const uint64_t f = r.alloc(T * h * 4, at, Pool::Temporary);
        const uint64_t out = r.alloc(T * h * 2, at, Pool::Temporary);
        r.free(f, at);
        return out;
    };
    const Frames attn = Frames{{kSite + "transformers/models/llama/modeling_llama.py", "forward", 320}} + kModuleCall + decoder(734, caller);
    const uint64_t x = norm(730);
    const uint64_t q = linear(r, h, h, l, attn, hooks);
    const uint64_t k = linear(r, h, h, l, attn, hooks);
    const uint64_t v = linear(r, h, h, l, attn, hooks);
    r.free(x, attn);
    const uint64_t qr = r.alloc(T * h * 2, attn, Pool::Temporary);
    const uint64_t kr = r.alloc(T * h * 2, attn, Pool::Temporary);
    r.free(q, attn);
    r.free(k, attn);
    const uint64_t ctx = r.alloc(T * h * 2, attn, Pool::Temporary);
    r.free(qr, attn);
    r.free(kr, attn);
    r.free(v, attn);
    const uint64_t o = linear(r, h, h, l, attn, hooks);
    r.free(ctx, attn);
    const uint64_t res1 = r.alloc(T * h * 2, decoder(741, caller), Pool::Temporary);
    r.free(o, decoder(741, caller));
    const uint64_t y = norm(745);
    const Frames mlp = Frames{{kSite + "transformers/models/llama/modeling_llama.py", "forward", 210}} + kModuleCall + decoder(746, caller);
    const uint64_t gate = linear(r, h, l.ffn, l, mlp, hooks);
    const uint64_t act = r.alloc(T * l.ffn * 2, mlp, Pool::Temporary);
    r.free(gate, mlp);
    const uint64_t up = linear(r, h, l.ffn, l, mlp, hooks);
    const uint64_t prod = r.alloc(T * l.ffn * 2, mlp, Pool::Temporary);
    r.free(act, mlp);
    r.free(up, mlp);
    r.free(y, mlp);
    const uint64_t down = linear(r, l.ffn, h, l, mlp, hooks);
    r.free(prod, mlp);
    const uint64_t out = r.alloc(T * h * 2, decoder(747, caller), Pool::Temporary);
    r.free(down, decoder(747, caller));
    r.free(res1, decoder(747, caller));
    return out;
}

// GPTQ.fasterquant on one linear (rows x cols fp16 weight): returns the new quantised weight.
uint64_t fasterquant(Recorder& r, uint64_t weight, uint64_t& hessian, int64_t rows, int64_t cols)
{
    const Frames caller = sequential(139);
    auto at = [&](int line) { return Frames{{kRepo + "gptq.py", "fasterquant", line}} + caller; };
    const uint64_t clone = r.alloc(rows * cols * 2, at(53), Pool::Temporary);
    const uint64_t W = r.alloc(rows * cols * 4, at(54), Pool::Temporary);
    r.free(clone, at(54));
    const uint64_t dead = r.alloc(cols, at(63), Pool::Temporary);
    const uint64_t losses = r.alloc(rows * cols * 4, at(67), Pool::Temporary);
    const uint64_t Q = r.alloc(rows * cols * 4, at(68), Pool::Temporary);
    r.free(dead, at(69));
    const uint64_t diag = r.alloc(cols * 8, at(71), Pool::Temporary);
    // self.H was deleted; the local H is the last reference: each factorisation replaces it.
    uint64_t H = hessian;
    hessian = 0;
    for (int line : {73, 74, 75}) {
        const uint64_t next = r.alloc(cols * cols * 4, at(line), Pool::Temporary);
        r.free(H, at(line));
        H = next;
    }
    r.free(diag, at(76));
    for (int64_t i1 = 0; i1 < cols; i1 += 128) {
        const int64_t n = std::min<int64_t>(128, cols - i1);
        const uint64_t W1 = r.alloc(rows * n * 4, at(82), Pool::Temporary);
        const uint64_t Q1 = r.alloc(rows * n * 4, at(83), Pool::Temporary);
        const uint64_t Err1 = r.alloc(rows * n * 4, at(84), Pool::Temporary);
        const uint64_t L1 = r.alloc(rows * n * 4, at(85), Pool::Temporary);
        if (cols - i1 - n > 0) {
            const uint64_t upd = r.alloc(rows * (cols - i1 - n) * 4, at(113), Pool::Temporary);
            r.free(upd, at(113));
        }
        for (uint64_t b : {W1, Q1, Err1, L1})
            r.free(b, at(115));
    }
    const uint64_t quantised = r.alloc(rows * cols * 2, at(130), Pool::Parameter);
    r.free(weight, at(130));
    for (uint64_t b : {W, losses, Q, H})
        r.free(b, caller);
    return quantised;
}

} // namespace

SynthResult gptqCalibration(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale, ffn = 1376 * scale, vocab = 8000, seqlen = 256, nsamples = 8, layers = 4;
    const Layer l{h, ffn, seqlen};
    // model.model.embed_tokens.to(dev), model.model.norm.to(dev), layers[0].to(dev).
    const uint64_t embed = r.alloc(vocab * h * 2, moveFrames(kApplyParam), Pool::Parameter);
    const uint64_t finalNorm = r.alloc(h * 2, moveFrames(kApplyParam), Pool::Parameter);
    // A decoder layer's weights: q, k, v, o (h x h), gate, up (ffn x h), down (h x ffn), two norms.
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{h, h}, {h, h}, {h, h}, {h, h}, {ffn, h}, {ffn, h}, {h, ffn}};
    auto moveIn = [&] {
        std::vector<uint64_t> w;
        for (auto [rows, cols] : shapes)
            w.push_back(r.alloc(rows * cols * 2, moveFrames(kApplyParam), Pool::Parameter));
        for (int k = 0; k < 2; ++k)
            w.push_back(r.alloc(h * 2, moveFrames(kApplyParam), Pool::Parameter));
        return w;
    };
    std::vector<uint64_t> weights = moveIn();
    uint64_t inps = r.alloc(nsamples * seqlen * h * 2, sequential(74), Pool::Input);
    // The Catcher: the model's forward up to layer 0, whose input is copied into inps[i].
    const Frames modelCall = Frames{{kSite + "transformers/models/llama/modeling_llama.py", "forward", 1189}} + kModuleCall + sequential(88);
    uint64_t mask = 0;
    for (int s = 0; s < nsamples; ++s) {
        const uint64_t ids = r.alloc(seqlen * 8, sequential(88), Pool::Input);
        const uint64_t emb = r.alloc(seqlen * h * 2, Frames{{kTorch + "nn/modules/sparse.py", "forward", 163}} + kModuleCall + modelCall, Pool::Temporary);
        const Frames maskAt = Frames{{kSite + "transformers/models/llama/modeling_llama.py", "_update_causal_mask", 1071}} + modelCall;
        const uint64_t m = r.alloc(seqlen * seqlen * 2, maskAt, Pool::Input);
        // cache['attention_mask'] = kwargs['attention_mask']: the last sample's mask stays.
        if (mask)
            r.free(mask, maskAt);
        mask = m;
        const Frames raise = Frames{{kRepo + "llama.py", "forward", 81}} + kModuleCall + modelCall;
        r.free(emb, raise);
        r.free(ids, sequential(90));
    }
    // layers[0].cpu(), embed_tokens.cpu(), norm.cpu(), then torch.cuda.empty_cache().
    for (uint64_t w : weights)
        r.free(w, moveFrames(kApplyParam));
    r.free(embed, moveFrames(kApplyParam));
    r.free(finalNorm, moveFrames(kApplyParam));
    r.emptyCache(sequential(99));
    uint64_t outs = r.alloc(nsamples * seqlen * h * 2, sequential(101), Pool::Input);
    for (int i = 0; i < layers; ++i) {
        // layer = layers[i].to(dev): layer 0 too, sent back to the host after the Catcher.
        weights = moveIn();
        std::vector<uint64_t> hessians;
        for (auto [rows, cols] : shapes) {
            (void)rows;
            hessians.push_back(r.alloc(cols * cols * 4, Frames{{kRepo + "gptq.py", "__init__", 27}} + sequential(113), Pool::Other));
        }
        for (int pass = 0; pass < 2; ++pass) {
            // pass 0: with the hooks (add_batch into every H); pass 1: the quantised layer again.
            for (int s = 0; s < nsamples; ++s) {
                const uint64_t out = layerForward(r, l, sequential(pass == 0 ? 124 : 148), pass == 0);
                r.free(out, sequential(pass == 0 ? 124 : 148));
            }
            if (pass == 0)
                for (size_t k = 0; k < shapes.size(); ++k)
                    weights[k] = fasterquant(r, weights[k], hessians[k], shapes[k].first, shapes[k].second);
        }
        // layers[i] = layer.cpu(); del layer; del gptq; torch.cuda.empty_cache(); swap.
        for (uint64_t w : weights)
            r.free(w, moveFrames(kApplyParam));
        r.emptyCache(sequential(155));
        std::swap(inps, outs);
    }
    r.free(mask, sequential(160));
    return r.finish();
}

} // namespace poolscope::synth_detail
