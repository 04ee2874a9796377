"""``paused()``: Python's cyclic garbage collector off while a trace or a compilation runs.

    with _gc.paused():
      closed = trace(...)

Tracing, the HLO passes and the LLVM IR emission allocate hundreds of thousands of small
objects that stay alive until the compilation ends (tracers, equations, instructions,
llvmlite values); each allocation batch triggers a collection that walks them all again, for no
garbage: 6-20% of the Python-side compile time of the model suite (benchmarks/models.py; a
transformer step's 115-150 ms of 660-720) went to the collector.  While paused, objects are still freed by
reference counting as usual; cyclic garbage made meanwhile waits for the first collection after
the pause.  Nested and concurrent pauses (threads compiling at once) count: the collector is on
again when the last one ends, and only if it was on when the first began.
"""
from __future__ import annotations

import gc
import threading

__all__ = ["paused"]

_lock = threading.Lock()
_depth = 0
_resume = False      # whether the collector was on when the outermost pause began


class paused:
  """Context manager: the cyclic collector is off inside (see the module docstring)."""
  __slots__ = ()

  def __enter__(self):
    global _depth, _resume
    with _lock:
      if _depth == 0:
        _resume = gc.isenabled()
        if _resume:
          gc.disable()
      _depth += 1
    return self

  def __exit__(self, *exc):
    global _depth
    with _lock:
      _depth -= 1
      if _depth == 0 and _resume:
        gc.enable()
    return False
