"""Tests for resources/capture/poolscope_capture.py that need neither torch nor a GPU.

torch is replaced by a small fake injected through sys.modules: it records every call the helper
makes, so the tests check the exact arguments PyTorch would receive. A last test runs the helper
against the real torch in a subprocess and is skipped where torch is not installed.
Run: python3 tests/capture/test_capture.py
"""

import contextlib
import importlib.util
import io
import os
import pickle
import re
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "resources", "capture"))
sys.path.insert(0, CAPTURE_DIR)
sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree

import poolscope_capture as pc  # noqa: E402  (path set up above)

MESSAGE = re.compile(r"^poolscope: wrote (\S+) \((\d+\.\d) MiB\); open it with: poolscope (\S+)$", re.M)
NAME = re.compile(r"^poolscope-\d{8}-\d{6}-rank(\d+)-([a-z]+)(-\d+)?\.pickle$")


class Handle:
    def __init__(self, owner, key, hook):
        self.owner, self.key, self.hook = owner, key, hook
        self.removed = False

    def remove(self):
        self.removed = True
        self.owner.hooks[self.key].remove(self.hook)


class HookHost:
    """Keeps registered hooks by registration method name and fires them on demand."""

    def __init__(self):
        self.hooks = {}
        self.handles = []

    def _register(self, key, hook):
        self.hooks.setdefault(key, []).append(hook)
        handle = Handle(self, key, hook)
        self.handles.append(handle)
        return handle

    def fire(self, key, *args):
        return [hook(*args) for hook in list(self.hooks.get(key, []))]


class FakeModule(HookHost):
    def register_forward_pre_hook(self, hook):
        return self._register("forward_pre", hook)

    def register_forward_hook(self, hook):
        return self._register("forward", hook)

    def register_full_backward_pre_hook(self, hook):
        return self._register("backward_pre", hook)

    def register_full_backward_hook(self, hook):
        return self._register("backward", hook)


class FakeOptimizer(HookHost):
    def register_step_pre_hook(self, hook):
        return self._register("step_pre", hook)

    def register_step_post_hook(self, hook):
        return self._register("step_post", hook)


class FakeOutOfMemoryError(RuntimeError):
    pass


def make_fake_torch(cuda=True, rank=None, with_global_annotations=False, with_observer=True, with_properties=False):
    """A torch stand-in with the attributes poolscope_capture touches; calls land in torch.calls."""
    calls = []
    torch = types.ModuleType("torch")
    torch.calls = calls
    torch.snapshot = {
        "segments": [{"device": 0, "address": 1 << 40, "total_size": 2097152, "blocks": []}],
        "device_traces": [[{"action": "alloc", "addr": 1 << 40, "size": 512, "stream": 0, "time_us": 7}]],
    }

    memory = types.ModuleType("torch.cuda.memory")

    # Mirrors _record_memory_history_impl of PyTorch 2.1-2.6; 2.7+ adds the last keyword.
    if with_global_annotations:
        def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                                   device=None, clear_history=False, compile_context=False,
                                   global_record_annotations=False):
            calls.append(("record_memory_history", dict(
                enabled=enabled, context=context, stacks=stacks, max_entries=max_entries,
                global_record_annotations=global_record_annotations)))
    else:
        def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                                   device=None):
            calls.append(("record_memory_history", dict(
                enabled=enabled, context=context, stacks=stacks, max_entries=max_entries)))

    def _snapshot(device=None):
        calls.append(("snapshot", None))
        return torch.snapshot

    def _dump_snapshot(filename="dump_snapshot.pickle"):
        raise AssertionError("the helper must pickle _snapshot() itself, not call _dump_snapshot")

    memory._record_memory_history = _record_memory_history
    memory._snapshot = _snapshot
    memory._dump_snapshot = _dump_snapshot

    cuda_mod = types.ModuleType("torch.cuda")
    cuda_mod.memory = memory
    cuda_mod.is_available = lambda: cuda
    cuda_mod.OutOfMemoryError = FakeOutOfMemoryError
    if with_properties:
        def get_device_properties(d):
            calls.append(("get_device_properties", d))
            return types.SimpleNamespace(name="Fake GPU %d" % d, total_memory=(80 << 30) + d)

        def mem_get_info(d):
            calls.append(("mem_get_info", d))
            return (3 << 30, (80 << 30) + d)

        cuda_mod.get_device_properties = get_device_properties
        cuda_mod.mem_get_info = mem_get_info
    torch.cuda = cuda_mod

    c = types.ModuleType("torch._C")
    torch.observers = []
    if with_observer:
        def attach(observer):
            calls.append(("attach_oom_observer", observer))
            torch.observers.append(observer)
        c._cuda_attach_out_of_memory_observer = attach
    torch._C = c

    dist = types.ModuleType("torch.distributed")
    dist.is_available = lambda: True
    dist.is_initialized = lambda: rank is not None
    dist.get_rank = lambda: rank
    torch.distributed = dist

    class record_function:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            calls.append(("rf_enter", self.name))
            return self

        def __exit__(self, *exc):
            calls.append(("rf_exit", self.name))
            return False

    profiler = types.ModuleType("torch.autograd.profiler")
    profiler.record_function = record_function
    autograd = types.ModuleType("torch.autograd")
    autograd.profiler = profiler
    torch.autograd = autograd
    return torch


class CaptureTestCase(unittest.TestCase):
    def install(self, **kwargs):
        torch = make_fake_torch(**kwargs)
        saved = {k: sys.modules.get(k) for k in ("torch", "torch.cuda", "torch.cuda.memory")}
        sys.modules["torch"] = torch
        sys.modules["torch.cuda"] = torch.cuda
        sys.modules["torch.cuda.memory"] = torch.cuda.memory

        def restore():
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        self.addCleanup(restore)
        return torch

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "dumps")
        env = {k: os.environ.pop(k) for k in ("RANK", "LOCAL_RANK") if k in os.environ}
        self.addCleanup(os.environ.update, env)
        for k in ("RANK", "LOCAL_RANK"):
            self.addCleanup(os.environ.pop, k, None)
        # A failed test must not leave a recording active for the next one.
        self.addCleanup(pc._active.clear)

    def history_calls(self, torch):
        return [args for name, args in torch.calls if name == "record_memory_history"]

    def check_dump(self, torch, path, stderr_text, rank, kind):
        self.assertTrue(os.path.isfile(path), path)
        self.assertEqual(os.path.dirname(path), self.dir)
        m = NAME.match(os.path.basename(path))
        self.assertIsNotNone(m, os.path.basename(path))
        self.assertEqual(int(m.group(1)), rank)
        self.assertEqual(m.group(2), kind)
        with open(path, "rb") as f:
            raw = f.read()
        self.assertEqual(raw[:2], b"\x80\x04", "pickle protocol 4 expected")
        loaded = pickle.loads(raw)
        props = loaded.pop(pc.DEVICE_PROPERTIES_KEY, None)
        self.assertEqual(loaded, torch.snapshot)
        self.assertNotIn(pc.DEVICE_PROPERTIES_KEY, torch.snapshot, "PyTorch's own dict must not be modified")
        self.assertFalse(os.path.exists(path + ".partial"))
        messages = [mm for mm in MESSAGE.finditer(stderr_text) if mm.group(1) == path]
        self.assertEqual(len(messages), 1, stderr_text)
        self.assertEqual(messages[0].group(3), path)
        self.assertEqual(messages[0].group(2), "%.1f" % (len(raw) / 1048576.0))
        return props


class ImportTest(unittest.TestCase):
    def test_import_does_not_import_torch(self):
        code = "import sys; import poolscope_capture; sys.exit(1 if 'torch' in sys.modules else 0)"
        env = dict(os.environ, PYTHONPATH=CAPTURE_DIR, PYTHONDONTWRITEBYTECODE="1")
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_bad_arguments_are_refused(self):
        with self.assertRaises(ValueError):
            pc.record(stacks="cpp")
        for bad in (0, -5, 1.5, True):
            with self.assertRaises(ValueError):
                pc.record(max_entries=bad)
        with self.assertRaises(ValueError):
            pc.recorded(stacks="cpp")


class RecordTest(CaptureTestCase):
    def test_start_stop_defaults(self):
        torch = self.install()
        with pc.record(self.dir) as rec:
            self.assertTrue(rec.active)
            self.assertEqual(self.history_calls(torch), [
                dict(enabled="all", context="all", stacks="python", max_entries=100000)])
        self.assertFalse(rec.active)
        self.assertEqual(self.history_calls(torch)[-1]["enabled"], None)
        self.assertEqual(len(self.history_calls(torch)), 2)
        self.assertEqual(pc._active, [])
        self.assertTrue(os.path.isdir(self.dir))
        self.assertEqual(os.listdir(self.dir), [], "no dump without an OOM or a request")

    def test_stacks_all_and_custom_entries(self):
        torch = self.install()
        with pc.record(self.dir, max_entries=5000, stacks="all"):
            pass
        self.assertEqual(self.history_calls(torch)[0], dict(enabled="all", context="all", stacks="all",
                                                            max_entries=5000))

    def test_global_annotations_passed_when_supported(self):
        torch = self.install(with_global_annotations=True)
        with pc.record(self.dir):
            pass
        self.assertIs(self.history_calls(torch)[0]["global_record_annotations"], True)

    def test_stops_even_when_block_raises(self):
        torch = self.install()
        with self.assertRaises(KeyError):
            with pc.record(self.dir):
                raise KeyError("boom")
        self.assertEqual(self.history_calls(torch)[-1]["enabled"], None)
        self.assertEqual(os.listdir(self.dir), [])

    def test_nested_recording_refused(self):
        torch = self.install()
        with pc.record(self.dir):
            with self.assertRaises(RuntimeError):
                pc.record(self.dir).start()
        self.assertEqual([c["enabled"] for c in self.history_calls(torch)], ["all", None])

    def test_no_cuda_is_a_noop(self):
        torch = self.install(cuda=False)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with pc.record(self.dir) as rec:
                self.assertFalse(rec.active)
        self.assertEqual(torch.calls, [])
        self.assertIn("CUDA is not available", err.getvalue())


class OomTest(CaptureTestCase):
    def test_observer_registered_once_and_writes_dump(self):
        torch = self.install(rank=3)
        os.environ["RANK"] = "9"  # torch.distributed wins over the environment
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with pc.record(self.dir) as rec:
                self.assertEqual(len(torch.observers), 1)
                torch.observers[0](0, 1 << 30, 70 << 30, 12 << 20)
        self.assertEqual(len(rec.paths), 1)
        self.check_dump(torch, rec.paths[0], err.getvalue(), rank=3, kind="oom")
        self.assertIn("out of memory on cuda:0: asked for 1073741824 bytes", err.getvalue())
        # A second recording reuses the one observer PyTorch cannot detach.
        with contextlib.redirect_stderr(io.StringIO()):
            with pc.record(self.dir):
                pass
        self.assertEqual(len(torch.observers), 1)
        # After the recording ended the observer is inert.
        before = os.listdir(self.dir)
        torch.observers[0](0, 1, 2, 3)
        self.assertEqual(os.listdir(self.dir), before)

    def test_device_total_recorded_beside_the_snapshot(self):
        torch = self.install(with_properties=True)
        torch.snapshot["segments"].append({"device": 2, "address": 1 << 41, "total_size": 2097152, "blocks": []})
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            path = pc.dump(self.dir)
        props = self.check_dump(torch, path, err.getvalue(), rank=0, kind="manual")
        self.assertEqual(props, [
            {"device": 0, "name": "Fake GPU 0", "total_memory": 80 << 30, "free_at_dump": 3 << 30},
            {"device": 2, "name": "Fake GPU 2", "total_memory": (80 << 30) + 2, "free_at_dump": 3 << 30},
        ])
        # Only devices holding segments are asked: mem_get_info would create a context elsewhere.
        self.assertEqual([a for n, a in torch.calls if n == "mem_get_info"], [0, 2])

    def test_device_properties_failure_still_dumps(self):
        torch = self.install(with_properties=True)

        def broken(d):
            raise RuntimeError("no driver")
        torch.cuda.get_device_properties = broken
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            path = pc.dump(self.dir)
        self.assertIsNone(self.check_dump(torch, path, err.getvalue(), rank=0, kind="manual"))

    def test_rank_from_env(self):
        for env, expected in (({"RANK": "5", "LOCAL_RANK": "1"}, 5), ({"LOCAL_RANK": "2"}, 2), ({}, 0)):
            with self.subTest(env=env):
                torch = self.install(rank=None)
                for k in ("RANK", "LOCAL_RANK"):
                    os.environ.pop(k, None)
                os.environ.update(env)
                pc._observer_owner = None
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    with pc.record(self.dir) as rec:
                        torch.observers[0](1, 10, 20, 30)
                self.check_dump(torch, rec.paths[0], err.getvalue(), rank=expected, kind="oom")

    def test_repeated_oom_dumps_are_capped_and_unique(self):
        torch = self.install()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with pc.record(self.dir, max_oom_dumps=2) as rec:
                for _ in range(4):
                    torch.observers[-1](0, 1, 2, 3)
        self.assertEqual(len(rec.paths), 2)
        self.assertEqual(len(set(rec.paths)), 2)
        self.assertEqual(sorted(os.listdir(self.dir)), sorted(os.path.basename(p) for p in rec.paths))
        self.assertIn("skipping", err.getvalue())

    def test_observer_never_raises(self):
        torch = self.install()

        def broken_snapshot(device=None):
            raise RuntimeError("allocator is on fire")
        torch.cuda.memory._snapshot = broken_snapshot
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with pc.record(self.dir) as rec:
                torch.observers[-1](0, 1, 2, 3)  # must not raise
        self.assertEqual(rec.paths, [])
        self.assertIn("could not write the out-of-memory dump", err.getvalue())
        self.assertIn("allocator is on fire", err.getvalue())

        # Whatever goes wrong around the dump stays inside the observer too.
        def exploding(*args):
            raise MemoryError("no host memory either")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with pc.record(self.dir) as rec:
                rec._on_oom = exploding
                torch.observers[-1](0, 1, 2, 3)
        self.assertIn("no host memory either", err.getvalue())

    def test_on_oom_false(self):
        torch = self.install()
        pc._observer_owner = None
        with pc.record(self.dir, on_oom=False) as rec:
            pass
        self.assertEqual(torch.observers, [])
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(FakeOutOfMemoryError):
                with pc.record(self.dir, on_oom=False) as rec:
                    raise FakeOutOfMemoryError("CUDA out of memory")
        self.assertEqual(rec.paths, [])

    def test_fallback_dump_when_no_observer_api(self):
        torch = self.install(with_observer=False)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with self.assertRaises(FakeOutOfMemoryError):
                with pc.record(self.dir) as rec:
                    raise FakeOutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.assertEqual(len(rec.paths), 1)
        self.check_dump(torch, rec.paths[0], err.getvalue(), rank=0, kind="oom")
        # The dump was taken while history was still on.
        names = [n for n, _ in torch.calls if n in ("snapshot", "record_memory_history")]
        self.assertEqual(names, ["record_memory_history", "snapshot", "record_memory_history"])


class DumpTest(CaptureTestCase):
    def test_manual_dump_and_dump_on_exit(self):
        torch = self.install()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            with pc.record(self.dir, dump_on_exit=True) as rec:
                manual = rec.dump()
        self.assertEqual(len(rec.paths), 2)
        self.assertEqual(rec.paths[0], manual)
        self.check_dump(torch, manual, err.getvalue(), rank=0, kind="manual")
        self.check_dump(torch, rec.paths[1], err.getvalue(), rank=0, kind="exit")
        # The exit dump precedes the stop call, which discards history.
        names = [n for n, _ in torch.calls if n in ("snapshot", "record_memory_history")]
        self.assertEqual(names, ["record_memory_history", "snapshot", "snapshot", "record_memory_history"])

    def test_module_level_dump(self):
        torch = self.install()
        os.environ["LOCAL_RANK"] = "4"
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            path = pc.dump(self.dir)
        self.check_dump(torch, path, err.getvalue(), rank=4, kind="manual")
        self.assertEqual(self.history_calls(torch), [])

    def test_path_with_space_is_quoted_in_command(self):
        torch = self.install()
        target = os.path.join(self.tmp.name, "my dumps", "x.pickle")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            pc.dump(path=target)
        self.assertIn("poolscope: wrote %s (" % target, err.getvalue())
        self.assertIn("open it with: poolscope '%s'" % target, err.getvalue())
        with open(target, "rb") as f:
            self.assertEqual(pickle.load(f), torch.snapshot)


class DecoratorTest(CaptureTestCase):
    def test_decorator_with_arguments(self):
        torch = self.install()

        @pc.recorded(self.dir, stacks="all", max_entries=42)
        def step(x, y=1):
            """doc kept"""
            self.assertEqual(len(pc._active), 1)
            return x + y

        self.assertEqual(step.__name__, "step")
        self.assertEqual(step.__doc__, "doc kept")
        self.assertEqual(torch.calls, [], "nothing starts until the function runs")
        self.assertEqual(step(2, y=3), 5)
        self.assertEqual(self.history_calls(torch), [
            dict(enabled="all", context="all", stacks="all", max_entries=42),
            dict(enabled=None, context="all", stacks="all", max_entries=sys.maxsize)])
        self.assertEqual(pc._active, [])
        step(1)
        self.assertEqual(len(self.history_calls(torch)), 4)

    def test_bare_decorator(self):
        torch = self.install()
        old = os.getcwd()
        os.makedirs(self.dir)
        os.chdir(self.dir)
        self.addCleanup(os.chdir, old)

        @pc.recorded
        def step():
            return "ran"

        self.assertEqual(step(), "ran")
        self.assertEqual(self.history_calls(torch)[0]["stacks"], "python")
        self.assertEqual(self.history_calls(torch)[0]["max_entries"], pc.DEFAULT_MAX_ENTRIES)


class PhaseTest(CaptureTestCase):
    def rf_calls(self, torch):
        return [(n, a) for n, a in torch.calls if n.startswith("rf_")]

    def test_phase_hooks(self):
        torch = self.install()
        model, opt = FakeModule(), FakeOptimizer()
        with pc.record(self.dir, annotate=model, optimizer=opt):
            self.assertEqual(sorted(model.hooks), ["backward", "backward_pre", "forward", "forward_pre"])
            self.assertEqual(sorted(opt.hooks), ["step_post", "step_pre"])
            # Hooks return None, so they never replace inputs, outputs or gradients.
            self.assertEqual(model.fire("forward_pre", model, ("x",)), [None])
            self.assertEqual(model.fire("forward", model, ("x",), "y"), [None])
            self.assertEqual(model.fire("backward_pre", model, ("g",)), [None])
            self.assertEqual(model.fire("backward", model, (None,), ("g",)), [None])
            self.assertEqual(opt.fire("step_pre", opt, (), {}), [None])
            self.assertEqual(opt.fire("step_post", opt, (), {}), [None])
        self.assertEqual(self.rf_calls(torch), [
            ("rf_enter", "poolscope::forward"), ("rf_exit", "poolscope::forward"),
            ("rf_enter", "poolscope::backward"), ("rf_exit", "poolscope::backward"),
            ("rf_enter", "poolscope::optimizer_step"), ("rf_exit", "poolscope::optimizer_step")])
        self.assertTrue(all(h.removed for h in model.handles + opt.handles))
        self.assertEqual(model.hooks, {"forward_pre": [], "forward": [], "backward_pre": [], "backward": []})

    def test_scope_left_open_by_failed_forward_is_closed_on_exit(self):
        torch = self.install()
        model = FakeModule()
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(FakeOutOfMemoryError):
                with pc.record(self.dir, annotate=model):
                    model.fire("forward_pre", model, ())
                    torch.observers[-1](0, 1, 2, 3)
                    raise FakeOutOfMemoryError("CUDA out of memory")
        self.assertEqual(self.rf_calls(torch), [("rf_enter", "poolscope::forward"), ("rf_exit", "poolscope::forward")])
        # Exactly one OOM dump: the observer's, not a second one from the exit path.
        self.assertEqual(len(os.listdir(self.dir)), 1)

    def test_unit_hooks(self):
        # units=: each repeated unit's forward runs inside a poolscope::unit scope, nothing else.
        torch = self.install()
        units = [FakeModule(), FakeModule()]
        with pc.record(self.dir, units=units):
            for unit in units:
                self.assertEqual(sorted(unit.hooks), ["forward", "forward_pre"])
                self.assertEqual(unit.fire("forward_pre", unit, ("x",)), [None])
                self.assertEqual(unit.fire("forward", unit, ("x",), "y"), [None])
        self.assertEqual(self.rf_calls(torch), [("rf_enter", "poolscope::unit"), ("rf_exit", "poolscope::unit")] * 2)
        self.assertTrue(all(h.removed for u in units for h in u.handles))

    def test_optimizer_only(self):
        torch = self.install()
        opt = FakeOptimizer()
        with pc.record(self.dir, optimizer=opt):
            opt.fire("step_pre", opt, (), {})
            opt.fire("step_post", opt, (), {})
        self.assertEqual(self.rf_calls(torch), [("rf_enter", "poolscope::optimizer_step"),
                                                ("rf_exit", "poolscope::optimizer_step")])


SMOKE = r"""
import inspect, os, pickle, sys, tempfile
import poolscope_capture as pc
import torch
params = inspect.signature(torch.cuda.memory._record_memory_history).parameters
for name in ("enabled", "context", "stacks", "max_entries"):
    assert name in params, name
assert hasattr(torch.autograd.profiler, "record_function")
assert hasattr(torch.optim.Optimizer, "register_step_pre_hook")
assert hasattr(torch.nn.Module, "register_full_backward_pre_hook")
if not torch.cuda.is_available():
    with pc.record(tempfile.mkdtemp()) as rec:
        assert not rec.active
    print("no CUDA: API checked only")
    sys.exit(0)
assert hasattr(torch._C, "_cuda_attach_out_of_memory_observer")
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.AdamW(model.parameters())
with pc.record(tempfile.mkdtemp(), annotate=model, optimizer=opt) as rec:
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    opt.step()
    path = rec.dump()
with open(path, "rb") as f:
    assert f.read(2) == b"\x80\x04"
with open(path, "rb") as f:
    snap = pickle.load(f)
assert any(e["action"] == "alloc" for t in snap["device_traces"] for e in t)
print("CUDA capture ok:", path)
"""


@unittest.skipUnless(importlib.util.find_spec("torch") is not None, "torch is not installed")
class RealTorchSmokeTest(unittest.TestCase):
    def test_against_real_torch(self):
        # A subprocess, so the fakes above never meet the real module.
        env = dict(os.environ, PYTHONPATH=CAPTURE_DIR, PYTHONDONTWRITEBYTECODE="1")
        result = subprocess.run([sys.executable, "-c", SMOKE], env=env, capture_output=True, text=True,
                                timeout=600)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
