"""The scatter primitives of ``lax``: scatter, scatter_add, scatter_sub, scatter_mul,
scatter_min and scatter_max, each with its rules (shape/dtype, NumPy implementation, JVP,
transpose, batching) and its lowering to one HLO ``scatter``.  The dimension numbers, the
modes and gather, which the rules use, are ``slicing.py``'s (which re-exports these names);
its docstring gives the conventions."""
from __future__ import annotations

import numpy as np

from ourjax import dtypes
from ourjax.backends import reference_ops as rops
from ourjax.core import get_aval
from ourjax.interpreters import ad, batching
from ourjax.interpreters.ad import Zero
from ourjax.lax._utils import _any, _num, check_dtypes, standard_primitive
from ourjax.lax import elementwise as _ew
from ourjax.lax import structural as _st
from ourjax.lax.slicing import (  # (defined above slicing's import of this module)
    GatherScatterMode, ScatterDimensionNumbers, _canon_scatter_dnums, _check_batching_dims,
    _check_disjoint, _check_in_range, _check_index_operand, _check_operand_batching_dims,
    _check_sorted, _check_unique, _gather_dnums_of_scatter, _gather_mode_of_scatter, _ref,
    _scatter_slice_sizes, _shape_of, _shift, _weak0, gather)


# ------------------------------------------------------------------------------------------------
# scatter, scatter_add, scatter_sub, scatter_mul, scatter_min, scatter_max


def _scatter_shape(x, idx, u, *, dimension_numbers, indices_are_sorted, unique_indices, mode):
  dn = dimension_numbers
  _check_index_operand(idx, "scatter")
  expected = idx.ndim - 1 + len(dn.update_window_dims)
  if u.ndim != expected:
    raise TypeError(f"Updates tensor must be of rank {expected}; got {u.ndim}.")
  _check_sorted(dn.update_window_dims, "scatter", "update_window_dims")
  _check_unique(dn.update_window_dims, "scatter", "update_window_dims")
  _check_in_range(dn.update_window_dims, u.ndim, "scatter", "update_window_dims")
  _check_sorted(dn.inserted_window_dims, "scatter", "inserted_window_dims")
  _check_unique(dn.inserted_window_dims, "scatter", "inserted_window_dims")
  _check_in_range(dn.inserted_window_dims, x.ndim, "scatter", "inserted_window_dims")
  _check_operand_batching_dims(x, dn.operand_batching_dims, "scatter")
  _check_disjoint(dn.inserted_window_dims, dn.operand_batching_dims, "scatter",
                  "inserted_window_dims", "operand_batching_dims")
  _check_disjoint(dn.scatter_dims_to_operand_dims, dn.operand_batching_dims, "scatter",
                  "scatter_dims_to_operand_dims", "operand_batching_dims")
  _check_batching_dims(x, idx, dn.operand_batching_dims, dn.scatter_indices_batching_dims,
                       "scatter", "scatter_indices_batching_dims")
  window = len(dn.update_window_dims) + len(dn.inserted_window_dims) + \
      len(dn.operand_batching_dims)
  if x.ndim != window:
    raise TypeError(f"Scatter op has window of size {window}; doesn't match operand of rank "
                    f"{x.ndim}.")
  if len(dn.scatter_dims_to_operand_dims) != idx.shape[-1]:
    raise TypeError(f"Scatter op has {len(dn.scatter_dims_to_operand_dims)} elements in "
                    f"scatter_dims_to_operand_dims and the bound of dimension "
                    f"index_vector_dim={idx.ndim - 1} of indices is {idx.shape[-1]}. These two "
                    f"numbers must be equal")
  for i, d in enumerate(dn.scatter_dims_to_operand_dims):
    if not 0 <= d < x.ndim:
      raise TypeError(f"Invalid scatter_dims_to_operand_dims mapping; domain is [0, {x.ndim}), "
                      f"got: {i}->{d}.")
  _check_unique(dn.scatter_dims_to_operand_dims, "scatter", "scatter_dims_to_operand_dims")
  window_bounds = [n for i, n in enumerate(x.shape)
                   if i not in dn.inserted_window_dims and i not in dn.operand_batching_dims]
  for bound, d in zip(window_bounds, dn.update_window_dims):
    if u.shape[d] > bound:
      raise TypeError(f"Bounds of the window dimensions of updates must not exceed the bounds "
                      f"of the corresponding dimensions of operand. For dimension {d}, updates "
                      f"bound is {u.shape[d]}, operand bound is {bound}.")
  scatter_dims = [d for d in range(u.ndim) if d not in dn.update_window_dims]
  for d, n in zip(scatter_dims, idx.shape[:-1]):
    if u.shape[d] != n:
      raise TypeError(f"Bounds of the scatter dimensions of updates must be the same as the "
                      f"bounds of the corresponding dimensions of scatter indices. For scatter "
                      f"dimension {d}, updates bound is {u.shape[d]}, indices bound is {n}.")
  return x.shape


def _scatter_dtype(x, idx, u, **_):
  _check_index_operand(idx, "scatter")
  if x.dtype != u.dtype:
    raise TypeError(f"scatter requires arguments to have the same dtypes, got {x.dtype.name}, "
                    f"{u.dtype.name}.")
  return x.dtype


def _scatter_primitive(name, combine, kinds=_any):
  def dtype_rule(x, idx, u, **params):
    dt = _scatter_dtype(x, idx, u, **params)
    check_dtypes(name, [x], kinds)
    return dt

  p = standard_primitive(name, _scatter_shape, dtype_rule, _weak0)

  def impl(x, idx, u, *, dimension_numbers, indices_are_sorted, unique_indices, mode):
    dn = dimension_numbers
    return _ref().scatter(
        x, idx, u, update_window_dims=dn.update_window_dims,
        inserted_window_dims=dn.inserted_window_dims,
        scatter_dims_to_operand_dims=dn.scatter_dims_to_operand_dims,
        operand_batching_dims=dn.operand_batching_dims,
        scatter_indices_batching_dims=dn.scatter_indices_batching_dims, combine=combine,
        mode="clip" if mode == GatherScatterMode.CLIP else "drop")
  p.def_impl(impl)
  batching.batch_rules[p] = lambda vals, dims, **params: _scatter_batch(p, vals, dims, **params)
  return p


def _make_scatter_wrapper(get_p, doc):
  def wrapper(operand, scatter_indices, updates, dimension_numbers, *,
              indices_are_sorted: bool = False, unique_indices: bool = False, mode=None):
    return get_p().bind(operand, scatter_indices, updates,
                        dimension_numbers=_canon_scatter_dnums(dimension_numbers),
                        indices_are_sorted=bool(indices_are_sorted),
                        unique_indices=bool(unique_indices),
                        mode=GatherScatterMode.from_any(mode))
  wrapper.__doc__ = doc
  return wrapper


scatter = _make_scatter_wrapper(lambda: scatter_p,
                                "Scatter: ``updates`` replace the operand's windows.")
scatter_add = _make_scatter_wrapper(lambda: scatter_add_p,
                                    "Scatter-add: ``updates`` are added into the operand.")
scatter_sub = _make_scatter_wrapper(lambda: scatter_sub_p,
                                    "Scatter-sub: ``updates`` are subtracted from the operand.")
scatter_mul = _make_scatter_wrapper(lambda: scatter_mul_p,
                                    "Scatter-mul: the operand is multiplied by ``updates``.")
scatter_min = _make_scatter_wrapper(lambda: scatter_min_p,
                                    "Scatter-min: the minimum of the operand and ``updates``.")
scatter_max = _make_scatter_wrapper(lambda: scatter_max_p,
                                    "Scatter-max: the maximum of the operand and ``updates``.")
for _f, _n in ((scatter, "scatter"), (scatter_add, "scatter_add"), (scatter_sub, "scatter_sub"),
               (scatter_mul, "scatter_mul"), (scatter_min, "scatter_min"),
               (scatter_max, "scatter_max")):
  _f.__name__ = _f.__qualname__ = _n
del _f, _n

scatter_p = _scatter_primitive("scatter", None)
scatter_add_p = _scatter_primitive("scatter-add", np.add, _num)
scatter_sub_p = _scatter_primitive("scatter-sub", np.subtract, _num)
scatter_mul_p = _scatter_primitive("scatter-mul", np.multiply, _num)
scatter_min_p = _scatter_primitive("scatter-min", rops.minimum)
scatter_max_p = _scatter_primitive("scatter-max", rops.maximum)


def _scatter_batch(p, vals, dims, *, dimension_numbers, indices_are_sorted, unique_indices,
                   mode):
  x, idx, u = vals
  dx, di, du = dims
  dn = dimension_numbers
  size = next(get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
  x = batching.bdim_at_front(x, dx, size)
  u = batching.bdim_at_front(u, du, size)
  if di is None:
    # the batch dimension is one more window dimension, leading the updates
    new = ScatterDimensionNumbers(
        update_window_dims=(0,) + _shift(dn.update_window_dims),
        inserted_window_dims=_shift(dn.inserted_window_dims),
        scatter_dims_to_operand_dims=_shift(dn.scatter_dims_to_operand_dims),
        operand_batching_dims=_shift(dn.operand_batching_dims),
        scatter_indices_batching_dims=dn.scatter_indices_batching_dims)
  else:
    idx = batching.moveaxis(idx, di, 0)
    new = ScatterDimensionNumbers(
        update_window_dims=_shift(dn.update_window_dims),
        inserted_window_dims=_shift(dn.inserted_window_dims),
        scatter_dims_to_operand_dims=_shift(dn.scatter_dims_to_operand_dims),
        operand_batching_dims=(0,) + _shift(dn.operand_batching_dims),
        scatter_indices_batching_dims=(0,) + _shift(dn.scatter_indices_batching_dims))
  return p.bind(x, idx, u, dimension_numbers=new, indices_are_sorted=indices_are_sorted,
                unique_indices=unique_indices, mode=mode), 0


def _read_back(operand, idx, updates_shape, dn, mode, **kw):
  """Gather, at the windows a scatter with these dimension numbers writes, from ``operand``."""
  return gather(operand, idx, _gather_dnums_of_scatter(dn),
                _scatter_slice_sizes(get_aval(operand).shape, updates_shape, dn), mode=mode, **kw)


# --- scatter-add / scatter-sub: linear in (operand, updates) together ---


def _scatter_addsub_jvp(p, primals, tangents, **params):
  x, idx, u = primals
  tx, _, tu = tangents
  out = p.bind(x, idx, u, **params)
  if type(tx) is Zero and type(tu) is Zero:
    return out, Zero.from_primal_value(out)
  return out, p.bind(ad.instantiate_zeros(tx), idx, ad.instantiate_zeros(tu), **params)


def _scatter_addsub_transpose(p, ct, x, idx, u, *, dimension_numbers, indices_are_sorted,
                              unique_indices, mode):
  assert not ad.is_undefined_primal(idx)
  ct_x = ct if ad.is_undefined_primal(x) else None
  ct_u = None
  if ad.is_undefined_primal(u):
    ct_u = _read_back(ct, idx, _shape_of(u), dimension_numbers,
                      _gather_mode_of_scatter(mode), fill_value=0)
    if p is scatter_sub_p:
      ct_u = _ew.neg(ct_u)
  return [ct_x, None, ct_u]


for _p in (scatter_add_p, scatter_sub_p):
  ad.jvp_rules[_p] = (lambda p: lambda primals, tangents, **kw:
                      _scatter_addsub_jvp(p, primals, tangents, **kw))(_p)
  ad.transpose_rules[_p] = ad._zero_aware_transpose(
      (lambda p: lambda ct, *args, **kw: _scatter_addsub_transpose(p, ct, *args, **kw))(_p))
del _p


# --- scatter-mul: linear in the operand; in the updates only where indices are unique ---


def _scatter_mul_jvp_updates(t, x, idx, u, *, dimension_numbers, indices_are_sorted,
                             unique_indices, mode):
  # d out_j = x_j * sum_{k -> j} t_k * prod_{l -> j, l != k} u_l. With unique indices the
  # product is empty (JAX's rule). Otherwise the product of the others is computed without
  # dividing by zero: from the product P of the nonzero updates landing at j and their number
  # Z of zeros, it is P / u_k if u_k != 0 and Z == 0, P if u_k == 0 and Z == 1, else 0.
  kw = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices, mode=mode)
  zeros_x = _st.full_like(x, 0)
  if unique_indices:
    return _ew.mul(x, scatter_add(zeros_x, idx, t, **kw))
  u_shape = get_aval(u).shape
  zeros_u, ones_u = _st.full_like(u, 0), _st.full_like(u, 1)
  is_zero = _ew.eq(u, zeros_u)
  u_nonzero = _ew.select_n(is_zero, u, ones_u)
  prod = scatter_mul(_st.full_like(x, 1), idx, u_nonzero, **kw)
  n_zero = scatter_add(zeros_x, idx, _ew.select_n(is_zero, zeros_u, ones_u), **kw)
  # windows a dropping scatter skipped read some in-bounds value here; their terms are dropped
  # again by the final scatter-add
  read = lambda v: _read_back(v, idx, u_shape, dimension_numbers,  # noqa: E731
                              GatherScatterMode.CLIP)
  p, z = read(prod), read(n_zero)
  others = _ew.select_n(
      is_zero,
      _ew.select_n(_ew.eq(z, zeros_u), zeros_u, _ew.div(p, u_nonzero)),
      _ew.select_n(_ew.eq(z, ones_u), zeros_u, p))
  return _ew.mul(x, scatter_add(zeros_x, idx, _ew.mul(t, others), **kw))


def _scatter_mul_transpose(ct, x, idx, u, *, dimension_numbers, indices_are_sorted,
                           unique_indices, mode):
  assert not ad.is_undefined_primal(idx)
  kw = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices, mode=mode)
  ct_x = scatter_mul_p.bind(ct, idx, u, **kw) if ad.is_undefined_primal(x) else None
  ct_u = None
  if ad.is_undefined_primal(u):
    if not unique_indices:
      raise NotImplementedError(
          "scatter_mul gradients are only implemented if `unique_indices=True`")
    ct_u = _read_back(_ew.mul(ct, x), idx, _shape_of(u), dimension_numbers,
                      _gather_mode_of_scatter(mode), fill_value=0)
  return [ct_x, None, ct_u]


ad.defjvp(scatter_mul_p,
          lambda t, x, idx, u, **kw: scatter_mul_p.bind(t, idx, u, **kw),
          None, _scatter_mul_jvp_updates)
ad.transpose_rules[scatter_mul_p] = ad._zero_aware_transpose(_scatter_mul_transpose)


# --- scatter-min / scatter-max: the tangent of each output is the average of the tangents of
# the values (operand and updates) that attain it ---


def _scatter_extremal_jvp(p, primals, tangents, *, dimension_numbers, indices_are_sorted,
                          unique_indices, mode):
  x, idx, u = primals
  tx, _, tu = tangents
  dn = dimension_numbers
  kw = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices, mode=mode)
  out = p.bind(x, idx, u, **kw)
  if type(tx) is Zero and type(tu) is Zero:
    return out, Zero.from_primal_value(out)
  tx, tu = ad.instantiate_zeros(tx), ad.instantiate_zeros(tu)
  u_shape = get_aval(u).shape
  # Reads go through CLIP gathers: windows a dropping scatter skipped read some in-bounds value,
  # and their contributions are dropped again by the final scatter-add.
  clip = GatherScatterMode.CLIP
  read = lambda v: _read_back(v, idx, u_shape, dn, clip)  # noqa: E731
  dt = get_aval(tu).dtype
  initial, target = read(x), read(out)
  won = _ew.eq(u, target)             # this update attains the output
  kept = _ew.eq(initial, target)      # the operand's value attains the output
  ones_u = _st.full(u_shape, 1, dt)
  zeros_u = _st.full(u_shape, 0, dt)
  count_won = read(scatter_add(_st.full(get_aval(x).shape, 0, dt), idx,
                               _ew.select_n(won, zeros_u, ones_u), **kw))
  count_refs = read(scatter_add(_st.full(get_aval(x).shape, 0, dt), idx, ones_u, **kw))
  # attainers at each output: the winning updates, plus the operand if it attains it too
  kept_f = _ew.select_n(kept, zeros_u, ones_u)
  attainers = _ew.max(_ew.add(count_won, kept_f), ones_u)
  share = _ew.div(ones_u, attainers)
  coef_u = _ew.select_n(won, zeros_u, share)
  coef_x = _ew.div(_ew.sub(_ew.select_n(kept, zeros_u, share), ones_u),
                   _ew.max(count_refs, ones_u))
  t_updates = _ew.add(_ew.mul(read(tx), coef_x), _ew.mul(tu, coef_u))
  return out, scatter_add(tx, idx, t_updates, **kw)


ad.jvp_rules[scatter_min_p] = lambda primals, tangents, **kw: _scatter_extremal_jvp(
    scatter_min_p, primals, tangents, **kw)
ad.jvp_rules[scatter_max_p] = lambda primals, tangents, **kw: _scatter_extremal_jvp(
    scatter_max_p, primals, tangents, **kw)


# --- scatter (overwrite) ---


def _scatter_jvp(primals, tangents, *, dimension_numbers, indices_are_sorted, unique_indices,
                 mode):
  x, idx, u = primals
  tx, _, tu = tangents
  dn = dimension_numbers
  kw = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices, mode=mode)
  out = scatter_p.bind(x, idx, u, **kw)
  if type(tx) is Zero and type(tu) is Zero:
    return out, Zero.from_primal_value(out)
  tx, tu = ad.instantiate_zeros(tx), ad.instantiate_zeros(tu)
  if unique_indices:
    return out, scatter_p.bind(tx, idx, tu, **kw)
  # Duplicate indices: which update wins is decided by scattering distinct ids (1, 2, ...) the
  # same way; an update's tangent survives where its id did, the operand's where no id landed.
  # The tangent is then a scatter-add of masked tangents, which transposes without a rule for
  # scatter itself.
  u_shape = get_aval(u).shape
  ids_shape = list(u_shape)
  for d in dn.update_window_dims:
    ids_shape[d] = 1
  n_ids = int(np.prod(ids_shape, dtype=np.int64))
  id_dtype = np.dtype(np.int32) if n_ids + 1 < 2 ** 31 else dtypes.canonicalize_dtype(np.int64)
  ids = _ew.add(_st.reshape(_st.iota(id_dtype, n_ids), tuple(ids_shape)), np.ones((), id_dtype))
  ids = _st.broadcast_in_dim(ids, u_shape, tuple(range(len(u_shape)))) if ids_shape != list(
      u_shape) else ids
  landed = scatter_p.bind(_st.full(get_aval(x).shape, 0, id_dtype), idx, ids, **kw)
  read_ids = _read_back(landed, idx, u_shape, dn, GatherScatterMode.CLIP)
  x_kept = _ew.eq(landed, np.zeros((), id_dtype))
  u_won = _ew.eq(ids, read_ids)
  t_x = _ew.select_n(x_kept, _st.full_like(tx, 0), tx)
  t_u = _ew.select_n(u_won, _st.full_like(tu, 0), tu)
  return out, scatter_add(t_x, idx, t_u, **kw)


def _scatter_transpose(ct, x, idx, u, *, dimension_numbers, indices_are_sorted, unique_indices,
                       mode):
  if not unique_indices:
    raise NotImplementedError("scatter transpose is only implemented where unique_indices=True")
  assert not ad.is_undefined_primal(idx)
  kw = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
            unique_indices=True, mode=mode)
  u_shape = _shape_of(u)
  ct_x = (scatter_p.bind(ct, idx, _st.full(u_shape, 0, get_aval(ct).dtype), **kw)
          if ad.is_undefined_primal(x) else None)
  ct_u = (_read_back(ct, idx, u_shape, dimension_numbers, _gather_mode_of_scatter(mode),
                     fill_value=0)
          if ad.is_undefined_primal(u) else None)
  return [ct_x, None, ct_u]


ad.jvp_rules[scatter_p] = _scatter_jvp
ad.transpose_rules[scatter_p] = ad._zero_aware_transpose(_scatter_transpose)


# ------------------------------------------------------------------------------------------------
# Lowerings: one HLO scatter each, modes 'clip'/'drop'

_SCATTER_OPCODES = {"scatter-add": "add", "scatter-sub": "subtract", "scatter-mul": "multiply",
                    "scatter-min": "minimum", "scatter-max": "maximum"}


def _overwrite_computation(ctx, dtype):
  """The update computation of a plain scatter: ``(old, new) -> new``."""
  from ourjax.lowering import hlo
  key = ("overwrite", np.dtype(dtype))
  comp = ctx._scalar_comps.get(key)
  if comp is None:
    b = hlo.Builder(ctx.module, ctx.module.unique_name(f"overwrite_{np.dtype(dtype).name}"))
    b.parameter(hlo.Shape(dtype, ()), "old")
    new = b.parameter(hlo.Shape(dtype, ()), "new")
    comp = ctx._scalar_comps[key] = b.build(new)
  return comp


def _register_scatter_lowerings():
  from ourjax.lowering.from_jaxpr import register_lowering

  def scatter_lowering(p):
    def rule(ctx, avals_in, avals_out, x, idx, u, *, dimension_numbers, indices_are_sorted,
             unique_indices, mode):
      dn = dimension_numbers
      dt = avals_in[0].dtype
      opcode = _SCATTER_OPCODES.get(p.name)
      comp = (_overwrite_computation(ctx, dt) if opcode is None
              else ctx.scalar_computation(opcode, dt))
      return ctx.builder.scatter(
          x, idx, u, comp, update_window_dims=dn.update_window_dims,
          inserted_window_dims=dn.inserted_window_dims,
          scatter_dims_to_operand_dims=dn.scatter_dims_to_operand_dims,
          input_batching_dims=dn.operand_batching_dims,
          scatter_indices_batching_dims=dn.scatter_indices_batching_dims,
          mode="clip" if mode == GatherScatterMode.CLIP else "drop")
    register_lowering(p)(rule)

  for p in (scatter_p, scatter_add_p, scatter_sub_p, scatter_mul_p, scatter_min_p,
            scatter_max_p):
    scatter_lowering(p)


_register_scatter_lowerings()
