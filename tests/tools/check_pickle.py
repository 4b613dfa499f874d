#!/usr/bin/env python3
"""Checks pickles written by PoolScope's PickleWriter against CPython's own pickler.

  roundtrip FILE PROTOCOL EXPR [CHECK]  the file loads to eval(EXPR), pickle.dumps of what it loads
                                        gives the file back byte for byte, and CHECK (Python code with
                                        `obj` bound, e.g. sharing by `is`) holds
  compare ORIGINAL OURS                 two snapshots hold the same dict (tuples and lists alike)
  json JSONFILE PICKLEFILE              a JSON snapshot holds the same dict as a pickled one
  info FILE                             prints opcode counts and frame sizes
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
    return f"unknown mode {mode}"


if __name__ == "__main__":
    err = main(sys.argv)
    if err:
        print(err)
        sys.exit(1)
