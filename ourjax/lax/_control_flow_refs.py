"""References (``ourjax.ref``) threaded through the loops and conditionals: a reference of an
enclosing trace that a body touches becomes an extra carry (scan, while_loop: fori_loop is one
of them) or an extra operand and result (cond, switch), written back afterwards.  A call whose
bodies touch no outer reference runs as it is (one extra frame)."""
from __future__ import annotations

import functools

from ourjax import ref as _ref


def _threading(api_fun, with_refs):
  """``api_fun``, and when its traces touch references of an enclosing frame,
  ``with_refs(refs, *args, **kwargs)`` instead."""
  @functools.wraps(api_fun)
  def wrapper(*args, **kwargs):
    depth, added = _ref.enter_handler()
    try:
      return api_fun(*args, **kwargs)
    except _ref._RefsNeeded as e:
      if e.depth != depth:
        raise
      first = e.ref
    finally:
      _ref.exit_handler(depth, added)
    return _ref.threaded(lambda refs: with_refs(api_fun, refs, *args, **kwargs), [first])
  return wrapper


def _in_body(refs, fun):
  """``fun`` run with ``refs`` bound to the values it is given first; returns its result and
  their new values."""
  def body(rv, *args):
    with _ref.bound(refs, rv) as now:
      out = fun(*args)
      return out, now()
  return body


def _scan(scan_fun, refs, f, init, xs=None, length=None, reverse=False, unroll=1,
          _split_transpose=False):
  g = _in_body(refs, f)

  def body(carry, x):
    (c, y), rv = g(carry[1], carry[0], x)
    return (c, rv), y
  (c, rv), ys = scan_fun(body, (init, _ref.read_all(refs)), xs, length, reverse, unroll,
                         _split_transpose)
  _ref.write_all(refs, rv)
  return c, ys


def _while_loop(while_fun, refs, cond_fun, body_fun, init_val):
  c, b = _in_body(refs, cond_fun), _in_body(refs, body_fun)
  v, rv = while_fun(lambda carry: c(carry[1], carry[0])[0],
                    lambda carry: b(carry[1], carry[0]),
                    (init_val, _ref.read_all(refs)))
  _ref.write_all(refs, rv)
  return v


def _cond(cond_fun, refs, pred, true_fun, false_fun, *operands, **kw):
  out, rv = cond_fun(pred, _in_body(refs, true_fun), _in_body(refs, false_fun),
                     _ref.read_all(refs), *operands, *kw.values())
  _ref.write_all(refs, rv)
  return out


def _switch(switch_fun, refs, index, branches, *operands, **kw):
  out, rv = switch_fun(index, [_in_body(refs, b) for b in branches], _ref.read_all(refs),
                       *operands, *kw.values())
  _ref.write_all(refs, rv)
  return out


def scan(scan_fun):
  return _threading(scan_fun, _scan)


def while_loop(while_fun):
  return _threading(while_fun, _while_loop)


def cond(cond_fun):
  return _threading(cond_fun, _cond)


def switch(switch_fun):
  return _threading(switch_fun, _switch)
