// Reinforcement learning from the model's own samples: TRL's GRPOTrainer (trl/trainer/grpo_trainer.py)
// with generation by transformers' generate(), as the trainer runs it without vLLM. Each step:
//   _prepare_inputs -> _generate_and_score_completions: the prompts tokenized and moved (each prompt
//     repeated num_generations times by the sampler), then unwrapped_model.generate() under no_grad:
//     GenerationMixin._sample, one forward per token, DynamicCache.update torch.cat-ing each layer's
//     keys and values onto what it held (transformers/cache_utils.py), the last position's logits cast
//     to fp32, softmax, multinomial, input_ids and the attention mask torch.cat-ed one column longer;
//     the cache let go of when generate() returns; the completion mask, the rewards and the
//     group-normalised advantages;
//   compute_loss -> _get_per_token_logps: the policy's forward with grad on prompt and completion
//     (the logits of the completion's positions only, divided by the temperature, selective_log_softmax
//     row by row: each row's log_softmax saved for backward), the per-token loss;
//   accelerator.backward, AdamW's step, model.zero_grad(). Beta 0 (TRL's default): no reference model.
// The policy is bf16 (from_pretrained(torch_dtype=bfloat16)), so AdamW's moments are too; three steps.
// Between the steps' backwards run many forwards that keep something into the next: a cache in a
// training run. The user's files are called nothing a rule knows (run.py, model.py).
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_graph.h"
#include "core/synth/synth_recorder.h"
#include "core/synth/synth_train_step.h"

namespace poolscope::synth_detail {

SynthResult grpoRollout(int scale)
{
    Recorder r;
    const int64_t h = 256 * scale, vocab = 8000, heads = 8, bf = 2, f32 = 4, i64 = 8;
    const int64_t prompts = 2, generations = 4, rows = prompts * generations, promptLen = 64, completionLen = 24;
    const int layers = 4;
    const std::string tf = kSite + "transformers/", trl = kSite + "trl/trainer/";
    const Frames load = Frames{{kSite + "accelerate/utils/modeling.py", "set_module_tensor_to_device", 329},
                               {tf + "modeling_utils.py", "_load_state_dict_into_meta_model", 915},
                               {tf + "modeling_utils.py", "_load_pretrained_model", 4329},
                               {tf + "modeling_utils.py", "from_pretrained", 3916},
                               {kUser + "run.py", "main", 30},
                               {kUser + "run.py", "<module>", 77}};
    // The embedding (tied to the head), then per layer a q/k/v-sized projection and the MLP's two.
    std::vector<int64_t> trained = {vocab * h * bf};
    for (int l = 0; l < layers; ++l)
        for (int64_t cols : {h, 4 * h, 4 * h})
            trained.push_back(h * cols * bf);
    for (int64_t b : trained)
        r.alloc(b, load, Pool::Parameter);

    const Frames loop = {{tf + "trainer.py", "_inner_training_loop", 2481}, {tf + "trainer.py", "train", 2245},
                         {kUser + "run.py", "main", 52}, {kUser + "run.py", "<module>", 77}};
    const Frames prepare = Frames{{trl + "grpo_trainer.py", "_prepare_inputs", 1004}, {tf + "trainer.py", "training_step", 3730}} + loop;
    const Frames score = Frames{{trl + "grpo_trainer.py", "_generate_and_score_completions", 1190}} + prepare;
    const Frames generate = Frames{{tf + "generation/utils.py", "_sample", 3254}, {tf + "generation/utils.py", "generate", 2465},
                                   {kTorch + "utils/_contextlib.py", "decorate_context", 116},
                                   {trl + "grpo_trainer.py", "_generate_and_score_completions", 1095}} +
                            prepare;
    const Frames sampleAt = Frames{{tf + "generation/utils.py", "_sample", 3285}} + Frames(generate.begin() + 1, generate.end());
    const Frames forward = Frames{{tf + "models/llama/modeling_llama.py", "forward", 561}} + kModuleCall + generate;
    const Frames cacheUpdate = Frames{{tf + "cache_utils.py", "update", 556}, {tf + "models/llama/modeling_llama.py", "forward", 272}} + kModuleCall + forward;
    const Frames computeLoss = Frames{{trl + "grpo_trainer.py", "_get_per_token_logps", 850}, {trl + "grpo_trainer.py", "_compute_loss", 1440},
                                      {trl + "grpo_trainer.py", "compute_loss", 1420}, {tf + "trainer.py", "training_step", 3758}} +
                               loop;
    const Frames lossAt = Frames{{trl + "grpo_trainer.py", "_compute_loss", 1462}} + Frames(computeLoss.begin() + 2, computeLoss.end());
    const Frames logpAt = Frames{{trl + "utils.py", "selective_log_softmax", 1610}} + computeLoss;

    const int64_t tokens = rows * (promptLen + completionLen), kept = rows * (completionLen + 1);
    std::vector<Op> ops;
    ops.push_back({tokens * h * bf, 610, 0}); // the embedding's output
    for (int l = 0; l < layers; ++l)
        for (const Op& o : layerOps(tokens, h, bf, 1 + 3 * l))
            ops.push_back(o);
    ops.push_back({tokens * h * bf, 620, -1}); // the final norm
    ops.push_back({kept * vocab * bf, 640, 0}); // the logits of the kept positions (the tied head)
    std::vector<uint64_t> grads(trained.size(), 0);
    for (int s = 0; s < 3; ++s) {
        // The prompts' ids and attention mask, moved to the device.
        const uint64_t promptIds = r.alloc(rows * promptLen * i64, prepare, Pool::Input);
        const uint64_t promptMask = r.alloc(rows * promptLen * i64, prepare, Pool::Input);
        // generate(): the running ids and mask start as the prompts' (cat makes new ones per token).
        uint64_t ids = promptIds, mask = promptMask;
        const uint64_t unfinished = r.alloc(rows * i64, sampleAt, Pool::Temporary);
        std::vector<uint64_t> keys(size_t(layers), 0), values(size_t(layers), 0);
        for (int t = 0; t < completionLen; ++t) {
            const int64_t n = rows * (t == 0 ? promptLen : 1), total = rows * (promptLen + t);
            uint64_t hidden = r.alloc(n * h * bf, inModel(60, forward), Pool::Temporary);
            const uint64_t causal = r.alloc(n * (total / rows) * bf, inModel(64, forward), Pool::Temporary);
            for (int l = 0; l < layers; ++l)
                hidden = decoderLayer(r, DecoderSizes{n, total, h, heads, 4 * h}, hidden, keys[size_t(l)], values[size_t(l)], forward, cacheUpdate);
            r.free(causal, inModel(66, forward));
            const uint64_t normed = r.alloc(rows * h * bf, inModel(90, forward), Pool::Temporary);
            r.free(hidden, inModel(90, forward));
            // The last position's logits, an output of the forward held by _sample until it samples.
            const uint64_t logits = r.alloc(rows * vocab * bf, inModel(92, generate), Pool::Activation);
            r.free(normed, inModel(92, forward));
            const uint64_t next32 = r.alloc(rows * vocab * f32, sampleAt, Pool::Temporary); // .to(float32)
            r.free(logits, sampleAt);
            const uint64_t scaled = r.alloc(rows * vocab * f32, sampleAt, Pool::Temporary); // / temperature
            r.free(next32, sampleAt);
            const uint64_t probs = r.alloc(rows * vocab * f32, sampleAt, Pool::Temporary);
            r.free(scaled, sampleAt);
            const uint64_t next = r.alloc(rows * i64, sampleAt, Pool::Temporary);
            r.free(probs, sampleAt);
            // input_ids = torch.cat([input_ids, next_tokens[:, None]]); the mask likewise. The last
            // ones are the batch the policy trains on.
            const bool last = t + 1 == completionLen;
            const uint64_t ids2 = r.alloc(rows * (promptLen + t + 1) * i64, sampleAt, last ? Pool::Input : Pool::Temporary);
            const uint64_t mask2 = r.alloc(rows * (promptLen + t + 1) * i64, sampleAt, last ? Pool::Input : Pool::Temporary);
            r.free(next, sampleAt);
            if (ids != promptIds)
                r.free(ids, sampleAt), r.free(mask, sampleAt);
            ids = ids2;
            mask = mask2;
        }
        r.free(unfinished, sampleAt);
        // generate() returns: the DynamicCache goes with its last reference.
        for (int l = 0; l < layers; ++l)
            r.free(keys[size_t(l)], generate), r.free(values[size_t(l)], generate);
        // The completion mask from the first EOS, the rewards, the group-normalised advantages.
        const uint64_t completionMask = r.alloc(rows * completionLen * i64, score, Pool::Input);
        const uint64_t rewards = r.alloc(rows * f32, score, Pool::Temporary);
        const uint64_t meanGrouped = r.alloc(rows * f32, score, Pool::Temporary);
        const uint64_t stdGrouped = r.alloc(rows * f32, score, Pool::Temporary);
        const uint64_t advantages = r.alloc(rows * f32, score, Pool::Input);
        r.free(rewards, score), r.free(meanGrouped, score), r.free(stdGrouped, score);

        // The policy's forward with grad; selective_log_softmax row by row (bf16 logits).
        std::vector<Saved> graph = forwardWithGrad(r, ops, [&](int line) { return Frames{{tf + "models/llama/modeling_llama.py", "forward", line}} + kModuleCall + computeLoss; });
        const int64_t rowBytes = (completionLen + 1) * vocab * bf;
        graph.push_back(Saved{r.alloc(kept * vocab * bf, computeLoss, Pool::Activation), kept * vocab * bf, -1}); // / temperature
        for (int64_t row = 0; row < rows; ++row) {
            graph.push_back(Saved{r.alloc(rowBytes, logpAt, Pool::Activation), rowBytes, -1}); // log_softmax, saved
            graph.push_back(Saved{r.alloc(completionLen * f32, logpAt, Pool::Activation), completionLen * f32, -1});
        }
        graph.push_back(Saved{r.alloc(rows * completionLen * f32, logpAt, Pool::Activation), rows * completionLen * f32, -1}); // stack
        const uint64_t perTokenLoss = r.alloc(rows * completionLen * f32, lossAt, Pool::Activation);
        const uint64_t loss = r.alloc(4, lossAt, Pool::Activation);
        const Frames bwdCall = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                      {kTorch + "autograd/__init__.py", "backward", 267},
                                      {kTorch + "_tensor.py", "backward", 521},
                                      {kSite + "accelerate/accelerator.py", "backward", 2159},
                                      {tf + "trainer.py", "training_step", 3771}} +
                               loop;
        const uint64_t root = r.alloc(4, bwdCall, Pool::Temporary);
        r.free(perTokenLoss, engineRelease("MulBackward0"));
        const uint64_t lastGrad = backwardGraph(r, graph, rows * completionLen * f32, grads, trained);
        r.free(lastGrad, kEngineFree);
        r.free(root, kEngineFree);
        r.free(loss, loop);
        for (uint64_t b : {ids, mask, completionMask, advantages, promptIds, promptMask})
            r.free(b, loop);
        adamwStep(r, trained, s == 0, Frames{{kSite + "accelerate/optimizer.py", "step", 171}} + loop);
        zeroGrad(r, grads, Frames{{tf + "trainer.py", "_inner_training_loop", 2559}} + Frames(loop.begin() + 1, loop.end()));
    }
    return r.finish();
}

} // namespace poolscope::synth_detail
