// Training stacks whose step is not one forward then one backward of one model, as short dumps with
// known pools. The allocation sites and their order follow each library's own source (innermost
// frame first; line numbers of the versions read, only files and functions matter to a rule):
//   PipelineOneFOneB: torch.distributed.pipelining, a middle stage (1 of 4) under Schedule1F1B with
//     8 micro-batches, two steps. schedules.py PipelineScheduleSingle.step calls
//     stage.clear_runtime_states() first (the receive buffers' .grad = None), then
//     Schedule1F1B._step_microbatches -> _initialize_stage: _get_init_p2p_neighbors_ops (a torch.zeros
//     (1) and a torch.tensor(stage_index)), PipelineStage._prepare_forward_infra -> _shape_inference
//     (recv_object_list, torch.zeros_like of the inputs, a no_grad forward, send_object_list) and one
//     receive buffer per micro-batch (_make_tensor_from_meta: torch.empty, requires_grad_); then
//     _prepare_backward_infra -> _create_grad_recv_info: one gradient receive buffer per micro-batch.
//     Warm-up: num_stages - stage_index = 3 forwards (forward_one_chunk -> forward_maybe_with_nosync
//     -> the submodule on the receive buffer; fwd_cache keeps (output, inputs)); then B0 F3 B1 F4 ...
//     B4 F7, B5, cooldown B6 B7. backward_one_chunk pops fwd_cache and runs _backward.py stage_backward
//     -> torch.autograd.backward(stage_output, grad_tensors=the gradient receive buffer); the input's
//     gradient lands in the receive buffer's .grad (AccumulateGrad steals the engine's block) and stays
//     there after the send (bwd_cache pops only the reference) until the next step's
//     clear_runtime_states. Gradients accumulate over the micro-batches (made by the first, added in
//     place after); AdamW's moments on the first step; zero_grad(set_to_none) before each step.
//   DpoReference: trl DPOTrainer with a frozen reference model: both models from_pretrained
//     (accelerate set_module_tensor_to_device); per step transformers Trainer.training_step ->
//     DPOTrainer.compute_loss -> get_batch_loss_metrics: concatenated_forward(policy) (chosen and
//     rejected in one batch; the logits and their log_softmax kept for backward, per-token log-probs
//     gathered and summed), then compute_ref_log_probs under torch.no_grad:
//     concatenated_forward(ref_model) (scratch only, its summed log-probs kept until the loss), dpo_loss,
//     accelerator.backward(loss), AdamW's step, model.zero_grad(). The reference model has no
//     gradient and no optimizer state. Two steps.
//   Gan: the PyTorch DCGAN example's loop (examples/dcgan/main.py): netD.zero_grad(); D(real),
//     errD_real.backward(); fake = netG(noise); D(fake.detach()), errD_fake.backward() (D's gradients
//     added in place); optimizerD.step(); netG.zero_grad(); D(fake), errG.backward() (through D into G:
//     D's gradients added again, G's made); optimizerG.step(). `fake` stays bound until the next
//     iteration rebinds it. Two models, two Adams, three backward passes per iteration; two iterations.
// The user's files are called nothing a rule knows (run.py, model.py).
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_graph.h"
#include "core/synth/synth_recorder.h"
#include "core/synth/synth_train_step.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <vector>

namespace poolscope::synth_detail {
namespace {

// --- torch.distributed.pipelining, Schedule1F1B, a middle stage ------------------------------------

SynthResult pipelineOneFOneB(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale, tokens = 1024, f32 = 4;
    const int layers = 4, microbatches = 8, stages = 4, stageIndex = 1;
    const std::string pp = kTorch + "distributed/pipelining/";
    std::vector<int64_t> weightBytes;
    for (int l = 0; l < layers; ++l)
        for (int64_t cols : {h, 4 * h, 4 * h})
            weightBytes.push_back(h * cols * f32);
    // This rank's part of the model, moved to its device by the program before the stage is built.
    for (int64_t b : weightBytes)
        r.alloc(b, moveFrames(kApplyParam), Pool::Parameter);
    const Frames loop = {{kUser + "run.py", "main", 61}, {kUser + "run.py", "<module>", 77}};
    const Frames step = Frames{{pp + "schedules.py", "step", 581}} + loop;
    const Frames stepMb = Frames{{pp + "schedules.py", "_step_microbatches", 738}} + step;
    const Frames initStage = Frames{{pp + "schedules.py", "_initialize_stage", 540}} + stepMb;
    std::vector<Op> ops;
    for (int l = 0; l < layers; ++l)
        for (const Op& o : layerOps(tokens, h, f32, 3 * l))
            ops.push_back(o);
    const int64_t actBytes = tokens * h * f32; // what a stage receives and sends per micro-batch
    std::vector<uint64_t> recv(microbatches, 0), gradRecv(microbatches, 0), inputGrad(microbatches, 0), grads(weightBytes.size(), 0);
    for (int s = 0; s < 2; ++s) {
        zeroGrad(r, grads, loop);
        // step(): clear_runtime_states lets go of last step's input gradients (buffer.grad = None).
        for (uint64_t& g : inputGrad) {
            if (g)
                r.free(g, Frames{{pp + "stage.py", "clear_runtime_states", 431}} + step);
            g = 0;
        }
        if (s == 0) {
            const Frames p2p = Frames{{pp + "stage.py", "_get_init_p2p_neighbors_ops", 792}} + initStage;
            const uint64_t a = r.alloc(4, p2p, Pool::Temporary), b = r.alloc(4, p2p, Pool::Temporary);
            r.free(a, initStage);
            r.free(b, initStage);
            // _shape_inference: the previous stage's output metadata as a pickled object, zeros of the
            // inputs' shape, a forward under no_grad, this stage's metadata sent on.
            const Frames infer = Frames{{pp + "stage.py", "_shape_inference", 1290}, {pp + "stage.py", "_prepare_forward_infra", 1390}} + initStage;
            const Frames objRecv = Frames{{kTorch + "distributed/distributed_c10d.py", "recv_object_list", 3155}} + infer;
            const uint64_t sz = r.alloc(8, objRecv, Pool::Temporary), obj = r.alloc(512, objRecv, Pool::Temporary);
            r.free(obj, infer);
            r.free(sz, infer);
            const uint64_t zeros = r.alloc(actBytes, Frames{{kTorch + "utils/_pytree.py", "tree_map_only", 1080}} + infer, Pool::Temporary);
            const Frames inferFwd = Frames{{pp + "stage.py", "_shape_inference", 1303}} + initStage;
            const uint64_t out = forwardNoGrad(r, ops, [&](int line) { return inModel(line, inferFwd); }, Pool::Temporary);
            r.free(zeros, inferFwd);
            const Frames objSend = Frames{{kTorch + "distributed/distributed_c10d.py", "send_object_list", 3068}, {pp + "stage.py", "_shape_inference", 1345}} + initStage;
            const uint64_t so = r.alloc(512, objSend, Pool::Temporary), ss = r.alloc(8, objSend, Pool::Temporary);
            r.free(so, objSend);
            r.free(ss, objSend);
            r.free(out, infer);
            // One receive buffer per micro-batch, kept by args_recv_info for every later step.
            const Frames made = Frames{{pp + "stage.py", "_make_tensor_from_meta", 111}, {pp + "stage.py", "_prepare_forward_infra", 1407}} + initStage;
            for (uint64_t& b : recv)
                b = r.alloc(actBytes, made, Pool::Input);
            // _prepare_backward_infra: a gradient receive buffer per micro-batch (grad_recv_info).
            const Frames gmade = Frames{{pp + "stage.py", "_make_tensor_from_meta", 111}, {pp + "stage.py", "_create_grad_recv_info", 1441},
                                        {pp + "stage.py", "_prepare_backward_infra", 281}} +
                                 initStage;
            for (uint64_t& b : gradRecv)
                b = r.alloc(actBytes, gmade, Pool::Input);
        }
        // The schedule: the forward saves each operator's output on the receive buffer's input; the
        // stage's output is kept by fwd_cache (and the send) until its backward; the backward starts
        // from the gradient receive buffer (no root made) and leaves the input's gradient in the
        // receive buffer's .grad.
        std::vector<std::vector<Saved>> graph(microbatches);
        const Frames fwd = Frames{{pp + "stage.py", "forward_maybe_with_nosync", 551}, {pp + "stage.py", "forward_one_chunk", 642}} + stepMb;
        const Frames bwdCall = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                      {kTorch + "autograd/__init__.py", "backward", 267},
                                      {pp + "_backward.py", "stage_backward", 370},
                                      {pp + "stage.py", "<lambda>", 587},
                                      {pp + "stage.py", "backward_maybe_with_nosync", 630},
                                      {pp + "stage.py", "backward_one_chunk", 744}} +
                               stepMb;
        auto forward = [&](int mb) { graph[size_t(mb)] = forwardWithGrad(r, ops, [&](int line) { return inModel(line, fwd); }); };
        auto backward = [&](int mb) {
            std::vector<Saved>& g = graph[size_t(mb)];
            // The stage's output, the graph's root, is let go of once backward_one_chunk returns.
            const Saved output = g.back();
            g.pop_back();
            const uint64_t root = r.alloc(4, bwdCall, Pool::Temporary); // the engine's graph task
            inputGrad[size_t(mb)] = backwardGraph(r, g, actBytes, grads, weightBytes);
            r.free(root, kEngineFree);
            r.free(output.addr, Frames{{pp + "stage.py", "backward_one_chunk", 803}} + stepMb);
        };
        const int warmup = std::min(microbatches, stages - stageIndex);
        int f = 0, b = 0;
        for (; f < warmup; ++f)
            forward(f);
        while (true) {
            backward(b++);
            if (f == microbatches)
                break;
            forward(f++);
        }
        while (b < microbatches)
            backward(b++);
        adamwStep(r, weightBytes, s == 0, loop);
    }
    return r.finish();
}

// --- trl DPOTrainer with a frozen reference model ---------------------------------------------------

SynthResult dpoReference(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale, vocab = 8000, tokens = 2 * 2 * 256, f32 = 4;
    const int layers = 4;
    const std::string tf = kSite + "transformers/", trl = kSite + "trl/trainer/";
    const Frames load = Frames{{kSite + "accelerate/utils/modeling.py", "set_module_tensor_to_device", 329},
                               {tf + "modeling_utils.py", "_load_state_dict_into_meta_model", 915},
                               {tf + "modeling_utils.py", "_load_pretrained_model", 4329},
                               {tf + "modeling_utils.py", "from_pretrained", 3916}};
    // The same checkpoint twice: the policy, then the reference (AutoModelForCausalLM.from_pretrained
    // for ref_model), loaded alike; only the policy's parameters reach the optimizer.
    std::vector<int64_t> weightBytes;
    for (int l = 0; l < layers; ++l)
        for (int64_t cols : {h, 4 * h, 4 * h})
            weightBytes.push_back(h * cols * f32);
    const int64_t embedBytes = vocab * h * f32;
    for (int m = 0; m < 2; ++m) {
        const Frames at = load + Frames{{kUser + "run.py", "main", m == 0 ? 30 : 33}, {kUser + "run.py", "<module>", 77}};
        r.alloc(embedBytes, at, Pool::Parameter);
        for (int64_t b : weightBytes)
            r.alloc(b, at, Pool::Parameter);
    }
    std::vector<int64_t> trained = weightBytes;
    trained.insert(trained.begin(), embedBytes);
    const Frames loop = {{tf + "trainer.py", "_inner_training_loop", 2279}, {tf + "trainer.py", "train", 1938},
                         {kUser + "run.py", "main", 52}, {kUser + "run.py", "<module>", 77}};
    const Frames trainingStep = Frames{{tf + "trainer.py", "training_step", 3485}} + loop;
    const Frames metrics = Frames{{trl + "dpo_trainer.py", "get_batch_loss_metrics", 1434}, {trl + "dpo_trainer.py", "compute_loss", 1519},
                                  {tf + "trainer.py", "training_step", 3485}} +
                           loop;
    std::vector<Op> ops;
    ops.push_back({tokens * h * f32, 610, 0}); // the embedding's output (its node makes the embedding's gradient)
    for (int l = 0; l < layers; ++l)
        for (const Op& o : layerOps(tokens, h, f32, 1 + 3 * l))
            ops.push_back(o);
    ops.push_back({tokens * h * f32, 620, -1});     // the final norm
    ops.push_back({tokens * vocab * f32, 1190, -1}); // the logits (lm_head tied to the embedding)
    std::vector<uint64_t> grads(trained.size(), 0);
    for (int s = 0; s < 2; ++s) {
        // _prepare_inputs: the concatenated chosen and rejected ids, masks and labels.
        const Frames prep = Frames{{tf + "trainer.py", "_prepare_input", 3426}, {tf + "trainer.py", "_prepare_inputs", 3444}, {tf + "trainer.py", "training_step", 3478}} + loop;
        std::vector<uint64_t> batch;
        for (int k = 0; k < 3; ++k)
            batch.push_back(r.alloc(tokens * 8, prep, Pool::Input));
        // concatenated_forward(policy): the model's forward with grad, then the log-probs.
        const Frames cf = Frames{{trl + "dpo_trainer.py", "concatenated_forward", 1352}} + metrics;
        auto inLlama = [&](const Frames& caller) {
            return [caller, tf](int line) { return Frames{{tf + "models/llama/modeling_llama.py", "forward", line}} + kModuleCall + caller; };
        };
        std::vector<Saved> g = forwardWithGrad(r, ops, inLlama(cf));
        const Frames logp = Frames{{trl + "dpo_trainer.py", "concatenated_forward", 1377}} + metrics;
        g.push_back(Saved{r.alloc(tokens * vocab * f32, logp, Pool::Activation), tokens * vocab * f32, -1}); // log_softmax, saved
        const uint64_t perToken = r.alloc(tokens * f32, logp, Pool::Activation);                           // gather
        g.push_back(Saved{perToken, tokens * f32, -1});
        const uint64_t chosen = r.alloc(512, logp, Pool::Activation), rejected = r.alloc(512, logp, Pool::Activation);
        // compute_ref_log_probs: the reference model's forward under no_grad; its summed log-probs
        // are kept until the loss, everything else is scratch.
        const Frames ref = Frames{{trl + "dpo_trainer.py", "concatenated_forward", 1352}, {trl + "dpo_trainer.py", "compute_ref_log_probs", 1002},
                                  {trl + "dpo_trainer.py", "get_batch_loss_metrics", 1441}, {trl + "dpo_trainer.py", "compute_loss", 1519},
                                  {tf + "trainer.py", "training_step", 3485}} +
                           loop;
        // The logits are the reference forward's output, held by the caller past the forward until
        // their log_softmax is taken: an output (activation), as a no-grad forward's outputs are.
        const uint64_t refLogits = forwardNoGrad(r, ops, inLlama(ref), Pool::Activation);
        const Frames refLogp = Frames{{trl + "dpo_trainer.py", "concatenated_forward", 1377}} + Frames(ref.begin() + 1, ref.end());
        const uint64_t refLs = r.alloc(tokens * vocab * f32, refLogp, Pool::Temporary);
        r.free(refLogits, refLogp);
        const uint64_t refTok = r.alloc(tokens * f32, refLogp, Pool::Temporary);
        r.free(refLs, refLogp);
        const uint64_t refChosen = r.alloc(512, refLogp, Pool::Activation), refRejected = r.alloc(512, refLogp, Pool::Activation);
        r.free(refTok, refLogp);
        // dpo_loss: logsigmoid of the margins; the loss.
        const Frames lossAt = Frames{{trl + "dpo_trainer.py", "dpo_loss", 1150}, {trl + "dpo_trainer.py", "get_batch_loss_metrics", 1450}} + Frames(metrics.begin() + 1, metrics.end());
        const uint64_t margin = r.alloc(512, lossAt, Pool::Activation);
        const uint64_t loss = r.alloc(512, lossAt, Pool::Activation);
        r.free(refChosen, trainingStep);
        r.free(refRejected, trainingStep);
        // accelerator.backward(loss): the engine frees the policy's graph and makes its gradients.
        const Frames bwdCall = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                      {kTorch + "autograd/__init__.py", "backward", 267},
                                      {kTorch + "_tensor.py", "backward", 521},
                                      {kSite + "accelerate/accelerator.py", "backward", 2159},
                                      {tf + "trainer.py", "training_step", 3518}} +
                               loop;
        const uint64_t root = r.alloc(4, bwdCall, Pool::Temporary);
        r.free(margin, engineRelease("LogSigmoidBackward0"));
        r.free(chosen, engineRelease("SubBackward0"));
        r.free(rejected, engineRelease("SubBackward0"));
        const uint64_t last = backwardGraph(r, g, 512, grads, trained);
        r.free(last, kEngineFree);
        r.free(root, kEngineFree);
        r.free(loss, trainingStep);
        for (uint64_t b : batch)
            r.free(b, trainingStep);
        // optimizer.step(), then model.zero_grad() (the Trainer sets .grad to None after the step).
        adamwStep(r, trained, s == 0, Frames{{kSite + "accelerate/optimizer.py", "step", 171}} + loop);
        zeroGrad(r, grads, Frames{{tf + "trainer.py", "_inner_training_loop", 2340}} + Frames(loop.begin() + 1, loop.end()));
    }
    return r.finish();
}

// --- a GAN: two models, two optimizers, alternating steps (the DCGAN example) ---------------------

SynthResult gan(int scale)
{
    Recorder r;
    const int64_t batch = 128, nz = 100, ngf = 64 * scale, ndf = 64 * scale, f32 = 4;
    // Generator: ConvTranspose2d nz->8ngf (4x4), 8ngf->4ngf, 4ngf->2ngf, 2ngf->ngf, ngf->3 (64x64),
    // BatchNorm after all but the last. Discriminator: Conv2d 3->ndf, ndf->2ndf, 2ndf->4ndf,
    // 4ndf->8ndf, 8ndf->1, BatchNorm after the middle three. Kernels 4x4.
    const std::vector<std::pair<int64_t, int64_t>> gConv = {{nz, 8 * ngf}, {8 * ngf, 4 * ngf}, {4 * ngf, 2 * ngf}, {2 * ngf, ngf}, {ngf, 3}};
    const std::vector<std::pair<int64_t, int64_t>> dConv = {{3, ndf}, {ndf, 2 * ndf}, {2 * ndf, 4 * ndf}, {4 * ndf, 8 * ndf}, {8 * ndf, 1}};
    const std::vector<int64_t> gSide = {4, 8, 16, 32, 64}, dSide = {32, 16, 8, 4, 1};
    std::vector<int64_t> gW, dW;
    for (size_t k = 0; k < gConv.size(); ++k) {
        gW.push_back(gConv[k].first * gConv[k].second * 16 * f32);
        if (k + 1 < gConv.size()) {
            gW.push_back(gConv[k].second * f32); // BatchNorm weight and bias
            gW.push_back(gConv[k].second * f32);
        }
    }
    for (size_t k = 0; k < dConv.size(); ++k) {
        dW.push_back(dConv[k].first * dConv[k].second * 16 * f32);
        if (k > 0 && k + 1 < dConv.size()) {
            dW.push_back(dConv[k].second * f32);
            dW.push_back(dConv[k].second * f32);
        }
    }
    // netG = Generator().to(device); netG.apply(weights_init); the same for netD.
    for (int64_t b : gW)
        r.alloc(b, moveFrames(kApplyParam), Pool::Parameter);
    for (int64_t b : dW)
        r.alloc(b, moveFrames(kApplyParam), Pool::Parameter);
    // BatchNorm's running mean and var are buffers: made with the model, moved alike.
    for (size_t k = 0; k + 1 < gConv.size(); ++k)
        for (int j = 0; j < 2; ++j)
            r.alloc(gConv[k].second * f32, moveFrames(kApplyParam + 20), Pool::Parameter);
    for (size_t k = 1; k + 1 < dConv.size(); ++k)
        for (int j = 0; j < 2; ++j)
            r.alloc(dConv[k].second * f32, moveFrames(kApplyParam + 20), Pool::Parameter);
    // Operators with their saved outputs; weight indices into gW / dW.
    std::vector<Op> gOps, dOps;
    {
        int w = 0;
        for (size_t k = 0; k < gConv.size(); ++k) {
            const int64_t out = batch * gConv[k].second * gSide[k] * gSide[k] * f32;
            const int conv = w++;
            gOps.push_back({out, 100 + int(k) * 3, conv}); // the transposed conv's output, BatchNorm's input
            if (k + 1 < gConv.size()) {
                gOps.push_back({gConv[k].second * f32, 101 + int(k) * 3, -1}); // BatchNorm's saved mean
                gOps.push_back({gConv[k].second * f32, 101 + int(k) * 3, -1}); // and invstd
                gOps.push_back({out, 101 + int(k) * 3, w});                    // its output, ReLU(inplace)
                w += 2;
            } else {
                gOps.push_back({out, 116, -1}); // Tanh: fake
            }
        }
    }
    {
        int w = 0;
        for (size_t k = 0; k < dConv.size(); ++k) {
            const int64_t out = batch * dConv[k].second * dSide[k] * dSide[k] * f32;
            const int conv = w++;
            dOps.push_back({out, 200 + int(k) * 3, conv});
            if (k > 0 && k + 1 < dConv.size()) {
                dOps.push_back({dConv[k].second * f32, 201 + int(k) * 3, -1});
                dOps.push_back({dConv[k].second * f32, 201 + int(k) * 3, -1});
                dOps.push_back({out, 201 + int(k) * 3, w}); // LeakyReLU(inplace) on it
                w += 2;
            }
        }
        dOps.push_back({batch * f32, 216, -1}); // Sigmoid
    }
    auto at = [](int line) -> At {
        return [line](int l) { return inModel(l, Frames{{kUser + "main.py", "<module>", line}}); };
    };
    auto lineAt = [](int line) { return Frames{{kUser + "main.py", "<module>", line}}; };
    const Frames bwd = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                              {kTorch + "autograd/__init__.py", "backward", 267},
                              {kTorch + "_tensor.py", "backward", 521}};
    std::vector<uint64_t> gGrads(gW.size(), 0), dGrads(dW.size(), 0);
    uint64_t fake = 0, real = 0, label = 0, noise = 0;
    // The loop's names hold their tensors until the next iteration rebinds them.
    auto rebind = [&](uint64_t& name, uint64_t made, int line) {
        if (name)
            r.free(name, lineAt(line));
        name = made;
    };
    std::vector<Saved> gGraph;
    for (int it = 0; it < 2; ++it) {
        // (1) Update D: maximize log(D(x)) + log(1 - D(G(z))).
        zeroGrad(r, dGrads, lineAt(233)); // netD.zero_grad()
        rebind(real, r.alloc(batch * 3 * 64 * 64 * f32, lineAt(235), Pool::Input), 235); // data[0].to(device)
        rebind(label, r.alloc(batch * f32, lineAt(237), Pool::Input), 237);             // torch.full
        std::vector<Saved> dg = forwardWithGrad(r, dOps, at(239));
        const uint64_t errReal = r.alloc(4, lineAt(241), Pool::Activation); // criterion(output, label): a scalar
        {
            const uint64_t root = r.alloc(4, bwd + lineAt(242), Pool::Temporary);
            r.free(errReal, engineRelease("BinaryCrossEntropyBackward0"));
            const uint64_t last = backwardGraph(r, dg, batch * f32, dGrads, dW);
            r.free(last, kEngineFree);
            r.free(root, kEngineFree);
        }
        // fake = netG(noise): G's graph is kept (for errG.backward below); the previous fake goes as
        // the name is rebound.
        rebind(noise, r.alloc(batch * nz * f32, lineAt(246), Pool::Input), 246);
        gGraph = forwardWithGrad(r, gOps, at(248));
        rebind(fake, gGraph.back().addr, 248);
        // D(fake.detach()): D's graph alone; errD_fake.backward() adds into D's gradients.
        dg = forwardWithGrad(r, dOps, at(251));
        const uint64_t errFake = r.alloc(4, lineAt(253), Pool::Activation);
        {
            const uint64_t root = r.alloc(4, bwd + lineAt(254), Pool::Temporary);
            r.free(errFake, engineRelease("BinaryCrossEntropyBackward0"));
            const uint64_t last = backwardGraph(r, dg, batch * f32, dGrads, dW);
            r.free(last, kEngineFree);
            r.free(root, kEngineFree);
        }
        adamwStep(r, dW, it == 0, lineAt(258), "Optimizer.step#Adam.step");
        // (2) Update G: maximize log(D(G(z))).
        zeroGrad(r, gGrads, lineAt(262)); // netG.zero_grad()
        dg = forwardWithGrad(r, dOps, at(265)); // D(fake): its graph runs into G's
        const uint64_t errG = r.alloc(4, lineAt(267), Pool::Activation);
        {
            const uint64_t root = r.alloc(4, bwd + lineAt(268), Pool::Temporary);
            r.free(errG, engineRelease("BinaryCrossEntropyBackward0"));
            // Through D (its gradients added in place), then into G's graph from fake's gradient.
            const uint64_t intoG = backwardGraph(r, dg, batch * f32, dGrads, dW);
            // G's saved tensors except fake itself, which `fake` keeps bound.
            const Saved keptFake = gGraph.back();
            gGraph.pop_back();
            const uint64_t last = backwardGraph(r, gGraph, keptFake.bytes, gGrads, gW);
            r.free(intoG, kEngineFree);
            r.free(last, kEngineFree);
            r.free(root, kEngineFree);
        }
        adamwStep(r, gW, it == 0, lineAt(271), "Optimizer.step#Adam.step");
    }
    return r.finish();
}

} // namespace

SynthResult synthesizeMultiPassScenario(StackScenario scenario, int scale)
{
    switch (scenario) {
    case StackScenario::PipelineOneFOneB: return pipelineOneFOneB(scale);
    case StackScenario::DpoReference: return dpoReference(scale);
    case StackScenario::Gan: return gan(scale);
    default: break;
    }
    throw std::invalid_argument("not a multi-pass training scenario");
}

} // namespace poolscope::synth_detail
