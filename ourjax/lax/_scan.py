"""``scan`` and ``map``: the ``scan_p`` primitive and its rules (how every control-flow
construct is transformed: ``control_flow.py``'s docstring), re-exported by ``control_flow``."""
from __future__ import annotations

import builtins
from typing import Callable

import numpy as np

from ourjax import core
from ourjax.config import config
from ourjax.core import ClosedJaxpr, Jaxpr, Literal, Primitive, get_aval
from ourjax.interpreters import ad, batching
from ourjax.interpreters import partial_eval as pe
from ourjax._pytree import keystr, tree_flatten, tree_flatten_with_path, tree_unflatten
from ourjax.lax import _loop_forwarding as _lf
from ourjax.lax import _trace_cache

_any = builtins.any
_all = builtins.all
_map = builtins.map
from ourjax.lax._control_flow_base import (_as_arrays, _batch_jaxpr, _carry_name, _check_carry,
    _check_operands, _fixpoint, _forwarded, _hoist, _jvp_jaxpr, _loop_result_types,
    _match_weak, _pe_jaxpr, _promote_weak_carries, _prune_invars, _slice_aval, _split,
    _stack_aval, _with_io)


# ------------------------------------------------------------------------------------------------
# scan / map
#
# scan_p(*consts, *init, *xs; jaxpr, length, reverse, num_consts, num_carry, linear, unroll):
# jaxpr maps (consts, carry, x slices) to (new carry, y slices); the ys are stacked along a new
# leading axis of size length.  With reverse=True the iterations run from the last slice to the
# first (ys keep their positions).


scan_p = Primitive("scan")
scan_p.multiple_results = True


def _scan_abstract_eval(*avals, jaxpr, length, reverse, num_consts, num_carry, linear, unroll):
  consts, carry, xs = _split(avals, [num_consts, num_carry])
  if len(linear) != len(avals):
    raise TypeError(f"scan: linear has {len(linear)} entries for {len(avals)} operands")
  for x in xs:
    if not x.shape or x.shape[0] != length:
      raise TypeError(f"scan: scanned operand of type {x.str_short()} does not have leading "
                      f"axis of size length={length}")
  _check_operands("scan", "jaxpr", jaxpr.in_avals,
                  consts + carry + [_slice_aval(x) for x in xs])
  carry_out, ys = _split(jaxpr.out_avals, [num_carry])
  if not _all(_map(core.typematch, carry_out, carry)):
    raise TypeError("scan: jaxpr carry output types differ from the carry input types")
  return carry_out + [_stack_aval(y, length) for y in ys]


scan_p.def_abstract_eval(_scan_abstract_eval)
# printed like JAX's scan, which has no ``linear`` parameter
core.pp_param_rules[scan_p] = lambda params: [(k, v) for k, v in sorted(params.items())
                                              if k != "linear"]


def _scan_impl(*args, **params):
  from ourjax import _eager_device
  dev = _eager_device.gpu_of(args, scan_p)
  if dev is not None:        # an operand on a GPU: the scan runs there, compiled
    return _eager_device.apply_custom(scan_p, args, params, dev, _scan_host)
  return _scan_host(*args, **params)


def _scan_host(*args, jaxpr, length, reverse, num_consts, num_carry, linear, unroll):
  """The scan evaluated on the host, its body's operations one by one per iteration."""
  from ourjax.array import Array, to_numpy
  consts, carry, xs = _split(args, [num_consts, num_carry])
  xs_np = [to_numpy(x) for x in xs]
  x_avals = jaxpr.in_avals[num_consts + num_carry:]
  y_avals = jaxpr.out_avals[num_carry:]
  ys = [np.zeros((length,) + a.shape, a.dtype) for a in y_avals]
  for k in range(length):
    i = length - 1 - k if reverse else k
    x_i = [Array._from_result(x[i], a) for x, a in zip(xs_np, x_avals)]
    outs = core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *consts, *carry, *x_i)
    carry = outs[:num_carry]
    for y, o in zip(ys, outs[num_carry:]):
      y[i] = to_numpy(o)
  carry_avals = jaxpr.out_avals[:num_carry]
  return _as_arrays(carry, carry_avals) + [Array._from_result(y, _stack_aval(a, length))
                                           for y, a in zip(ys, y_avals)]


scan_p.def_custom_impl(_scan_impl)


def _bind_scan(closed, consts, init, xs, *, length, reverse, unroll, linear=None):
  closed, extra = _hoist(closed)
  consts = extra + list(consts)
  operands = consts + list(init) + list(xs)
  if linear is None:
    linear = (False,) * len(operands)
  else:
    linear = (False,) * len(extra) + tuple(linear)
  return scan_p.bind(*operands, jaxpr=closed, length=length, reverse=reverse,
                     num_consts=len(consts), num_carry=len(init), linear=tuple(linear),
                     unroll=unroll)


def scan(f: Callable, init, xs=None, length=None, reverse: bool = False, unroll=1,
         _split_transpose: bool = False):
  """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs``; returns the final carry
  and the ``y``s stacked along a new leading axis.  Equivalent to::

    def scan(f, init, xs, length=None):
      carry, ys = init, []
      for x in (xs if xs is not None else [None] * length):
        carry, y = f(carry, x)
        ys.append(y)
      return carry, np.stack(ys)
  """
  if not callable(f):
    raise TypeError("lax.scan: f argument should be a callable.")
  xs_flat, xs_tree = tree_flatten(xs)
  xs_avals = [get_aval(x) for x in xs_flat]
  for x, a in zip(xs_flat, xs_avals):
    if not a.shape:
      raise ValueError(f"scan got value with no leading axis to scan over: {x}.")
  lengths = [a.shape[0] for a in xs_avals]
  if length is not None:
    length = core.concrete_or_error(
        int, length, "The `length` argument to `scan` expects a concrete `int` value.")
    if not _all(n == length for n in lengths):
      raise ValueError(f"scan got `length` argument of {length} which disagrees with leading "
                       f"axis sizes {lengths}.")
  else:
    if len(set(lengths)) > 1:
      paths = [keystr(p) for p, _ in tree_flatten_with_path(xs)[0]]
      sizes = ", ".join(f"xs{p} has leading axis size {n}" for p, n in zip(paths, lengths))
      raise ValueError(f"scan got values with different leading axis sizes: {sizes}.")
    if not lengths:
      raise ValueError("scan got no values to scan over and `length` not provided.")
    length = lengths[0]
  unroll = core.concrete_or_error(
      None, unroll, "The `unroll` argument to `scan` expects a concrete `int` or `bool` value.")
  if isinstance(unroll, bool):
    unroll = max(length, 1) if unroll else 1
  unroll = int(unroll)
  if unroll < 0:     # (0, like True, unrolls the whole loop)
    raise ValueError("`unroll` must be a `bool` or a non-negative `int`.")
  if config.jax_disable_jit:
    return _scan_in_python(f, init, xs_flat, xs_tree, length, reverse)
  x_avals = [_slice_aval(a) for a in xs_avals]
  init_flat, init_tree = tree_flatten(init)
  in_avals = [get_aval(x) for x in init_flat]
  n = len(init_flat)

  def trace(carry_avals):      # (cached by the function's identity: _trace_cache)
    hit, store = _trace_cache.lookup(
        "scan", (f,), (init_tree, xs_tree, tuple(carry_avals), tuple(x_avals)))
    if hit is not None:
      return hit
    cell = []

    def body(*args):
      carry = tree_unflatten(init_tree, args[:n])
      x = tree_unflatten(xs_tree, args[n:])
      out = f(carry, x)
      if not isinstance(out, (tuple, list)) or len(out) != 2:
        try:
          what = get_aval(out).str_short(short_dtypes=False)    # JAX names the type
        except TypeError:
          what = out
        raise TypeError(f"scan body output must be a pair, got {what}.")
      c_flat, c_tree = tree_flatten(out[0])
      y_flat, y_tree = tree_flatten(out[1])
      c_avals = [get_aval(c) for c in c_flat]
      for y in y_flat:
        get_aval(y)
      cell[:] = [c_tree, c_avals, y_tree]
      if len(c_flat) == n:
        c_flat = [_match_weak(c, a) for c, a in zip(c_flat, carry_avals)]
      return list(c_flat) + list(y_flat)

    closed = pe.trace_to_jaxpr(body, list(carry_avals) + x_avals, "scan_body")
    return store((closed, cell), (closed,))

  closed, cell = trace(in_avals)
  if cell[0] != init_tree:
    _check_carry("scan body", _carry_name(f), init_tree, in_avals, cell[0],
                 cell[1])
  init_flat, in_avals, changed = _promote_weak_carries(init_flat, in_avals, cell[1])
  if changed:
    closed, cell = trace(in_avals)
  _check_carry("scan body", _carry_name(f), init_tree, in_avals, cell[0],
               cell[1])
  # carries the body returns unchanged are loop constants (see _loop_forwarding)
  move = _lf.forwarded_carries(closed, n)
  if _any(move):
    closed = _lf.carries_to_consts(closed, move)
  fixed, carried = _lf.split(init_flat, move)
  # ys that are an x as it came in are that xs array itself, not a loop output (as in JAX)
  closed, y_from_x = _lf.forward_xs_to_ys(closed, len(carried), len(xs_flat))
  outs = _bind_scan(closed, fixed, carried, xs_flat, length=length, reverse=bool(reverse),
                    unroll=unroll)
  if _any(k is not None for k in y_from_x):
    rest = iter(outs[len(carried):])
    outs = list(outs[:len(carried)]) + [xs_flat[k] if k is not None else next(rest)
                                        for k in y_from_x]
  n_left = len(carried)
  kept = [_forwarded(x, a) for x, a, m in zip(init_flat, in_avals, move) if m]
  outs = _lf.merge(move, kept, outs[:n_left]) + list(outs[n_left:])
  carry_out, ys = _loop_result_types(outs[:n], in_avals, cell[1]), outs[n:]
  return tree_unflatten(init_tree, carry_out), tree_unflatten(cell[2], ys)


def _scan_in_python(f, init, xs_flat, xs_tree, length, reverse):
  """scan with jit disabled, as JAX's: the body runs in Python on each slice, the ys stacked;
  a zero-length scan is an error (the type of its ys is unknown without tracing)."""
  from ourjax.lax.slicing import index_in_dim
  from ourjax.lax.structural import concatenate, expand_dims
  from ourjax._pytree import tree_map
  if length == 0:
    raise ValueError("zero-length scan is not supported in disable_jit() mode because the "
                     "output type is unknown.")
  carry, ys = init, []
  order = range(length - 1, -1, -1) if reverse else range(length)
  for i in order:
    x = tree_unflatten(xs_tree, [index_in_dim(x, i, keepdims=False) for x in xs_flat])
    carry, y = f(carry, x)
    ys.append(y)
  if reverse:
    ys.reverse()
  stacked = tree_map(lambda *y: concatenate([expand_dims(v, (0,)) for v in y], 0), *ys)
  return carry, stacked


def map(f: Callable, xs, *, batch_size: int | None = None):  # noqa: A001 (lax.map, as in JAX)
  """``f`` applied to each slice of ``xs`` along its leading axis, stacked; with
  ``batch_size``, slices are processed ``batch_size`` at a time with ``vmap``."""
  if batch_size is None:
    _, ys = scan(lambda _, x: ((), f(x)), (), xs)
    return ys
  from ourjax import api
  from ourjax.lax.slicing import slice_in_dim
  from ourjax.lax.structural import concatenate, reshape
  from ourjax._pytree import tree_map
  batch_size = int(batch_size)
  if batch_size < 1:
    raise ValueError(f"lax.map: batch_size must be a positive integer, got {batch_size}")
  leaves = tree_flatten(xs)[0]
  if not leaves:
    raise ValueError("lax.map got no values to map over")
  n = get_aval(leaves[0]).shape[0]
  nb, rem = divmod(n, batch_size)
  vf = api.vmap(f)
  parts = []
  if nb:
    main = tree_map(lambda x: reshape(slice_in_dim(x, 0, nb * batch_size),
                                      (nb, batch_size) + get_aval(x).shape[1:]), xs)
    _, ys = scan(lambda _, x: ((), vf(x)), (), main)
    parts.append(tree_map(lambda y: reshape(y, (nb * batch_size,) + get_aval(y).shape[2:]),
                          ys))
  if rem:
    parts.append(vf(tree_map(lambda x: slice_in_dim(x, nb * batch_size, n), xs)))
  if len(parts) == 1:
    return parts[0]
  return tree_map(lambda a, b: concatenate([a, b], 0), *parts)


def _scan_jvp(primals, tangents, *, jaxpr, length, reverse, num_consts, num_carry, linear,
              unroll):
  nc, nk = num_consts, num_carry
  nx = len(primals) - nc - nk
  ny = len(jaxpr.out_avals) - nk
  nz = [type(t) is not ad.Zero for t in tangents]
  const_nz, carry_nz, xs_nz = _split(nz, [nc, nk])
  carry_nz = _fixpoint(carry_nz, lambda c: _jvp_jaxpr(jaxpr, const_nz + c + xs_nz,
                                                      c + [False] * ny)[1][:nk])
  jvp, out_nz = _jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz, carry_nz + [False] * ny)
  ys_nz = out_nz[nk:]
  j = jvp.jaxpr
  p_c, p_k, p_x, t_c, t_k, t_x = _split(j.invars, [nc, nk, nx, sum(const_nz), sum(carry_nz)])
  o_k, o_y, ot_k, ot_y = _split(j.outvars, [nk, ny, sum(carry_nz)])
  jvp = ClosedJaxpr(Jaxpr(j.constvars, p_c + t_c + p_k + t_k + p_x + t_x, j.eqns,
                          o_k + ot_k + o_y + ot_y), jvp.consts)
  consts, init, xs = _split(primals, [nc, nk])
  c_dot, k_dot, x_dot = _split(tangents, [nc, nk])
  c_dot = [t for t in c_dot if type(t) is not ad.Zero]
  k_dot = [ad.instantiate_zeros(t) for t, z in zip(k_dot, carry_nz) if z]
  x_dot = [t for t in x_dot if type(t) is not ad.Zero]
  lc, lk, lx = _split(linear, [nc, nk])
  new_linear = (lc + [True] * len(c_dot) + lk + [True] * len(k_dot) + lx
                + [True] * len(x_dot))
  outs = _bind_scan(jvp, consts + c_dot, init + k_dot, xs + x_dot, length=length,
                    reverse=reverse, unroll=unroll, linear=new_linear)
  carry, carry_dot, ys, ys_dot = _split(outs, [nk, len(k_dot), ny])
  carry_dot, ys_dot = iter(carry_dot), iter(ys_dot)
  t_out = ([next(carry_dot) if z else ad.Zero.from_primal_value(p)
            for p, z in zip(carry, carry_nz)]
           + [next(ys_dot) if z else ad.Zero.from_primal_value(p) for p, z in zip(ys, ys_nz)])
  return carry + ys, t_out


ad.jvp_rules[scan_p] = _scan_jvp


def _invariant_vars(jaxpr: Jaxpr, invariant_invars) -> set:
  """Variables of ``jaxpr`` that depend only on the given inputs (and constants)."""
  inv = set(jaxpr.constvars) | set(invariant_invars)
  for eqn in jaxpr.eqns:
    if _all(isinstance(x, Literal) or x in inv for x in eqn.inputs):
      inv.update(eqn.out_binders)
  return inv


def _scan_partial_eval(trace, tracers, *, jaxpr, length, reverse, num_consts, num_carry,
                       linear, unroll):
  nc, nk = num_consts, num_carry
  ny = len(jaxpr.out_avals) - nk
  unknowns = [not t.pval.is_known for t in tracers]
  const_uk, carry_uk, xs_uk = _split(unknowns, [nc, nk])
  carry_uk = _fixpoint(carry_uk, lambda c: _pe_jaxpr(jaxpr, const_uk + c + xs_uk,
                                                     c + [False] * ny)[2][:nk])
  jk, ju, out_uk, nres = _pe_jaxpr(jaxpr, const_uk + carry_uk + xs_uk, carry_uk + [False] * ny)
  ys_uk = out_uk[nk:]
  consts, init, xs = _split(tracers, [nc, nk])
  known = lambda ts, uks: [t.pval.const for t, u in zip(ts, uks) if not u]
  k_consts = list(jk.consts) + known(consts, const_uk)
  k_init, k_xs = known(init, carry_uk), known(xs, xs_uk)
  jk, _ = _hoist(jk)
  j = jk.jaxpr
  nkc = len(k_consts)
  # residuals that depend only on loop constants are computed once, outside the loop
  inv = _invariant_vars(j, j.invars[:nkc])
  n_known_out = len(j.outvars) - nres
  res_vars = j.outvars[n_known_out:]
  res_inv = [isinstance(v, Literal) or v in inv for v in res_vars]
  if _any(res_inv):
    hoisted, _ = pe.dce_jaxpr(Jaxpr([], j.invars[:nkc], j.eqns,
                                    [v for v, i in zip(res_vars, res_inv) if i]))
    inv_vals = core.eval_jaxpr(hoisted, [], *k_consts)
  else:
    inv_vals = []
  # residuals that are slices of known xs are read from those xs, not stacked again
  nkk = nk - sum(carry_uk)
  x_pos = {v: k for k, v in enumerate(j.invars[nkc + nkk:])}
  res_x = [None if i else x_pos.get(v) for v, i in zip(res_vars, res_inv)]
  stacked = [v for v, i, x in zip(res_vars, res_inv, res_x) if not i and x is None]
  loop_j, _ = pe.dce_jaxpr(Jaxpr([], j.invars, j.eqns, j.outvars[:n_known_out] + stacked))
  k_outs = _bind_scan(ClosedJaxpr(loop_j, []), k_consts, k_init, k_xs, length=length,
                      reverse=reverse, unroll=unroll)
  k_carry, k_ys, stacked_vals = _split(k_outs, [nkk, ny - sum(ys_uk)])
  stacked_vals = iter(stacked_vals)
  var_res = [k_xs[x] if x is not None else next(stacked_vals)
             for i, x in zip(res_inv, res_x) if not i]
  # the staged scan: consts = invariant residuals + unknown consts; carry = unknown carries;
  # xs = unknown xs + stacked residuals
  res_in, u_c, u_k, u_x = _split(ju.invars, [nres, sum(const_uk), sum(carry_uk)])
  res_in_inv = [v for v, i in zip(res_in, res_inv) if i]
  res_in_var = [v for v, i in zip(res_in, res_inv) if not i]
  staged = _with_io(ju, res_in_inv + u_c + u_k + u_x + res_in_var)
  lc, lk, lx = _split(linear, [nc, nk])
  new_linear = ([False] * len(res_in_inv) + [l for l, u in zip(lc, const_uk) if u]
                + [l for l, u in zip(lk, carry_uk) if u] + [l for l, u in zip(lx, xs_uk) if u]
                + [False] * len(res_in_var))
  unk = lambda ts, uks: [t for t, u in zip(ts, uks) if u]
  in_tracers = ([trace.instantiate_const(trace.pure(v)) for v in inv_vals]
                + unk(consts, const_uk) + [trace.instantiate_const(t) for t in unk(init, carry_uk)]
                + unk(xs, xs_uk) + [trace.instantiate_const(trace.pure(r)) for r in var_res])
  if _any(out_uk):
    u_outs = trace.default_process_primitive(
        scan_p, in_tracers,
        dict(jaxpr=staged, length=length, reverse=reverse,
             num_consts=len(res_in_inv) + sum(const_uk), num_carry=sum(carry_uk),
             linear=tuple(new_linear), unroll=unroll))
  else:
    u_outs = []
  k_it, u_it = iter(k_carry + k_ys), iter(u_outs)
  return [next(u_it) if u else trace.pure(next(k_it)) for u in carry_uk + ys_uk]


pe.partial_eval_rules[scan_p] = _scan_partial_eval


def _scan_transpose(cts, *args, jaxpr, length, reverse, num_consts, num_carry, linear,
                    unroll):
  nc, nk = num_consts, num_carry
  consts, init, xs = _split(args, [nc, nk])
  undef = ad.is_undefined_primal
  const_lin = [undef(x) for x in consts]
  xs_lin = [undef(x) for x in xs]
  res_c = [x for x in consts if not undef(x)]
  res_x = [x for x in xs if not undef(x)]
  in_avals = jaxpr.in_avals
  c_avals, k_avals, x_avals = _split(in_avals, [nc, nk])
  y_avals = jaxpr.out_avals[nk:]
  ct_carry, ct_ys = cts[:nk], cts[nk:]
  ct_carry = [ad.instantiate_zeros(c) if type(c) is ad.Zero else c for c in ct_carry]
  ys_nz = [type(c) is not ad.Zero for c in ct_ys]
  ct_ys = [c for c in ct_ys if type(c) is not ad.Zero]
  lin_c_avals = [ad.tangent_aval(a) for a, l in zip(c_avals, const_lin) if l]
  acc0 = [ad.zeros_like_aval(a) for a in lin_c_avals]
  n_rc, n_lc = len(res_c), len(lin_c_avals)

  def bwd(*args):
    rc, acc, ctk, cty, rx = _split(args, [n_rc, n_lc, nk, len(ct_ys)])
    rc, rx, cty = iter(rc), iter(rx), iter(cty)
    full = ([ad.UndefinedPrimal(a) if l else next(rc) for a, l in zip(c_avals, const_lin)]
            + [ad.UndefinedPrimal(a) for a in k_avals]
            + [ad.UndefinedPrimal(a) if l else next(rx) for a, l in zip(x_avals, xs_lin)])
    full_cts = list(ctk) + [next(cty) if z else ad.Zero(ad.tangent_aval(a))
                            for a, z in zip(y_avals, ys_nz)]
    cts_in = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, full, full_cts)
    ct_c, ct_k, ct_x = _split(cts_in, [n_lc, nk])
    new_acc = [ad.add_tangents(a, c) for a, c in zip(acc, ct_c)]
    return (list(new_acc) + [ad.instantiate_zeros(c) for c in ct_k]
            + [ad.instantiate_zeros(c) for c in ct_x])

  avals = ([get_aval(r) for r in res_c] + lin_c_avals + [get_aval(c) for c in ct_carry]
           + [_slice_aval(get_aval(c)) for c in ct_ys] + [_slice_aval(get_aval(r)) for r in res_x])
  bwd_closed = pe.trace_to_jaxpr(bwd, avals, "scan_transpose")
  outs = _bind_scan(bwd_closed, res_c, acc0 + ct_carry, ct_ys + res_x, length=length,
                    reverse=not reverse, unroll=unroll,
                    linear=[False] * n_rc + [True] * (n_lc + nk + len(ct_ys))
                    + [False] * len(res_x))
  ct_c, ct_k, ct_x = _split(outs, [n_lc, nk])
  ct_c, ct_x = iter(ct_c), iter(ct_x)
  return ([next(ct_c) if l else None for l in const_lin]
          + [c if undef(x) else None for c, x in zip(ct_k, init)]
          + [next(ct_x) if l else None for l in xs_lin])


ad.transpose_rules[scan_p] = _scan_transpose


def _scan_batch(vals, dims, *, axis_size, jaxpr, length, reverse, num_consts, num_carry,
                linear, unroll):
  nc, nk = num_consts, num_carry
  ny = len(jaxpr.out_avals) - nk
  bat = [d is not None for d in dims]
  const_b, carry_b, xs_b = _split(bat, [nc, nk])
  carry_b = _fixpoint(carry_b, lambda c: _batch_jaxpr(jaxpr, axis_size, const_b + c + xs_b,
                                                      c + [False] * ny)[1][:nk])
  body, out_b = _batch_jaxpr(jaxpr, axis_size, const_b + carry_b + xs_b, carry_b + [False] * ny)
  consts, init, xs = _split(vals, [nc, nk])
  c_dims, k_dims, x_dims = _split(dims, [nc, nk])
  consts = [batching.moveaxis(x, d, 0) if d is not None else x for x, d in zip(consts, c_dims)]
  init = [batching.bdim_at_front(x, d, axis_size) if b else x
          for x, d, b in zip(init, k_dims, carry_b)]
  # the scanned axis stays first; the batch axis goes second so that slices are batched at 0
  xs = [batching.moveaxis(x, d, 1) if d is not None else x for x, d in zip(xs, x_dims)]
  outs = _bind_scan(body, consts, init, xs, length=length, reverse=reverse, unroll=unroll,
                    linear=linear)
  return outs, [0 if b else None for b in carry_b] + [1 if b else None for b in out_b[nk:]]


batching.register_rule_with_axis_size(scan_p, _scan_batch)


def _scan_dce(eqn, used_outputs):
  p = eqn.params
  jaxpr, nc, nk = p["jaxpr"].jaxpr, p["num_consts"], p["num_carry"]
  used_carry, used_ys = used_outputs[:nk], list(used_outputs[nk:])
  used_carry = _fixpoint(used_carry,
                         lambda u: pe.dce_jaxpr(jaxpr, u + used_ys)[1][nc:nc + nk])
  new_j, used_in = pe.dce_jaxpr(jaxpr, used_carry + used_ys)
  used_c, _, used_x = _split(used_in, [nc, nk])
  used_inputs = used_c + used_carry + used_x
  new_eqn = eqn._replace(
      inputs=[x for x, u in zip(eqn.inputs, used_inputs) if u],
      out_binders=[v for v, u in zip(eqn.out_binders, used_carry + used_ys) if u],
      params=dict(p, jaxpr=_prune_invars(new_j, used_inputs), num_consts=sum(used_c),
                  num_carry=sum(used_carry),
                  linear=tuple(l for l, u in zip(p["linear"], used_inputs) if u)))
  return used_inputs, new_eqn


pe.dce_rules[scan_p] = _scan_dce
