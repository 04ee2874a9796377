"""``jax_explain_cache_misses``: a warning for each jit trace-cache miss saying why, in JAX's
words (``TRACING CACHE MISS at prog.py:12 (main):`` then the reason), so that a function traced
again and again can be found and fixed::

    TRACING CACHE MISS at prog.py:7 (<module>):
      for f defined at prog.py:4
      all previously seen cache keys differ. For the closest previous key:
      different input types:
      * at y, now i32[] and before f32[]

Reasons: a function never seen (and, when another function was defined on the same line, the
hint that it may be re-defined in a loop), a different argument structure, different input
types (shape, dtype or weak type, per argument path), other static arguments, or a different
tracing context (x64, matmul precision, dtype promotion, named axes, user contexts).
Functions defined inside ourjax itself are not reported.
"""
from __future__ import annotations

import inspect
import logging
import os
import threading
import weakref

log = logging.getLogger("ourjax")

_OURJAX_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_seen_lines: dict = {}        # (file, line) -> weakref to the last function defined there
_lock = threading.Lock()


def _code(fun):
  try:
    return getattr(inspect.unwrap(fun), "__code__", None)
  except ValueError:           # (a wrapper cycle)
    return None


def _type_str(a) -> str:
  return a.str_short()


def explain(fun, fname: str, key, cache: dict, names, where: str | None) -> None:
  """Log why ``key`` missed ``cache`` (the jit of ``fun``), unless ``fun`` is ourjax's own."""
  code = _code(fun)
  if code is not None and os.path.abspath(code.co_filename).startswith(_OURJAX_DIR):
    return
  defined = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "(unknown)"
  head = f"TRACING CACHE MISS at {where or '(unknown)'}:"
  if not cache:
    lines = [head, "  never seen function:", f"    {fname} id={id(fun)} defined at {defined}"]
    if code is not None:
      loc = (code.co_filename, code.co_firstlineno)
      try:
        ref = weakref.ref(fun)
      except TypeError:
        ref = (lambda f: lambda: f)(None)
      with _lock:
        prev = _seen_lines.get(loc)
        _seen_lines[loc] = ref
      if prev is not None and prev() is not fun:   # (the earlier one died, or is another)
        lines += ["  but seen another function defined on the same line; maybe the function is",
                  "  being re-defined repeatedly, preventing caching?"]
    log.warning("\n".join(lines))
    return
  best = None
  for old in list(cache):
    diffs = _differences(key, old, names)
    score = sum(w for w, _ in diffs)
    if best is None or score < best[0]:
      best = (score, diffs)
  lines = [head, f"  for {fname} defined at {defined}",
           "  all previously seen cache keys differ. For the closest previous key:"]
  groups: dict = {}
  for _, (group, text) in best[1]:
    groups.setdefault(group, []).append(text)
  for group, texts in groups.items():
    lines.append(f"  {group}")
    lines += [f"  * {t}" for t in texts if t]
  if not best[1]:
    lines.append("  explanation unavailable! (an equal key was evicted)")
  log.warning("\n".join(lines))


def _differences(key, old, names) -> list:
  """[(weight, (group heading, detail))] between two jit cache keys (``JitWrapped._signature``'s
  layout); the closest key has the least total weight."""
  in_tree, avals, static_key, backend, x64, prec, axes, promo, user, tflags = key
  o_tree, o_avals, o_static, o_backend, o_x64, o_prec, o_axes, o_promo, o_user, o_tflags = old
  out = []
  if in_tree != o_tree:
    out.append((1000, ("different input pytree:", f"now {in_tree} and before {o_tree}")))
  else:
    for n, a, b in zip(names, avals, o_avals):
      if a == b:
        continue
      if a.shape == b.shape and a.dtype == b.dtype:
        out.append((1, ("different input types:",
                        f"at {n}, now {_type_str(a)}{{weak_type={a.weak_type}}} and before "
                        f"{_type_str(b)}{{weak_type={b.weak_type}}} (see "
                        "https://docs.jax.dev/en/latest/type_promotion.html#weak-types)")))
      else:
        out.append((3, ("different input types:",
                        f"at {n}, now {_type_str(a)} and before {_type_str(b)}")))
  try:
    static_differs = bool(static_key != o_static)
  except Exception:    # noqa: BLE001  (a static argument whose __eq__ raises)
    static_differs = True
  if static_differs:
    out.append((3, ("different value of static args:", f"now {static_key} and before {o_static}")))
  ctx = "Tracing context doesn't match, e.g. due to config or context manager."
  from ourjax._jit import TRACE_FLAGS
  extra = tuple(zip(TRACE_FLAGS, tflags, o_tflags))
  for flag, now, before in extra + (("jax_enable_x64", x64, o_x64),
                            ("jax_default_matmul_precision", prec, o_prec),
                            ("jax_numpy_dtype_promotion", promo, o_promo),
                            ("named axes in scope", axes, o_axes),
                            ("user contexts (make_user_context)", user, o_user),
                            ("backend", backend, o_backend)):
    if now != before:
      out.append((2, (ctx, f"{flag} differs: now {now} and before {before}")))
  return out
