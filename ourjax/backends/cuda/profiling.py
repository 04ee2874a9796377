"""Profiled calls of CUDA executables (``ourjax.profiler``, ``backends/profiling.py``).

A profiled call launches the program kernel by kernel (never as a CUDA graph), each launch and
each device-to-device copy between two timing events (``CudaExecutable.timed_call``), and waits
for its outputs.  Its rows:

* one per kernel (``llvm/kernel_info.describe``: kind = the GPU kernel's class, the HLO it
  computes, its buffers' bytes, its contraction FLOPs): device time between its events, summed
  over its launches (kernels inside a ``while`` launch once per iteration);
* one per size of device-to-device copy (the program's copies, e.g. a loop's state);
* one per ``while``/``conditional``: its *host round trips*, the predicate or branch index read
  back to the host (a blocking copy), host wall time;
* Python dispatch: the call's host time minus the time it spent waiting for the device (the
  round trips and the final wait for the outputs).  It includes the profiler's own event
  records; ``Compiled.profile`` replaces it by the host time of plain calls through jit's
  fast path (``plain_dispatch``).

The timeline puts the kernels and copies on the device's track at the times the events give,
relative to an event recorded just before the call, and the call and its round trips on the
calling thread's track.
"""
from __future__ import annotations

import threading
import time

from ourjax.backends.cuda import driver
from ourjax.backends.llvm import kernel_info

__all__ = ["Runner"]


def _control_ops(program, out):
  from ourjax.backends.cuda.program import _loop_programs
  for op in program:
    if op[0] == "copy":
      out.setdefault(("copy", op[3]), None)
    elif op[0] == "while":
      out.setdefault(("host", op[4]), "while")
      for prog in _loop_programs(op):
        _control_ops(prog, out)
    elif op[0] == "cond":
      out.setdefault(("host", op[4]), "conditional")
      for br in op[3]:
        _control_ops(br, out)
    elif op[0] == "repeat":          # a loop of known trip count: no round trips of its own
      for prog in _loop_programs(op):
        _control_ops(prog, out)
  return out


class Runner:
  """Calls a ``CudaExecutable`` with every launch timed; ``record(t0, t1)`` makes the call's
  ``CallRecord`` given the host times around it.  Callers hold ``lock`` from the call to
  ``record``."""
  device_resident = True

  def __init__(self, exe, name: str):
    from ourjax.backends.profiling import DISPATCH_ROW
    self.exe, self.name = exe, name
    self.aliases = exe.aliases          # (outputs written into donated arguments' buffers)
    self.lock = threading.Lock()
    rows = []
    for k in exe._kernels:       # (what runs: for an executable from the disk cache, as recorded)
      # (a kernel of an executable from the disk cache carries its description: cuda/cache.py)
      d = dict(k.described) if hasattr(k, "described") else kernel_info.describe(k)
      d["category"], d["loop"] = "kernel", None
      rows.append(d)
    self.row_of = {}
    for key, what in _control_ops(exe._program, {}).items():
      self.row_of[key] = len(rows)
      if key[0] == "copy":
        rows.append({"name": "device copy", "kind": "copy", "category": "copy",
                     "hlo": f"{key[1]}-byte device-to-device copies", "bytes": 2 * key[1],
                     "flops": 0, "loop": None})
      else:
        read = "predicate" if what == "while" else "branch index"
        rows.append({"name": f"{key[1]} read-back", "kind": "host round trip",
                     "category": "host", "hlo": f"{what} {key[1]}: the {read} read to the "
                     "host (waits for the stream)", "bytes": 0, "flops": 0, "loop": None})
    self.dispatch_row = len(rows)
    rows.append(dict(DISPATCH_ROW))
    self.rows = rows
    self.last = None

  def __call__(self, *args):
    exe = self.exe
    dev = exe._dev or exe._load()
    start = driver.Event(dev, timing=True).record()
    timings = []
    t0 = time.perf_counter_ns()
    exe._timings = timings
    try:
      outs = exe(*args)
    finally:
      exe._timings = None
    t1 = time.perf_counter_ns()
    dev.synchronize("a profiled call")     # (every event done: their times can be read)
    t2 = time.perf_counter_ns()
    self.last = (dev, start, timings, t0, t1, t2)
    return outs

  def plain_dispatch(self, exe, leaves, reps: int, measured):
    """Python dispatch of ``reps`` plain calls through jit's fast path (``exe``, the
    ``ModuleExecutable``; CUDA graph replay where it applies): their host time until the call
    returns, less the measured calls' median time in host round trips."""
    from ourjax import api
    call = exe.fast_path() or (lambda args: exe._run(exe.compiled, args))
    host = [i for i, r in enumerate(self.rows) if r["category"] == "host"]
    n = len(measured[self.dispatch_row])
    trips = sorted(sum(measured[i][k] for i in host) for k in range(n))
    rt = trips[len(trips) // 2] if trips else 0.0
    out = []
    for k in range(reps + 1):
      t0 = time.perf_counter_ns()
      outs = call(leaves)
      t1 = time.perf_counter_ns()
      if outs is None:
        return None
      api.block_until_ready(outs)
      if k:
        out.append(max((t1 - t0) * 1e-9 - rt, 0.0))
    return out

  def record(self, t0: int, t1: int):
    from ourjax.backends.profiling import CallRecord
    dev, start, timings, a, b, c = self.last
    times = [[0.0, 0] for _ in self.rows]
    host = ("thread", threading.get_ident())
    gpu = ("gpu", getattr(dev, "ordinal", 0))
    events = [(host, self.name, t0, t1 - t0, {"backend": "cuda"})]
    waited = c - b                       # the final wait for the outputs
    for t in timings:
      if t[0] == "host":
        row = self.row_of[("host", t[1])]
        dur = t[3] - t[2]
        waited += dur
        events.append((host, self.rows[row]["name"], t[2], dur,
                       {"kind": "host round trip", "cat": "host"}))
        times[row][0] += dur * 1e-9
        times[row][1] += 1
        continue
      row = t[1] if t[0] == "k" else self.row_of[("copy", t[1])]
      ms = t[2].elapsed_ms(t[3])
      off = start.elapsed_ms(t[2])
      times[row][0] += ms * 1e-3
      times[row][1] += 1
      r = self.rows[row]
      events.append((gpu, f"{r['name']} ({r['kind']})", a + int(off * 1e6), int(ms * 1e6),
                     {"kind": r["kind"], "hlo": r["hlo"], "bytes": r["bytes"],
                      "cat": r["category"]}))
    times[self.dispatch_row] = [max((t1 - t0) - waited, 0) * 1e-9, 1]
    return CallRecord(self.name, "cuda", self.rows, [tuple(x) for x in times], t0, t1, events,
                      note="kernels: device time between CUDA events; host rows: host "
                      "time, which overlaps the device's")
