"""Profiling of CPU executables: the entry's instrumentation and what reads it back.

A module compiled with ``backend.compile(module, profile=True)`` has *items*: every kernel and
every ``while``/``conditional`` step, at any depth, in plan order (``plan_items``; their
descriptions, ``llvm/kernel_info.describe``, go into ``meta["profile"]``, so a disk-cache hit
has them too).  Thread 0 reads the cycle counter (``rdtsc``; ``cntvct_el0`` on AArch64) before
and after each item and keeps, in i64 words of the arena's control block::

    [0] counter at entry start   [1] counter at entry end
    [2 + 3k] cycles in item k    [3 + 3k] times item k ran    [4 + 3k] counter when it first ran

A parallel kernel is timed from the moment thread 0 opens it to the moment its last piece is
done (with profiling, thread 0 waits for those pieces right away instead of at the next
parallel step).  A loop's cycles include those of its kernels.  The counters are zeroed by the
entry itself, so any call of an instrumented executable leaves its own counts in the arena it
ran on (``read_counters``).  ``counter_hz()`` calibrates the counter against
``time.perf_counter_ns`` once per process; ``Runner`` calls an instrumented executable and
turns each call's counters into a ``backends.profiling.CallRecord``.
"""
from __future__ import annotations

import ctypes
import platform
import threading
import time
from typing import NamedTuple

import numpy as np

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernel_info

__all__ = ["plan_items", "counter_bytes", "Instrumentation", "read_counters", "counter_hz",
           "Runner"]


# ---------------------------------------------------------------------------------------------
# planning: the items and their counters
# ---------------------------------------------------------------------------------------------

def plan_items(steps, offset: int):
  """(meta, index) of a plan's ``steps``: ``meta = {"offset", "items"}`` (each item a dict:
  ``kernel_info.describe`` plus ``category`` ('kernel', 'copy' or 'control'), ``parent``
  (index of the enclosing loop's item, -1 at the top) and ``loop`` (its name)), ``index``
  maps ``id(kernel)`` / ``id(step)`` to its item."""
  from ourjax.backends.llvm import planning as B
  items, index = [], {}

  def walk(steps, parent, loop):
    for s in steps:
      k = len(items)
      if isinstance(s, B.KernelStep):
        d = kernel_info.describe(s.kernel)
        d["category"] = "copy" if d["kind"] == "CopyKernel" else "kernel"
        index[id(s.kernel)] = k
      else:
        kind = "while" if isinstance(s, B.WhileStep) else "conditional"
        d = {"name": s.name, "kind": kind, "hlo": s.name, "group": s.name, "bytes": 0,
             "flops": 0, "category": "control"}
        index[id(s)] = k
      d["parent"], d["loop"] = parent, loop
      items.append(d)
      if isinstance(s, B.WhileStep):
        walk(s.cond_steps, k, s.name)
        walk(s.body_steps, k, s.name)
      elif isinstance(s, B.CondStep):
        for br in s.branches:
          walk(br, k, s.name)
  walk(steps, -1, None)
  return {"offset": int(offset), "items": items}, index


def counter_bytes(meta) -> int:
  """Bytes of the counters of a profile ``meta`` (0 for None)."""
  return 0 if meta is None else 8 * (2 + 3 * len(meta["items"]))


# ---------------------------------------------------------------------------------------------
# emission
# ---------------------------------------------------------------------------------------------

def read_counter(mod, b):
  """The host's cycle counter as an i64 value (emitted at ``b``)."""
  import llvmlite.ir as ir
  if platform.machine().lower() in ("aarch64", "arm64"):
    # (llvm.readcyclecounter reads PMCCNTR_EL0 there, which user code may not)
    asm = ir.InlineAsm(ir.FunctionType(E.I64, []), "mrs $0, cntvct_el0", "=r",
                       side_effect=True)
    return b.call(asm, [])
  fn = mod.globals.get("llvm.readcyclecounter") or ir.Function(
      mod, ir.FunctionType(E.I64, []), name="llvm.readcyclecounter")
  return b.call(fn, [])


class Instrumentation:
  """Emits the counter updates into the entry of ``em`` (an ``entry._Emission``); every
  method is called where thread 0 alone runs."""

  def __init__(self, em, offset: int, index: dict):
    b = em.b
    self.em, self.index = em, index
    self.n = len(set(index.values()))
    self.base = b.bitcast(b.gep(em.arena, [E.i64(offset)]), E.I64.as_pointer())
    self.t0 = E.alloca_entry(b, E.I64)

  def _word(self, k):
    return self.em.b.gep(self.base, [E.i64(k)])

  def now(self):
    return read_counter(self.em.mod, self.em.b)

  def begin(self):
    """Entry start: zero the counts, note the counter."""
    b = self.em.b
    zero = E.i64(0)
    for k in range(self.n):
      b.store(zero, self._word(2 + 3 * k))
      b.store(zero, self._word(3 + 3 * k))
    b.store(self.now(), self._word(0))

  def end(self):
    self.em.b.store(self.now(), self._word(1))

  def mark(self):
    """Note the counter where the value cannot be carried in a register (``marked``)."""
    self.em.b.store(self.now(), self.t0)

  def marked(self):
    return self.em.b.load(self.t0)

  def account(self, key, t0):
    """Item ``key`` (a kernel or a step) ran from counter value ``t0`` until now."""
    b = self.em.b
    k = self.index[id(key)]
    t1 = self.now()
    acc, cnt, first = self._word(2 + 3 * k), self._word(3 + 3 * k), self._word(4 + 3 * k)
    c = b.load(cnt)
    b.store(b.add(b.load(acc), b.sub(t1, t0)), acc)
    b.store(b.select(b.icmp_signed("==", c, E.i64(0)), t0, b.load(first)), first)
    b.store(b.add(c, E.i64(1)), cnt)


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------

class Counters(NamedTuple):
  start: int               # counter at entry start
  end: int                 # ... and at entry end
  cycles: np.ndarray       # per item
  counts: np.ndarray       # per item: times it ran
  first: np.ndarray        # per item: counter when it first ran (meaningless where count is 0)


def read_counters(exe, arena) -> Counters:
  """The counters an instrumented ``exe`` left in ``arena`` (its last call on that arena)."""
  meta = exe.meta["profile"]
  off, n = meta["offset"], len(meta["items"])
  w = np.frombuffer(bytes(arena[off:off + 8 * (2 + 3 * n)]), np.int64)
  return Counters(int(w[0]), int(w[1]), w[2::3].copy(), w[3::3].copy(), w[4::3].copy())


_calibration = None
_calibration_lock = threading.Lock()


def _counter_function():
  import llvmlite.ir as ir
  from ourjax.backends.cpu import jit
  mod = jit.new_module("ourjax_counter")
  fn = ir.Function(mod, ir.FunctionType(E.I64, []), name="ourjax_read_counter")
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  b.ret(read_counter(mod, b))
  cm = jit.compile_module(mod, ["ourjax_read_counter"])
  f = ctypes.CFUNCTYPE(ctypes.c_int64)(cm.address("ourjax_read_counter"))
  return cm, f


def calibration():
  """(counter ticks per second, a counter value, the perf_counter_ns at that value, the
  counter function): measured once, over 20 ms."""
  global _calibration
  if _calibration is None:
    with _calibration_lock:
      if _calibration is None:
        cm, f = _counter_function()

        def pair():     # a counter value and the perf_counter_ns taken around it
          t0 = time.perf_counter_ns()
          c = f()
          t1 = time.perf_counter_ns()
          return c, (t0 + t1) // 2
        pair()
        c0, t0 = pair()
        time.sleep(0.02)
        c1, t1 = pair()
        hz = (c1 - c0) * 1e9 / max(t1 - t0, 1)
        if not hz > 0:   # pragma: no cover - a counter that does not count
          raise RuntimeError("profiler: the CPU cycle counter does not advance")
        _calibration = (hz, c1, t1, f, cm)
  return _calibration


def counter_hz() -> float:
  """Cycle counter ticks per second on this host."""
  return calibration()[0]


# ---------------------------------------------------------------------------------------------
# calling
# ---------------------------------------------------------------------------------------------

class Runner:
  """Calls an instrumented ``CpuExecutable`` in the place of the plain one (``exe(*arrays)``)
  and keeps the last call's counters; ``record(t0, t1)`` makes the ``CallRecord`` of that call
  given the host times around it.  Callers hold ``lock`` from the call to ``record``.

  Rows: the kernels; for an executable that runs on the thread pool, *thread pool*: the
  native call's time outside the entry on the calling thread (waking the workers, waiting for
  them to return); *Python dispatch*: the rest of the call's wall time (argument checks,
  output allocation, the result Arrays, and the few cycles of loop control between kernels)."""
  device_resident = False

  def __init__(self, exe, name: str):
    from ourjax.backends.profiling import DISPATCH_ROW
    self.exe, self.name = exe, name
    self.aliases = exe.aliases          # (outputs written into donated arguments' buffers)
    self.lock = threading.Lock()
    self.items = exe.meta["profile"]["items"]
    self.kernel_ids = [k for k, it in enumerate(self.items) if it["category"] != "control"]
    self.rows = [self.items[k] for k in self.kernel_ids]
    if exe.parallel:
      self.rows.append({"name": "thread pool", "kind": "host", "category": "host",
                        "hlo": "waking the worker threads, waiting for them to return",
                        "bytes": 0, "flops": 0, "loop": None})
    self.rows.append(dict(DISPATCH_ROW))
    self.last = None

  def __call__(self, *args):
    exe = self.exe
    res, outs, keep = exe._bind(args)
    t0 = time.perf_counter_ns()
    rc = exe._run(res)
    t1 = time.perf_counter_ns()
    self.last = (read_counters(exe, res[2]), t1 - t0)
    exe._free.append(res)
    if rc:
      raise RuntimeError(f"{exe.module.name}: the native entry refused its arguments")
    del keep
    return tuple(outs)

  def record(self, t0: int, t1: int):
    from ourjax.backends.profiling import CallRecord
    c, native_ns = self.last
    hz, ref_c, ref_t = calibration()[:3]
    secs = c.cycles / hz
    times = [(float(secs[k]), int(c.counts[k])) for k in self.kernel_ids]
    wall = (t1 - t0) * 1e-9
    rest = wall - sum(t for t, _ in times)
    if self.exe.parallel:
      pool = max(native_ns * 1e-9 - (c.end - c.start) / hz, 0.0)
      times.append((pool, 1))
      rest -= pool
    times.append((max(rest, 0.0), 1))
    return CallRecord(self.name, "cpu", self.rows, times, t0, t1,
                      self._events(c, hz, ref_c, ref_t, t0, t1))

  def plain_dispatch(self, exe, leaves, reps: int, measured):
    """Python dispatch of ``reps`` calls through jit's fast path (the instrumented code's,
    which is the plain one's plus the counters): each call's wall time less its kernels and
    the measured calls' median thread-pool time; None without a fast path."""
    from ourjax.array import Array
    inner = self.exe.fast_caller(exe.kept_args, exe.hoisted, Array)
    if inner is None:
      return None
    avals = exe.out_avals
    wrap = Array._from_result
    pool = 0.0
    if self.exe.parallel:
      k = next(i for i, r in enumerate(self.rows) if r["name"] == "thread pool")
      pool = sorted(measured[k])[len(measured[k]) // 2]
    hz = counter_hz()
    out = []
    for k in range(reps + 1):
      t0 = time.perf_counter_ns()
      outs = inner(leaves)
      res = [wrap(o, a) for o, a in zip(outs, avals)] if outs is not None else None
      t1 = time.perf_counter_ns()
      if res is None:
        return None
      c = read_counters(self.exe, inner.resources[-1][2])
      kernels = sum(float(c.cycles[i]) for i in self.kernel_ids) / hz
      if k:
        out.append(max((t1 - t0) * 1e-9 - kernels - pool, 0.0))
    return out

  def _events(self, c, hz, ref_c, ref_t, t0, t1):
    """The call's timeline on its thread: the call, and inside it each top-level item where
    it ran; items inside a loop are laid end to end from the loop's start, with their total
    time over the loop's iterations (their individual launches are not kept)."""
    track = ("thread", threading.get_ident())
    ev = [(track, self.name, t0, t1 - t0, {"backend": "cpu"})]
    dur = max(c.end - c.start, 0) / hz * 1e9
    start = ref_t + (c.start - ref_c) / hz * 1e9
    dur = min(dur, t1 - t0)
    start = max(t0, min(start, t1 - dur))       # (within the call whatever the drift)
    items = self.items
    children = {}
    for k, it in enumerate(items):
      children.setdefault(it["parent"], []).append(k)

    def place(parent, begin, exact):
      cursor = begin
      for k in children.get(parent, ()):
        n = int(c.counts[k])
        if n == 0:
          continue
        d = c.cycles[k] / hz * 1e9
        ts = start + (c.first[k] - c.start) / hz * 1e9 if exact else cursor
        ts = max(ts, cursor)
        it = items[k]
        args = {"kind": it["kind"], "hlo": it["hlo"], "launches": n,
                "cat": "loop" if it["category"] == "control" else it["category"]}
        if it["category"] != "control":
          args["bytes"] = it["bytes"]
        label = f"{it['name']} ({it['kind']})" if it["category"] != "control" else it["name"]
        if n > 1:
          label += f" x{n}"
        ev.append((track, label, ts, d, args))
        cursor = ts + d
        place(k, ts, False)
    place(-1, start, True)
    return ev
