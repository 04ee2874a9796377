"""``jax_debug_nans`` / ``jax_debug_infs``: find the primitive that produced a NaN (or inf).

With ``config.update("jax_debug_nans", True)`` (``OURJAX_DEBUG_NANS=1``, or the thread-local
``ourjax.config.debug_nans()`` context) every floating output is checked, as in JAX:

* eagerly, each primitive's outputs (``EvalTrace``): a NaN raises ``FloatingPointError``
  ("invalid value (nan) encountered in log") naming the primitive and the user's line;
* a jitted call's outputs: when one holds a NaN, a warning is logged and the function's jaxpr
  is run again op by op (de-optimized, each primitive eagerly and checked), so that the error
  names the primitive that produced it and the line of the jitted function where it was
  traced; when the op-by-op run produces none (a NaN passed straight through, or one made by
  an optimization of the compiled code), the error says so.

As in JAX, a NaN in a primitive's output raises even when it came from a NaN input.
``jax_debug_infs`` does the same for infinities.  Complex outputs are checked on both parts;
integer and boolean outputs never.
"""
from __future__ import annotations

import logging
import threading

import numpy as np

from ourjax.config import config

log = logging.getLogger("ourjax")

__all__ = ["enabled", "check_outputs", "check_jit", "rerun_deoptimized"]


class _Where(threading.local):
  source = None     # the jaxpr equation's source line during a de-optimized run


_where = _Where()


def enabled() -> bool:
  """Whether NaNs (or infs) are being looked for in the calling thread."""
  ov = config._local.overrides
  if ov:
    return bool(config.jax_debug_nans or config.jax_debug_infs)
  v = config._values
  return bool(v["jax_debug_nans"] or v["jax_debug_infs"])


def _bad_kind(outs) -> str | None:
  """'nan' or 'inf' when an inexact value of ``outs`` holds one being looked for."""
  from ourjax.array import to_numpy
  nans, infs = config.jax_debug_nans, config.jax_debug_infs
  for o in outs:
    dt = getattr(o, "dtype", None)
    if dt is None:
      if not isinstance(o, (float, complex)):
        continue
    elif not np.issubdtype(np.dtype(dt), np.inexact):
      continue
    v = to_numpy(o)
    if v.dtype.kind not in "fc":        # (bfloat16 and the small floats: compare as float32)
      v = v.astype(np.float32)
    if nans and np.isnan(v).any():
      return "nan"
    if infs and np.isinf(v).any():
      return "inf"
  return None


def _error(kind: str, name: str, where: str | None) -> FloatingPointError:
  msg = f"invalid value ({kind}) encountered in {name}"
  if where:
    msg += f"\n  at {where}"
  return FloatingPointError(msg)


def check_outputs(prim, outs, args, params) -> None:
  """After ``prim`` ran eagerly on ``args``: raise if its outputs hold a NaN (or inf).  A call
  primitive (a jit inside eager code) is first re-run op by op, to name the primitive inside
  it."""
  from ourjax import core
  seq = outs if prim.multiple_results else (outs,)
  kind = _bad_kind(seq)
  if kind is None:
    return
  if prim in core.call_primitives and "jaxpr" in params:
    rerun_deoptimized(params["jaxpr"], args, params.get("name") or prim.name, kind)
  raise _error(kind, prim.name, _where.source or core.user_frame())


def check_jit(outs, closed, args, name: str) -> None:
  """After a jitted call of ``closed`` on ``args`` returned ``outs``: when they hold a NaN (or
  inf), run the function again op by op to raise the error at the primitive that made it."""
  kind = _bad_kind(outs)
  if kind is not None:
    rerun_deoptimized(closed, args, name, kind)


def rerun_deoptimized(closed, args, name: str, kind: str) -> None:
  """Evaluate ``closed`` on ``args`` one primitive at a time with the checks on; raise the
  first primitive's error, or, when none produces the value, an error saying so."""
  from ourjax import core
  log.warning("Invalid %s value encountered in the output of jit(%s). Calling the "
              "de-optimized version.", kind, name)
  jaxpr, env = closed.jaxpr, {}

  def read(x):
    return x.value() if isinstance(x, core.Literal) else env[x]
  for v, c in zip(jaxpr.constvars, closed.consts):
    env[v] = c
  for v, a in zip(jaxpr.invars, args):
    env[v] = a
  prev = _where.source
  try:
    with core.new_base_main():
      for eqn in jaxpr.eqns:
        _where.source = eqn.source_info
        outs = eqn.primitive.bind(*[read(x) for x in eqn.inputs], **eqn.params)
        if not eqn.primitive.multiple_results:
          outs = [outs]
        for v, o in zip(eqn.out_binders, outs):
          env[v] = o
  finally:
    _where.source = prev
  raise FloatingPointError(
      f"invalid value ({kind}) in the output of jit({name}). Because jax_debug_nans and/or "
      "jax_debug_infs is set, the de-optimized function (the function as if the jit were "
      "removed) was called to find the primitive that produced it, but it did not produce "
      "invalid values: they were passed in as inputs or literals, or an optimization of the "
      "compiled code produced them.")
