"""Where an executable's compile time goes: per-phase timers for ``jax_log_compiles``.

    times = _phases.begin("f")            # None when jax_log_compiles is off
    with _phases.collecting(times):       # this thread's phases go to ``times``
      with _phases.phase("trace"):
        ...
    _phases.report(times)                 # one log line: the phases in order, then the total

``phase(name)`` adds the wall time of its block to the record this thread is collecting into, or
does nothing (one thread-local lookup) when none is.  A phase that runs several times (a pass
of the fixed point, an LLVM module) adds up and shows its count (``pass:simplify 0.10 s x3``).
Phases may nest: ``llvm`` is the wall time of all LLVM work, ``llvm.opt`` the optimisation of
each module inside it.  Worker threads collect into their caller's record through
``bound(fn)``; a phase timed on several threads at once adds up their times (``llvm.opt`` may
exceed ``llvm``).  The line ends with ``other``: the total less the phases not nested in
another (imports, Python glue, what nobody timed).
"""
from __future__ import annotations

import logging
import threading
import time

__all__ = ["begin", "collecting", "phase", "bound", "report", "Times", "current"]

log = logging.getLogger("ourjax")

_tls = threading.local()


class Times:
  """The phases of one executable's compilation: name -> [seconds, count], in first-seen order."""

  def __init__(self, name: str):
    self.name = name
    self.phases: dict = {}
    self.start = time.perf_counter()
    self.carried = 0.0          # phases timed before ``start`` (tracing, when compiled later)
    self.outer = 0.0            # the time of the phases not inside another phase
    self.lock = threading.Lock()

  def add(self, name: str, seconds: float, outer: bool = False) -> None:
    with self.lock:
      p = self.phases.get(name)
      if p is None:
        self.phases[name] = [seconds, 1]
      else:
        p[0] += seconds
        p[1] += 1
      if outer:
        self.outer += seconds

  def total(self) -> float:
    return self.carried + time.perf_counter() - self.start

  def resume(self) -> None:
    """Go on after a pause (traced now, compiled later): the total counts what was timed so
    far plus the wall time from now."""
    with self.lock:
      self.carried = self.outer
      self.start = time.perf_counter()

  def summary(self) -> str:
    total = self.total()
    parts = []
    for name, (sec, count) in self.phases.items():
      parts.append(f"{name} {sec:.3f} s" + (f" x{count}" if count > 1 else ""))
    parts.append(f"other {max(0.0, total - self.outer):.3f} s")
    return (f"Finished compiling {self.name or 'jit'} in {total:.3f} s: " + ", ".join(parts))


class _Null:
  __slots__ = ()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False


_NULL = _Null()


class _Phase:
  __slots__ = ("times", "name", "t0")

  def __init__(self, times, name):
    self.times, self.name = times, name

  def __enter__(self):
    _tls.depth = getattr(_tls, "depth", 0) + 1
    self.t0 = time.perf_counter()
    return self

  def __exit__(self, *exc):
    dt = time.perf_counter() - self.t0
    _tls.depth -= 1
    self.times.add(self.name, dt, outer=_tls.depth == 0)
    return False


def current() -> Times | None:
  """The record this thread collects into, or None."""
  return getattr(_tls, "times", None)


def phase(name: str):
  """A context manager that adds its block's wall time to this thread's record as ``name``."""
  times = getattr(_tls, "times", None)
  if times is None:
    return _NULL
  return _Phase(times, name)


class collecting:
  """``with collecting(times):`` phases of this thread go to ``times`` (None: nowhere), and to
  the record that was current before when the block ends."""
  __slots__ = ("times", "prev", "depth")

  def __init__(self, times: Times | None, depth: int = 0):
    self.times, self.depth = times, depth

  def __enter__(self):
    self.prev = getattr(_tls, "times", None), getattr(_tls, "depth", 0)
    _tls.times, _tls.depth = self.times, self.depth
    return self.times

  def __exit__(self, *exc):
    _tls.times, _tls.depth = self.prev
    return False


def begin(name: str, times: Times | None = None) -> Times | None:
  """A new record for compiling ``name`` (or ``times``, to go on with one begun at tracing),
  when ``jax_log_compiles`` is on; None otherwise."""
  from ourjax.config import config
  if not config.jax_log_compiles:
    return None
  if times is None:
    return Times(name)
  times.resume()
  return times


def bound(fn):
  """``fn`` collecting into the calling thread's record wherever it runs (for thread pools)."""
  times = getattr(_tls, "times", None)
  if times is None:
    return fn
  depth = getattr(_tls, "depth", 0)     # (its phases nest in the caller's)

  def run(*args, **kwargs):
    with collecting(times, depth):
      return fn(*args, **kwargs)
  return run


def report(times: Times | None) -> None:
  """Log ``times``'s summary (a WARNING on the ``ourjax`` logger, as "Compiling ..." is)."""
  if times is not None:
    log.warning(times.summary())
