"""Autotuned cache blocking of the shared GEMM (``gemm.py``), per shape class and per host.

The register blocking (micro-tile ``mr x nv*W``) is fixed when the shared kernel is generated
(``gemm.VECTOR_TARGETS``); the cache blocking is a run-time argument of each call (its ``tune``
word, ``gemm.tune_word``): the depth of a K slice ``kc``, the rows ``mc`` and columns ``nc``
packed at once, the rows up to which a row-major B is read in place (``direct_b_rows``) and up
to which a product streams B through the few-rows kernels (``stream_rows``).  Trying another
cache blocking costs a few calls of an already compiled kernel, no compilation, so a shape
class can be tuned in tens of milliseconds.

:func:`choose` gives the blocking of a dot, the same one every time within a process (the
planner sizes the dot's scratch with it, the emitter passes it to the call):

* a result cached for the dot's class on this host (``<cache dir>/gemm_tune/<host>.json``,
  the disk cache's directory; the host key holds LLVM's CPU name and features, the vector
  target and the GEMM's source), else
* a fresh tuning of the class (:func:`tune`), when tuning is on for it, stored there, else
* the default blocking (the cost model's: ``gemm.default_blocking``).

A class is the dtype, ``ceil(log2)`` of M, N, K and the batch, the operands' layouts and the
pieces the dot is cut into.  A knob that is a threshold on rows (``stream_rows``,
``direct_b_rows``) is turned on at the rows of the shape tuned (so for the class's shapes of
as many rows or fewer: streaming B pays at 12 rows and costs 30% at 16 on AMD znver4, one
class) or off.

Compiled programs in the disk cache are keyed by the tuning mode only; each records the
blocking it chose per class (:func:`recording`), and one found in the cache is used only while
those classes would still get the same blockings (:func:`choices_hold`): tuning a class after
other programs were cached makes again only the programs that use it.

``OURJAX_GEMM_AUTOTUNE``: ``0`` never tunes nor reads tuned results (the default blocking:
deterministic); ``1`` tunes every class at first use (waiting for the shared kernel's build,
with or without a disk cache); unset (``auto``): tunes a class at first use only when the
disk cache is on (its result then serves every later process), the product has at least
``AUTOTUNE_MIN_WORK`` multiply-adds, the shared kernel is already built (planning never
waits for it) and the process has tuned for less than ``AUTOTUNE_PROCESS_S`` (the classes
left are tuned by later processes, so a host's first compilations each pay a little).  ``OURJAX_GEMM_AUTOTUNE_MS``: the
time budget of one class's tuning (default ``BUDGET_MS``).

Rounding: a tuned ``kc`` cuts K into other slices, and streaming sums K in one chain, so a
product may differ in its last bits from the default blocking's (and between a process that
ran before its class was tuned and one after); ``OURJAX_GEMM_AUTOTUNE=0`` gives the same bits
every run on a host.

Tuning (:func:`tune`): coordinate descent from the default over knob groups in the order of
their measured effect (stream or not, B in place or packed, kc, mc, nc), each candidate timed
on the dot's own sizes with random operands (the pieces called one after another on this
thread, as the threads would run them), the best of a few calls each; a winner must then beat
the default by ``MIN_GAIN`` in an interleaved recheck, else the default stays.  Candidates are
pruned by the cost model: only values that change the number of K slices, row blocks or
column blocks of this shape, a few nearest the default's.
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import threading
import time
from typing import Callable, Optional

import numpy as np

from ourjax.backends.llvm import gemm, gemm_scratch, gemm_table
from ourjax.backends.llvm.gemm_table import host_key, mode, table_path  # noqa: F401

__all__ = ["choose", "tune", "candidates", "shape_class", "host_key", "table_path", "mode",
           "BUDGET_MS", "AUTOTUNE_MIN_WORK", "AUTOTUNE_PROCESS_S", "MIN_GAIN"]

#: Default time budget of one class's tuning, in milliseconds (``OURJAX_GEMM_AUTOTUNE_MS``).
BUDGET_MS = 40.0
#: Fewest multiply-adds (batch * M * N * K) of a product that ``auto`` tunes: below (about
#: 0.15 ms a call on one AVX-512 core) what tuning could save takes long to repay its budget.
AUTOTUNE_MIN_WORK = 1 << 24
#: Most seconds of tuning ``auto`` spends in one process (the first compilations on a host
#: tune a few classes each, not every class of a model at once: the compile time stays).
AUTOTUNE_PROCESS_S = 0.2
#: How much faster than the default a tuned blocking must be (the interleaved recheck's best
#: times), else the default stays: less is within the noise of a shared machine.
MIN_GAIN = 0.05

_lock = threading.RLock()
_memo: dict = {}          # choose()'s arguments -> Blocking: one answer per process
_table: Optional[dict] = None   # class -> fields, this host's tuned results (disk + this process)
_table_path: Optional[str] = None
_spent = 0.0              # seconds this process has tuned for


def budget_s() -> float:
  v = os.environ.get("OURJAX_GEMM_AUTOTUNE_MS", "").strip()
  return (float(v) if v else BUDGET_MS) / 1e3


def _bucket(x: int) -> int:
  """ceil(log2(x)) (0 for x <= 1)."""
  return max(0, (max(int(x), 1) - 1).bit_length())


def shape_class(dtype: str, M: int, N: int, K: int, trans_a: bool, trans_b: bool,
                batch: int = 1, pieces: int = 1) -> str:
  """The class a product's tuned blocking is stored under (see the module docstring)."""
  return (f"{dtype}/m{_bucket(M)}/n{_bucket(N)}/k{_bucket(K)}/b{_bucket(batch)}/"
          f"t{int(bool(trans_a))}{int(bool(trans_b))}/p{pieces}")


# (where results are stored: gemm_table.py, which a warm start reads without this module)
_read = gemm_table.read


def cache_tag() -> str:
  """What the disk cache keys compiled code by of the tuning: the mode (with
  ``OURJAX_GEMM_AUTOTUNE=0`` every run gets the default blocking's code and bits).  The
  blockings themselves are checked per program when it is loaded (:func:`choices_hold`), not
  put in every key: a key holding all the host's tuned results changed with each class tuned,
  and every program of a host was compiled again each time."""
  return mode()


_recording = threading.local()


class recording:
  """``with recording() as chosen:`` collects into the dict ``chosen`` the blocking of every
  :func:`choose` made on this thread inside the block, ``{class: [dtype, {field: value}]}``
  (what a compiled program records in its cache entry for :func:`choices_hold`)."""

  def __enter__(self) -> dict:
    self._outer = getattr(_recording, "chosen", None)
    self.chosen = _recording.chosen = {}
    return self.chosen

  def __exit__(self, *exc) -> None:
    _recording.chosen = self._outer
    if self._outer is not None:
      self._outer.update(self.chosen)


def _fields(bl: gemm.Blocking) -> dict:
  return {k: int(getattr(bl, k)) for k in _FIELDS}


def choices_hold(chosen) -> bool:
  """Whether a program that recorded ``chosen`` (:func:`recording`) would be planned with the
  same blockings now: each class's stored result (or the default when it has none) is the one
  it used.  Under ``force`` a class with no result would be tuned now: the program is made
  again."""
  if not chosen:
    return True
  how = mode()
  if how == "off":
    return True
  table = _results()
  try:
    for cls, (dtype, fields) in chosen.items():
      entry = table.get(cls)
      if entry is None and how == "force":
        return False
      bl = (_from_entry(entry, dtype) if entry is not None else None) or \
          gemm.default_blocking(dtype)
      if _fields(bl) != fields:
        return False
  except (TypeError, ValueError, KeyError):
    return False
  return True


def _results() -> dict:
  """This host's tuned results (read from disk once per cache directory)."""
  global _table, _table_path
  path = table_path()
  if _table is None or path != _table_path:
    _table, _table_path = _read(path), path
  return _table


def _store(cls: str, entry: dict) -> None:
  """Record a class's result in memory and in the file (merged with what other processes
  wrote meanwhile; written atomically; a cache that cannot be written is skipped)."""
  import tempfile
  _results()[cls] = entry
  path = _table_path
  if not path:
    return
  try:
    merged = _read(path)
    merged[cls] = entry
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
      json.dump(merged, f, indent=0, sort_keys=True)
    os.replace(tmp, path)
  except OSError:
    pass


_FIELDS = tuple(name for name, *_ in gemm.TUNE_FIELDS)


def _from_entry(entry, dtype: str) -> Optional[gemm.Blocking]:
  """The blocking a stored entry names (None: malformed, or not valid for this kernel)."""
  try:
    bl = dataclasses.replace(gemm.default_blocking(dtype),
                             **{k: int(entry[k]) for k in _FIELDS})
    gemm.tune_word(bl, dtype)
    return bl
  except (KeyError, TypeError, ValueError):
    return None


def choose(dtype: str, M: int, N: int, K: int, trans_a: bool, trans_b: bool, batch: int = 1,
           pieces: int = 1) -> gemm.Blocking:
  """The cache blocking of a call of the shared GEMM of ``dtype`` (``op(A)`` M x K, ``op(B)``
  K x N, A stored transposed if ``trans_a``, B if ``trans_b``, ``batch`` entries, cut into
  ``pieces``): the same for the same arguments all through a process (see the module
  docstring)."""
  args = (dtype, M, N, K, bool(trans_a), bool(trans_b), batch, pieces, mode())
  with _lock:
    bl = _memo.get(args)
    if bl is None:
      bl = _memo[args] = _choose(*args)
  chosen = getattr(_recording, "chosen", None)
  if chosen is not None and args[-1] != "off" and min(M, N, K, batch) > 0:
    chosen[shape_class(dtype, M, N, K, trans_a, trans_b, batch, pieces)] = [dtype, _fields(bl)]
  return bl


def _choose(dtype, M, N, K, trans_a, trans_b, batch, pieces, how) -> gemm.Blocking:
  global _spent
  default = gemm.default_blocking(dtype)
  if how == "off" or min(M, N, K, batch) <= 0:
    return default
  cls = shape_class(dtype, M, N, K, trans_a, trans_b, batch, pieces)
  entry = _results().get(cls)
  if entry is not None:
    return _from_entry(entry, dtype) or default
  if how == "auto":
    from ourjax.backends.llvm import gemm_library
    if (table_path() is None or batch * M * N * K < AUTOTUNE_MIN_WORK
            or _spent >= AUTOTUNE_PROCESS_S or not gemm_library.is_built(dtype)):
      return default
  t0 = time.perf_counter()
  try:
    best, trials = tune(dtype, M, N, K, trans_a, trans_b, batch, pieces)
  except MemoryError:
    return default
  finally:
    _spent += time.perf_counter() - t0
  if len(trials) == 1 and 12 * _estimate(dtype, M, N, K, batch) <= budget_s():
    return default   # (a call ran far slower than such a product should: a loaded machine;
    #                  the default for now, the class tuned again by a later compilation)
  t_default = trials[0][1]
  t_best = min(t for bl, t in trials if bl == best)
  entry = {k: getattr(best, k) for k in _FIELDS}
  entry.update(shape=[M, N, K, batch], default_s=t_default, tuned_s=t_best,
               trials=len(trials))
  _store(cls, entry)
  return best


def _estimate(dtype: str, M: int, N: int, K: int, batch: int) -> float:
  """Seconds a call should take at least (the cost model: 50 G multiply-adds a second in f32,
  25 G in f64, about one core's peak), to tell a product too large to tune in the budget from
  a call slowed by load."""
  return batch * M * N * K / (50e9 if dtype == "f32" else 25e9)


# --------------------------------------------------------------------------------------------
# candidates

def _nearest(options, base_count, limit):
  """Up to ``limit`` of ``options`` (value, count) whose counts differ from ``base_count`` and
  from one another, nearest to it first."""
  seen, out = {base_count}, []
  for v, c in sorted(options, key=lambda vc: (abs(vc[1] - base_count), vc[0])):
    if c not in seen:
      seen.add(c)
      out.append(v)
  return out[:limit]


def _knobs(dtype: str, M: int, N: int, K: int, trans_a: bool, trans_b: bool, batch: int,
           pieces: int):
  """The knob groups to try, in order: functions of the current blocking giving its variants
  in one knob (cost-model pruned: only values that change how this product is cut, a few
  nearest the current one)."""
  vt = gemm.vector_target()
  w = vt.lanes[dtype]
  base = vt.blocking[dtype]
  rep, cdiv = dataclasses.replace, gemm_scratch._cdiv

  def extent(bl):   # the most rows and columns of a piece
    ps = gemm_scratch._pieces(M, N, pieces, batch, bl, w)
    return max(r for r, _ in ps), max(c for _, c in ps)

  def stream(bl):   # 4/2/1-row axpy kernels streaming B, or tiles
    if trans_b or base.stream_rows <= 0 or M > 64:
      return []
    return [rep(bl, stream_rows=0 if M <= bl.stream_rows else M)]

  def direct(bl):   # a row-major B read in place, or packed
    rows = extent(bl)[0]
    if trans_b or rows > 1024:
      return []
    return [rep(bl, direct_b_rows=0 if rows <= bl.direct_b_rows else -(-rows // 4) * 4)]

  def kc(bl):
    opts = [(v, cdiv(K, v)) for v in (64, 128, 192, 256, 384, 512, 768, 1024)]
    return [rep(bl, kc=v) for v in _nearest(opts, cdiv(K, bl.kc), 3)]

  def mc(bl):
    rows = extent(bl)[0]
    opts = [(bl.mr * k, cdiv(rows, bl.mr * k)) for k in (2, 4, 6, 8, 12, 16, 24, 32)]
    return [rep(bl, mc=v) for v in _nearest(opts, cdiv(rows, bl.mc), 2)]

  def nc(bl):
    nr, cols = bl.nv * w, extent(bl)[1]
    opts = [(cdiv(v, nr) * nr, cdiv(cols, cdiv(v, nr) * nr)) for v in (256, 512, 1024, 2048,
                                                                         4096)]
    return [rep(bl, nc=v) for v in _nearest(opts, cdiv(cols, bl.nc), 2)]
  return [stream, direct, kc, mc, nc]


def candidates(dtype: str, M: int, N: int, K: int, trans_a: bool, trans_b: bool,
               batch: int = 1, pieces: int = 1) -> list:
  """The default blocking and every one-knob variant of it that :func:`tune` may try first
  (later groups are tried around the winners of earlier ones)."""
  bl = gemm.default_blocking(dtype)
  return [bl] + [c for knob in _knobs(dtype, M, N, K, trans_a, trans_b, batch, pieces)
                 for c in knob(bl)]


# --------------------------------------------------------------------------------------------
# timing

class _Bench:
  """Calls of the shared GEMM of one product on random operands (the pieces one after
  another); ``run(blocking)`` makes one such call."""

  def __init__(self, dtype, M, N, K, trans_a, trans_b, batch, pieces):
    from ourjax.backends.llvm import gemm_library
    npdt = np.float32 if dtype == "f32" else np.float64
    if batch * (M * K + K * N + M * N) * np.dtype(npdt).itemsize > (256 << 20):
      raise MemoryError("gemm_tune: operands too large to tune")
    rng = np.random.default_rng(0)
    self.a = rng.standard_normal((batch, K, M) if trans_a else (batch, M, K)).astype(npdt)
    self.b = rng.standard_normal((batch, N, K) if trans_b else (batch, K, N)).astype(npdt)
    self.c = np.empty((batch, M, N), npdt)
    P, L, I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    proto = ctypes.CFUNCTYPE(None, P, P, P, L, L, L, L, L, L, I, I, L, L, L, L, L, L, P, L)
    self.fn = proto(gemm_library.shared_gemm_address(dtype))
    self.dtype, self.npdt = dtype, npdt
    self.shape = (M, N, K, trans_a, trans_b, batch, pieces)
    self.pack = np.empty(0, npdt)

  def run(self, bl: gemm.Blocking) -> None:
    M, N, K, ta, tb, batch, pieces = self.shape
    n = gemm.pack_buffer_elements(self.dtype, M, N, K, pieces, bl, trans_b=tb, batch=batch)
    if self.pack.size < n:
      self.pack = np.empty(n, self.npdt)
    word = gemm.tune_word(bl, self.dtype)
    for t in range(pieces):
      self.fn(self.a.ctypes.data, self.b.ctypes.data, self.c.ctypes.data, M, N, K,
              M if ta else K, K if tb else N, N, int(ta), int(tb), batch, M * K, K * N, M * N,
              t, pieces, self.pack.ctypes.data, word)


def tune(dtype: str, M: int, N: int, K: int, trans_a: bool, trans_b: bool, batch: int = 1,
         pieces: int = 1, budget: Optional[float] = None,
         clock: Callable[[], float] = time.perf_counter, run=None):
  """Tune the cache blocking of one product within ``budget`` seconds (default
  :func:`budget_s`) of ``clock``: ``(best, trials)``, ``trials`` a list of (blocking, best
  time) in the order measured, the default first.  ``run(blocking)``: one timed call (default:
  the shared GEMM on random operands of these sizes)."""
  budget = budget_s() if budget is None else budget
  if run is None:
    run = _Bench(dtype, M, N, K, trans_a, trans_b, batch, pieces).run
  start = clock()
  deadline = start + budget
  recheck = start + 0.6 * budget    # (the rest: the winner against the default)

  def timed(bl, reps):
    best = None
    for _ in range(reps):
      t0 = clock()
      run(bl)
      t = clock() - t0
      best = t if best is None else min(best, t)
    return best

  default = gemm.default_blocking(dtype)
  # (the first call touches the operands and the scratch: slower, a hint only)
  once = timed(default, 1)
  if 2 * once <= budget:
    once = timed(default, 1)
  if 12 * once > budget:       # (too slow a call to try 5 blockings and recheck a winner)
    return default, [(default, once)]
  # calls per measurement: about 10 measurements in the first 60% of the budget
  reps = int(max(1, min(8, 0.6 * budget / 10 / max(once, 1e-9))))
  t_def = min(once, timed(default, reps))
  trials = [(default, t_def)]
  best, t_best = default, t_def
  for knob in _knobs(dtype, M, N, K, trans_a, trans_b, batch, pieces):
    winner = None
    for cand in knob(best):
      if clock() + reps * t_best > recheck:
        break
      t = timed(cand, reps)
      trials.append((cand, t))
      if t < t_best:
        winner, t_best = cand, t
    if winner is not None:
      best = winner
    if clock() >= recheck:
      break
    if M <= best.stream_rows and not trans_b:
      break    # (streamed: no tile, no packing, the rest of the knobs do nothing)
  if best == default:
    return default, trials
  # recheck, interleaved (a load that came and went may have favoured either): pairs of calls
  # while the budget lasts, the best of each; fewer than 3 pairs decide nothing
  step = 2 * max(t_def, t_best)
  td = tb_ = float("inf")
  pairs = 0
  while clock() + step <= deadline:
    td = min(td, timed(default, 1))
    tb_ = min(tb_, timed(best, 1))
    pairs += 1
  if pairs < 3:
    return default, trials
  trials.append((default, td))
  trials.append((best, tb_))
  if tb_ > (1 - MIN_GAIN) * td:
    return default, trials
  return best, trials
