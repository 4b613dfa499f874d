#!/usr/bin/env python3
"""Checks pickles written by PoolScope's PickleWriter against CPython's own pickler.

  roundtrip FILE PROTOCOL EXPR [CHECK]  the file loads to eval(EXPR), pickle.dumps of what it loads
                                        gives the file back byte for byte, and CHECK (Python code with
                                        `obj` bound, e.g. sharing by `is`) holds
  compare ORIGINAL OURS                 two snapshots hold the same dict (tuples and lists alike)
  json JSONFILE PICKLEFILE              a JSON snapshot holds the same dict as a pickled one
  info FILE                             prints opcode counts and frame sizes
  snapshot FILE [FRAMES]                the file is a snapshot dict as torch.cuda.memory._snapshot()
                                        returns it (or the bare segment list of memory_snapshot()),
                                        in the shape PyTorch's memory_viz reads (segments with
                                        blocks, device_traces of entries, frames of name/filename/line);
                                        FRAMES "python": no native frame; "none": every frames list empty
Exit status 0 when the check holds; the reason otherwise. Classes are never resolved.
"""
import io
import json
import pickle
import pickletools
import sys
from collections import Counter


class _Safe(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def load(path):
    with open(path, "rb") as f:
        return _Safe(io.BytesIO(f.read())).load()


def norm(o):
    if isinstance(o, (list, tuple)):
        return [norm(x) for x in o]
    if isinstance(o, dict):
        return {k: norm(v) for k, v in o.items()}
    return o


def first_difference(a, b, path="$"):
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        if set(a) != set(b):
            return f"{path}: keys {sorted(set(a) ^ set(b))} differ"
        for k in a:
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def main(argv):
    mode = argv[1]
    if mode == "roundtrip":
        path, proto, expr = argv[2], int(argv[3]), argv[4]
        data = open(path, "rb").read()
        obj = _Safe(io.BytesIO(data)).load()
        expected = eval(expr)
        if obj != expected:
            return f"loaded {obj!r:.300} expected {expected!r:.300}"
        again = pickle.dumps(obj, protocol=proto)
        if again != data:
            pos = next((i for i, (x, y) in enumerate(zip(again, data)) if x != y), min(len(again), len(data)))
            return f"CPython writes {len(again)} bytes, we wrote {len(data)}; first difference at byte {pos}: " \
                   f"cpython {again[max(0, pos - 8):pos + 8].hex()} ours {data[max(0, pos - 8):pos + 8].hex()}"
        if len(argv) > 5 and not eval(argv[5], {"obj": obj}):
            return f"check failed: {argv[5]}"
        return None
    if mode == "compare":
        a, b = load(argv[2]), load(argv[3])
        if a == b:  # the fast path, in C; the walk below only explains a difference
            return None
        return first_difference(norm(a), norm(b)) or "the dicts differ (tuple vs list only)"

    if mode == "json":
        with open(argv[2], "rb") as f:
            a = json.load(f)
        return first_difference(norm(load(argv[3])), norm(a))
    if mode == "info":
        data = open(argv[2], "rb").read()
        ops = Counter()
        frames = []
        for op, arg, pos in pickletools.genops(data):
            ops[op.name] += 1
            if op.name == "FRAME":
                frames.append(arg)
        print(dict(ops), frames[:10])
        return None
    if mode == "snapshot":
        return check_snapshot(load(argv[2]), argv[3] if len(argv) > 3 else "all")
    return f"unknown mode {mode}"


NATIVE = (".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".cu", ".cuh", ".inl", ".S")


def check_frames(frames, where, keep):
    if not isinstance(frames, list):
        return f"{where}.frames: {type(frames).__name__}, expected list"
    if keep == "none" and frames:
        return f"{where}.frames: {len(frames)} frames, expected none"
    for i, f in enumerate(frames):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("filename"), str) \
                or not isinstance(f.get("line"), int):
            return f"{where}.frames[{i}]: {f!r:.120} is not a name/filename/line dict"
        native = f["filename"] in ("", "??") or f["filename"].endswith(NATIVE)
        if keep == "python" and native and f["filename"] != "<op>":
            return f"{where}.frames[{i}]: native frame {f!r:.120} in a Python-only copy"
    return None


def check_snapshot(obj, keep):
    if isinstance(obj, list):  # torch.cuda.memory_snapshot(): the bare list of segments
        obj = {"segments": obj, "device_traces": []}
    if not isinstance(obj, dict) or not isinstance(obj.get("segments"), list) or not isinstance(obj.get("device_traces"), list):
        return "not a snapshot dict with segments and device_traces"
    for s, seg in enumerate(obj["segments"]):
        for key in ("device", "address", "total_size", "stream", "segment_type", "blocks"):
            if key not in seg:
                return f"segments[{s}] has no {key}"
        for b, block in enumerate(seg["blocks"]):
            for key in ("address", "size", "state"):
                if key not in block:
                    return f"segments[{s}].blocks[{b}] has no {key}"
            err = check_frames(block.get("frames", []), f"segments[{s}].blocks[{b}]", keep)
            if err:
                return err
    for d, entries in enumerate(obj["device_traces"]):
        if not isinstance(entries, list):
            return f"device_traces[{d}] is not a list"
        for e, entry in enumerate(entries):
            for key in ("action", "addr", "size", "stream", "frames"):
                if key not in entry and not (key == "addr" and entry.get("action") == "oom"):
                    return f"device_traces[{d}][{e}] has no {key}"
            err = check_frames(entry["frames"], f"device_traces[{d}][{e}]", keep)
            if err:
                return err
    for a, ann in enumerate(obj.get("external_annotations", [])):
        if not isinstance(ann.get("name"), str) or ann.get("stage") not in ("START", "END"):
            return f"external_annotations[{a}]: {ann!r:.120}"
    return None


if __name__ == "__main__":
    err = main(sys.argv)
    if err:
        print(err)
        sys.exit(1)
