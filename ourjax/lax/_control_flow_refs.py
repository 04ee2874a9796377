"""References (``ourjax.ref``) threaded through the loops and conditionals: a reference of an
enclosing trace that a body touches becomes an extra carry (scan, while_loop: fori_loop is one
of them) or an extra operand and result (cond, switch), written back afterwards."""
from __future__ import annotations

import functools

from ourjax import ref as _ref


def _in_body(refs, fun):
  """``fun`` run with ``refs`` bound to the values it is given first; returns its result and
  their new values."""
  def body(rv, *args):
    with _ref.bound(refs, rv) as now:
      out = fun(*args)
      return out, now()
  return body


def scan(scan_fun):
  @functools.wraps(scan_fun)
  def wrapper(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False):
    def run(refs):
      if not refs:
        return scan_fun(f, init, xs, length, reverse, unroll, _split_transpose)
      g = _in_body(refs, f)

      def body(carry, x):
        (c, y), rv = g(carry[1], carry[0], x)
        return (c, rv), y
      (c, rv), ys = scan_fun(body, (init, _ref.read_all(refs)), xs, length, reverse, unroll,
                             _split_transpose)
      _ref.write_all(refs, rv)
      return c, ys
    return _ref.threaded(run)
  return wrapper


def while_loop(while_fun):
  @functools.wraps(while_fun)
  def wrapper(cond_fun, body_fun, init_val):
    def run(refs):
      if not refs:
        return while_fun(cond_fun, body_fun, init_val)
      c, b = _in_body(refs, cond_fun), _in_body(refs, body_fun)
      v, rv = while_fun(lambda carry: c(carry[1], carry[0])[0],
                        lambda carry: b(carry[1], carry[0]),
                        (init_val, _ref.read_all(refs)))
      _ref.write_all(refs, rv)
      return v
    return _ref.threaded(run)
  return wrapper


def cond(cond_fun):
  @functools.wraps(cond_fun)
  def wrapper(pred, true_fun, false_fun, *operands, **kw):
    def run(refs):
      if not refs:
        return cond_fun(pred, true_fun, false_fun, *operands, **kw)
      ops = operands + tuple(kw.values())
      out, rv = cond_fun(pred, _in_body(refs, true_fun), _in_body(refs, false_fun),
                         _ref.read_all(refs), *ops)
      _ref.write_all(refs, rv)
      return out
    return _ref.threaded(run)
  return wrapper


def switch(switch_fun):
  @functools.wraps(switch_fun)
  def wrapper(index, branches, *operands, **kw):
    def run(refs):
      if not refs:
        return switch_fun(index, branches, *operands, **kw)
      ops = operands + tuple(kw.values())
      out, rv = switch_fun(index, [_in_body(refs, b) for b in branches], _ref.read_all(refs),
                           *ops)
      _ref.write_all(refs, rv)
      return out
    return _ref.threaded(run)
  return wrapper
