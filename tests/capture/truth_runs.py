"""Real training and inference runs on a CUDA GPU, each dumped with the capture helper beside the
run's own truth: which live tensor is a parameter, a gradient, optimizer state, an input, a KV
cache, an autocast weight cast or a tensor saved for backward, at the moment the dump was written.

PoolScope's classifier reads the dump; the run knows its own objects. `poolscope_truth_check`
(tests/tools/truth_check.cpp) compares the two, for the dump as written and after each redaction.
Nothing here is a test of its own: it needs a GPU, PyTorch, transformers, peft, timm and
torch_geometric, which CI does not have. It was written for the GPU machine some sessions are lent.

    python3 tests/capture/truth_runs.py OUTDIR [SCENARIO ...]
    python3 tests/capture/truth_runs.py --pack OUTDIR DEST     (gzip the dumps, tar them in 15 MiB parts)

Scenarios of the second and third sets (SECOND) run one per process, so that no run inherits another's memory.

Each dump OUTDIR/<scenario>.pickle gets OUTDIR/<scenario>.truth.json:
    {"scenario", "moment": "manual"|"oom", "tensors": [{"ptr", "nbytes", "label", "name"}]}
ptr is the tensor's storage address (an allocation's address in the dump); where a storage is
known under two roles, the first of parameter, gradient, optimizer_state, input, kv_cache,
cast_cache, activation wins. Tensors the run cannot name (scratch, outputs in flight, the loss)
are not listed: the checker reports those bytes as unlabelled, apart from the score.

The pieces: truth_record.py (what the run knows, the dumps and their truth), truth_models.py (the
models written by hand), this file (the runs and the driver).
"""

import os
import sys
import time
import traceback

from truth_models import HandDecoder, HandStore, MoeModel, TinyUnet
from truth_record import (CURRENT, Truth, fresh, keep_oom_dump, manual_dump, on_oom, pack, pc,
                          scaled_fp16_mid_backward, torch, train_and_dump)


def llama_config(layers=6):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers, num_attention_heads=16,
                       num_key_value_heads=16, vocab_size=32000, max_position_embeddings=2048)


def train_llama(out, name, oom_fraction=None, stacks="python"):
    """transformers Llama, fp32 weights under bf16 autocast, foreach AdamW; the recording starts
    before the model is made. Dumped after the third forward and again mid-backward, or at an OOM
    when the cap is set to a share of the run's own peak."""
    from transformers import LlamaForCausalLM

    truth = Truth()
    CURRENT[0] = truth
    ids = None
    with pc.record(out, max_entries=60000, stacks=stacks, max_oom_dumps=1) as rec:
        with torch.device("cuda"):
            model = LlamaForCausalLM(llama_config())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        truth.model, truth.opt = model, opt
        ids = torch.randint(0, 32000, (4, 1024), device="cuda")
        truth.inputs = [ids]
        if oom_fraction is not None:
            torch.cuda.set_per_process_memory_fraction(oom_fraction)
        state = {"dumped": False}

        def mid_backward(module, grad_in, grad_out):
            if want_mid[0] and not state["dumped"]:
                state["dumped"] = True
                manual_dump(rec, out, name + "_midbackward", truth)

        want_mid = [False]
        h = model.model.layers[2].register_full_backward_hook(mid_backward)
        try:
            for step in range(3):
                with truth.hooks:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = model(input_ids=ids, labels=ids).loss
                    if step == 2 and oom_fraction is None:
                        manual_dump(rec, out, name + "_afterforward", truth)
                        want_mid[0] = True
                    loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        except torch.OutOfMemoryError:
            pass
        h.remove()
    if oom_fraction is not None:
        keep_oom_dump(rec, out, name, truth)
    CURRENT[0] = None
    return torch.cuda.max_memory_allocated()


def gpt2_generate(out, name):
    """transformers GPT-2 in fp16, generate() with its own cache, no backward; dumped at the 48th
    decoding forward from a pre-hook that sees the cache object."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=1024, n_head=16, vocab_size=50257, n_positions=1024)).cuda().half().eval()
    truth = Truth()
    truth.model = model
    ids = torch.randint(0, 50257, (16, 256), device="cuda")
    mask = torch.ones_like(ids)
    truth.inputs = [ids, mask]
    calls = [0]
    with pc.record(out, max_entries=60000, stacks="python") as rec:

        def pre(module, args, kwargs):
            calls[0] += 1
            if calls[0] == 48:
                truth.cache = kwargs.get("past_key_values")
                manual_dump(rec, out, name, truth)
                truth.cache = None
            return None

        h = model.register_forward_pre_hook(pre, with_kwargs=True)
        with torch.no_grad():
            model.generate(ids, attention_mask=mask, max_new_tokens=64, do_sample=False, pad_token_id=0)
        h.remove()


def lora_llama(out, name):
    """peft LoRA on a bf16 Llama with non-reentrant gradient checkpointing, AdamW on the adapters;
    the recording starts after the model is on the GPU. Dumped after the third forward."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    base = LlamaForCausalLM(llama_config(8)).to("cuda", torch.bfloat16)
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    truth = Truth()
    truth.model, truth.opt = model, opt
    ids = torch.randint(0, 32000, (8, 1024), device="cuda")
    truth.inputs = [ids]
    model.train()
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        train_and_dump(rec, out, name, truth, lambda: model(input_ids=ids, labels=ids).loss, opt)


def vit_fp16(out, name):
    """timm ViT-B/16 under fp16 autocast with a GradScaler and SGD with momentum; dumped mid-backward
    of the third step (from a block's backward hook)."""
    import timm

    model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    truth = Truth()
    truth.model, truth.opt = model, opt
    x = torch.randn(96, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (96,), device="cuda")
    truth.inputs = [x, y]
    scaled_fp16_mid_backward(out, name, truth, model, model.blocks[5], lambda: torch.nn.functional.cross_entropy(model(x), y), opt)


def resnet_oom(out, name, fraction):
    """torchvision ResNet-50, fp32, channels_last, Adam; the cap is a share of the run's own peak,
    so the allocator runs out where the run would have peaked."""
    import torchvision

    truth = Truth()
    CURRENT[0] = truth
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    truth.model, truth.opt = model, opt
    x = torch.randn(128, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (128,), device="cuda")
    truth.inputs = [x, y]
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction)
    with pc.record(out, max_entries=60000, stacks="python", max_oom_dumps=1) as rec:
        try:
            for step in range(3):
                with truth.hooks:
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        except torch.OutOfMemoryError:
            pass
    if fraction is not None:
        keep_oom_dump(rec, out, name, truth)
    CURRENT[0] = None
    return torch.cuda.max_memory_allocated()


def gcn(out, name):
    """torch_geometric GCN on a random graph, Adam, with C++ frames; dumped after the third forward."""
    from torch_geometric.nn import GCNConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([GCNConv(128, 256), GCNConv(256, 256), GCNConv(256, 40)])

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = torch.relu(x)
            return x

    model = Net().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    truth = Truth()
    truth.model, truth.opt = model, opt
    x = torch.randn(200000, 128, device="cuda")
    edge_index = torch.randint(0, 200000, (2, 2000000), device="cuda")
    y = torch.randint(0, 40, (200000,), device="cuda")
    truth.inputs = [x, edge_index, y]
    with pc.record(out, max_entries=20000, stacks="all") as rec:
        train_and_dump(rec, out, name, truth, lambda: torch.nn.functional.cross_entropy(model(x, edge_index), y), opt)


def train_llama_cpp(out, name):
    """The Llama run above with C++ frames as well (stacks='all')."""
    return train_llama(out, name, stacks="all")


def adam_step_oom(out, name):
    """A fp32 Llama whose first forward and backward fit and whose foreach Adam step does not: the
    cap sits between the passes' peak and what the step's state and update need (Adam's state
    is the wall, not the batch)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(llama_config(4)).cuda()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    ids = torch.randint(0, 32000, (2, 512), device="cuda")
    model(input_ids=ids, labels=ids).loss.backward()
    passes = torch.cuda.max_memory_allocated()
    model.zero_grad(set_to_none=True)
    fresh()
    cap = max(passes * 1.05, 4.4 * params)
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    truth = Truth()
    truth.model, truth.opt, truth.inputs = model, opt, [ids]
    CURRENT[0] = truth
    print("  parameters %.1f MiB, passes' peak %.1f MiB, cap %.1f MiB" % (params / 2**20, passes / 2**20, cap / 2**20))
    with pc.record(out, max_entries=60000, stacks="python", max_oom_dumps=1) as rec:
        try:
            for _ in range(2):
                with truth.hooks:
                    model(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        except torch.OutOfMemoryError:
            pass
    keep_oom_dump(rec, out, name, truth)


def eval_with_grad(out, name):
    """An evaluation loop that forgot torch.no_grad() and collects the logits: each batch's graph
    stays alive through the logits kept in a list. Dumped after the fourth batch."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(llama_config(4)).cuda().eval()
    truth = Truth()
    truth.model = model
    batches = [torch.randint(0, 32000, (4, 512), device="cuda") for _ in range(4)]
    truth.inputs = batches
    kept = []
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        with truth.hooks:
            for ids in batches:
                kept.append(model(input_ids=ids).logits)
        manual_dump(rec, out, name, truth)


def hand_decoder(out, name, grow):
    """A hand-written decoder in fp16 with its own cache (preallocated, or grown by torch.cat at
    each token), greedy decoding under no_grad; dumped at the 40th new token."""
    model = HandDecoder().cuda().half().eval()
    truth = Truth()
    truth.model = model
    ids = torch.randint(0, 16000, (8, 384), device="cuda")
    truth.inputs = [ids]
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        with torch.no_grad():
            b, t = ids.shape
            store = [[None] * 8, [None] * 8] if grow else HandStore(8, b, 16, t + 64, 64, torch.float16)
            truth.cache = store
            logits = model(ids, store, 0, grow)
            pos = t
            for step in range(64):
                nxt = logits.argmax(-1)
                if step == 40:
                    manual_dump(rec, out, name, truth)
                logits = model(nxt, store, pos, grow)
                pos += 1


def ddp_fused_adamw(out, name):
    """DistributedDataParallel on one rank (NCCL), gradients as views of its buckets, fused AdamW,
    zero_grad keeping the buckets; dumped after the third forward."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import LlamaForCausalLM

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        model = LlamaForCausalLM(llama_config(4)).cuda()
        ddp = DDP(model, device_ids=[0], gradient_as_bucket_view=True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        truth = Truth()
        truth.model, truth.opt = model, opt
        ids = torch.randint(0, 32000, (4, 512), device="cuda")
        truth.inputs = [ids]
        with pc.record(out, max_entries=60000, stacks="python") as rec:
            def loss_fn():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return ddp(input_ids=ids, labels=ids).loss

            train_and_dump(rec, out, name, truth, loss_fn, opt, set_to_none=False)
    finally:
        dist.destroy_process_group()


def graph_leak(out, name):
    """A training loop that keeps each step's logits (with their graph's grad_fn) in a list: the
    classic leak. Four steps of SGD with momentum, dumped after the fourth step."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(llama_config(2)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    truth = Truth()
    truth.model, truth.opt = model, opt
    ids = torch.randint(0, 32000, (4, 256), device="cuda")
    truth.inputs = [ids]
    history = []
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        for step in range(4):
            with truth.hooks:
                o = model(input_ids=ids, labels=ids)
                o.loss.backward()
            history.append(o.logits)
            opt.step()
            opt.zero_grad(set_to_none=True)
        manual_dump(rec, out, name, truth)


def compiled_llama(out, name):
    """torch.compile (inductor) of a two-layer Llama, AdamW, three steps; dumped after the third
    forward (the compiled graph's buffers, not eager's)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(llama_config(2)).cuda()
    fwd = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    truth = Truth()
    truth.model, truth.opt = model, opt
    ids = torch.randint(0, 32000, (4, 512), device="cuda")
    truth.inputs = [ids]
    fwd(input_ids=ids, labels=ids).loss.backward()  # compile outside the recording
    opt.zero_grad(set_to_none=True)
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        train_and_dump(rec, out, name, truth, lambda: fwd(input_ids=ids, labels=ids).loss, opt)


SECOND = {
    "llama_autocast_adamw_cpp": (train_llama_cpp,),
    "adam_step_oom": (adam_step_oom,),
    "eval_with_grad": (eval_with_grad,),
    "hand_decoder_static": (hand_decoder, False),
    "hand_decoder_cat": (hand_decoder, True),
    "ddp_fused_adamw": (ddp_fused_adamw,),
    "graph_leak": (graph_leak,),
    "compiled_llama": (compiled_llama,),
}


def llama_batch(n=8, seq=512):
    return torch.randint(0, 32000, (n, seq), device="cuda")


def hf_trainer_eval(out, name):
    """transformers' Trainer, bf16, evaluation every two steps with the logits kept for metrics
    (eval_accumulation_steps unset: the predictions gather on the GPU); dumped during the second
    evaluation's third batch, from a callback."""
    from transformers import LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

    class Data(torch.utils.data.Dataset):
        def __init__(self, n):
            self.ids = torch.randint(0, 32000, (n, 256))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    model = LlamaForCausalLM(llama_config(2))
    truth = Truth()
    state = {"rec": None, "evals": 0}  # evals: prediction steps so far (four per evaluation)

    class Dump(TrainerCallback):
        # During the second evaluation's third batch: the predictions gathered so far are on the GPU.
        def on_prediction_step(self, args, st, control, **kw):
            state["evals"] += 1
            if state["evals"] == 7 and state["rec"] is not None:
                truth.model, truth.opt = trainer.model, trainer.optimizer
                manual_dump(state["rec"], out, name, truth)

    args = TrainingArguments(output_dir="/tmp/hf_out", per_device_train_batch_size=4, per_device_eval_batch_size=8,
                             max_steps=4, eval_strategy="steps", eval_steps=2, bf16=True, report_to=[],
                             save_strategy="no", logging_strategy="no", dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Data(32), eval_dataset=Data(32),
                      compute_metrics=lambda p: {"n": float(len(p.predictions))}, callbacks=[Dump()])
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        state["rec"] = rec
        with truth.hooks:
            trainer.train()


def fsdp2_adamw(out, name):
    """FSDP2 (fully_shard per decoder layer and the root) on one rank, bf16 parameters in compute
    through MixedPrecisionPolicy, AdamW; dumped after the third forward."""
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaForCausalLM

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29518")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        model = LlamaForCausalLM(llama_config(4)).cuda()
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        truth = Truth()
        truth.model, truth.opt = model, opt
        ids = llama_batch(4)
        truth.inputs = [ids]
        with pc.record(out, max_entries=60000, stacks="python") as rec:
            train_and_dump(rec, out, name, truth, lambda: model(input_ids=ids, labels=ids).loss, opt)
    finally:
        dist.destroy_process_group()


def moe_train(out, name):
    """The hand-written mixture of experts under bf16 autocast, AdamW; dumped after the third forward."""
    model = MoeModel().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    truth = Truth()
    truth.model, truth.opt = model, opt
    ids = torch.randint(0, 16000, (8, 512), device="cuda")
    truth.inputs = [ids]
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        def loss_fn():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(ids)
                return torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), ids.view(-1))

        train_and_dump(rec, out, name, truth, loss_fn, opt)


def unet_fp16(out, name):
    """The UNet predicting noise under fp16 autocast with a GradScaler and AdamW; dumped mid-backward
    of the third step."""
    model = TinyUnet().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    truth = Truth()
    truth.model, truth.opt = model, opt
    x = torch.randn(16, 4, 64, 64, device="cuda").to(memory_format=torch.channels_last)
    noise = torch.randn_like(x)
    truth.inputs = [x, noise]
    scaled_fp16_mid_backward(out, name, truth, model, model.u1, lambda: torch.nn.functional.mse_loss(model(x + noise), noise), opt)


def vit_inference_oom(out, name):
    """timm ViT-L/16 under torch.inference_mode, fp32, a batch too large for a cap of 6 GiB: the OOM
    inside the forward of an inference job."""
    import timm

    model = timm.create_model("vit_large_patch16_224", pretrained=False).cuda().eval()
    truth = Truth()
    truth.model = model
    CURRENT[0] = truth
    x = torch.randn(512, 3, 224, 224, device="cuda")
    truth.inputs = [x]
    torch.cuda.set_per_process_memory_fraction(6 * 2**30 / torch.cuda.get_device_properties(0).total_memory)
    with pc.record(out, max_entries=60000, stacks="python", max_oom_dumps=1) as rec:
        try:
            with torch.inference_mode():
                model(x)
        except torch.OutOfMemoryError:
            pass
    keep_oom_dump(rec, out, name, truth)


def bert_embed_service(out, name):
    """An embedding service: a BERT encoder in fp16 under no_grad, mean-pooled batches moved to the
    host as they come; dumped during the fifth batch's forward (from a layer's forward hook)."""
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(hidden_size=1024, num_hidden_layers=12, num_attention_heads=16,
                                 intermediate_size=4096)).cuda().half().eval()
    truth = Truth()
    truth.model = model
    calls = [0]
    results = []
    with pc.record(out, max_entries=60000, stacks="python") as rec:

        def hook(module, args, output):
            calls[0] += 1
            if calls[0] == 4 * 12 + 6:
                manual_dump(rec, out, name, truth)

        h = [layer.register_forward_hook(hook) for layer in model.encoder.layer]
        with torch.no_grad():
            for _ in range(6):
                ids = torch.randint(0, 30000, (64, 256), device="cuda")
                mask = torch.ones_like(ids)
                truth.inputs = [ids, mask]
                hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
                results.append(hidden.mean(1).cpu())
        for x in h:
            x.remove()


def lightning_fit(out, name):
    """pytorch_lightning's Trainer fitting a LightningModule (a small Llama) in bf16-mixed precision
    with Adam; dumped from on_train_batch_end after the third batch."""
    import pytorch_lightning as pl
    from transformers import LlamaForCausalLM

    truth = Truth()
    state = {"rec": None}

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = LlamaForCausalLM(llama_config(2))

        def training_step(self, batch, i):
            return self.net(input_ids=batch[0], labels=batch[0]).loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-4)

        def on_train_batch_end(self, outputs, batch, i):
            if i == 2 and state["rec"] is not None:
                truth.model, truth.opt = self, self.trainer.optimizers[0]
                manual_dump(state["rec"], out, name, truth)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randint(0, 32000, (32, 512))), batch_size=4)
    trainer = pl.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=4, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    module = Module()
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        state["rec"] = rec
        with truth.hooks:
            trainer.fit(module, data)


def adafactor_reentrant(out, name):
    """torch.optim.Adafactor (factored second moments: a row and a column vector per matrix) on a
    Llama with reentrant gradient checkpointing; dumped after the third forward."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(llama_config(4)).cuda()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()
    model.train()
    opt = torch.optim.Adafactor(model.parameters(), lr=1e-3)
    truth = Truth()
    truth.model, truth.opt = model, opt
    ids = llama_batch(8)
    truth.inputs = [ids]
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        train_and_dump(rec, out, name, truth, lambda: model(input_ids=ids, labels=ids).loss, opt)


THIRD = {
    "hf_trainer_eval": (hf_trainer_eval,),
    "fsdp2_adamw": (fsdp2_adamw,),
    "moe_train": (moe_train,),
    "unet_fp16": (unet_fp16,),
    "vit_inference_oom": (vit_inference_oom,),
    "bert_embed_service": (bert_embed_service,),
    "lightning_fit": (lightning_fit,),
    "adafactor_reentrant": (adafactor_reentrant,),
}
SECOND.update(THIRD)



def main():
    if sys.argv[1] == "--pack":
        return pack(sys.argv[2], sys.argv[3])
    out = sys.argv[1]
    only = sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    import transformers

    print("torch", torch.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name(0), flush=True)
    # The capture helper attaches its observer at its first recording; ours goes after it, so the
    # dump is written before the truth is read (nothing moves in between).
    with pc.record(out, max_entries=10, stacks="python"):
        pass
    torch._C._cuda_attach_out_of_memory_observer(on_oom)
    peaks = {}

    def run(label, fn, *args):
        if only and label not in only:
            return
        t0 = time.time()
        try:
            peaks[label] = fn(out, label, *args)
        except Exception:
            print("FAILED %s:\n%s" % (label, traceback.format_exc()), flush=True)
        fresh()
        print("%s: %.1f s" % (label, time.time() - t0), flush=True)

    if only and all(o in SECOND for o in only):
        for o in only:
            run(o, *SECOND[o])
        return
    total = torch.cuda.get_device_properties(0).total_memory
    run("llama_autocast_adamw", train_llama)
    if peaks.get("llama_autocast_adamw"):
        run("llama_autocast_adamw_oom", train_llama, 0.92 * peaks["llama_autocast_adamw"] / total)
    run("gpt2_generate_fp16", gpt2_generate)
    run("lora_llama_bf16_ckpt", lora_llama)
    run("vit_fp16_scaler_sgd", vit_fp16)
    run("resnet50_probe", resnet_oom, None)
    if peaks.get("resnet50_probe"):
        run("resnet50_adam_oom", resnet_oom, 0.9 * peaks["resnet50_probe"] / total)
    run("gcn_adam_cpp", gcn)


if __name__ == "__main__":
    main()

