#pragma once
// The frames a PEFT LoRA model trained by transformers' Trainer with gradient checkpointing leaves,
// shared by the LoRA (synth_finetune.cpp) and QLoRA (synth_quantized.cpp) scenarios, which run the
// same Trainer loop over the same Llama decoder and differ in what the base weights are.
#include "core/synth/synth_recorder.h"

#include <string>

namespace poolscope::synth_detail {

struct PeftTrainerFrames {
    const std::string tf = kSite + "transformers/";
    const std::string peft = kSite + "peft/";
    // get_peft_model adds lora_A/lora_B: peft/tuners/lora/layer.py update_layer ->
    // _move_adapter_to_device_of_base_layer -> Module.to.
    const Frames adapter = Frames{{kTorch + "nn/modules/module.py", "convert", 1357},
                                  {kTorch + "nn/modules/module.py", "_apply", 957},
                                  {kTorch + "nn/modules/module.py", "to", 1371},
                                  {peft + "tuners/tuners_utils.py", "_move_adapter_to_device_of_base_layer", 1123},
                                  {peft + "tuners/lora/layer.py", "update_layer", 153},
                                  {peft + "tuners/lora/model.py", "_create_and_replace", 238},
                                  {peft + "mapping.py", "get_peft_model", 222}} +
                           kMain;
    const Frames loop = {{tf + "trainer.py", "training_step", 3485}, {tf + "trainer.py", "_inner_training_loop", 2279},
                         {tf + "trainer.py", "train", 1938}, {kUser + "run.py", "main", 48}, {kUser + "run.py", "<module>", 77}};
    const Frames model = Frames{{tf + "models/llama/modeling_llama.py", "forward", 1189}} + kModuleCall +
                         Frames{{peft + "peft_model.py", "forward", 1577}} + kModuleCall + loop;
    const Frames backwardCall = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                       {kTorch + "autograd/__init__.py", "backward", 267},
                                       {kTorch + "_tensor.py", "backward", 521},
                                       {kSite + "accelerate/accelerator.py", "backward", 2151}} +
                                loop;

    // A decoder layer's line under torch.utils.checkpoint's forward (reentrant: run under no_grad).
    Frames ckpt(int line) const
    {
        return Frames{{tf + "models/llama/modeling_llama.py", "forward", line}} + kModuleCall +
               Frames{{kTorch + "utils/checkpoint.py", "forward", 263}, {kTorch + "autograd/function.py", "apply", 574},
                      {kTorch + "utils/checkpoint.py", "checkpoint", 494}, {tf + "models/llama/modeling_llama.py", "forward", 963}} +
               model;
    }
    // CheckpointFunction.backward on the engine's thread: its Python frames, no program entry.
    Frames recompute(int line) const
    {
        return Frames{{tf + "models/llama/modeling_llama.py", "forward", line}} + kModuleCall +
               Frames{{kTorch + "utils/checkpoint.py", "backward", 307}, {kTorch + "autograd/function.py", "apply", 306}} + kEngine;
    }
};

} // namespace poolscope::synth_detail
