"""Where the time goes: per-kernel tables and Chrome traces of jitted code (``jax.profiler``'s
names where JAX has them).

    with ourjax.profiler.trace("/tmp/trace"):       # or start_trace(dir) ... stop_trace()
      for i in range(10):
        with ourjax.profiler.StepTraceAnnotation("train", step_num=i):
          params = step(params, batch)
    # -> /tmp/trace/plugins/profile/<time>/<host>.trace.json (chrome://tracing, Perfetto),
    #    and a table per executable on stdout

    print(jit(f).lower(x).compile().profile(x))     # one executable, median of `reps` calls
    print(ourjax.profiler.profile(f, x))             # every executable `f` runs (f is jitted)

``OURJAX_PROFILE=1`` records every executable call of the process and, at exit, prints the
table of each (calls, total and mean time per kernel) to stderr and writes
``ourjax-<pid>.trace.json`` into ``OURJAX_PROFILE_DIR`` (default: the current directory).

While the profiler records, every call of a compiled executable is *measured*
(``backends/profiling.py``): on the CPU the module runs compiled with cycle counters around
each kernel (compiled once more, cached on disk apart from the plain code), on a GPU its
kernels are launched one by one between timing events; jit's dispatch fast path is off.  When
nothing records, nothing of this runs: the executables and the fast path are the plain ones.

The table (``Profile``; ``str()`` prints it, ``.rows`` has the numbers, ``.to_chrome_trace``
writes the timeline): one row per kernel, sorted by time, with its kind (the planner's kernel
class), its time and share of the call, launches per call (kernels inside a loop launch once
per iteration; their times are summed), the bytes of its input and output buffers (an
estimate of its memory traffic) and the GB/s they make, GFLOP/s of the dots and convolutions
it computes, and the HLO instructions it covers; each executable's section starts with its peak
memory (arguments + outputs + the temporaries' arena - outputs written into donated arguments:
``Compiled.memory_analysis()``, also in ``sections[i]["memory"]`` and the trace's
``otherData``).  Host overheads are rows of their own: the CPU's thread pool (waking the
workers, waiting for them), device copies, host round trips (a GPU ``while``'s predicate read
back each iteration) and Python dispatch (a call's wall time minus the rows above:
``Compiled.profile`` measures it on calls through jit's fast path, a trace on the calls it
records, which take the general path).  An executable that is not
compiled natively (the reference backend, a jaxpr run op by op) is one row, its wall time.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import gzip
import json
import os
import socket
import sys
import threading
import time

__all__ = ["trace", "start_trace", "stop_trace", "TraceAnnotation", "StepTraceAnnotation",
           "annotate_function", "profile", "Profile"]

#: Trace events a recording keeps (later ones are counted, not kept).
MAX_EVENTS = 200_000
#: Per-call samples a recording keeps per row for its medians.
MAX_SAMPLES = 100_000

_lock = threading.RLock()
_recorders: list = []
_session = None          # start_trace's: (recorder, log_dir, options)
_env_recorder = None     # OURJAX_PROFILE's


# ---------------------------------------------------------------------------------------------
# recording
# ---------------------------------------------------------------------------------------------

class _ExeStats:
  """The calls of one executable (one runner) a recording saw."""

  def __init__(self, rec, seq: int):
    self.name, self.backend, self.rows, self.note = rec.name, rec.backend, rec.rows, rec.note
    self.memory = rec.memory
    self.seq = seq
    n = len(rec.rows)
    self.calls = 0
    self.total = [0.0] * n
    self.launches = [0] * n
    self.samples = [[] for _ in range(n)]

  def add(self, rec):
    self.calls += 1
    for i, (t, n) in enumerate(rec.times):
      self.total[i] += t
      self.launches[i] += n
      if len(self.samples[i]) < MAX_SAMPLES:
        self.samples[i].append(t)


class _Recorder:
  """What one recording (a trace, ``OURJAX_PROFILE``, a ``profile`` call) collects."""

  def __init__(self):
    self.start_ns = time.perf_counter_ns()
    self.stats: dict = {}        # id(rows) -> _ExeStats
    self.events: list = []
    self.dropped = 0
    self.threads: dict = {}      # ident -> name

  def _event(self, ev):
    if len(self.events) < MAX_EVENTS:
      self.events.append(ev)
    else:
      self.dropped += 1

  def add(self, rec, thread):
    st = self.stats.get(id(rec.rows))
    if st is None:
      st = self.stats[id(rec.rows)] = _ExeStats(rec, len(self.stats))
    st.add(rec)
    self.threads.setdefault(thread[0], thread[1])
    for ev in rec.events:
      self._event(ev)

  def annotate(self, name, t0, t1, args, cat, thread):
    self.threads.setdefault(thread[0], thread[1])
    self._event((("thread", thread[0]), name, t0, t1 - t0, dict(args, cat=cat)))

  def profile(self, per_call: bool, title: str) -> "Profile":
    sections = [_section(st, per_call) for st in self.stats.values()]
    sections.sort(key=lambda s: -s["total_us"])
    _dedupe_names(sections)
    return Profile(sections, title, per_call, self.events, dict(self.threads), self.start_ns,
                   self.dropped)


def _hook(exe, args):
  """``backends._profile_hook``: measure the call and hand it to every recording."""
  from ourjax.backends import profiling
  outs, rec = profiling.profiled_call(exe, args)
  th = threading.current_thread()
  with _lock:
    for r in _recorders:
      r.add(rec, (th.ident, th.name))
  return outs


def _activate(rec: _Recorder) -> None:
  from ourjax import api, backends
  with _lock:
    _recorders.append(rec)
    backends._profile_hook = _hook
    api._clear_fast_paths()


def _deactivate(rec: _Recorder) -> None:
  from ourjax import api, backends
  with _lock:
    if rec in _recorders:
      _recorders.remove(rec)
    if not _recorders:
      backends._profile_hook = None
      api._clear_fast_paths()


@contextlib.contextmanager
def _recording():
  rec = _Recorder()
  _activate(rec)
  try:
    yield rec
  finally:
    _deactivate(rec)


# ---------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------

def _median(xs):
  if not xs:
    return 0.0
  s = sorted(xs)
  n = len(s)
  return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _section(st: _ExeStats, per_call: bool) -> dict:
  calls = max(st.calls, 1)
  rows = []
  for i, r in enumerate(st.rows):
    if st.launches[i] == 0 and st.total[i] == 0.0 and r["category"] != "dispatch":
      continue       # (a kernel no call launched: an untaken branch)
    med, mean = _median(st.samples[i]), st.total[i] / calls
    t = med if per_call else mean
    launches = st.launches[i] / calls
    nbytes = r["bytes"] * launches
    flops = r["flops"] * launches
    rows.append({
        "executable": st.name, "backend": st.backend, "name": r["name"], "kind": r["kind"],
        "category": r["category"], "hlo": r["hlo"], "loop": r.get("loop"),
        "time_us": t * 1e6, "median_us": med * 1e6, "mean_us": mean * 1e6,
        "total_us": st.total[i] * 1e6, "calls": st.calls, "launches": launches,
        "bytes": int(round(nbytes)), "gbps": nbytes / t / 1e9 if t > 0 and nbytes else None,
        "flops": int(round(flops)), "gflops": flops / t / 1e9 if t > 0 and flops else None})
  per = sum(x["time_us"] for x in rows)
  for x in rows:
    x["percent"] = 100.0 * x["time_us"] / per if per > 0 else 0.0
  rows.sort(key=lambda x: -x["time_us"])
  return {"name": st.name, "backend": st.backend, "calls": st.calls, "rows": rows,
          "time_us": per, "total_us": sum(x["total_us"] for x in rows), "note": st.note,
          "seq": st.seq, "memory": None if st.memory is None else dict(
              st.memory._asdict(), peak_memory_in_bytes=st.memory.peak_memory_in_bytes)}


def _dedupe_names(sections):
  seen = {}
  for s in sorted(sections, key=lambda s: s["seq"]):
    n = seen.get(s["name"], 0)
    seen[s["name"]] = n + 1
    if n:
      s["name"] = f"{s['name']}#{n + 1}"
      for r in s["rows"]:
        r["executable"] = s["name"]


def _fmt_bytes(n) -> str:
  if not n:
    return "-"
  for unit, k in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
    if n >= k:
      return f"{n / k:.1f} {unit}"
  return f"{int(n)} B"


def _fmt_num(x, digits=2) -> str:
  return "-" if x is None else f"{x:.{digits}f}"


def _fmt_launches(x) -> str:
  return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.2f}"


def _clip(text: str, width: int) -> str:
  return text if len(text) <= width else text[:width - 3] + "..."


_BYTES_NOTE = ("bytes: the sizes of a kernel's input and output buffers per call, an estimate "
               "of its memory traffic; GB/s = bytes / time; GFLOP/s counts dots, "
               "convolutions and attentions (2*B*M*N*K per product); kernels inside loops: launches and times summed "
               "over the iterations.")


class Profile:
  """A profiler's result: ``str(profile)`` is the table (one section per executable, most
  expensive first), ``rows`` the numbers (one dict per row: executable, name, kind, category
  ('kernel', 'copy', 'host', 'dispatch', 'executable'), time_us (median per call, or mean per
  call for a recording of a whole run), median_us, mean_us, total_us, calls, percent,
  launches (per call), bytes, gbps, flops, gflops, hlo, loop), ``to_chrome_trace(path)`` the
  timeline of the calls measured."""

  HLO_WIDTH = 64

  def __init__(self, sections, title, per_call, events, threads, start_ns, dropped=0):
    self.sections, self.title, self.per_call = sections, title, per_call
    self.events, self.threads, self.start_ns, self.dropped = events, threads, start_ns, dropped
    self.path = None            # where a trace wrote it

  @property
  def rows(self) -> list:
    return [r for s in self.sections for r in s["rows"]]

  def __repr__(self):
    return f"<Profile {self.title}: {len(self.sections)} executable(s)>"

  def __str__(self):
    out = [self.title]
    if not self.sections:
      out.append("  (no compiled calls were recorded)")
    for s in self.sections:
      calls = s["calls"]
      nk = sum(1 for r in s["rows"] if r["category"] in ("kernel", "copy"))
      if self.per_call:
        head = (f"{s['name']} [{s['backend']}]: {nk} kernel row(s), median of {calls} "
                f"call(s): {s['time_us']:.1f} us per call")
      else:
        head = (f"{s['name']} [{s['backend']}]: {calls} call(s), {s['total_us'] / 1e3:.3f} ms "
                f"in all, {s['total_us'] / max(calls, 1):.1f} us per call")
      if s["note"]:
        head += f" ({s['note']})"
      out.append("")
      out.append(head)
      m = s.get("memory")
      if m:
        size = lambda k: _fmt_bytes(m[k]) if m[k] else "0 B"
        alias = m["alias_size_in_bytes"]
        out.append(f"  peak memory {size('peak_memory_in_bytes')} = arguments "
                   f"{size('argument_size_in_bytes')} + outputs {size('output_size_in_bytes')}"
                   f" + temporaries {size('temp_size_in_bytes')}"
                   + (f" - outputs in donated buffers {_fmt_bytes(alias)}" if alias else ""))
      cols = ["kernel", "kind"]
      cols += ["time(us)"] if self.per_call else ["total(ms)", "mean(us)"]
      cols += ["%", "launches", "bytes", "GB/s", "GFLOP/s", "HLO"]
      table = [cols]
      for r in s["rows"]:
        hlo = r["hlo"] or ""
        if r.get("loop"):
          hlo = f"[in {r['loop']}] {hlo}"
        line = [r["name"], r["kind"]]
        line += ([f"{r['time_us']:.1f}"] if self.per_call else
                 [f"{r['total_us'] / 1e3:.3f}", f"{r['mean_us']:.1f}"])
        line += [f"{r['percent']:.1f}", _fmt_launches(r["launches"]),
                 _fmt_bytes(r["bytes"]), _fmt_num(r["gbps"]), _fmt_num(r["gflops"]),
                 _clip(hlo, self.HLO_WIDTH)]
        table.append(line)
      widths = [max(len(t[c]) for t in table) for c in range(len(cols))]
      left = {0, 1, len(cols) - 1}
      for t in table:
        cells = [(c.ljust(w) if k in left else c.rjust(w)) for k, (c, w) in
                 enumerate(zip(t, widths))]
        out.append("  " + "  ".join(cells).rstrip())
    out.append("")
    out.append(_BYTES_NOTE)
    return "\n".join(out)

  def to_chrome_trace(self, path) -> str:
    """Write the timeline as Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev):
    a track per calling thread (its calls, annotations and, on the CPU, its kernels) and per
    GPU (kernels and copies on device time).  Returns ``path``."""
    path = os.fspath(path)
    d = os.path.dirname(path)
    if d:
      os.makedirs(d, exist_ok=True)
    data = self._trace_json()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
      json.dump(data, f, default=_json_default)
    return path

  def _trace_json(self) -> dict:
    pid = os.getpid()
    start = min([self.start_ns] + [e[2] for e in self.events])
    ids, out = {}, []
    out.append({"ph": "M", "pid": pid, "name": "process_name",
                "args": {"name": f"ourjax host (pid {pid})"}})
    out.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": 0}})

    def ident(track):
      got = ids.get(track)
      if got is None:
        if track[0] == "gpu":
          got = (10_000_000 + int(track[1]), 1)
          out.append({"ph": "M", "pid": got[0], "name": "process_name",
                      "args": {"name": f"GPU {track[1]} (device time)"}})
          out.append({"ph": "M", "pid": got[0], "name": "process_sort_index",
                      "args": {"sort_index": 1 + int(track[1])}})
          out.append({"ph": "M", "pid": got[0], "tid": 1, "name": "thread_name",
                      "args": {"name": "stream"}})
        else:
          got = (pid, 1 + sum(1 for t in ids if t[0] == "thread"))
          name = self.threads.get(track[1], f"thread {track[1]}")
          out.append({"ph": "M", "pid": pid, "tid": got[1], "name": "thread_name",
                      "args": {"name": f"{name} (host)"}})
        ids[track] = got
      return got

    for track, name, t0, dur, args in self.events:
      p, t = ident(track)
      args = dict(args)
      cat = args.pop("cat", "kernel" if "kind" in args else "call")
      out.append({"name": name, "ph": "X", "cat": cat, "pid": p, "tid": t,
                  "ts": round(max(t0 - start, 0) / 1e3, 3), "dur": round(max(dur, 0) / 1e3, 3),
                  "args": args})
    meta = {"title": self.title, "clock": "time.perf_counter_ns, microseconds from the "
            "recording's start", "dropped_events": self.dropped,
            "memory": {s["name"]: s["memory"] for s in self.sections if s.get("memory")}}
    return {"traceEvents": out, "displayTimeUnit": "ns", "otherData": meta}


def _json_default(x):
  try:
    import numpy as np
    if isinstance(x, np.generic):
      return x.item()
  except ImportError:   # pragma: no cover
    pass
  return str(x)


# ---------------------------------------------------------------------------------------------
# public API: traces
# ---------------------------------------------------------------------------------------------

def start_trace(log_dir, create_perfetto_link: bool = False,
                create_perfetto_trace: bool = False) -> None:
  """Start recording every compiled call (and ``TraceAnnotation``) until ``stop_trace``, which
  writes ``<log_dir>/plugins/profile/<time>/<host>.trace.json`` (Chrome trace-event JSON) and
  prints a table per executable.  ``create_perfetto_trace`` also writes
  ``perfetto_trace.json.gz`` beside it (what ui.perfetto.dev opens);
  ``create_perfetto_link`` does too and prints where to open it (ourjax starts no server)."""
  global _session
  with _lock:
    if _session is not None:
      raise RuntimeError(f"start_trace: a trace into {_session[1]!r} is already running; only "
                         "one trace may run at a time (call stop_trace() first)")
    rec = _Recorder()
    _session = (rec, os.fspath(log_dir), (create_perfetto_link, create_perfetto_trace))
    _activate(rec)


def stop_trace() -> Profile:
  """Stop the trace ``start_trace`` started: write its file, print its table; returns the
  ``Profile`` (``.path``: the file written)."""
  global _session
  with _lock:
    if _session is None:
      raise RuntimeError("stop_trace: no trace is running (start one with start_trace(log_dir) "
                         "or `with ourjax.profiler.trace(log_dir):`)")
    rec, log_dir, (link, perfetto) = _session
    _session = None
    _deactivate(rec)
  prof = rec.profile(per_call=False, title=f"ourjax profiler: trace into {log_dir}")
  run = os.path.join(log_dir, "plugins", "profile", time.strftime("%Y_%m_%d_%H_%M_%S"))
  k = 1
  base = run
  while os.path.exists(run):
    k += 1
    run = f"{base}_{k}"
  prof.path = prof.to_chrome_trace(os.path.join(run, f"{socket.gethostname()}.trace.json"))
  print(prof)
  print(f"trace written to {prof.path} (open it in chrome://tracing or ui.perfetto.dev)")
  if link or perfetto:
    p = prof.to_chrome_trace(os.path.join(run, "perfetto_trace.json.gz"))
    if link:
      print(f"Perfetto: open https://ui.perfetto.dev and load {p}")
  return prof


@contextlib.contextmanager
def trace(log_dir, create_perfetto_link: bool = False, create_perfetto_trace: bool = False):
  """``start_trace(log_dir, ...)`` on entry, ``stop_trace()`` on exit."""
  start_trace(log_dir, create_perfetto_link, create_perfetto_trace)
  try:
    yield
  finally:
    stop_trace()


class TraceAnnotation:
  """``with TraceAnnotation("name", **args):`` marks a span of host time on the calling
  thread's track of every running trace (nothing when none runs).  An instance also decorates
  a function (``@TraceAnnotation("name")``), as ``annotate_function`` does."""
  _cat = "annotation"

  def __init__(self, name: str, **kwargs):
    self.name, self.kwargs = str(name), kwargs
    self._starts = threading.local()

  def __enter__(self):
    stack = getattr(self._starts, "stack", None)
    if stack is None:
      stack = self._starts.stack = []
    stack.append(time.perf_counter_ns() if _recorders else None)
    return self

  def __exit__(self, *exc):
    t0 = self._starts.stack.pop()
    if t0 is not None and _recorders:
      t1 = time.perf_counter_ns()
      th = threading.current_thread()
      with _lock:
        for r in _recorders:
          r.annotate(self.name, t0, t1, self.kwargs, self._cat, (th.ident, th.name))
    return False

  def __call__(self, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
      with self:
        return func(*args, **kwargs)
    return wrapper


class StepTraceAnnotation(TraceAnnotation):
  """A training step: ``with StepTraceAnnotation("train", step_num=i):``."""
  _cat = "step"

  def __init__(self, name: str, **kwargs):
    super().__init__(name, **kwargs)
    if "step_num" in kwargs:
      self.name = f"{self.name} {kwargs['step_num']}"


def annotate_function(func=None, name: str | None = None, **kwargs):
  """Decorate ``func`` so each call is a ``TraceAnnotation`` (named ``name``, default the
  function's qualified name); also ``@annotate_function(name=...)``."""
  if func is None:
    return lambda f: annotate_function(f, name, **kwargs)
  return TraceAnnotation(name or getattr(func, "__qualname__", repr(func)), **kwargs)(func)


# ---------------------------------------------------------------------------------------------
# public API: per-kernel tables
# ---------------------------------------------------------------------------------------------

def _block(tree):
  from ourjax import api
  api.block_until_ready(tree)


def profile(fn, *args, reps: int = 10, **kwargs) -> Profile:
  """Profile ``fn(*args, **kwargs)``: ``fn`` is jitted unless it is already a jitted function,
  called once to compile and once more to compile the measured variant, then ``reps`` times
  measured.  The ``Profile`` has a section per executable the calls ran (times: median per
  call).  A function that donates arguments gets copies of the array arguments at each call
  (the caller's stay alive)."""
  from ourjax import api
  if reps < 1:
    raise ValueError(f"profiler.profile: reps must be at least 1, got {reps}")
  f = fn if isinstance(fn, api.JitWrapped) else api.jit(fn)
  call = (lambda: f(*_copies(args), **_copies(kwargs))) if (
      f.donate_argnums or f.donate_argnames) else (lambda: f(*args, **kwargs))
  _block(call())
  with _recording() as rec:
    _block(call())
    rec.stats.clear()
    rec.events.clear()
    rec.start_ns = time.perf_counter_ns()
    for _ in range(reps):
      _block(call())
  name = getattr(fn, "__name__", None) or type(fn).__name__
  return rec.profile(per_call=True, title=f"ourjax profile of {name}: {reps} measured call(s)")


def _copies(tree):
  """``tree`` with each Array replaced by a copy of its own (on the Array's device)."""
  from ourjax import api, tree_util
  from ourjax.array import Array

  def copy(x):
    if not isinstance(x, Array):
      return x
    c = Array(np.asarray(x), x.weak_type)
    return api.device_put(c, x.device) if x._device_buf is not None else c
  import numpy as np
  return tree_util.tree_map(copy, tree)


def _profile_executable(exe, leaves, in_avals, reps: int, name: str) -> Profile:
  """``Compiled.profile``: ``reps`` measured calls of ``exe`` (a ``ModuleExecutable`` or a
  ``JaxprEvaluator``) on ``leaves``, after one to warm up; then, where the backend can
  (``runner.plain_dispatch``), ``reps`` calls through jit's dispatch fast path measure the
  Python dispatch row (the measured calls' own take the general path and the profiler's
  work)."""
  from ourjax.array import Array
  from ourjax.backends import profiling
  if reps < 1:
    raise ValueError(f"Compiled.profile: reps must be at least 1, got {reps}")
  import numpy as np
  # (Arrays of the compiled types: what the fast path takes; on a GPU their device copies
  # are made once, as for arrays that live there)
  leaves = [x if isinstance(x, Array) and x.dtype == a.dtype else
            Array(np.asarray(x, a.dtype), a.weak_type) for x, a in zip(leaves, in_avals)]
  # donated arguments: each call gets copies of its own (made before it is timed), so that
  # the caller's arrays are neither deleted nor overwritten
  donation = getattr(exe, "donation", None)
  donated = [] if donation is None else [
      i if exe.kept_args is None else exe.kept_args[i] for i in donation.deleted]
  values = {i: np.asarray(leaves[i]) for i in donated}

  def args():
    if not donated:
      return leaves
    out = list(leaves)
    for i in donated:
      a = Array(values[i], leaves[i].weak_type)
      if getattr(exe, "backend", None) == "cuda":
        a.block_until_ready()
        from ourjax import api
        a = api.device_put(a)
      out[i] = a
    return out
  rec = _Recorder()
  th = threading.current_thread()
  _block(profiling.profiled_call(exe, args())[0])
  rec.start_ns = time.perf_counter_ns()
  for _ in range(reps):
    outs, r = profiling.profiled_call(exe, args())
    _block(outs)
    rec.add(r, (th.ident, th.name))
  runner = profiling.runner_for(exe)
  st = rec.stats[id(runner.rows)]
  rows = runner.rows
  drow = next((i for i, r in enumerate(rows) if r["category"] == "dispatch"), None)
  if drow is not None and hasattr(runner, "plain_dispatch") and not donated:
    disp = runner.plain_dispatch(exe, leaves, reps, st.samples)
    if disp:
      st.samples[drow] = disp
      st.total[drow] = sum(disp) * st.calls / len(disp)
  return rec.profile(per_call=True, title=f"ourjax profile of {name}: {reps} measured call(s)")


# ---------------------------------------------------------------------------------------------
# OURJAX_PROFILE=1
# ---------------------------------------------------------------------------------------------

def _env_enabled() -> bool:
  return os.environ.get("OURJAX_PROFILE", "").strip().lower() not in ("", "0", "false", "no",
                                                                       "off")


def _env_report() -> None:
  rec = _env_recorder
  if rec is None:
    return
  _deactivate(rec)
  prof = rec.profile(per_call=False, title=f"ourjax profiler (OURJAX_PROFILE=1): every "
                     f"compiled call of process {os.getpid()}, most expensive first")
  d = os.environ.get("OURJAX_PROFILE_DIR") or os.getcwd()
  try:
    prof.path = prof.to_chrome_trace(os.path.join(d, f"ourjax-{os.getpid()}.trace.json"))
    where = f"trace written to {prof.path}"
  except OSError as e:
    where = f"could not write the trace into {d!r}: {e}"
  print(f"{prof}\n{where}", file=sys.stderr)


def _env_start() -> None:
  global _env_recorder
  if not _env_enabled() or _env_recorder is not None:
    return
  from ourjax import backends
  backends._profile_all = True
  _env_recorder = _Recorder()
  _activate(_env_recorder)
  atexit.register(_env_report)


_env_start()
