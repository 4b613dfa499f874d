#!/usr/bin/env python3
"""Makes a large, real-shaped allocator snapshot for the load benchmarks.

Repeats the trace of a real dump (default: ../shared/corpus/k_ctx128_fullstep.pickle, else the project's
own fixture) until it holds N entries, shifting time_us so time still increases, and pickles it with
Python's own pickler, so frame dicts and frames lists are memo-shared exactly as PyTorch's dumps are.
usage: make_big_snapshot.py OUT ENTRIES [SOURCE]
"""
import os, pickle, sys

def main():
    out, n = sys.argv[1], int(sys.argv[2])
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[3] if len(sys.argv) > 3 else None
    if not src:
        corpus = os.path.join(here, "..", "..", "..", "shared", "corpus", "k_ctx128_fullstep.pickle")
        src = corpus if os.path.exists(corpus) else os.path.join(here, "..", "data", "snapshots", "train_p4.pickle")
    with open(src, "rb") as f:
        snap = pickle.load(f)
    trace = snap["device_traces"][0]
    span = (trace[-1].get("time_us", 0) - trace[0].get("time_us", 0)) + 1000
    big = []
    rep = 0
    while len(big) < n:
        lists = {}  # per repetition: new frames lists (as PyTorch makes per traceback), shared frame dicts
        for e in trace:
            if len(big) >= n:
                break
            if rep == 0 or "time_us" not in e:
                big.append(e)
            else:
                c = dict(e)
                c["time_us"] = e["time_us"] + rep * span
                if "frames" in e:
                    c["frames"] = lists.setdefault(id(e["frames"]), list(e["frames"]))
                big.append(c)
        rep += 1
    snap["device_traces"][0] = big
    with open(out, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    print(f"{out}: {len(big)} entries, {os.path.getsize(out) / 1e6:.1f} MB from {os.path.basename(src)} x{rep}")

if __name__ == "__main__":
    main()
