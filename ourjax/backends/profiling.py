"""Profiled calls of executables: what ``ourjax.profiler`` measures, backend by backend.

``profiled_call(exe, args) -> (outputs, CallRecord)`` runs a ``ModuleExecutable`` (or the
op-by-op ``JaxprEvaluator``) once, as its ``__call__`` would, and measures it:

* ``cpu``: the module compiled again with profiling instrumentation (``cpu/profiling.py``;
  cached in memory on the executable and on disk apart from the plain code), which times every
  kernel with the cycle counter; Python dispatch is the call's wall time minus its kernels'.
* ``cuda``: the kernels launched one by one between timing events (``cuda/profiling.py``); host
  round trips (a ``while`` predicate or a ``conditional`` index read back) timed on the host.
* anything else (the reference backend, a module the native backends hand to another backend,
  a jaxpr run op by op): one row, the call's wall time.

A ``CallRecord`` holds ``rows`` (static descriptions, one per kernel or host overhead, shared by
every call of one executable), ``times`` ((seconds, launches) per row, this call's) and
``events`` (its timeline: ``(track, name, start_ns, duration_ns, args)`` with
``time.perf_counter_ns`` clocks; a track is ``("thread", ident)`` or ``("gpu", ordinal)``) and
``memory``: the executable's ``Compiled.memory_analysis()`` (``_donation.MemoryStats``: its peak
is arguments + outputs + temporaries - outputs in donated buffers), or None.
"""
from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("ourjax")

__all__ = ["CallRecord", "profiled_call", "runner_for", "DISPATCH_ROW"]

#: The row of a call's time outside its kernels.
DISPATCH_ROW = {"name": "Python dispatch", "kind": "host", "category": "dispatch",
                "hlo": "call overhead: wall time minus the rows above", "bytes": 0, "flops": 0,
                "loop": None}


class CallRecord:
  """One measured call (see the module docstring)."""
  __slots__ = ("name", "backend", "rows", "times", "start_ns", "end_ns", "events", "note",
               "memory")

  def __init__(self, name, backend, rows, times, start_ns, end_ns, events, note="",
               memory=None):
    self.name, self.backend, self.rows, self.times = name, backend, rows, times
    self.start_ns, self.end_ns, self.events, self.note = start_ns, end_ns, events, note
    self.memory = memory

  @property
  def wall_s(self) -> float:
    return (self.end_ns - self.start_ns) * 1e-9


class WallRunner:
  """Times a whole call: one row."""

  def __init__(self, target, name: str, backend: str, kind: str, note: str = ""):
    self.target, self.name, self.backend = target, name, backend
    self.device_resident = bool(getattr(target, "device_resident", False))
    self.aliases = getattr(target, "aliases", ())     # (outputs written into donated args)
    self.lock = threading.Lock()
    self.rows = [{"name": name, "kind": kind, "category": "executable", "hlo": note or
                  "the whole executable", "bytes": 0, "flops": 0, "loop": None}]

  def __call__(self, *args):
    outs = self.target(*args)
    if self.device_resident:      # (device buffers: wait for them, so the time is the work's)
      for o in outs:
        getattr(o, "synchronize", lambda: None)()
    return outs

  def record(self, t0, t1):
    track = ("thread", threading.get_ident())
    return CallRecord(self.name, self.backend, self.rows, [((t1 - t0) * 1e-9, 1)], t0, t1,
                      [(track, self.name, t0, t1 - t0, {"backend": self.backend})])


def _name(exe) -> str:
  module = getattr(exe, "module", None)
  if module is not None and module.name:
    return module.name
  closed = getattr(exe, "closed", None)
  return f"jit_{getattr(getattr(closed, 'jaxpr', None), 'debug_name', None) or 'jaxpr'}"


def _native_runner(exe, compiled, name):
  """The per-kernel runner of a natively compiled executable, or None."""
  if exe.backend == "cpu":
    from ourjax.backends.cpu import backend as cpu
    if isinstance(compiled, cpu.CpuExecutable):
      inst = compiled if compiled.meta.get("profile") else cpu.compile(exe.module, profile=True)
      if isinstance(inst, cpu.CpuExecutable) and inst.meta.get("profile"):
        from ourjax.backends.cpu import profiling as cpu_profiling
        return cpu_profiling.Runner(inst, name)
  elif exe.backend == "cuda":
    from ourjax.backends.cuda import backend as cuda
    if isinstance(compiled, cuda.CudaExecutable):
      from ourjax.backends.cuda import profiling as cuda_profiling
      return cuda_profiling.Runner(compiled, name)
  return None


def runner_for(exe):
  """The runner that measures calls of ``exe`` (made once, kept on it)."""
  r = getattr(exe, "_profile_runner", None)
  if r is not None:
    return r
  from ourjax.backends import JaxprEvaluator
  name = _name(exe)
  if isinstance(exe, JaxprEvaluator):
    r = WallRunner(exe._evaluate, name, "reference", "jaxpr (op by op)",
                   "a primitive without a lowering: the jaxpr runs op by op")
  else:
    compiled = exe.compiled
    r = None
    try:
      r = _native_runner(exe, compiled, name)
    except Exception as e:   # noqa: BLE001 - measure the call as a whole instead
      log.warning("profiler: %s is timed as a whole (its kernels could not be measured: "
                  "%s: %s)", name, type(e).__name__, e)
    if r is None:
      kind = type(compiled).__name__
      note = {"ReferenceExecutable": "the reference (NumPy) backend",
              "HostFallbackExecutable": "run by the CPU backend on host copies: "
              + str(getattr(compiled, "reason", ""))[:60]}.get(kind, "the whole executable")
      r = WallRunner(compiled, name, exe.backend, kind, note)
    from ourjax.stages import memory_stats
    try:
      r.memory = memory_stats(exe)
    except Exception as e:   # noqa: BLE001 - the table goes without it
      log.debug("profiler: no memory analysis of %s (%s: %s)", name, type(e).__name__, e)
  exe._profile_runner = r
  return r


def profiled_call(exe, args):
  """``exe(*args)``, measured: (outputs as ``exe`` returns them, ``CallRecord``)."""
  runner = runner_for(exe)
  with runner.lock:
    t0 = time.perf_counter_ns()
    outs = exe._run(runner, args)
    t1 = time.perf_counter_ns()
    rec = runner.record(t0, t1)
    rec.memory = getattr(runner, "memory", None)
    return outs, rec
