#!/usr/bin/env python3
"""Writes generated seed inputs for the fuzz harnesses into OUT/<harness>/ (run.sh calls it).

Small, valid inputs of every shape the readers accept, so the fuzzer starts from deep inside each
format instead of rediscovering its syntax: snapshot dicts in pickle protocols 0-5 (memo sharing as
in real dumps), the same dict as JSON and inside a memory_viz HTML page, Kineto traces (with and
without Addr/Total Allocated, operators, OOM), export_memory_timeline .raw.json rows, and zstd/gzip
versions of some of them. The checked-in fixtures in tests/data are copied beside these by run.sh.
"""
import base64, gzip, json, os, pickle, shutil, subprocess, sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "seeds"


def frame(f, line, name):
    return {"filename": f, "line": line, "name": name}


def snapshot(n=6, with_time=True, annotations=True, extra_keys=False):
    fr = [frame("train.py", 3, "step"), frame("??", 0, "c10::malloc")]
    base = 0x7F0000000000
    entries = [{"action": "segment_alloc", "addr": base, "size": 2 << 20, "stream": 0, "frames": fr}]
    for k in range(n):
        entries.append({"action": "alloc", "addr": base + 512 * k, "size": 500 + k, "stream": 0, "frames": fr})
    entries.append({"action": "free_requested", "addr": base, "size": 500, "stream": 0, "frames": fr})
    entries.append({"action": "free_completed", "addr": base, "size": 500, "stream": 0, "frames": fr})
    entries.append({"action": "free_completed", "addr": 0x1234, "size": 64, "stream": 0, "frames": []})
    entries.append({"action": "oom", "addr": 0, "size": 1 << 30, "stream": 0, "device_free": 1 << 20, "frames": fr})
    entries.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0})
    entries.append({"action": "weird_new_action", "addr": 0, "size": 0, "stream": 0})
    if with_time:
        for i, e in enumerate(entries):
            e["time_us"] = 1_700_000_000_000_000 + 10 * i
    if extra_keys:
        for e in entries:
            e["compile_context"] = "N/A"
            e["user_metadata"] = ""
    blocks = [{"address": base + 512 * k, "size": 512, "requested_size": 500 + k, "state": "active_allocated",
               "frames": fr} for k in range(1, n)]
    blocks.append({"size": 1 << 20, "state": "inactive"})  # legacy: no address
    blocks.append({"size": 512, "state": "active_pending_free", "history": [{"addr": 0, "frames": fr}]})
    seg = {"device": 0, "address": base, "total_size": 2 << 20, "allocated_size": 512 * n, "active_size": 512 * n,
           "requested_size": 500 * n, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
           "is_expandable": False, "frames": fr, "blocks": blocks}
    d = {"segments": [seg, dict(seg, device=1, address=base * 2, segment_type="small", blocks=[])],
         "device_traces": [entries, []],
         "allocator_settings": {"expandable_segments": False, "max_split_size": -1,
                                "roundup_power2_divisions": {"1": 0, "2": 4}}}
    if annotations:
        d["external_annotations"] = [{"name": "Optimizer.step", "stage": "START", "device": 0, "time_us": 1},
                                     {"name": "Optimizer.step", "stage": "END", "device": 0, "time_us": 2}]
    return d


def kineto(with_addr=True, with_totals=True, bare=False):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 7, "ts": 100.5, "dur": 50},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 7, "ts": 110, "dur": 10.25},
          {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": "1", "tid": "stream 7", "ts": 300, "dur": 1}]
    alloc = 0
    for i, (b, t) in enumerate([(512, 112), (1024, 115), (-512, 140), (-1024, 200), (256, 301)]):
        alloc += b
        args = {"Device Type": 1, "Device Id": 0, "Bytes": b}
        if with_addr:
            args["Addr"] = 4096 + (i % 2) * 1024
        if with_totals:
            args["Total Allocated"] = alloc + 10000
            args["Total Reserved"] = 1 << 21
        ev.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 7,
                   "ts": t + 0.001, "args": args})
    ev.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 7, "ts": 120,
               "args": {"Device Type": 0, "Device Id": -1, "Bytes": 64, "Addr": 77}})
    ev.append({"ph": "i", "name": "[OutOfMemory]", "pid": 1, "tid": 7, "ts": 400,
               "args": {"Device Type": 1, "Device Id": 0, "Bytes": 1 << 33, "Total Allocated": 1 << 30}})
    if bare:
        return ev
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": ev,
            "displayTimeUnit": "ms"}


def timeline():
    return [[-1, 1, 100, 0], [-1, 1, 200, 1], [1000, 2, 50, 4], [2000, 3, -50, 4], [2000, 3, 50, 5],
            [3000, 4, -50, 5], [3500, 4, -999, 7], [4000, 9, 10, 2], [4500, 2, 1, 8]]


def html(pickled):
    padded = pickled + b"\0" * (3 - len(pickled) % 3)
    b64 = base64.b64encode(padded).decode()
    return ('<!DOCTYPE html>\n<html><body><script type="module">\nconst local_files = [{"name": '
            '"snapshot.pickle", "base64": "' + b64 + '"}]\n</script></body></html>\n').encode()


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def zstd(data):
    if not shutil.which("zstd"):
        return None
    return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, capture_output=True, check=True).stdout


def main():
    variants = {"full": snapshot(), "notime": snapshot(with_time=False, annotations=False),
                "newkeys": snapshot(n=3, extra_keys=True)}
    for vname, snap in variants.items():
        for proto in range(0, 6):
            p = pickle.dumps(snap, protocol=proto)
            if proto >= 2:  # the readers take protocols 2-5 from files; the VM reads 0-5
                write("fuzz_snapshot", f"{vname}_p{proto}.pickle", p)
                write("fuzz_load", f"{vname}_p{proto}.pickle", p)
            write("fuzz_pickle", f"{vname}_p{proto}.pickle", p)
        j = json.dumps(snap).encode()
        write("fuzz_snapshot", f"{vname}.json", j)
        write("fuzz_load", f"{vname}.json", j)
    p4 = pickle.dumps(variants["full"], protocol=4)
    write("fuzz_snapshot", "page.html", html(p4))
    write("fuzz_load", "page.html", html(p4))
    write("fuzz_snapshot", "segments_list.pickle", pickle.dumps(variants["full"]["segments"], protocol=4))
    write("fuzz_pickle", "scalars.pickle", pickle.dumps([1, -1, 2**40, -2**63, 2**64 - 1, 1.5, True, None, b"xy",
                                                         (1,), (1, 2), (1, 2, 3), set([1]), frozenset([2]),
                                                         bytearray(b"z"), {"k": "v"}], protocol=4))
    write("fuzz_pickle", "scalars_p5.pickle", pickle.dumps([2**70 // 2**10, "\u00e9", b"\0" * 300], protocol=5))

    for name, doc in {"kineto.json": kineto(), "kineto_noaddr.json": kineto(with_addr=False, with_totals=False),
                      "kineto_bare.json": kineto(bare=True)}.items():
        data = json.dumps(doc).encode()
        write("fuzz_kineto", name, data)
        write("fuzz_load", name, data)
    rows = json.dumps(timeline()).encode()
    write("fuzz_memory_timeline", "timeline.raw.json", rows)
    write("fuzz_memory_timeline", "empty.raw.json", b"[]")
    write("fuzz_load", "timeline.raw.json", rows)

    plain = {"snapshot.pickle": p4, "kineto.json": json.dumps(kineto()).encode(), "timeline.raw.json": rows,
             "zeros": b"\0" * 100000}
    for name, data in plain.items():
        write("fuzz_decompress", name + ".gz", gzip.compress(data, mtime=0))
        write("fuzz_decompress", name + "_2members.gz", gzip.compress(data[:50], mtime=0) + gzip.compress(data[50:], mtime=0))
        z = zstd(data)
        if z:
            write("fuzz_decompress", name + ".zst", z)
            write("fuzz_load", name + ".zst", z)
        write("fuzz_load", name + ".gz", gzip.compress(data, mtime=0))


if __name__ == "__main__":
    main()
