"""Real training and inference runs on a CUDA GPU, each dumped with the capture helper beside the
run's own truth: which live tensor is a parameter, a gradient, optimizer state, an input, a KV
cache, an autocast weight cast or a tensor saved for backward, at the moment the dump was written.

PoolScope's classifier reads the dump; the run knows its own objects. `poolscope_truth_check`
(tests/tools/truth_check.cpp) compares the two, for the dump as written and after each redaction.
Nothing here is a test of its own: it needs a GPU, PyTorch, transformers, peft, timm and
torch_geometric, which CI does not have. It was written for the GPU machine some sessions are lent.

    python3 tests/capture/truth_runs.py OUTDIR [SCENARIO ...]
    python3 tests/capture/truth_runs.py --pack OUTDIR DEST     (gzip the dumps, tar them in 15 MiB parts)

Scenarios of the second set (SECOND) run one per process, so that no run inherits another's memory.

Each dump OUTDIR/<scenario>.pickle gets OUTDIR/<scenario>.truth.json:
    {"scenario", "moment": "manual"|"oom", "tensors": [{"ptr", "nbytes", "label", "name"}]}
ptr is the tensor's storage address (an allocation's address in the dump); where a storage is
known under two roles, the first of parameter, gradient, optimizer_state, input, kv_cache,
cast_cache, activation wins. Tensors the run cannot name (scratch, outputs in flight, the loss)
are not listed: the checker reports those bytes as unlabelled, apart from the score.
"""

import gc
import json
import os
import sys
import time
import traceback
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "resources", "capture")))

import poolscope_capture as pc  # noqa: E402
import torch  # noqa: E402

PRIORITY = ["parameter", "gradient", "optimizer_state", "input", "kv_cache", "cast_cache", "activation"]


def tensors_in(obj, depth=0, seen=None):
    """Every CUDA tensor reachable from obj through attributes, lists, tuples and dicts (a cache
    object of any class: the run's own, transformers', a quantised store)."""
    seen = set() if seen is None else seen
    if depth > 5 or id(obj) in seen:
        return []
    seen.add(id(obj))
    if torch.is_tensor(obj):
        return [obj] if obj.is_cuda else []
    out = []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, type)):
        items = list(vars(obj).values())
    else:
        items = []
    for x in items:
        out += tensors_in(x, depth + 1, seen)
    return out


class Truth:
    """What the run knows about its live tensors; saved-for-backward tensors are followed by weak
    references taken in a saved_tensors_hooks pack hook (which returns the tensor itself, so the
    graph keeps exactly what it would have kept)."""

    def __init__(self):
        self.saved = []
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self.model = None
        self.opt = None
        self.inputs = []
        self.cache = None
        self.pending = None  # rows collected in the OOM observer
        self.cast_candidates = []

    def _pack(self, t):
        try:
            self.saved.append(weakref.ref(t))
        except TypeError:
            pass
        return t

    @staticmethod
    def _unpack(t):
        return t

    def collect(self):
        """Rows by storage address; allocates nothing on the GPU (it runs inside the OOM observer)."""
        rows = {}

        def add(t, label, name):
            # A DTensor (FSDP2) holds its shard in _local_tensor: that is the allocation.
            t = getattr(t, "_local_tensor", t)
            if not torch.is_tensor(t) or not t.is_cuda:
                return
            st = t.untyped_storage()
            ptr, n = st.data_ptr(), st.nbytes()
            if n == 0 or ptr == 0:
                return
            old = rows.get(ptr)
            if old is None or PRIORITY.index(label) < PRIORITY.index(old["label"]):
                rows[ptr] = {"ptr": ptr, "nbytes": n, "label": label, "name": name}

        params = []
        if self.model is not None:
            for name, p in self.model.named_parameters():
                add(p, "parameter", name)
                params.append(p)
                if p.grad is not None:
                    add(p.grad, "gradient", name + ".grad")
            for name, b in self.model.named_buffers():
                add(b, "parameter", name)
        if self.opt is not None:
            for i, (p, state) in enumerate(self.opt.state.items()):
                for k, v in state.items():
                    add(v, "optimizer_state", "state[%d].%s" % (i, k))
        for i, t in enumerate(self.inputs):
            add(t, "input", "input[%d]" % i)
        if self.cache is not None:
            for i, t in enumerate(tensors_in(self.cache)):
                add(t, "kv_cache", "cache[%d]" % i)
        # A saved lower-precision tensor with a parameter's element count and shape (or its
        # transpose) is a candidate weight cast; its values decide later (comparing allocates).
        by_numel = {}
        for p in (getattr(p, "_local_tensor", p) for p in params):
            if p.dtype == torch.float32:
                by_numel.setdefault(p.numel(), []).append(p)
        alive = [r() for r in self.saved]
        self.saved = [r for r, t in zip(self.saved, alive) if t is not None]
        cands = []
        for t in alive:
            if t is None:
                continue
            if t.dtype in (torch.bfloat16, torch.float16) and t.untyped_storage().nbytes() // t.element_size() in by_numel:
                cands.append(t)
            add(t, "activation", "saved %s %s" % (tuple(t.shape), str(t.dtype).replace("torch.", "")))
        self.cast_candidates = [(t, by_numel[t.untyped_storage().nbytes() // t.element_size()]) for t in cands]
        return rows

    def confirm_casts(self, rows):
        """After the dump: a candidate whose storage holds a parameter's values cast is a cast."""
        for t, ps in self.cast_candidates:
            st = t.untyped_storage()
            # Compared on the host, so the check adds nothing to the recording that goes on.
            flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(st).cpu()
            for p in ps:
                if torch.equal(flat, p.detach().reshape(-1).cpu().to(t.dtype)):
                    row = rows.get(st.data_ptr())
                    if row is not None and row["label"] == "activation":
                        row["label"] = "cast_cache"
                        row["name"] = "cast of a parameter"
                    break
        self.cast_candidates = []


CURRENT = [None]


def on_oom(device, alloc, device_alloc, device_free):
    truth = CURRENT[0]
    if truth is not None and truth.pending is None:
        try:
            truth.pending = truth.collect()
        except Exception:
            traceback.print_exc()


def write_truth(path, scenario, moment, truth, rows):
    truth.confirm_casts(rows)
    with open(path.replace(".pickle", ".truth.json"), "w") as f:
        json.dump({"scenario": scenario, "moment": moment, "tensors": sorted(rows.values(), key=lambda r: r["ptr"])}, f)
    counts = {}
    for r in rows.values():
        counts[r["label"]] = counts.get(r["label"], 0) + r["nbytes"]
    print("  truth %s: %s" % (scenario, ", ".join("%s %.1f MiB" % (k, v / 2**20) for k, v in sorted(counts.items()))), flush=True)


def manual_dump(rec, out, scenario, truth):
    path = os.path.join(out, scenario + ".pickle")
    rec.dump(path=path)
    rows = truth.collect()
    write_truth(path, scenario, "manual", truth, rows)


def fresh():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1.0)
    torch.cuda.reset_peak_memory_stats()


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
    if oom_fraction is not None and rec.paths:
        path = os.path.join(out, name + ".pickle")
        os.replace(rec.paths[0], path)
        write_truth(path, name, "oom", truth, truth.pending or {})
    peak = torch.cuda.max_memory_allocated()
    CURRENT[0] = None
    return peak


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
        for step in range(3):
            with truth.hooks:
                loss = model(input_ids=ids, labels=ids).loss
                if step == 2:
                    manual_dump(rec, out, name, truth)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)


def vit_fp16(out, name):
    """timm ViT-B/16 under fp16 autocast with a GradScaler and SGD with momentum; dumped mid-backward
    of the third step (from a block's backward hook)."""
    import timm

    model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    truth = Truth()
    truth.model, truth.opt = model, opt
    x = torch.randn(96, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (96,), device="cuda")
    truth.inputs = [x, y]
    want = [False]
    with pc.record(out, max_entries=60000, stacks="python") as rec:

        def hook(module, gi, go):
            if want[0]:
                want[0] = False
                manual_dump(rec, out, name, truth)

        h = model.blocks[5].register_full_backward_hook(hook)
        for step in range(3):
            with truth.hooks:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                want[0] = step == 2
                scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
        h.remove()


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
    if fraction is not None and rec.paths:
        path = os.path.join(out, name + ".pickle")
        os.replace(rec.paths[0], path)
        write_truth(path, name, "oom", truth, truth.pending or {})
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
        for step in range(3):
            with truth.hooks:
                loss = torch.nn.functional.cross_entropy(model(x, edge_index), y)
                if step == 2:
                    manual_dump(rec, out, name, truth)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)


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
    CURRENT[0] = None
    if rec.paths:
        path = os.path.join(out, name + ".pickle")
        os.replace(rec.paths[0], path)
        write_truth(path, name, "oom", truth, truth.pending or {})


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


class HandStore:
    """A decoder's own KV cache (the user's class, the user's names): one preallocated buffer per
    layer and tensor, written in place at each position."""

    def __init__(self, layers, batch, heads, length, head_dim, dtype):
        self.keys = [torch.zeros(batch, heads, length, head_dim, device="cuda", dtype=dtype) for _ in range(layers)]
        self.vals = [torch.zeros(batch, heads, length, head_dim, device="cuda", dtype=dtype) for _ in range(layers)]


class HandBlock(torch.nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(h)
        self.qkv = torch.nn.Linear(h, 3 * h)
        self.out = torch.nn.Linear(h, h)
        self.norm2 = torch.nn.LayerNorm(h)
        self.up = torch.nn.Linear(h, 4 * h)
        self.down = torch.nn.Linear(4 * h, h)

    def forward(self, x, store, i, pos, grow):
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        if grow:
            store[0][i] = k if store[0][i] is None else torch.cat([store[0][i], k], dim=2)
            store[1][i] = v if store[1][i] is None else torch.cat([store[1][i], v], dim=2)
            ks, vs = store[0][i], store[1][i]
        else:
            store.keys[i][:, :, pos:pos + t] = k
            store.vals[i][:, :, pos:pos + t] = v
            ks, vs = store.keys[i][:, :, :pos + t], store.vals[i][:, :, :pos + t]
        a = torch.nn.functional.scaled_dot_product_attention(q, ks, vs, is_causal=t > 1)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, h))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class HandDecoder(torch.nn.Module):
    def __init__(self, vocab=16000, h=1024, heads=16, layers=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, h)
        self.blocks = torch.nn.ModuleList([HandBlock(h, heads) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(h)
        self.head = torch.nn.Linear(h, vocab, bias=False)

    def forward(self, ids, store, pos, grow):
        x = self.emb(ids)
        for i, blk in enumerate(self.blocks):
            x = blk(x, store, i, pos, grow)
        return self.head(self.norm(x[:, -1:]))


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
            for step in range(3):
                with truth.hooks:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = ddp(input_ids=ids, labels=ids).loss
                    if step == 2:
                        manual_dump(rec, out, name, truth)
                    loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=False)
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
        for step in range(3):
            with truth.hooks:
                loss = fwd(input_ids=ids, labels=ids).loss
                if step == 2:
                    manual_dump(rec, out, name, truth)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)


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
            for step in range(3):
                with truth.hooks:
                    loss = model(input_ids=ids, labels=ids).loss
                    if step == 2:
                        manual_dump(rec, out, name, truth)
                    loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
    finally:
        dist.destroy_process_group()


class Experts(torch.nn.Module):
    """A top-2 mixture of experts written by hand: tokens gathered per expert by index."""

    def __init__(self, h=1024, n=8, ffn=2048):
        super().__init__()
        self.router = torch.nn.Linear(h, n, bias=False)
        self.up = torch.nn.ModuleList([torch.nn.Linear(h, ffn, bias=False) for _ in range(n)])
        self.down = torch.nn.ModuleList([torch.nn.Linear(ffn, h, bias=False) for _ in range(n)])

    def forward(self, x):
        b, t, h = x.shape
        flat = x.reshape(-1, h)
        weights, chosen = torch.topk(torch.softmax(self.router(flat), -1), 2, dim=-1)
        out = torch.zeros_like(flat)
        for e in range(len(self.up)):
            rows, slot = torch.where(chosen == e)
            if rows.numel() == 0:
                continue
            y = self.down[e](torch.nn.functional.silu(self.up[e](flat[rows])))
            out = out.index_add(0, rows, (y * weights[rows, slot, None]).to(out.dtype))
        return x + out.reshape(b, t, h)


class MoeModel(torch.nn.Module):
    def __init__(self, layers=4, h=1024, vocab=16000):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, h)
        self.blocks = torch.nn.ModuleList([Experts(h) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(h)
        self.head = torch.nn.Linear(h, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def moe_train(out, name):
    """The hand-written mixture of experts under bf16 autocast, AdamW; dumped after the third forward."""
    model = MoeModel().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    truth = Truth()
    truth.model, truth.opt = model, opt
    ids = torch.randint(0, 16000, (8, 512), device="cuda")
    truth.inputs = [ids]
    with pc.record(out, max_entries=60000, stacks="python") as rec:
        for step in range(3):
            with truth.hooks:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = model(ids)
                    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), ids.view(-1))
                if step == 2:
                    manual_dump(rec, out, name, truth)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)


class TinyUnet(torch.nn.Module):
    """A diffusion-style UNet: conv blocks with GroupNorm and SiLU, down and up with skips."""

    def __init__(self, c=128):
        super().__init__()

        def block(i, o):
            return torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, padding=1), torch.nn.GroupNorm(32, o), torch.nn.SiLU(),
                                       torch.nn.Conv2d(o, o, 3, padding=1), torch.nn.GroupNorm(32, o), torch.nn.SiLU())

        self.inp = torch.nn.Conv2d(4, c, 3, padding=1)
        self.d1, self.d2, self.d3 = block(c, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.mid = block(4 * c, 4 * c)
        self.u3, self.u2, self.u1 = block(8 * c, 2 * c), block(4 * c, c), block(2 * c, c)
        self.out = torch.nn.Conv2d(c, 4, 3, padding=1)

    def forward(self, x):
        x = self.inp(x)
        s1 = self.d1(x)
        s2 = self.d2(torch.nn.functional.avg_pool2d(s1, 2))
        s3 = self.d3(torch.nn.functional.avg_pool2d(s2, 2))
        m = self.mid(s3)
        u = self.u3(torch.cat([m, s3], 1))
        u = self.u2(torch.cat([torch.nn.functional.interpolate(u, scale_factor=2), s2], 1))
        u = self.u1(torch.cat([torch.nn.functional.interpolate(u, scale_factor=2), s1], 1))
        return self.out(u)


def unet_fp16(out, name):
    """The UNet predicting noise under fp16 autocast with a GradScaler and AdamW; dumped mid-backward
    of the third step."""
    model = TinyUnet().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    truth = Truth()
    truth.model, truth.opt = model, opt
    x = torch.randn(16, 4, 64, 64, device="cuda").to(memory_format=torch.channels_last)
    noise = torch.randn_like(x)
    truth.inputs = [x, noise]
    want = [False]
    with pc.record(out, max_entries=60000, stacks="python") as rec:

        def hook(module, gi, go):
            if want[0]:
                want[0] = False
                manual_dump(rec, out, name, truth)

        h = model.u1.register_full_backward_hook(hook)
        for step in range(3):
            with truth.hooks:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = torch.nn.functional.mse_loss(model(x + noise), noise)
                want[0] = step == 2
                scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
        h.remove()


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
    CURRENT[0] = None
    if rec.paths:
        path = os.path.join(out, name + ".pickle")
        os.replace(rec.paths[0], path)
        write_truth(path, name, "oom", truth, truth.pending or {})


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
        for step in range(3):
            with truth.hooks:
                loss = model(input_ids=ids, labels=ids).loss
                if step == 2:
                    manual_dump(rec, out, name, truth)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)


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


def pack(src, dest, limit=15 * 2**20):
    """Gzip every dump and put dumps and truths into as few tar files of at most `limit` bytes as
    fit (the device machine hands back 8 files of 16 MiB)."""
    import gzip
    import shutil
    import tarfile

    files = []
    for f in sorted(os.listdir(src)):
        p = os.path.join(src, f)
        if f.endswith(".pickle"):
            with open(p, "rb") as i, gzip.open(p + ".gz", "wb", 9) as o:
                shutil.copyfileobj(i, o)
            p += ".gz"
        elif not f.endswith(".json"):
            continue
        files.append(p)
    files.sort(key=os.path.getsize, reverse=True)
    parts = []
    for p in files:
        n = os.path.getsize(p)
        if n > limit:
            print("too large to bring back: %s (%d bytes)" % (p, n))
            continue
        for part in parts:
            if part[0] + n <= limit:
                part[0] += n
                part[1].append(p)
                break
        else:
            parts.append([n, [p]])
    os.makedirs(dest, exist_ok=True)
    for k, (_, ps) in enumerate(parts):
        with tarfile.open(os.path.join(dest, "part%d.tar" % k), "w") as t:
            for p in ps:
                t.add(p, arcname=os.path.basename(p))
        print("part%d.tar: %s" % (k, " ".join(os.path.basename(p) for p in ps)))


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
