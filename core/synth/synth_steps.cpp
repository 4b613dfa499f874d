#include "core/synth/synth_generator.h"

// Forward, backward and optimizer step of the synthetic training loop. Tensor sizes follow a GPT-2
// style block; which tensors stay alive follows what autograd saves (Korthikanti et al. 2022).

namespace poolscope::synth_detail {
namespace {

constexpr int64_t kCublasLtWorkspace = 1 << 20; // CUBLASLT_WORKSPACE_SIZE default, allocated per call
int64_t shardOf(int64_t numel, int ranks) { return (numel + ranks - 1) / ranks; }

} // namespace

void Generator::gatherLayer(int layer, bool backwardPass)
{
    // ZeRO-3: the layer's full parameters exist only while it runs.
    int64_t bytes = 0;
    for (size_t id : m_layerParams[size_t(layer)])
        bytes += m_params[id].numel * m_ep;
    const SynthSite site = backwardPass ? SynthSite::BackwardEngine : SynthSite::ShardGather;
    m_gathered.push_back(alloc(bytes, m_stacks.alloc(SynthOp::AllGather, site), Pool::Parameter));
}

void Generator::forward()
{
    const int64_t h = m_model.hidden, s = m_model.seq, b = m_model.microBatch, v = m_model.vocab;
    const int64_t sbh = s * b * h;
    auto st = [&](SynthOp op, SynthSite site) { return m_stacks.alloc(op, site); };

    Tensor tok = alloc(sbh * m_ea, st(SynthOp::Embedding, SynthSite::GptEmbedding), Pool::Temporary);
    Tensor pos = alloc(s * h * m_ea, st(SynthOp::Embedding, SynthSite::GptEmbedding), Pool::Temporary);
    m_layerInput[0] = alloc(sbh * m_ea, st(SynthOp::Add, SynthSite::GptEmbedding), Pool::Activation);
    release(tok, m_stacks.free(SynthSite::GptEmbedding));
    release(pos, m_stacks.free(SynthSite::GptEmbedding));

    for (int l = 0; l < m_model.layers; ++l) {
        if (m_model.zeroStage >= 3)
            gatherLayer(l, false);
        layerForward(l, false);
        hookCapture(l);
        if (m_model.zeroStage >= 3)
            releaseAll(m_gathered, m_stacks.free(SynthSite::ShardGather));
        tick(40);
    }

    m_head.lnf = alloc(sbh * m_ea, st(SynthOp::LayerNorm, SynthSite::GptHead), Pool::Activation);
    const bool autocast = m_model.dtype == SynthDtype::Autocast;
    if (variantLayers() && (m_model.dtype == SynthDtype::Mixed || autocast)) // the layers' weights are autocast's casts: so is lm_head's
        m_head.castHead = alloc(v * h * 2, st(SynthOp::AutocastCast, SynthSite::GptHead), Pool::CastCache);
    else if (m_model.dtype == SynthDtype::Mixed) // the model's own `.to(torch.bfloat16)`, kept for the backward
        m_head.castHead = alloc(v * h * 2, st(SynthOp::ToDevice, SynthSite::GptHead), Pool::Activation);
    if (autocast) // lm_head's fp32 input, cast by autocast for the matmul (not cached: kept for its backward)
        m_head.castIn = alloc(sbh * 2, st(SynthOp::AutocastCast, SynthSite::GptHead), Pool::Activation);
    temp(kCublasLtWorkspace, SynthOp::CublasWorkspace, SynthSite::GptHead);
    const int64_t eLogits = autocast ? 2 : m_ea;
    m_head.logits = alloc(b * s * v * eLogits, st(SynthOp::Linear, SynthSite::GptHead), Pool::Activation);
    // cross_entropy runs in fp32: 16-bit logits are upcast first.
    Tensor up;
    if (eLogits != 4)
        up = alloc(b * s * v * 4, st(SynthOp::ToDevice, SynthSite::Loss), Pool::Temporary);
    m_head.logp = alloc(b * s * v * 4, st(SynthOp::LogSoftmax, SynthSite::Loss), Pool::Activation);
    release(up, m_stacks.free(SynthSite::Loss));
    m_head.loss = alloc(4, st(SynthOp::LogSoftmax, SynthSite::Loss), Pool::Activation);
}

void Generator::layerForward(int layer, bool recompute)
{
    if (variantLayers()) {
        variantForward(layer);
        return;
    }
    const int64_t h = m_model.hidden, s = m_model.seq, b = m_model.microBatch, a = m_model.heads;
    const int64_t sbh = s * b * h, scores = a * s * s * b;
    const bool mixed = m_model.dtype == SynthDtype::Mixed;
    auto site = [&](SynthSite normal) { return recompute ? SynthSite::RecomputeHook : normal; };
    auto act = [&](int64_t bytes, SynthOp op, SynthSite where) {
        return alloc(bytes, m_stacks.alloc(op, site(where)), Pool::Activation);
    };
    auto tmp = [&](int64_t bytes, SynthOp op, SynthSite where) {
        return alloc(bytes, m_stacks.alloc(op, site(where)), Pool::Temporary);
    };
    auto drop = [&](Tensor& t, SynthSite where) { release(t, m_stacks.free(site(where))); };
    LayerActs& x = m_saved[size_t(layer)];

    x.ln1 = act(sbh * m_ea, SynthOp::LayerNorm, SynthSite::BlockLn1);
    if (mixed)
        x.castQkv = act(3 * h * h * 2, SynthOp::ToDevice, SynthSite::AttentionQkv);
    temp(kCublasLtWorkspace, SynthOp::CublasWorkspace, site(SynthSite::AttentionQkv));
    x.qkv = act(3 * sbh * m_ea, SynthOp::Linear, SynthSite::AttentionQkv);
    Tensor raw = tmp(scores * m_ea, SynthOp::Bmm, SynthSite::Attention); // q @ k^T, only softmax keeps it
    x.probs = act(scores * m_ea, SynthOp::Softmax, SynthSite::Attention);
    drop(raw, SynthSite::Attention);
    x.attnMask = act(scores, SynthOp::Dropout, SynthSite::Attention);
    x.attnDrop = act(scores * m_ea, SynthOp::Dropout, SynthSite::Attention);
    x.context = act(sbh * m_ea, SynthOp::Bmm, SynthSite::Attention);
    if (mixed)
        x.castProj = act(h * h * 2, SynthOp::ToDevice, SynthSite::AttentionProj);
    temp(kCublasLtWorkspace, SynthOp::CublasWorkspace, site(SynthSite::AttentionProj));
    Tensor proj = tmp(sbh * m_ea, SynthOp::Linear, SynthSite::AttentionProj);
    x.projMask = act(sbh, SynthOp::Dropout, SynthSite::AttentionProj);
    Tensor projDrop = tmp(sbh * m_ea, SynthOp::Dropout, SynthSite::AttentionProj);
    drop(proj, SynthSite::AttentionProj);
    x.residual = act(sbh * m_ea, SynthOp::Add, SynthSite::BlockLn1);
    drop(projDrop, SynthSite::BlockLn1);
    x.ln2 = act(sbh * m_ea, SynthOp::LayerNorm, SynthSite::BlockLn2);
    if (mixed)
        x.castFc1 = act(4 * h * h * 2, SynthOp::ToDevice, SynthSite::MlpFc);
    temp(kCublasLtWorkspace, SynthOp::CublasWorkspace, site(SynthSite::MlpFc));
    x.fc1 = act(4 * sbh * m_ea, SynthOp::Linear, SynthSite::MlpFc);
    x.gelu = act(4 * sbh * m_ea, SynthOp::Gelu, SynthSite::MlpAct);
    if (mixed)
        x.castFc2 = act(4 * h * h * 2, SynthOp::ToDevice, SynthSite::MlpFc);
    temp(kCublasLtWorkspace, SynthOp::CublasWorkspace, site(SynthSite::MlpFc));
    Tensor fc2 = tmp(sbh * m_ea, SynthOp::Linear, SynthSite::MlpFc);
    x.mlpMask = act(sbh, SynthOp::Dropout, SynthSite::MlpAct);
    if (recompute) {
        // Non-reentrant checkpointing stops once the last saved tensor is recomputed.
        drop(fc2, SynthSite::MlpAct);
        return;
    }
    Tensor mlpDrop = tmp(sbh * m_ea, SynthOp::Dropout, SynthSite::MlpAct);
    drop(fc2, SynthSite::MlpAct);
    m_layerInput[size_t(layer) + 1] = act(sbh * m_ea, SynthOp::Add, SynthSite::BlockLn2);
    drop(mlpDrop, SynthSite::BlockLn2);
    if (m_model.checkpointing) {
        // Full recompute: only the layer's input (and its output, the next input) survive.
        x.each([&](Tensor& t) { release(t, m_stacks.free(SynthSite::BlockLn2)); });
    }
}

void Generator::gradient(Param& p, SynthOp op)
{
    if (p.frozen)
        return; // autograd computes no gradient for a frozen weight
    const StackId freeEngine = m_stacks.free(SynthSite::BackwardEngine);
    const int64_t bytes = p.numel * m_ep;
    if (p.grad != 0) {
        // Already has a gradient (tied embedding, an earlier micro-batch, or kept by zero_grad(set_to_none=
        // False)): the node's output is added in place.
        Tensor t = alloc(bytes, m_stacks.backwardAlloc(op), Pool::Temporary);
        release(t, freeEngine);
        return;
    }
    if ((m_model.dtype == SynthDtype::Mixed || m_model.dtype == SynthDtype::Autocast) && p.cols > 0) {
        // The bf16 weight's gradient, cast to fp32 on its way into .grad.
        Tensor half = alloc(p.numel * 2, m_stacks.backwardAlloc(op), Pool::Temporary);
        Tensor g = alloc(bytes, m_stacks.backwardAlloc(SynthOp::Clone), Pool::Gradient);
        release(half, freeEngine);
        p.grad = g.addr;
    } else {
        // The node's output is contiguous: AccumulateGrad steals it as .grad (no clone, no copy).
        p.grad = alloc(bytes, m_stacks.backwardAlloc(op), Pool::Gradient).addr;
    }
    if (m_model.zeroStage >= 2 && m_model.dataParallel > 1) {
        // Reduce-scatter into this rank's shard; the full gradient goes.
        Tensor full{p.grad};
        Tensor part = alloc(shardOf(p.numel, m_model.dataParallel) * m_ep,
                            m_stacks.alloc(SynthOp::ReduceScatter, SynthSite::BackwardEngine), Pool::Gradient);
        release(full, freeEngine);
        p.grad = part.addr;
    }
}

void Generator::backward()
{
    const int64_t h = m_model.hidden, s = m_model.seq, b = m_model.microBatch, v = m_model.vocab;
    const int64_t sbh = s * b * h, bsv = b * s * v;
    const StackId fe = m_stacks.free(SynthSite::BackwardEngine);
    auto grad = [&](int64_t bytes, SynthOp op) { return alloc(bytes, m_stacks.backwardAlloc(op), Pool::Temporary); };

    Tensor seed = alloc(4, m_stacks.alloc(SynthOp::OnesLike, SynthSite::Loss), Pool::Temporary);
    Tensor dlogp = grad(bsv * 4, SynthOp::LogSoftmax);
    release(seed, fe);
    release(m_head.loss, fe);
    Tensor dlogits = grad(bsv * 4, SynthOp::LogSoftmax);
    release(dlogp, fe);
    release(m_head.logp, fe);
    const int64_t eLogits = m_model.dtype == SynthDtype::Autocast ? 2 : m_ea;
    if (eLogits != 4) {
        Tensor d16 = grad(bsv * eLogits, SynthOp::LogSoftmax);
        release(dlogits, fe);
        dlogits = d16;
    }
    temp(kCublasLtWorkspace, SynthOp::CublasWorkspace, SynthSite::BackwardEngine);
    Tensor dlnf = grad(sbh * m_ea, SynthOp::Linear);
    gradient(m_params[m_headParams[0]], SynthOp::Linear); // lm_head is tied to wte
    release(m_head.castHead, fe);
    release(m_head.castIn, fe);
    release(dlogits, fe);
    release(m_head.logits, fe);
    Tensor dx = grad(sbh * m_ea, SynthOp::LayerNorm);
    gradient(m_params[m_headParams[2]], SynthOp::LayerNorm);
    gradient(m_params[m_headParams[3]], SynthOp::LayerNorm);
    release(dlnf, fe);
    release(m_head.lnf, fe);
    release(m_layerInput[size_t(m_model.layers)], fe);

    for (int l = m_model.layers - 1; l >= 0; --l) {
        dx = layerBackward(l, dx);
        tick(60);
    }
    gradient(m_params[m_headParams[0]], SynthOp::Embedding);
    gradient(m_params[m_headParams[1]], SynthOp::Embedding);
    release(dx, fe);
}

Tensor Generator::layerBackward(int layer, Tensor dout)
{
    if (variantLayers())
        return variantBackward(layer, dout);
    const int64_t h = m_model.hidden, s = m_model.seq, b = m_model.microBatch, a = m_model.heads;
    const int64_t sbh = s * b * h, scores = a * s * s * b;
    const StackId fe = m_stacks.free(SynthSite::BackwardEngine);
    auto grad = [&](int64_t bytes, SynthOp op) { return alloc(bytes, m_stacks.backwardAlloc(op), Pool::Temporary); };
    auto param = [&](int i) -> Param& { return m_params[m_layerParams[size_t(layer)][size_t(i)]]; };
    auto workspace = [&] { temp(kCublasLtWorkspace, SynthOp::CublasWorkspace, SynthSite::BackwardEngine); };

    if (m_model.zeroStage >= 3)
        gatherLayer(layer, true);
    if (m_model.checkpointing)
        layerForward(layer, true);
    LayerActs& x = m_saved[size_t(layer)];

    Tensor dfc2 = grad(sbh * m_ea, SynthOp::Dropout);
    release(x.mlpMask, fe);
    workspace();
    Tensor dgelu = grad(4 * sbh * m_ea, SynthOp::Linear);
    gradient(param(10), SynthOp::Linear);
    gradient(param(11), SynthOp::Linear);
    release(x.castFc2, fe);
    release(x.gelu, fe);
    release(dfc2, fe);
    Tensor dfc1 = grad(4 * sbh * m_ea, SynthOp::Gelu);
    release(dgelu, fe);
    release(x.fc1, fe);
    workspace();
    Tensor dln2 = grad(sbh * m_ea, SynthOp::Linear);
    gradient(param(8), SynthOp::Linear);
    gradient(param(9), SynthOp::Linear);
    release(x.castFc1, fe);
    release(dfc1, fe);
    release(x.ln2, fe);
    Tensor dres = grad(sbh * m_ea, SynthOp::LayerNorm);
    gradient(param(6), SynthOp::LayerNorm);
    gradient(param(7), SynthOp::LayerNorm);
    release(dln2, fe);
    release(x.residual, fe);
    release(dout, fe); // added into dres in place

    Tensor dproj = grad(sbh * m_ea, SynthOp::Dropout);
    release(x.projMask, fe);
    workspace();
    Tensor dctx = grad(sbh * m_ea, SynthOp::Linear);
    gradient(param(4), SynthOp::Linear);
    gradient(param(5), SynthOp::Linear);
    release(x.castProj, fe);
    release(dproj, fe);
    release(x.context, fe);
    Tensor ddrop = grad(scores * m_ea, SynthOp::Bmm);
    Tensor dqkv = grad(3 * sbh * m_ea, SynthOp::Bmm);
    release(dctx, fe);
    release(x.attnDrop, fe);
    Tensor dprobs = grad(scores * m_ea, SynthOp::Dropout);
    release(ddrop, fe);
    release(x.attnMask, fe);
    Tensor dscores = grad(scores * m_ea, SynthOp::Softmax);
    release(dprobs, fe);
    release(x.probs, fe);
    release(dscores, fe); // q and k gradients land in dqkv
    workspace();
    Tensor dln1 = grad(sbh * m_ea, SynthOp::Linear);
    gradient(param(2), SynthOp::Linear);
    gradient(param(3), SynthOp::Linear);
    release(x.castQkv, fe);
    release(dqkv, fe);
    release(x.qkv, fe);
    Tensor din = grad(sbh * m_ea, SynthOp::LayerNorm);
    gradient(param(0), SynthOp::LayerNorm);
    gradient(param(1), SynthOp::LayerNorm);
    release(dln1, fe);
    release(x.ln1, fe);
    release(dres, fe); // added into din in place
    release(m_layerInput[size_t(layer)], fe);
    if (m_model.zeroStage >= 3)
        releaseAll(m_gathered, fe);
    return din;
}

void Generator::optimizerStep(bool first)
{
    // The optimizer holds the trainable parameters only.
    std::vector<Param*> trained;
    for (auto& p : m_params)
        if (!p.frozen)
            trained.push_back(&p);
    const int nd = m_model.dataParallel;
    auto stateNumel = [&](const Param& p) { return m_model.zeroStage >= 1 ? shardOf(p.numel, nd) : p.numel; };
    auto state = [&](int64_t numel, SynthOp op, SynthSite site) {
        return alloc(numel * m_ep, m_stacks.alloc(op, site), Pool::OptimizerState).addr;
    };
    const StackId updateFree = m_stacks.free(SynthSite::OptimizerUpdate);
    switch (m_model.optimizer) {
    case SynthOptimizer::AdamW:
    case SynthOptimizer::Adam: {
        if (first) {
            for (Param* p : trained) {
                p->state.push_back(state(stateNumel(*p), SynthOp::ZerosLike, SynthSite::OptimizerInit)); // exp_avg
                p->state.push_back(state(stateNumel(*p), SynthOp::ZerosLike, SynthSite::OptimizerInit)); // exp_avg_sq
            }
        }
        // exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs): one temporary per parameter, all alive at once.
        std::vector<Tensor> sqrt;
        for (Param* p : trained)
            sqrt.push_back(alloc(stateNumel(*p) * m_ep, m_stacks.alloc(SynthOp::ForeachSqrt, SynthSite::OptimizerUpdate), Pool::Temporary));
        releaseAll(sqrt, updateFree);
        break;
    }
    case SynthOptimizer::Sgd:
        break; // foreach add_ in place: nothing to allocate
    case SynthOptimizer::SgdMomentum:
        if (first)
            for (Param* p : trained)
                p->state.push_back(state(stateNumel(*p), SynthOp::Clone, SynthSite::OptimizerUpdate)); // momentum_buffer
        break;
    case SynthOptimizer::Lion:
        for (Param* p : trained) {
            if (first)
                p->state.push_back(state(stateNumel(*p), SynthOp::ZerosLike, SynthSite::OptimizerInit));
            temp(stateNumel(*p) * m_ep, SynthOp::ForeachMul, SynthSite::OptimizerUpdate); // the signed update
        }
        break;
    case SynthOptimizer::Adafactor:
        for (Param* p : trained) {
            if (first) {
                if (p->cols > 0) {
                    p->state.push_back(state(p->rows, SynthOp::ZerosLike, SynthSite::OptimizerInit)); // row_var
                    p->state.push_back(state(p->cols, SynthOp::ZerosLike, SynthSite::OptimizerInit)); // col_var
                } else {
                    p->state.push_back(state(p->numel, SynthOp::ZerosLike, SynthSite::OptimizerInit)); // variance
                }
            }
            temp(p->numel * m_ep, SynthOp::ForeachMul, SynthSite::OptimizerUpdate); // the reconstructed variance
        }
        break;
    }
}

} // namespace poolscope::synth_detail
