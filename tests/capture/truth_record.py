"""The truth a run on a GPU knows about its live tensors, and the dumps written beside it (see
truth_runs.py): what is a parameter, a gradient, optimizer state, an input, a KV cache, a weight
cast or saved for backward, by storage address, at the moment of a dump."""

import gc
import gzip
import json
import os
import shutil
import sys
import tarfile
import traceback
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "resources", "capture")))

import poolscope_capture as pc  # noqa: E402,F401  (re-exported to truth_runs)
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


def keep_oom_dump(rec, out, name, truth):
    """The helper's OOM dump, named after the run, with the truth the observer collected."""
    CURRENT[0] = None
    if rec.paths:
        path = os.path.join(out, name + ".pickle")
        os.replace(rec.paths[0], path)
        write_truth(path, name, "oom", truth, truth.pending or {})


def train_and_dump(rec, out, name, truth, loss_fn, opt, steps=3, set_to_none=True):
    """`steps` steps of loss_fn().backward() then opt.step(); dumped after the last step's forward,
    with what the graph saved held."""
    for step in range(steps):
        with truth.hooks:
            loss = loss_fn()
            if step == steps - 1:
                manual_dump(rec, out, name, truth)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)


def scaled_fp16_mid_backward(out, name, truth, model, block, loss_fn, opt):
    """Three fp16 autocast steps with a GradScaler; dumped in the third backward when it reaches
    `block` (a full backward hook): part of the saved tensors let go of, part of the gradients made."""
    scaler = torch.amp.GradScaler("cuda")
    want = [False]
    with pc.record(out, max_entries=60000, stacks="python") as rec:

        def hook(module, gi, go):
            if want[0]:
                want[0] = False
                manual_dump(rec, out, name, truth)

        h = block.register_full_backward_hook(hook)
        for step in range(3):
            with truth.hooks:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = loss_fn()
                want[0] = step == 2
                scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
        h.remove()


def fresh():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1.0)
    torch.cuda.reset_peak_memory_stats()



def pack(src, dest, limit=15 * 2**20):
    """Gzip every dump and put dumps and truths into as few tar files of at most `limit` bytes as
    fit (the device machine hands back 8 files of 16 MiB)."""
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


