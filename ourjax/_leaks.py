"""Tracer leak checking for vmap under
``jax_check_tracer_leaks`` / ``checking_leaks()``: after a transformation's trace has ended, no
tracer of it may still be referenced.  A leaked tracer is reported as JAX reports it, with the
chain of references that keeps it alive::

    Leaked trace BatchTrace. Leaked tracer(s):

    VmapTracer(aval=int32[], batched=int32[3])
    This BatchTracer with object id 1403... was created on line:
      /path/prog.py:21 (main)
    <BatchTracer 1403...> is referred to by <function 1403...> (foo) closed-over variable x
    <function 1403...> is referred to by <list 1403...>[0]
    <list 1403...> is referred to by <dict 1403...>['hi']

(The line is where the transformation was called: ourjax records no per-tracer source line.)
Finding the tracers scans the garbage collector's objects, so it costs time only while leak
checking is on.  jit and make_jaxpr traces are checked by ``partial_eval._check_leaks``; jvp and
grad traces are not checked (nor are they in JAX 0.10.2).
"""
from __future__ import annotations

import gc
import types

from ourjax.errors import UnexpectedTracerError

_MAX_CHAIN = 8


def check(main, tracer_type, trace_name: str, where: str | None) -> None:
  """Raise ``UnexpectedTracerError`` if a ``tracer_type`` tracer of the finished ``main`` is
  still alive."""
  gc.collect()
  leaked = [o for o in gc.get_objects()
            if type(o) is tracer_type and getattr(o, "_trace", None) is not None
            and o._trace.main is main]
  if not leaked:
    return
  t = leaked[0]
  del leaked
  name = type(t).__name__
  lines = [f"Leaked trace {trace_name}. Leaked tracer(s):", "", _tracer_repr(t),
           f"This {name} with object id {id(t)} was created on line:",
           f"  {where or '(unknown)'}"]
  lines += _referrer_chain(t)
  raise UnexpectedTracerError("\n".join(lines))


def _tracer_repr(t) -> str:
  try:
    return repr(t)
  except Exception:   # noqa: BLE001  (a repr that fails must not hide the leak)
    return f"<{type(t).__name__}>"


def _short(o) -> str:
  return f"<{type(o).__name__} {id(o)}>"


def _referrer_chain(obj) -> list[str]:
  """One line per link from ``obj`` outwards: what refers to it, and how."""
  out: list[str] = []
  seen = {id(obj)}
  cur = obj
  for _ in range(_MAX_CHAIN):
    link = _find_referrer(cur, seen)
    if link is None:
      break
    holder, how = link
    out.append(f"{_short(cur)} is referred to by {how}")
    if holder is None:
      break
    seen.add(id(holder))
    cur = holder
  return out


def _find_referrer(obj, seen):
  """(the object holding ``obj``, a description) for the first meaningful referrer, or None.
  Frames and the checker's own containers are skipped; a closure cell is described through its
  function, an instance's ``__dict__`` through the instance, a module's through the module."""
  # closures, lists and dicts first: tuples are mostly the interpreter's own (arguments)
  refs = sorted(gc.get_referrers(obj), key=lambda r: isinstance(r, tuple))
  for r in refs:
    if id(r) in seen or isinstance(r, types.FrameType):
      continue
    if isinstance(r, types.CellType):     # a closure cell: held by a function's __closure__
      for clo in gc.get_referrers(r):
        if not isinstance(clo, tuple):
          continue
        for fn in gc.get_referrers(clo):
          if isinstance(fn, types.FunctionType) and fn.__closure__ is clo:
            var = fn.__code__.co_freevars[clo.index(r)]
            return fn, f"{_short(fn)} ({fn.__name__}) closed-over variable {var}"
      continue
    if isinstance(r, (list, tuple)):
      if r is not obj and any(x is obj for x in r):
        i = next(i for i, x in enumerate(r) if x is obj)
        return r, f"{_short(r)}[{i}]"
      continue
    if isinstance(r, dict):
      key = next((k for k, v in r.items() if v is obj), None)
      if key is None:
        continue
      for owner in gc.get_referrers(r):
        if isinstance(owner, types.ModuleType) and owner.__dict__ is r:
          return None, f"{owner.__name__}.{key}"
        if getattr(owner, "__dict__", None) is r and not isinstance(owner, type):
          return owner, f"{_short(owner)}.{key}"
      return r, f"{_short(r)}[{key!r}]"
  return None
