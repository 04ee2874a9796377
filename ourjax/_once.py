"""``build_once(table, key, build)``: the value of ``key`` in the dict ``table``, built by
``build()`` once however many threads ask for it at the same time.

The first thread to miss builds; the others wait for it and get its value, or its exception
(which is not stored: the next call builds again).  ``build`` may return ``(value, False)``
through ``Uncached(value)`` to hand the value to its own caller without storing it (a jit
trace that closed over another transformation's tracers); waiting threads then build their
own.  A thread that asks again for a key it is building itself (a recursive trace) builds
again rather than waiting for itself.
"""
from __future__ import annotations

import threading

__all__ = ["build_once", "Uncached"]

_lock = threading.Lock()
_pending: dict = {}       # (id(table), key) -> _Pending


class Uncached:
  """Wraps a value ``build`` returns that is not to be stored in the table."""
  __slots__ = ("value",)

  def __init__(self, value):
    self.value = value


class _Pending:
  __slots__ = ("done", "value", "error", "owner", "table")

  def __init__(self, table):
    self.done = threading.Event()
    self.value = self.error = None
    self.owner = threading.get_ident()
    self.table = table           # (keeps id(table) from being reused while pending)


def build_once(table: dict, key, build):
  missing = _missing
  while True:
    v = table.get(key, missing)
    if v is not missing:
      return v
    pk = (id(table), key)
    with _lock:
      v = table.get(key, missing)
      if v is not missing:
        return v
      p = _pending.get(pk)
      mine = p is None
      if mine:
        p = _pending[pk] = _Pending(table)
    if not mine:
      if p.owner == threading.get_ident():     # re-entered by the builder itself
        out = build()
        return out.value if isinstance(out, Uncached) else out
      p.done.wait()
      if p.error is not None:
        raise p.error
      if p.value is not missing:
        return p.value
      continue          # the builder's value was not for sharing: build our own
    try:
      out = build()
    except BaseException as e:
      p.error = e
      raise
    else:
      if isinstance(out, Uncached):
        p.value = missing
        return out.value
      with _lock:
        table[key] = out
      p.value = out
      return out
    finally:
      with _lock:
        del _pending[pk]
      p.done.set()


_missing = object()
