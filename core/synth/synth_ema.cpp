// A diffusion transformer trained with an EMA copy of its weights, in the shape of
// facebookresearch/DiT's train.py (and the many scripts written after it), on one GPU:
//   ema = deepcopy(model).to(device)      the EMA copy, moved first (nn.Module._apply, one block per
//                                         parameter, from the script's own line)
//   model = model.to(device)              the model, the same shapes from another line of the script
//   vae = AutoencoderKL.from_pretrained(...).to(device)   frozen: no gradient, no optimizer state
//   opt = torch.optim.AdamW(model.parameters()); update_ema(ema, model, decay=0)  (in place)
//   for x, y in loader:
//       x = x.to(device); y = y.to(device)
//       with torch.no_grad(): x = vae.encode(x).latent_dist.sample().mul_(0.18215)
//       t = torch.randint(...); loss = diffusion.training_losses(model, x, t, ...)["loss"].mean()
//       opt.zero_grad(); loss.backward(); opt.step(); update_ema(ema, model)   (in place)
// The EMA copy is a model's weights (parameter) with no gradient and no state of its own; it has
// every trained weight's size, is made before the first forward and lives to the end like the
// model. Read by the order the model is moved in, it looked like gradients moved with the model.
// DiffusersEma: diffusers' examples/text_to_image/train_text_to_image.py --use_ema: the UNet loaded
// by from_pretrained (accelerate's set_module_tensor_to_device per weight), the frozen VAE cast to
// fp16 by .to(device, dtype), EMAModel(ema_unet.parameters()) cloned on the host and moved after the
// model by EMAModel.to (training_utils.py, one p.to() per shadow parameter); each step
// accelerator.backward, optimizer.step, optimizer.zero_grad (set_to_none), then ema_unet.step
// (foreach=False: s_param.sub_(one_minus_decay * (s_param - param)), two temporaries of the
// parameter's size per parameter).
// EmaDeepcopy: the model moved first, then ema = deepcopy(model) of the model on the device (timm's
// ModelEmaV3, ultralytics' ModelEMA, fast-DiT's train.py): the copy made by Parameter.__deepcopy__.
// The user's files are called nothing a rule knows (run.py, model.py).
#include "core/synth/synth_stacks.h"

#include "core/synth/synth_recorder.h"
#include "core/synth/synth_train_step.h"

namespace poolscope::synth_detail {
namespace {

Frames atLine(int line)
{
    return Frames{{kUser + "run.py", "main", line}, {kUser + "run.py", "<module>", 77}};
}

// nn.Module._apply moving one parameter, called from line `caller` of the training script.
Frames moveFrom(int caller) { return moveFrames(kApplyParam, atLine(caller)); }

// copy.deepcopy of a module already on the device (timm's ModelEmaV3, ultralytics' ModelEMA,
// fast-DiT): each parameter cloned by Parameter.__deepcopy__ under the standard library's recursion
// through the module's __dict__, from line `caller`.
Frames deepcopyFrom(int caller)
{
    const std::string copy = "/usr/lib/python3.10/copy.py";
    Frames f = {{kTorch + "nn/parameter.py", "__deepcopy__", 68}};
    for (int depth = 0; depth < 3; ++depth)
        f = f + Frames{{copy, "deepcopy", 153}, {copy, "_deepcopy_dict", 231}, {copy, "deepcopy", 146}, {copy, "_reconstruct", 271}};
    return f + Frames{{copy, "deepcopy", 172}} + atLine(caller);
}

enum class Ema : uint8_t { MovedFirst, Diffusers, Deepcopy };

SynthResult emaTraining(int scale, Ema kind)
{
    const bool diffusers = kind == Ema::Diffusers;
    Recorder r;
    const int64_t h = 512 * scale, batch = 8, imageSide = 128, latentSide = imageSide / 8, f32 = 4;
    const int64_t tokens = batch * latentSide * latentSide; // patch size 1
    const Net net = makeNet(h, tokens, f32, f32);
    const std::vector<int64_t> weights = weightBytes(net);
    const std::string tf = kSite + "diffusers/";
    const Frames load = Frames{{kSite + "accelerate/utils/modeling.py", "set_module_tensor_to_device", 329},
                               {tf + "models/model_loading_utils.py", "load_model_dict_into_meta", 223},
                               {tf + "models/modeling_utils.py", "from_pretrained", 886}} +
                        atLine(140);
    if (kind == Ema::MovedFirst) {
        for (int64_t b : weights)
            r.alloc(b, moveFrom(150), Pool::Parameter); // ema = deepcopy(model).to(device)
        for (int64_t b : weights)
            r.alloc(b, moveFrom(152), Pool::Parameter); // model = model.to(device)
    } else if (kind == Ema::Deepcopy) {
        for (int64_t b : weights)
            r.alloc(b, moveFrom(150), Pool::Parameter); // model = model.to(device)
        for (int64_t b : weights)
            r.alloc(b, deepcopyFrom(152), Pool::Parameter); // ema = deepcopy(model)
    } else {
        for (int64_t b : weights)
            r.alloc(b, load, Pool::Parameter); // the UNet, loaded onto the device
    }
    // The VAE's encoder convolutions (3x3 kernels) and their biases, frozen (fp16 under diffusers).
    const std::vector<std::pair<int64_t, int64_t>> convs = {{3, 128}, {128, 128}, {128, 256}, {256, 256}, {256, 512}, {512, 512}, {512, 8}};
    const int64_t vaeElem = diffusers ? 2 : f32;
    for (const auto& [in, out] : convs) {
        r.alloc(in * out * 9 * vaeElem, moveFrom(160), Pool::Parameter);
        r.alloc(out * vaeElem, moveFrom(160), Pool::Parameter);
    }
    const Frames emaAt = Frames{{tf + "training_utils.py", "<listcomp>", 560}, {tf + "training_utils.py", "to", 559}} + atLine(170);
    if (diffusers)
        for (int64_t b : weights)
            r.alloc(b, emaAt, Pool::Parameter); // ema_unet.to(accelerator.device)
    const std::string vae = kSite + "diffusers/models/autoencoders/";
    const Frames encode = Frames{{vae + "vae.py", "forward", 143}} + kModuleCall +
                          Frames{{vae + "autoencoder_kl.py", "_encode", 240}, {vae + "autoencoder_kl.py", "encode", 262}} + atLine(205);
    const Frames diffusion = Frames{{kUser + "diffusion/gaussian_diffusion.py", "training_losses", 740}} + atLine(208);
    const Frames backward = Frames{{kTorch + "autograd/graph.py", "_engine_run_backward", 768},
                                   {kTorch + "autograd/__init__.py", "backward", 267},
                                   {kTorch + "_tensor.py", "backward", 521}} +
                            atLine(213);
    const int64_t image = batch * 3 * imageSide * imageSide * f32, latent = batch * 4 * latentSide * latentSide * f32;
    std::vector<uint64_t> grads(weights.size(), 0);
    uint64_t x = 0, y = 0, t = 0;
    for (int step = 0; step < 3; ++step) {
        // x = x.to(device) rebinds x: last step's latents go once the new images are on the device.
        const uint64_t images = r.alloc(image, atLine(201), Pool::Input);
        if (x)
            r.free(x, atLine(201));
        const uint64_t labels = r.alloc(batch * 8, atLine(202), Pool::Input);
        if (y)
            r.free(y, atLine(202));
        y = labels;
        // The encoder under no_grad: each output made before its input goes; the moments kept.
        uint64_t prev = 0;
        int64_t side = imageSide;
        for (size_t k = 0; k < convs.size(); ++k) {
            if (k == 2 || k == 4 || k == 6)
                side /= 2;
            const uint64_t out = r.alloc(batch * convs[k].second * side * side * f32, encode, Pool::Temporary);
            if (prev)
                r.free(prev, encode);
            prev = out;
        }
        // latent_dist.sample(): mean + std * randn; .mul_ in place; the images let go of as x rebinds.
        const uint64_t noise = r.alloc(latent, encode, Pool::Temporary);
        x = r.alloc(latent, encode, Pool::Input);
        r.free(noise, encode);
        r.free(prev, atLine(205));
        r.free(images, atLine(205));
        const uint64_t timesteps = r.alloc(batch * 8, atLine(206), Pool::Input);
        if (t)
            r.free(t, atLine(206));
        t = timesteps;
        // training_losses: the noise (the loss's target, saved by mse_loss) and x_t (the model's
        // input, saved by its first layer).
        const uint64_t target = r.alloc(latent, diffusion, Pool::Activation);
        const uint64_t xt = r.alloc(latent, Frames{{kUser + "diffusion/gaussian_diffusion.py", "q_sample", 180}} + diffusion, Pool::Activation);
        Hooks hk;
        // opt.zero_grad() before loss.backward(): last step's gradients go (set_to_none).
        hk.startBackward = [&] {
            const Frames zero = Frames{{kTorch + "optim/optimizer.py", "zero_grad", 986}} + atLine(212);
            for (uint64_t& g : grads) {
                if (g)
                    r.free(g, kCppFree + zero);
                g = 0;
            }
        };
        hk.gradReady = [&](size_t w, uint64_t g) { grads[w] = g; };
        hk.endBackward = [&] {
            r.free(target, kEngineFree);
            r.free(xt, kEngineFree);
        };
        forwardBackward(r, net, diffusion, backward, hk);
        adamwStep(r, weights, step == 0, atLine(214));
        // update_ema(ema, model): ema_param.mul_(decay).add_(param.data, alpha=1 - decay), in place.
        // EMAModel.step: (s_param - param), times one_minus_decay, subtracted in place.
        if (diffusers) {
            hk.startBackward(); // optimizer.zero_grad() after the step
            const Frames emaStep = Frames{{tf + "training_utils.py", "step", 470}} + atLine(220);
            for (int64_t b : weights) {
                const uint64_t diff = r.alloc(b, emaStep, Pool::Temporary);
                const uint64_t scaled = r.alloc(b, emaStep, Pool::Temporary);
                r.free(diff, emaStep);
                r.free(scaled, emaStep);
            }
        }
    }
    return r.finish();
}

} // namespace

SynthResult ditEmaTraining(int scale) { return emaTraining(scale, Ema::MovedFirst); }
SynthResult diffusersEmaTraining(int scale) { return emaTraining(scale, Ema::Diffusers); }
SynthResult deepcopyEmaTraining(int scale) { return emaTraining(scale, Ema::Deepcopy); }

} // namespace poolscope::synth_detail
