"""Capture a PyTorch CUDA allocator dump that PoolScope can open, in one line.

PoolScope reads the snapshot PyTorch's caching allocator keeps when its memory history is
recorded. This helper starts that recording with sensible defaults, writes the dump *at* the
out-of-memory error (not after the stack has unwound and the evidence is freed), optionally marks
the forward / backward / optimizer-step phases so PoolScope's classifier has ground truth, and
stops recording when you are done.

Usage::

    import poolscope_capture

    with poolscope_capture.record("dumps", annotate=model, optimizer=opt):
        for batch in loader:
            loss = model(batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad()

    # or as a decorator (bare or with arguments):
    @poolscope_capture.recorded("dumps", stacks="all")
    def train_step(batch): ...

    # a dump of a healthy step, on demand:
    with poolscope_capture.record("dumps") as rec:
        train_step(batch)
        rec.dump()

When the allocator runs out of memory, the dump is written before PyTorch raises, and the helper
prints where it went::

    poolscope: wrote dumps/poolscope-20250101-120000-rank0-oom.pickle (412.7 MiB); open it with: poolscope dumps/...

What it does, in PyTorch terms (2.1 and later):

* ``torch.cuda.memory._record_memory_history(enabled='all', context='all', stacks=..., max_entries=...)``
  on entry, ``enabled=None`` on exit. ``max_entries`` bounds the event ring buffer (default
  100,000 events, a few hundred MB of host memory at most); ``stacks='python'`` keeps Python
  frames only, which is cheap; ``stacks='all'`` adds C++ frames (slower, much larger dumps).
* ``torch._C._cuda_attach_out_of_memory_observer`` with an observer that writes
  ``pickle.dump(torch.cuda.memory._snapshot(), f, protocol=4)``. Protocol 4 is fixed on purpose:
  ``_dump_snapshot`` uses Python's default protocol, which is 5 from Python 3.14 on, and older
  viewers cannot read that. The observer never raises; a failure is reported on stderr.
  PyTorch offers no way to detach an observer, so one process-wide observer is attached once
  and forwards to whichever recording is active.
* File names carry a timestamp and the rank (``torch.distributed`` when initialised, else the
  ``RANK`` or ``LOCAL_RANK`` environment variable, else 0), so every rank of a job can write
  into the same folder: ``poolscope-<YYYYmmdd-HHMMSS>-rank<R>-<kind>.pickle``.
* Beside PyTorch's keys the dump holds ``poolscope_device_properties``: for each device with
  segments, ``torch.cuda.get_device_properties(d).name`` and ``.total_memory`` and the free bytes
  ``torch.cuda.mem_get_info(d)`` reports when the dump is written. PyTorch's snapshot has no device
  total; with it PoolScope shows the memory held outside PyTorch (CUDA context, NCCL, other
  processes) at an OOM. Viewers that do not know the key ignore it.
* With ``units=model.layers`` (any iterable of modules), each unit's forward runs inside a
  ``poolscope::unit`` scope: PoolScope's what-if checkpoints and shards by these units when the
  model's repetition is not visible from its call sites (a GNN's steps, UNet blocks, experts).
* With ``annotate=model``, ``torch.autograd.profiler.record_function`` scopes named
  ``poolscope::forward`` and ``poolscope::backward`` are opened and closed by module hooks; with
  ``optimizer=opt``, ``poolscope::optimizer_step`` by ``register_step_pre_hook`` /
  ``register_step_post_hook``. PyTorch 2.5+ stores them in the dump's ``external_annotations``.
  Module backward hooks wrap the model's outputs; if your model modifies its output in place,
  leave ``annotate`` out.

The module imports nothing but the standard library until recording starts; ``torch`` is its
only other dependency. It runs on Python 3.8+. Without CUDA, ``record`` prints a note and does
nothing, so the same script still runs on a laptop.
"""

import datetime
import functools
import inspect
import os
import pickle
import shlex
import sys
import threading
import traceback

__all__ = [
    "record",
    "recorded",
    "dump",
    "Recorder",
    "PHASE_FORWARD",
    "PHASE_BACKWARD",
    "PHASE_OPTIMIZER_STEP",
    "DEFAULT_MAX_ENTRIES",
    "PICKLE_PROTOCOL",
]

DEFAULT_MAX_ENTRIES = 100000
# Readable by every viewer, and by Python 3.4+; see the module docstring.
PICKLE_PROTOCOL = 4
PHASE_FORWARD = "poolscope::forward"
# record_function scope around each forward of a repeated unit (units=): PoolScope's what-if
# checkpoints and shards by these units where it cannot find them from repeating call sites.
UNIT_SCOPE = "poolscope::unit"
PHASE_BACKWARD = "poolscope::backward"
PHASE_OPTIMIZER_STEP = "poolscope::optimizer_step"

_VALID_STACKS = ("python", "all")

# Process-wide state: the OOM observer cannot be detached, so it is attached once per torch
# module and dispatches to the innermost active Recorder.
_state_lock = threading.RLock()
_active = []  # stack of started Recorders
_observer_owner = None  # the torch module our observer is attached to


def _say(message):
    """Print one line to stderr; never raises (it runs inside the OOM observer)."""
    try:
        print("poolscope: " + message, file=sys.stderr, flush=True)
    except Exception:
        pass


def _import_torch():
    import torch  # lazy: importing this module must not pull in torch

    return torch


def _rank(torch):
    try:
        dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    for var in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(var, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def _dump_path(path_dir, rank, kind, now=None):
    """A new file name in path_dir: timestamped, per rank, never overwriting an older dump."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = os.path.join(path_dir, "poolscope-%s-rank%d-%s" % (stamp, rank, kind))
    path = base + ".pickle"
    n = 2
    while os.path.exists(path):
        path = "%s-%d.pickle" % (base, n)
        n += 1
    return path


DEVICE_PROPERTIES_KEY = "poolscope_device_properties"


def _device_properties(torch, snapshot):
    """Name, total memory and free memory of the devices the snapshot covers.

    PyTorch's snapshot records what its allocator reserved and, at an OOM, the device's free bytes,
    but not the device's total: without it the memory held outside PyTorch (CUDA context, NCCL,
    other libraries, other processes) cannot be told. Only devices that already hold segments are
    asked, because torch.cuda.mem_get_info creates a CUDA context on a device that has none.
    Never raises: a dump without these figures is still a dump.
    """
    out = []
    try:
        devices = sorted({int(seg.get("device", 0)) for seg in snapshot.get("segments", []) if isinstance(seg, dict)})
    except Exception:
        return out
    cuda = torch.cuda
    for d in devices:
        entry = {"device": d}
        try:
            props = cuda.get_device_properties(d)
            entry["name"] = str(props.name)
            entry["total_memory"] = int(props.total_memory)
        except Exception:
            continue
        try:
            free, _total = cuda.mem_get_info(d)
            entry["free_at_dump"] = int(free)
        except Exception:
            pass
        out.append(entry)
    return out


def _write_snapshot(torch, path):
    """Take the allocator snapshot and pickle it (protocol 4) to path; returns the byte size."""
    snapshot = torch.cuda.memory._snapshot()
    if isinstance(snapshot, dict):
        # Beside PyTorch's own keys; viewers that do not know it ignore it (PoolScope reads it).
        props = _device_properties(torch, snapshot)
        if props:
            snapshot = dict(snapshot)
            snapshot[DEVICE_PROPERTIES_KEY] = props
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    # Write beside the target and rename, so a viewer never opens a half-written dump.
    partial = path + ".partial"
    with open(partial, "wb") as f:
        pickle.dump(snapshot, f, protocol=PICKLE_PROTOCOL)
    os.replace(partial, path)
    size = os.path.getsize(path)
    _say("wrote %s (%.1f MiB); open it with: poolscope %s" % (path, size / 1048576.0, shlex.quote(path)))
    return size


def dump(path_dir=".", kind="manual", path=None):
    """Write the allocator snapshot now, without a Recorder; returns the file's path.

    Only the allocator state is in the file unless memory history is being recorded.
    """
    torch = _import_torch()
    if path is None:
        path = _dump_path(path_dir, _rank(torch), kind)
    _write_snapshot(torch, path)
    return path


def _oom_observer(device, alloc, device_alloc, device_free):
    # Called by the CUDA caching allocator just before it raises OutOfMemoryError. An exception
    # escaping into C++ here would replace the user's OOM with a confusing error: log instead.
    try:
        with _state_lock:
            recorder = _active[-1] if _active else None
        if recorder is not None:
            recorder._on_oom(device, alloc, device_alloc, device_free)
    except BaseException:
        try:
            _say("could not write the out-of-memory dump:\n" + traceback.format_exc())
        except BaseException:
            pass


def _attach_oom_observer(torch):
    global _observer_owner
    with _state_lock:
        if _observer_owner is torch:
            return True
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return False
        attach(_oom_observer)
        _observer_owner = torch
        return True


def _supports(fn, name):
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class Recorder:
    """One recording of CUDA allocator history; use through ``record`` / ``recorded``."""

    def __init__(self, path_dir=".", max_entries=DEFAULT_MAX_ENTRIES, stacks="python", annotate=None,
                 optimizer=None, on_oom=True, dump_on_exit=False, max_oom_dumps=3, units=None):
        if stacks not in _VALID_STACKS:
            raise ValueError("stacks must be 'python' or 'all', not %r" % (stacks,))
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries <= 0:
            raise ValueError("max_entries must be a positive int, not %r" % (max_entries,))
        self.path_dir = os.fspath(path_dir)
        self.max_entries = max_entries
        self.stacks = stacks
        self.annotate = annotate
        self.optimizer = optimizer
        # The repeated units (a ModuleList, or any iterable of modules: layers, blocks, experts).
        self.units = list(units) if units is not None else []
        self.on_oom = on_oom
        self.dump_on_exit = dump_on_exit
        # cuDNN retries a convolution with less workspace after an OOM, so one failure can call
        # the observer several times; each dump can be hundreds of MB.
        self.max_oom_dumps = max_oom_dumps
        self.paths = []  # every dump this recording wrote, in order
        self.active = False
        self._torch = None
        self._handles = []
        self._open_scopes = {}  # phase name -> list of entered record_function objects
        self._oom_dumps = 0
        self._observer_attached = False
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self):
        torch = _import_torch()
        if not torch.cuda.is_available():
            _say("CUDA is not available; not recording allocator history")
            return self
        with _state_lock:
            if _active:
                raise RuntimeError("poolscope_capture: a recording is already active; do not nest record()")
            self._torch = torch
            os.makedirs(self.path_dir, exist_ok=True)
            history = torch.cuda.memory._record_memory_history
            kwargs = dict(enabled="all", context="all", stacks=self.stacks, max_entries=self.max_entries)
            # Newer PyTorch records record_function annotations from the calling thread only unless
            # asked; backward hooks run on autograd's worker threads.
            if _supports(history, "global_record_annotations"):
                kwargs["global_record_annotations"] = True
            history(**kwargs)
            self.active = True
            _active.append(self)
        try:
            if self.on_oom:
                self._observer_attached = _attach_oom_observer(torch)
                if not self._observer_attached:
                    _say("this PyTorch has no out-of-memory observer; the dump is written when the "
                         "OutOfMemoryError leaves the recorded block")
            self._attach_phase_hooks(torch)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, exc=None):
        if not self.active:
            return
        torch = self._torch
        try:
            for handle in reversed(self._handles):
                try:
                    handle.remove()
                except Exception:
                    pass
            self._handles = []
            self._close_open_scopes()
            if exc is not None and self.on_oom and self._oom_dumps == 0 and self._is_oom(exc):
                self._safe_dump("oom")
            elif exc is None and self.dump_on_exit:
                self.dump(kind="exit")
        finally:
            with _state_lock:
                if self in _active:
                    _active.remove(self)
                self.active = False
            # Disabling also discards the history, so every dump above must come first.
            torch.cuda.memory._record_memory_history(enabled=None)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop(exc)
        return False

    # -- dumps -----------------------------------------------------------------------------
    def dump(self, kind="manual", path=None):
        """Write the snapshot now (history included while recording); returns the path."""
        torch = self._torch or _import_torch()
        if path is None:
            path = _dump_path(self.path_dir, _rank(torch), kind)
        _write_snapshot(torch, path)
        self.paths.append(path)
        return path

    def _safe_dump(self, kind):
        try:
            return self.dump(kind=kind)
        except BaseException:
            label = "out-of-memory" if kind == "oom" else kind
            _say("could not write the %s dump:\n%s" % (label, traceback.format_exc()))
            return None

    def _on_oom(self, device, alloc, device_alloc, device_free):
        if not self.on_oom:
            return
        with self._lock:
            if self._oom_dumps >= self.max_oom_dumps:
                _say("out of memory again on cuda:%s; already wrote %d dumps, skipping" % (device, self._oom_dumps))
                return
            self._oom_dumps += 1
        _say("out of memory on cuda:%s: asked for %d bytes with %d allocated and %d free on the device"
             % (device, alloc, device_alloc, device_free))
        self._safe_dump("oom")

    def _is_oom(self, exc):
        oom_type = getattr(getattr(self._torch, "cuda", None), "OutOfMemoryError", None)
        if isinstance(oom_type, type) and isinstance(exc, oom_type):
            return True
        return type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(exc)

    # -- phase annotations -----------------------------------------------------------------
    def _attach_phase_hooks(self, torch):
        if self.annotate is None and self.optimizer is None and not self.units:
            return
        record_function = torch.autograd.profiler.record_function
        for unit in self.units:
            self._handles.append(unit.register_forward_pre_hook(self._opener(record_function, UNIT_SCOPE)))
            self._handles.append(unit.register_forward_hook(self._closer(UNIT_SCOPE)))
        model, opt = self.annotate, self.optimizer
        if model is not None:
            self._handles.append(model.register_forward_pre_hook(self._opener(record_function, PHASE_FORWARD)))
            self._handles.append(model.register_forward_hook(self._closer(PHASE_FORWARD)))
            if hasattr(model, "register_full_backward_pre_hook"):
                self._handles.append(
                    model.register_full_backward_pre_hook(self._opener(record_function, PHASE_BACKWARD)))
                self._handles.append(model.register_full_backward_hook(self._closer(PHASE_BACKWARD)))
        if opt is not None:
            self._handles.append(opt.register_step_pre_hook(self._opener(record_function, PHASE_OPTIMIZER_STEP)))
            self._handles.append(opt.register_step_post_hook(self._closer(PHASE_OPTIMIZER_STEP)))

    def _opener(self, record_function, phase):
        # Hooks must return None: a value would replace the module's inputs, outputs or grads.
        def hook(*_args):
            scope = record_function(phase)
            scope.__enter__()
            with self._lock:
                self._open_scopes.setdefault(phase, []).append(scope)
            return None

        return hook

    def _closer(self, phase):
        def hook(*_args):
            with self._lock:
                scopes = self._open_scopes.get(phase)
                scope = scopes.pop() if scopes else None
            if scope is not None:
                scope.__exit__(None, None, None)
            return None

        return hook

    def _close_open_scopes(self):
        # A forward that raised (say, the OOM) never reaches its post hook.
        with self._lock:
            pending = [(phase, scope) for phase, scopes in self._open_scopes.items() for scope in scopes]
            self._open_scopes = {}
        for _phase, scope in reversed(pending):
            try:
                scope.__exit__(None, None, None)
            except Exception:
                pass


def record(path_dir=".", max_entries=DEFAULT_MAX_ENTRIES, stacks="python", annotate=None, optimizer=None,
           on_oom=True, dump_on_exit=False, max_oom_dumps=3, units=None):
    """Context manager: record allocator history inside the block; dump at an OOM.

    path_dir: folder for the dumps (created if missing). max_entries: events kept in the ring
    buffer. stacks: 'python' (default) or 'all' (adds C++ frames). annotate: a torch.nn.Module
    whose forward/backward get record_function scopes. optimizer: a torch.optim.Optimizer whose
    step gets one. on_oom: write a dump at an out-of-memory error. dump_on_exit: also write one
    when the block ends normally. max_oom_dumps: cap on OOM dumps for this recording. units: the
    repeated units (e.g. model.layers), each forward wrapped in a "poolscope::unit" scope so the
    what-if engine checkpoints and shards by them.
    The Recorder it yields has ``dump()`` and ``paths`` (the dumps written so far).
    """
    return Recorder(path_dir=path_dir, max_entries=max_entries, stacks=stacks, annotate=annotate,
                    optimizer=optimizer, on_oom=on_oom, dump_on_exit=dump_on_exit, max_oom_dumps=max_oom_dumps,
                    units=units)


def recorded(*args, **kwargs):
    """Decorator form of ``record``: ``@recorded`` or ``@recorded("dumps", stacks="all")``."""
    if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], (str, bytes)):
        return recorded()(args[0])
    record(*args, **kwargs)  # refuse bad arguments at decoration time, not at the first call

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*fn_args, **fn_kwargs):
            with record(*args, **kwargs):
                return fn(*fn_args, **fn_kwargs)

        return wrapper

    return decorate
