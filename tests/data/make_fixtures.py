#!/usr/bin/env python3
"""Writes PoolScope's small snapshot fixtures and their facts (tests/data/snapshots/).

The fixtures mimic what torch.cuda.memory._snapshot() returns (see ../../../shared/docs/formats.md):
shared frame dicts and frames lists (so the pickle memo is exercised as in real dumps), pre-existing
allocations, segment events, an OOM entry, annotations. facts.json holds the numbers an independent,
plain replay computes (the same definitions as shared/corpus/expected.json). Run it again after changing
it; the outputs are checked in so the tests need neither Python nor zstd.
"""
import gzip, json, os, pickle, subprocess, sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "snapshots")
MiB = 1 << 20

def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}

CPP = [frame("??", 0, "torch::unwind::unwind()"),
       frame("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)")]
F_TRAIN = frame("/home/u/train.py", 42, "train_step")
F_FWD = frame("/usr/lib/python3/site-packages/torch/nn/modules/module.py", 1527, "_call_impl")
F_LIN = frame("/home/u/model.py", 17, "forward")
F_ADAM = frame("/usr/lib/python3/site-packages/torch/optim/adamw.py", 410, "_init_group")
F_PARAM = frame("/home/u/model.py", 9, "__init__")

def stack(*fs):
    return list(fs)

def build(with_time=True, legacy=False, devices=1, unknown=False, oom=True):
    """A small training-like trace on device 0 (and an empty device 1 when devices == 2)."""
    t = [1_700_000_000_000_000]
    def now():
        t[0] += 137
        return t[0]
    base = 0x7f0000000000
    entries = []
    def e(action, addr, size, frames=None, stream=0, **extra):
        d = {"action": action, "addr": addr, "size": size, "stream": stream}
        if with_time:
            d["time_us"] = now()
        if frames is not None:
            d["frames"] = frames
        d.update(extra)
        entries.append(d)
    fwd = stack(*CPP, F_LIN, F_FWD, F_TRAIN)
    opt = stack(*CPP, F_ADAM, F_TRAIN)
    # Segment created during the trace for activations.
    act_seg = base + 64 * MiB
    e("segment_alloc", act_seg, 20 * MiB, fwd)
    acts = []
    for k in range(4):
        addr = act_seg + k * 4 * MiB
        e("alloc", addr, 4 * MiB - 100 * k, fwd)        # requested sizes, not rounded
        acts.append((addr, 4 * MiB - 100 * k, fwd))
    for addr, size, fr in acts[:3]:                     # backward frees three; frames list shared
        e("free_requested", addr, size, fr)
        e("free_completed", addr, size, fr)
    # Optimizer state: two buffers, allocated in a second new segment, alive at the end.
    opt_seg = base + 128 * MiB
    e("segment_alloc", opt_seg, 20 * MiB, opt)
    e("alloc", opt_seg, 6 * MiB, opt)
    e("alloc", opt_seg + 6 * MiB, 6 * MiB, opt)
    # A pre-existing allocation (a parameter allocated before recording) freed during the trace.
    e("free_requested", base + 8 * MiB, 2 * MiB, stack(*CPP, F_PARAM))
    e("free_completed", base + 8 * MiB, 2 * MiB, stack(*CPP, F_PARAM))
    if unknown:
        e("mystery_action", 0, 0, None)
        entries[-1]["brand_new_key"] = 1
    if oom:
        d = {"action": "oom", "device_free": 3 * MiB, "size": 40 * MiB, "stream": 0, "addr": 0}
        if with_time:
            d["time_us"] = now()
        entries.append(d)
    # Final segments: a pre-existing segment with two parameters (one freed in the trace above),
    # the activation segment with its survivor and the optimizer segment.
    param_frames = stack(*CPP, F_PARAM)
    def blk(addr, size, req, state, frames):
        if legacy:
            return {"size": size, "requested_size": req, "state": state,
                    "history": [{"addr": addr, "real_size": req, "frames": frames}] if state != "inactive" else []}
        return {"address": addr, "size": size, "requested_size": req, "state": state, "frames": frames}
    def seg(addr, total, blocks):
        s = {"device": 0, "address": addr, "total_size": total,
             "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
             "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
             "requested_size": sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated"),
             "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
             "frames": blocks[0].get("frames", [])}
        s["blocks"] = blocks
        return s
    segments = [
        seg(base, 20 * MiB, [blk(base, 8 * MiB, 8 * MiB, "active_allocated", param_frames),
                             blk(base + 8 * MiB, 12 * MiB, 0, "inactive", [])]),
        seg(act_seg, 20 * MiB, [blk(act_seg, 12 * MiB, 0, "inactive", []),
                                blk(act_seg + 12 * MiB, 4 * MiB, 4 * MiB - 300, "active_allocated", fwd),
                                blk(act_seg + 16 * MiB, 4 * MiB, 0, "inactive", [])]),
        seg(opt_seg, 20 * MiB, [blk(opt_seg, 6 * MiB, 6 * MiB, "active_allocated", opt),
                                blk(opt_seg + 6 * MiB, 6 * MiB, 6 * MiB, "active_allocated", opt),
                                blk(opt_seg + 12 * MiB, 8 * MiB, 0, "inactive", [])]),
    ]
    snap = {"segments": segments, "device_traces": [entries] + ([[]] if devices == 2 else []),
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "expandable_segments": False,
                                   "roundup_power2_divisions": {"1": 0, "2": 0}}}
    if with_time:
        snap["external_annotations"] = [
            {"name": "Optimizer.step#AdamW.step", "stage": "START", "device": 0, "time_us": entries[8]["time_us"] - 1},
            {"name": "Optimizer.step#AdamW.step", "stage": "END", "device": 0, "time_us": entries[11]["time_us"] + 1}]
    if unknown:
        snap["some_future_key"] = {"x": 1}
    if not with_time:
        for s in snap["device_traces"]:
            for d in s:
                d.pop("time_us", None)
    return snap

def facts(snap):
    """Independent plain replay: the definitions of shared/corpus/README.md."""
    out = []
    traces = snap["device_traces"] if isinstance(snap, dict) else []
    segs = snap["segments"] if isinstance(snap, dict) else snap
    ndev = max([len(traces)] + [s["device"] + 1 for s in segs])
    for dev in range(ndev):
        tr = traces[dev] if dev < len(traces) else []
        active = sum(b["size"] for s in segs if s["device"] == dev for b in s["blocks"] if b["state"] == "active_allocated")
        alive, net, run, peak, pidx, orphan = {}, 0, 0, 0, -1, 0
        for i, x in enumerate(tr):
            if x["action"] == "alloc":
                alive[x["addr"]] = x["size"]; net += x["size"]; run += x["size"]
            elif x["action"] == "free_completed":
                run -= x["size"]
                if x["addr"] in alive:
                    net -= x["size"]; del alive[x["addr"]]
                else:
                    orphan += x["size"]
            if run > peak:
                peak, pidx = run, i
        initial = active - net + orphan
        out.append({"device": dev, "entries": len(tr), "initial_allocated": initial,
                    "peak_allocated": initial + peak, "peak_index": pidx,
                    "end_reserved": sum(s["total_size"] for s in segs if s["device"] == dev),
                    "orphan_free_bytes": orphan, "ooms": sum(1 for x in tr if x["action"] == "oom")})
    return out

def main():
    os.makedirs(OUT, exist_ok=True)
    all_facts = {}
    def write(name, data, snap):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        all_facts[name] = facts(snap)
    s = build()
    for proto in (0, 1, 2, 3, 4, 5):
        write(f"train_p{proto}.pickle", pickle.dumps(s, protocol=proto), s)
    write("train.json", json.dumps(s).encode(), s)
    write("train.pickle.gz", gzip.compress(pickle.dumps(s, protocol=4), mtime=0), s)
    raw = pickle.dumps(s, protocol=4)
    zst = subprocess.run(["zstd", "-q", "-c", "-19"], input=raw, stdout=subprocess.PIPE, check=True).stdout
    write("train.pickle.zst", zst, s)
    write("train.json.zst", subprocess.run(["zstd", "-q", "-c"], input=json.dumps(s).encode(), stdout=subprocess.PIPE, check=True).stdout, s)
    s = build(with_time=False, legacy=True, oom=False)
    write("legacy_no_time.pickle", pickle.dumps(s, protocol=4), s)
    s = build(devices=2, unknown=True)
    write("two_devices_unknown.pickle", pickle.dumps(s, protocol=4), s)
    s = build()["segments"]
    write("bare_segments.pickle", pickle.dumps(s, protocol=2), s)
    s = {"segments": [], "device_traces": [[]]}
    write("empty_trace.pickle", pickle.dumps(s, protocol=4), s)
    with open(os.path.join(OUT, "facts.json"), "w") as f:
        json.dump(all_facts, f, indent=1, sort_keys=True)
    # Hostile: a pickle that would run os.system when given to pickle.load (never load it in Python).
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    with open(os.path.join(OUT, "evil_reduce.pickle"), "wb") as f:
        f.write(pickle.dumps({"segments": [Evil()]}, protocol=4))

if __name__ == "__main__":
    main()
