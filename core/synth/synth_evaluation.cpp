// An evaluation that runs out of memory after training, as a short dump with known pools:
// transformers' Trainer fine-tunes a model for two steps, then `trainer.predict(test_set)` runs the
// evaluation loop without eval_accumulation_steps, so every batch's logits are kept on the device
// and concatenated to what came before (EvalLoopContainer.add -> nested_concat ->
// torch_pad_and_concatenate: torch.cat((tensor1, tensor2), dim=0)), until a concatenation does not
// fit. The Trainer's frames are the library's; the model's are the user's.
//
// What the evaluation loop does per batch (transformers trainer.py evaluation_loop and
// prediction_step, trainer_pt_utils.py): the batch moved to the device (_prepare_inputs); the model
// called under torch.no_grad() (each layer's scratch let go of as it goes); the logits kept
// (outputs.logits), then all_preds.add(logits): the first batch's logits become the collection
// itself, every later batch makes a new block of the two summed, and both inputs go. The test set
// has no labels (predict on unlabelled data), so only the logits are collected.
//
// True pools, as a user acts on them: the collection (the first batch's logits and every
// concatenation) is other (outputs the program keeps; eval_accumulation_steps moves them to the
// host); the logits of the batch being appended are that call's output (activation, as a generate
// loop's logits are in kv-generate); the rest as in training (parameters, AdamW's moments, gradients until zero_grad drops
// them, activations saved for backward, scratch).
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"
#include "core/synth/synth_train_step.h"

#include <vector>

namespace poolscope::synth_detail {
namespace {

const std::string kTf = kSite + "transformers/";

const Frames kTrain = {{kTf + "trainer.py", "_inner_training_loop", 2279}, {kTf + "trainer.py", "train", 1938}, {kUser + "finetune.py", "main", 61},
                       {kUser + "finetune.py", "<module>", 90}};
const Frames kPredict = {{kTf + "trainer.py", "evaluation_loop", 4245}, {kTf + "trainer.py", "predict", 4150}, {kUser + "finetune.py", "main", 64},
                         {kUser + "finetune.py", "<module>", 90}};

} // namespace

SynthResult trainerEvalAccumulation(int scale)
{
    Recorder r;
    const Net net = makeNet(512 * scale, 512, 4, 4);
    const int64_t vocab = 32000, tokens = net.tokens, h = net.h;
    std::vector<uint64_t> params;
    for (size_t w = 0; w < net.weightNumel.size(); ++w)
        params.push_back(r.alloc(net.weightBytes(w), moveFrames(kApplyParam), Pool::Parameter));
    const uint64_t head = r.alloc(vocab * h * 4, moveFrames(kApplyParam), Pool::Parameter); // lm_head (frozen)
    (void)head;
    const Frames step = Frames{{kTf + "trainer.py", "training_step", 3485}} + kTrain;
    const Frames prepare = Frames{{kTf + "trainer.py", "_prepare_input", 3411}, {kTf + "trainer.py", "_prepare_inputs", 3428}};
    const Frames backwardCall = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                       {kTorch + "autograd/__init__.py", "backward", 267},
                                       {kTorch + "_tensor.py", "backward", 521},
                                       {kSite + "accelerate/accelerator.py", "backward", 2151}} +
                                step;
    for (int s = 0; s < 2; ++s) {
        const uint64_t ids = r.alloc(tokens * 8, prepare + step, Pool::Input);
        std::vector<uint64_t> grads;
        Hooks hk;
        hk.gradReady = [&](size_t, uint64_t g) { grads.push_back(g); };
        forwardBackward(r, net, inModel(30, Frames{{kTf + "trainer.py", "compute_loss", 3532}} + step), backwardCall, hk);
        r.free(ids, step);
        adamwStep(r, weightBytes(net), s == 0, Frames{{kSite + "accelerate/optimizer.py", "step", 171}} + kTrain);
        // model.zero_grad(set_to_none=True) (the Trainer's default).
        r.annotate("Optimizer.zero_grad#AdamW.zero_grad", true);
        for (uint64_t g : grads)
            r.free(g, Frames{{kTorch + "optim/optimizer.py", "zero_grad", 980}} + kTrain);
        r.annotate("Optimizer.zero_grad#AdamW.zero_grad", false);
    }
    // trainer.predict(test_set): batches of the same shape, logits collected on the device.
    const Frames predictionStep = Frames{{kTf + "trainer.py", "prediction_step", 4460}} + kPredict;
    const Frames add = Frames{{kTf + "trainer_pt_utils.py", "torch_pad_and_concatenate", 96},
                              {kTf + "trainer_pt_utils.py", "nested_concat", 135},
                              {kTf + "trainer_pt_utils.py", "add", 326}} +
                       kPredict;
    const int64_t logitsBytes = tokens * vocab * 4;
    uint64_t collection = 0;
    int64_t collected = 0;
    const int batches = 6;
    for (int b = 0; b < batches; ++b) {
        const uint64_t ids = r.alloc(tokens * 8, prepare + kPredict, Pool::Input);
        const Frames at = inModel(30, predictionStep);
        // The no-grad forward: each layer's outputs let go of once the next operator used them.
        uint64_t x = r.alloc(tokens * h * 4, inModel(20, predictionStep), Pool::Temporary);
        for (size_t l = 0; l < net.layers(); ++l) {
            const uint64_t norm = r.alloc(tokens * h * 4, at, Pool::Temporary);
            const uint64_t up = r.alloc(tokens * 4 * h * 4, at, Pool::Temporary);
            r.free(norm, at);
            const uint64_t act = r.alloc(tokens * 4 * h * 4, at, Pool::Temporary);
            r.free(up, at);
            const uint64_t down = r.alloc(tokens * h * 4, at, Pool::Temporary);
            r.free(act, at);
            const uint64_t res = r.alloc(tokens * h * 4, at, Pool::Temporary);
            r.free(down, at);
            r.free(x, at);
            x = res;
        }
        const uint64_t logits = r.alloc(logitsBytes, inModel(44, predictionStep), b == 0 ? Pool::Other : Pool::Activation);
        r.free(x, inModel(44, predictionStep));
        if (b == batches - 1) {
            // The last concatenation does not fit.
            r.oom(collected + logitsBytes, add);
            break;
        }
        if (b == 0) {
            collection = logits;
            collected = logitsBytes;
        } else {
            const uint64_t joined = r.alloc(collected + logitsBytes, add, Pool::Other);
            r.free(collection, add);
            r.free(logits, add);
            collection = joined;
            collected += logitsBytes;
        }
        r.free(ids, kPredict);
    }
    return r.finish();
}

} // namespace poolscope::synth_detail
