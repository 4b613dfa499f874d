// Inference with the models moved onto the device one at a time, as a short dump with known pools:
// a diffusers Stable Diffusion pipeline after `pipe.enable_model_cpu_offload()`, in fp16, running out
// of memory in the VAE's decode (the classic OOM of a large image), with the library's frames.
//
// What the stack does (diffusers pipeline_stable_diffusion.py StableDiffusionPipeline.__call__,
// pipeline_utils.py enable_model_cpu_offload; accelerate hooks.py cpu_offload_with_hook, CpuOffload,
// UserCpuOffloadHook): every component lives on the host until its forward is called; the hook's
// pre_forward first offloads the component before it in the chain (prev_module_hook.offload():
// init_hook -> module.to("cpu"), its weights let go of), then moves its own module to the device
// (module.to(execution_device): nn.Module._apply makes each weight there). So, in order:
//   encode_prompt: the token ids moved to the device, the text encoder moved in, its forward under
//   no_grad (scratch per layer), the prompt embeddings kept; the same for the negative prompt
//   (classifier-free guidance), both kept and concatenated;
//   prepare_latents: randn_tensor on the device;
//   the denoising loop: the first unet call offloads the text encoder and moves the UNet in; each step
//   torch.cat([latents] * 2), the UNet's forward (scratch per block), the guidance arithmetic and
//   scheduler.step making the next latents (the old ones let go of);
//   vae.decode: its hook offloads the UNet and moves the VAE in; the decoder's up blocks make
//   activations four times as wide per step up, until one does not fit.
//
// True pools, as a user acts on them: each model's weights are parameters while they are on the
// device; the token ids, the prompt embeddings (the conditioning every UNet call reads) and the latents
// carried from step to step are inputs; what the decode's forward holds when it runs out (its working
// set, which the resolution sizes) is activation, as every forward's product alive at a dump's end is
// counted; everything a forward or the loop makes and drops is temporary. Nothing trains: no
// gradient, no optimizer state.
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"

#include <vector>

namespace poolscope::synth_detail {
namespace {

const std::string kDiffusers = kSite + "diffusers/";
const std::string kAccelerate = kSite + "accelerate/";
const std::string kPipeline = kDiffusers + "pipelines/stable_diffusion/pipeline_stable_diffusion.py";

const Frames kScript = {{kUser + "generate.py", "main", 28}, {kUser + "generate.py", "<module>", 41}};
const Frames kNoGrad = {{kTorch + "utils/_contextlib.py", "decorate_context", 116}};

Frames call(int line) { return Frames{{kPipeline, "__call__", line}} + kNoGrad + kScript; }

// accelerate's hooked forward: new_forward -> the hook's pre_forward, then the module's own forward.
Frames hooked(const Frames& caller) { return Frames{{kAccelerate + "hooks.py", "new_forward", 165}} + kModuleCall + caller; }

// CpuOffload.pre_forward moving its module in, or the previous module's hook sending it back.
Frames moveIn(const Frames& caller)
{
    return moveFrames(kApplyParam, Frames{{kAccelerate + "hooks.py", "pre_forward", 704}, {kAccelerate + "hooks.py", "new_forward", 160}} + kModuleCall + caller);
}
Frames moveOut(const Frames& caller)
{
    return moveFrames(kApplyParam, Frames{{kAccelerate + "hooks.py", "init_hook", 697},
                                          {kAccelerate + "hooks.py", "offload", 756},
                                          {kAccelerate + "hooks.py", "pre_forward", 702},
                                          {kAccelerate + "hooks.py", "new_forward", 160}} +
                                       kModuleCall + caller);
}

// A component's weights: `blocks` repeats of one block's shapes (bytes), plus the ones made once.
std::vector<uint64_t> moveModelIn(Recorder& r, const std::vector<int64_t>& once, const std::vector<int64_t>& block, int blocks, const Frames& caller)
{
    std::vector<uint64_t> w;
    for (int64_t b : once)
        w.push_back(r.alloc(b, moveIn(caller), Pool::Parameter));
    for (int k = 0; k < blocks; ++k)
        for (int64_t b : block)
            w.push_back(r.alloc(b, moveIn(caller), Pool::Parameter));
    return w;
}

void moveModelOut(Recorder& r, std::vector<uint64_t>& weights, const Frames& caller)
{
    for (uint64_t w : weights)
        r.free(w, moveOut(caller));
    weights.clear();
}

// One block of a no-grad forward at `width` bytes per activation: a norm, an activation function,
// two operators' outputs and the residual; the block's input is let go of once the output exists.
uint64_t block(Recorder& r, uint64_t in, int64_t width, const Frames& at, Pool output = Pool::Temporary)
{
    const uint64_t norm = r.alloc(width, at, Pool::Temporary);
    const uint64_t act = r.alloc(width, at, Pool::Temporary);
    r.free(norm, at);
    const uint64_t a = r.alloc(width, at, Pool::Temporary);
    r.free(act, at);
    const uint64_t b = r.alloc(width, at, Pool::Temporary);
    r.free(a, at);
    const uint64_t out = r.alloc(width, at, output);
    r.free(b, at);
    if (in)
        r.free(in, at);
    return out;
}

} // namespace

SynthResult diffusersOffload(int scale)
{
    Recorder r;
    const int64_t h = 256 * scale, tokens = 77, c = 64 * scale, latent = 32, steps = 4;
    // encode_prompt: the prompt's and the negative prompt's ids, each through the text encoder.
    const Frames encode = Frames{{kPipeline, "encode_prompt", 372}} + call(934);
    const Frames te = Frames{{kSite + "transformers/models/clip/modeling_clip.py", "forward", 612}} + kModuleCall + hooked(encode);
    std::vector<uint64_t> textEncoder;
    std::vector<uint64_t> embeds;
    for (int pass = 0; pass < 2; ++pass) {
        const uint64_t ids = r.alloc(tokens * 8, encode, Pool::Input);
        if (pass == 0)
            textEncoder = moveModelIn(r, {49408 * h * 2, tokens * h * 2}, {h * h * 2, h * h * 2, h * h * 2, h * h * 2, 4 * h * h * 2, 4 * h * h * 2, h * 2, 4 * h * 2},
                                      4, encode);
        uint64_t x = r.alloc(tokens * h * 2, te, Pool::Temporary);
        for (int l = 0; l < 4; ++l)
            x = block(r, x, tokens * h * 2, te);
        embeds.push_back(r.alloc(tokens * h * 2, te, Pool::Input)); // last_hidden_state after the final norm
        r.free(x, te);
        r.free(ids, encode);
    }
    // prompt_embeds = torch.cat([negative_prompt_embeds, prompt_embeds]): the two halves let go of.
    r.alloc(2 * tokens * h * 2, call(951), Pool::Input);
    for (uint64_t e : embeds)
        r.free(e, call(951));
    uint64_t latents = r.alloc(4 * latent * latent * 2, Frames{{kDiffusers + "utils/torch_utils.py", "randn_tensor", 81}, {kPipeline, "prepare_latents", 804}} + call(968),
                               Pool::Input);
    // The UNet's weights: a conv-net of three widths, its blocks repeated; moved in by its first call.
    std::vector<uint64_t> unet;
    const Frames unetAt = Frames{{kDiffusers + "models/unets/unet_2d_blocks.py", "forward", 1281}} + kModuleCall +
                          Frames{{kDiffusers + "models/unets/unet_2d_condition.py", "forward", 1216}} + kModuleCall + hooked(call(1003));
    for (int t = 0; t < steps; ++t) {
        const uint64_t model_in = r.alloc(2 * 4 * latent * latent * 2, call(998), Pool::Temporary); // torch.cat([latents] * 2)
        if (t == 0) {
            moveModelOut(r, textEncoder, hooked(call(1003)));
            unet = moveModelIn(r, {4 * c * 9 * 2, c * 4 * 9 * 2, 1280 * 320 * 2},
                               {c * c * 9 * 2, c * c * 9 * 2, 4 * c * c * 9 * 2, 4 * c * c * 9 * 2, c * c * 2, c * c * 2, c * c * 2, c * c * 2, c * 2, c * 2}, 6,
                               hooked(call(1003)));
        }
        uint64_t x = r.alloc(2 * c * latent * latent * 2, unetAt, Pool::Temporary);
        for (int b = 0; b < 6; ++b)
            x = block(r, x, 2 * c * latent * latent * 2 * (b % 3 == 2 ? 2 : 1), unetAt);
        const uint64_t noise = r.alloc(2 * 4 * latent * latent * 2, unetAt, Pool::Temporary);
        r.free(x, unetAt);
        r.free(model_in, call(1003));
        // noise_pred.chunk(2), then uncond + scale * (text - uncond): two temporaries, one result.
        const uint64_t diff = r.alloc(4 * latent * latent * 2, call(1012), Pool::Temporary);
        const uint64_t guided = r.alloc(4 * latent * latent * 2, call(1012), Pool::Temporary);
        r.free(diff, call(1012));
        r.free(noise, call(1012));
        // scheduler.step: the previous sample, then the next latents.
        const Frames schedStep = Frames{{kDiffusers + "schedulers/scheduling_pndm.py", "step_plms", 345}} + call(1019);
        const uint64_t prev = r.alloc(4 * latent * latent * 2, schedStep, Pool::Temporary);
        const uint64_t next = r.alloc(4 * latent * latent * 2, schedStep, Pool::Input);
        r.free(prev, schedStep);
        r.free(guided, call(1019));
        r.free(latents, call(1019));
        latents = next;
    }
    // vae.decode(latents / scaling_factor): the UNet offloaded, the VAE moved in, the up blocks.
    const uint64_t scaled = r.alloc(4 * latent * latent * 2, call(1040), Pool::Temporary);
    const Frames vaeAt = Frames{{kDiffusers + "models/autoencoders/vae.py", "forward", 322}} + kModuleCall +
                         Frames{{kDiffusers + "models/autoencoders/autoencoder_kl.py", "_decode", 265}, {kDiffusers + "models/autoencoders/autoencoder_kl.py", "decode", 296}} +
                         hooked(call(1040));
    moveModelOut(r, unet, Frames{{kDiffusers + "models/autoencoders/autoencoder_kl.py", "decode", 296}} + hooked(call(1040)));
    std::vector<uint64_t> vae = moveModelIn(r, {4 * 2 * c * 9 * 2, 2 * c * 3 * 9 * 2},
                                            {2 * c * 2 * c * 9 * 2, 2 * c * 2 * c * 9 * 2, 2 * c * 2, 2 * c * 2}, 5, hooked(call(1040)));
    (void)vae;
    uint64_t x = r.alloc(2 * c * latent * latent * 2, vaeAt, Pool::Temporary);
    r.free(scaled, vaeAt);
    int64_t side = latent;
    for (int up = 0; up < 3; ++up) {
        side *= 2;
        const uint64_t upsampled = r.alloc(2 * c * side * side * 2, vaeAt, Pool::Temporary);
        r.free(x, vaeAt);
        x = upsampled;
        for (int b = 0; b < 2; ++b)
            x = block(r, x, 2 * c * side * side * 2, vaeAt, up == 2 && b == 1 ? Pool::Activation : Pool::Temporary);
    }
    // The last up block's first norm at twice the side does not fit.
    r.oom(2 * c * 4 * side * side * 2, vaeAt);
    return r.finish();
}

} // namespace poolscope::synth_detail
