// torchtune's full fine-tune with optimizer_in_bwd=True (recipes/full_finetune_single_device.py,
// torchtune/training/memory.py): one torch.optim.AdamW per parameter, stepped by the parameter's
// post-accumulate-grad hook inside the backward, then zero_grad(set_to_none) on it:
//   register_optim_in_bwd_hooks: p.register_post_accumulate_grad_hook(optim_step), optim_step:
//     optim_dict[param].step(); optim_dict[param].zero_grad()
// So each weight's gradient is made by AccumulateGrad, its AdamW step runs at once (at the first step
// _init_group makes exp_avg and exp_avg_sq; _multi_tensor_adamw's sqrt of exp_avg_sq is its one
// temporary), and the gradient is let go of before the engine moves on: no gradient outlives its
// node, and the optimizer's state is made inside the first backward. bf16 weights and state; the
// model loaded by the recipe's checkpointer. Three steps. The user's files are called nothing a rule
// knows (run.py, model.py).
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"
#include "core/synth/synth_train_step.h"

namespace poolscope::synth_detail {

SynthResult optimizerInBackward(int scale)
{
    Recorder r;
    const int64_t h = 512 * scale, tokens = 2048, bf = 2;
    const Net net = makeNet(h, tokens, bf, bf);
    const std::vector<int64_t> weights = weightBytes(net);
    const std::string tt = kSite + "torchtune/";
    const Frames load = Frames{{tt + "training/checkpointing/_checkpointer.py", "load_checkpoint", 612},
                               {tt + "recipes/full_finetune_single_device.py", "setup", 251}} +
                        kMain;
    for (int64_t b : weights)
        r.alloc(b, load, Pool::Parameter);
    const Frames recipe = Frames{{tt + "recipes/full_finetune_single_device.py", "train", 702}} + kMain;
    const Frames backward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                   {kTorch + "autograd/__init__.py", "backward", 267},
                                   {kTorch + "_tensor.py", "backward", 521},
                                   {tt + "recipes/full_finetune_single_device.py", "train", 731}} +
                            kMain;
    // The hook runs Python on the engine's thread: its frames, then the engine's.
    const Frames hook = Frames{{tt + "training/memory.py", "optim_step", 197}} + kEngine;
    auto inStep = [&](const std::string& fn, int line) {
        return kCppAlloc + Frames{{kTorch + "optim/adamw.py", fn, line}, {kTorch + "optim/adamw.py", "step", 232},
                                  {kTorch + "optim/optimizer.py", "wrapper", 484}} +
               hook;
    };
    const Frames zeroGrad = kCppFree + Frames{{kTorch + "optim/optimizer.py", "zero_grad", 986}, {tt + "training/memory.py", "optim_step", 198}} + kEngine;
    std::vector<uint8_t> stateMade(weights.size(), 0);
    for (int step = 0; step < 3; ++step) {
        const uint64_t batch = r.alloc(tokens * 8, Frames{{tt + "training/_distributed.py", "to_device", 90}} + recipe, Pool::Input);
        Hooks hk;
        hk.gradReady = [&](size_t w, uint64_t grad) {
            if (!stateMade[w]) {
                r.alloc(weights[w], inStep("_init_group", 120), Pool::OptimizerState); // exp_avg
                r.alloc(weights[w], inStep("_init_group", 124), Pool::OptimizerState); // exp_avg_sq
                stateMade[w] = 1;
            }
            const uint64_t sqrt = r.alloc(weights[w], inStep("_multi_tensor_adamw", 640), Pool::Temporary);
            r.free(sqrt, kCppFree + Frames{{kTorch + "optim/adamw.py", "_multi_tensor_adamw", 652}} + hook);
            r.free(grad, zeroGrad);
        };
        forwardBackward(r, net, Frames{{tt + "modules/transformer.py", "forward", 640}} + kModuleCall + recipe, backward, hk);
        r.free(batch, recipe);
    }
    return r.finish();
}

} // namespace poolscope::synth_detail
