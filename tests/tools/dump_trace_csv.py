#!/usr/bin/env python3
"""Dumps one device of a PyTorch allocator snapshot (pickle) as CSV lines, for tests that need the
raw numbers without a pickle reader. Only plain containers are loaded (no classes are resolved).

  A,<setting>,<value>                       allocator_settings (dicts as Python repr)
  E,<action>,<addr>,<size>,<stream>,<time_us or empty>,<1 if a frame is empty_cache>
  S,<address>,<total_size>,<stream>,<small|large>,<0|1 expandable>
  B,<address>,<size>,<requested_size>,<state>
"""
import argparse
import io
import pickle
import sys


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("snapshot")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    with open(args.snapshot, "rb") as f:
        data = _NoGlobals(io.BytesIO(f.read())).load()
    if isinstance(data, list):
        data = {"segments": data, "device_traces": []}
    out = sys.stdout
    for k, v in (data.get("allocator_settings") or {}).items():
        out.write(f"A,{k},{v!r}\n" if isinstance(v, dict) else f"A,{k},{v}\n")
    traces = data.get("device_traces") or []
    if args.device < len(traces):
        for e in traces[args.device]:
            frames = e.get("frames") or []
            empty = any(fr.get("name") == "empty_cache" for fr in frames)
            t = e.get("time_us", "")
            out.write(f"E,{e['action']},{e.get('addr', e.get('device_free', 0))},{e.get('size', 0)},"
                      f"{e.get('stream', 0)},{t},{int(empty)}\n")
    for s in data.get("segments") or []:
        if s.get("device", 0) != args.device:
            continue
        out.write(f"S,{s['address']},{s['total_size']},{s.get('stream', 0)},{s.get('segment_type', 'large')},"
                  f"{int(bool(s.get('is_expandable', False)))}\n")
        addr = s["address"]
        for b in s.get("blocks") or []:
            a = b.get("address", addr)
            out.write(f"B,{a},{b['size']},{b.get('requested_size', b['size'])},{b['state']}\n")
            addr = a + b["size"]


if __name__ == "__main__":
    main()
