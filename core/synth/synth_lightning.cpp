// PyTorch Lightning 2.x with automatic optimization (lightning/pytorch/loops/optimization/
// automatic.py): the loop calls optimizer.step(closure), and AdamW.step runs the closure under
// torch.enable_grad() before it reads a gradient. The closure is training_step (the forward),
// zero_grad (set_to_none: the last step's gradients let go of), then loss.backward(), and a detached
// clone of the loss kept for the progress bar. So the forward and the backward run inside
// Optimizer.step's record_function range and below its frames; only the innermost frame says which
// is which. The model built by the user on the CPU and moved by the strategy (model_to_device);
// each batch moved by transfer_batch_to_device; fp32; three steps. The user's files are called
// nothing a rule knows (run.py, model.py).
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"
#include "core/synth/synth_train_step.h"

namespace poolscope::synth_detail {

SynthResult lightningClosure(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale, tokens = 1024, f32 = 4;
    const Net net = makeNet(h, tokens, f32, f32);
    const std::vector<int64_t> weights = weightBytes(net);
    const std::string pl = kSite + "lightning/pytorch/";
    const Frames fit = Frames{{pl + "trainer/trainer.py", "_run", 981},
                              {pl + "trainer/trainer.py", "_fit_impl", 599},
                              {pl + "trainer/call.py", "_call_and_handle_interrupt", 47},
                              {pl + "trainer/trainer.py", "fit", 561}} +
                       kMain;
    const Frames toDevice = Frames{{pl + "strategies/single_device.py", "model_to_device", 79}, {pl + "trainer/trainer.py", "_run", 952}};
    for (size_t w = 0; w < weights.size(); ++w)
        r.alloc(weights[w], moveFrames(kApplyParam, Frames{{kSite + "lightning/fabric/utilities/device_dtype_mixin.py", "to", 55}} + toDevice + fit), Pool::Parameter);
    const Frames epoch = Frames{{pl + "loops/training_epoch_loop.py", "advance", 250},
                                {pl + "loops/training_epoch_loop.py", "run", 140},
                                {pl + "loops/fit_loop.py", "advance", 363},
                                {pl + "loops/fit_loop.py", "run", 205},
                                {pl + "trainer/trainer.py", "_run_stage", 1025}} +
                         fit;
    // AdamW.step (called by the precision plugin's optimizer_step), below Lightning's optimizer loop.
    const Frames step = Frames{{kTorch + "optim/adamw.py", "step", 209},
                               {kTorch + "optim/optimizer.py", "wrapper", 484},
                               {pl + "plugins/precision/precision.py", "optimizer_step", 122},
                               {pl + "strategies/strategy.py", "optimizer_step", 238},
                               {pl + "core/optimizer.py", "step", 153},
                               {pl + "core/module.py", "optimizer_step", 1306},
                               {pl + "trainer/call.py", "_call_lightning_module_hook", 167},
                               {pl + "loops/optimization/automatic.py", "_optimizer_step", 268},
                               {pl + "loops/optimization/automatic.py", "run", 190},
                               {pl + "loops/training_epoch_loop.py", "advance", 250}} +
                        Frames(epoch.begin() + 1, epoch.end());
    // The closure AdamW.step calls (adamw.py line 202: loss = closure()).
    const Frames closure = Frames{{pl + "loops/optimization/automatic.py", "closure", 129},
                                  {pl + "loops/optimization/automatic.py", "__call__", 144},
                                  {pl + "plugins/precision/precision.py", "_wrap_closure", 108},
                                  {kTorch + "optim/adamw.py", "step", 202}} +
                           Frames(step.begin() + 1, step.end());
    const Frames trainingStep = Frames{{kUser + "lit_model.py", "training_step", 41},
                                       {pl + "strategies/strategy.py", "training_step", 390},
                                       {pl + "trainer/call.py", "_call_strategy_hook", 319},
                                       {pl + "loops/optimization/automatic.py", "_training_step", 318}} +
                                closure;
    const Frames backward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                   {kTorch + "autograd/__init__.py", "backward", 267},
                                   {kTorch + "_tensor.py", "backward", 521},
                                   {pl + "core/module.py", "backward", 1090},
                                   {pl + "plugins/precision/precision.py", "backward", 72},
                                   {pl + "strategies/strategy.py", "backward", 212},
                                   {pl + "loops/optimization/automatic.py", "backward_fn", 235}} +
                            closure;
    const Frames zeroGrad = kCppFree + Frames{{kTorch + "optim/optimizer.py", "zero_grad", 986},
                                              {pl + "core/module.py", "optimizer_zero_grad", 1330},
                                              {pl + "loops/optimization/automatic.py", "zero_grad_fn", 285}} +
                            closure;
    const Frames batchMove = Frames{{kSite + "lightning/fabric/utilities/apply_func.py", "move_data_to_device", 103},
                                    {pl + "core/hooks.py", "transfer_batch_to_device", 583},
                                    {pl + "loops/training_epoch_loop.py", "advance", 228}} +
                             Frames(epoch.begin() + 1, epoch.end());
    std::vector<uint64_t> grads(weights.size(), 0);
    uint64_t keptLoss = 0;
    for (int s = 0; s < 3; ++s) {
        const uint64_t batch = r.alloc(tokens * 8, batchMove, Pool::Input);
        r.annotate("Optimizer.step#AdamW.step", true);
        Hooks hk;
        hk.startBackward = [&] {
            for (uint64_t& g : grads)
                if (g)
                    r.free(g, zeroGrad), g = 0;
        };
        hk.gradReady = [&](size_t w, uint64_t grad) { grads[w] = grad; };
        forwardBackward(r, net, Frames{{kUser + "lit_model.py", "forward", 30}} + kModuleCall + trainingStep, backward, hk);
        // _ClosureResult's detached clone of the loss, kept until the next step's replaces it.
        if (keptLoss)
            r.free(keptLoss, closure);
        keptLoss = r.alloc(4, Frames{{pl + "loops/optimization/automatic.py", "_clone_loss", 63}} + closure, Pool::Other);
        if (s == 0)
            for (int64_t b : weights) {
                const Frames init = Frames{{kTorch + "optim/adamw.py", "_init_group", 120}} + step;
                r.alloc(b, init, Pool::OptimizerState);
                r.alloc(b, init, Pool::OptimizerState);
            }
        const Frames update = Frames{{kTorch + "optim/adamw.py", "_multi_tensor_adamw", 640}, {kTorch + "optim/adamw.py", "adamw", 780}} + step;
        for (int64_t b : weights) {
            const uint64_t tmp = r.alloc(b, update, Pool::Temporary);
            r.free(tmp, update);
        }
        r.annotate("Optimizer.step#AdamW.step", false);
        r.free(batch, epoch);
    }
    return r.finish();
}

} // namespace poolscope::synth_detail
