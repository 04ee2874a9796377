"""Programs for ``diff_jax.py --suite programs``: small pieces of typical user code (jnp calls
with keyword arguments, construction and promotion with Python scalars, jax.nn, jax.random with
fixed keys, tree_util, lax control flow, grad / vmap of these, and the errors of misuse), each a
function of one namespace ``L`` (``L.jnp``, ``L.lax``, ``L.nn``, ``L.random``, ``L.jax``...)
returning a pytree.  The same program runs against JAX and against ourjax; ``diff_jax.py``
records and compares the leaves."""
from __future__ import annotations

import numpy as np

PROGRAMS: list = []       # (name, fn(L) -> pytree)


def prog(name):
  def deco(fn):
    PROGRAMS.append((name, fn))
    return fn
  return deco


def add(name, fn):
  PROGRAMS.append((name, fn))


def _x(shape=(3, 4), dtype=np.float32, seed=0, scale=2.0):
  rng = np.random.default_rng(seed)
  v = rng.standard_normal(shape) * scale
  return np.round(v, 3).astype(dtype) if np.dtype(dtype).kind == "f" else v.astype(dtype)


# ----------------------------------------------------------------------------- reductions kwargs
_RED = ["sum", "mean", "max", "min", "prod", "var", "std", "argmax", "argmin", "any", "all",
        "nansum", "nanmean", "nanmax", "cumsum", "cumprod", "median", "ptp", "count_nonzero",
        "average", "nanstd", "nanvar", "amax", "nanargmax", "logsumexp"]
_AXES = [None, 0, 1, -1, (0, 1), 2, -3, (0, 0)]
for _fn in _RED:
  for _ax in _AXES:
    for _kd in (False, True):
      if _fn in ("cumsum", "cumprod") and (_kd or isinstance(_ax, tuple)):
        continue
      def _p(L, fn=_fn, ax=_ax, kd=_kd):
        x = _x()
        f = L.logsumexp if fn == "logsumexp" else getattr(L.jnp, fn)
        kw = {} if fn in ("cumsum", "cumprod", "average") else {"keepdims": kd}
        if fn == "average":
          kw = {"keepdims": kd}
        return f(x, axis=ax, **kw)
      add(f"red.{_fn}.axis={_ax}.keepdims={_kd}", _p)
for _fn in ["sum", "mean", "max", "min", "prod", "var", "std", "any", "all", "nansum", "nanmax",
            "argmax", "count_nonzero"]:
  for _dt in ["int32", "bool", "float16", "bfloat16", "uint8", "int8"]:
    def _p(L, fn=_fn, dt=_dt):
      x = np.abs(_x(dtype=np.float32)) * 3
      x = L.jnp.asarray(x).astype(dt)
      return getattr(L.jnp, fn)(x, axis=0)
    add(f"red.{_fn}.dtype_in={_dt}", _p)
for _fn in ["sum", "mean", "prod", "cumsum", "var"]:
  for _dt in ["int32", "float32", "float16", "bfloat16", "bool", "int8"]:
    def _p(L, fn=_fn, dt=_dt):
      return getattr(L.jnp, fn)(L.jnp.asarray(_x()), axis=1, dtype=dt)
    add(f"red.{_fn}.dtype={_dt}", _p)
for _fn in ["sum", "mean", "max", "min", "prod", "var", "std", "any", "all", "argmax",
            "nansum", "count_nonzero"]:
  def _p(L, fn=_fn):
    x = _x()
    w = x > -1
    kw = {"initial": 0.0} if fn in ("max", "min") else {}
    return getattr(L.jnp, fn)(x, axis=1, where=w, **kw)
  add(f"red.{_fn}.where", _p)
  def _p2(L, fn=_fn):
    x = _x()
    return getattr(L.jnp, fn)(x, axis=0, where=np.zeros_like(x, bool),
                              **({"initial": -1.0} if fn in ("max", "min") else {}))
  add(f"red.{_fn}.where_none", _p2)
for _ddof in (0, 1, 3, 5):
  add(f"red.var.ddof={_ddof}", lambda L, d=_ddof: L.jnp.var(_x(), axis=0, ddof=d))
  add(f"red.std.ddof={_ddof}", lambda L, d=_ddof: L.jnp.std(_x(), axis=1, ddof=d))
add("red.max.initial", lambda L: L.jnp.max(_x(), axis=1, initial=10.0))
add("red.sum.initial", lambda L: L.jnp.sum(_x(), axis=1, initial=10.0))
add("red.max.empty", lambda L: L.jnp.max(np.zeros((0, 3), np.float32), axis=0))
add("red.max.empty_initial", lambda L: L.jnp.max(np.zeros((0, 3), np.float32), axis=0, initial=1.))
add("red.mean.empty", lambda L: L.jnp.mean(np.zeros((0, 3), np.float32), axis=0))
add("red.argmax.empty", lambda L: L.jnp.argmax(np.zeros((0, 3), np.float32), axis=0))
add("red.average.weights", lambda L: L.jnp.average(_x(), axis=1, weights=np.arange(4.)))
add("red.average.returned", lambda L: L.jnp.average(_x(), axis=0, weights=np.arange(1., 4.),
                                                    returned=True))
add("red.quantile", lambda L: L.jnp.quantile(_x(), np.array([0.1, 0.5, 0.9]), axis=1))
add("red.percentile", lambda L: L.jnp.percentile(_x(), 30, axis=0, keepdims=True))
add("red.quantile.method", lambda L: [L.jnp.quantile(_x(), 0.3, method=m) for m in
                                      ("linear", "lower", "higher", "midpoint", "nearest")])
add("red.median.nan", lambda L: L.jnp.median(np.array([1., np.nan, 3.], np.float32)))
add("red.nanmedian", lambda L: L.jnp.nanmedian(np.array([1., np.nan, 3., 0.], np.float32)))
add("red.sum.int8_overflow", lambda L: L.jnp.sum(np.full(100, 100, np.int8)))
add("red.sum.uint8", lambda L: L.jnp.sum(np.full(100, 200, np.uint8)))
add("red.mean.int", lambda L: L.jnp.mean(np.arange(7)))
add("red.cumsum.bool", lambda L: L.jnp.cumsum(np.array([True, True, False])))
add("red.cumsum.int8", lambda L: L.jnp.cumsum(np.full(5, 100, np.int8)))
add("red.cumprod.axis_none", lambda L: L.jnp.cumprod(_x(), axis=None))
add("red.diff", lambda L: [L.jnp.diff(_x(), n=2, axis=0), L.jnp.diff(_x(), prepend=0., axis=1)])
add("red.ediff1d", lambda L: L.jnp.ediff1d(_x(), to_begin=np.array([1.0])))
add("red.norm", lambda L: [L.jnp.linalg.norm(_x()), L.jnp.linalg.norm(_x(), axis=1, ord=1),
                           L.jnp.linalg.norm(_x(), ord="fro", keepdims=True),
                           L.jnp.linalg.norm(_x(), ord=np.inf, axis=0),
                           L.jnp.linalg.norm(_x(), ord=2)])
add("red.trace", lambda L: L.jnp.trace(_x((4, 4)), offset=1))
add("red.einsum", lambda L: L.jnp.einsum("ij,kj->ik", _x(), _x(seed=1)))
add("red.einsum_int", lambda L: L.jnp.einsum("ij,j->i", np.arange(6).reshape(2, 3), np.arange(3)))
add("red.tensordot", lambda L: L.jnp.tensordot(_x(), _x(seed=2), axes=([1], [1])))

# ----------------------------------------------------------------------- construction/promotion
add("mk.array_mixed", lambda L: L.jnp.array([1, 2.0, True]))
add("mk.array_int_list", lambda L: L.jnp.array([1, 2, 3]))
add("mk.array_bool", lambda L: L.jnp.array([True, False]))
add("mk.array_nested", lambda L: L.jnp.array([[1, 2], [3, 4.5]]))
add("mk.array_scalar", lambda L: L.jnp.array(3))
add("mk.array_float", lambda L: L.jnp.array(3.5))
add("mk.asarray_scalar", lambda L: L.jnp.asarray(2.0))
add("mk.array_dtype", lambda L: L.jnp.array([1.7, -2.7], dtype=L.jnp.int32))
add("mk.array_bf16", lambda L: L.jnp.array([1.7, -2.7], dtype=L.jnp.bfloat16))
add("mk.array_f64_np", lambda L: L.jnp.array(np.arange(3.0)))
add("mk.array_i64_np", lambda L: L.jnp.array(np.arange(3)))
add("mk.array_u32_big", lambda L: L.jnp.array(2 ** 31 + 5, dtype=L.jnp.uint32))
add("mk.array_too_big", lambda L: L.jnp.array(2 ** 40))
add("mk.array_ragged", lambda L: L.jnp.array([[1, 2], [3]]))
add("mk.arange1", lambda L: L.jnp.arange(5))
add("mk.arange_f", lambda L: L.jnp.arange(0, 1, 0.1))
add("mk.arange_fstop", lambda L: L.jnp.arange(5.0))
add("mk.arange_neg", lambda L: L.jnp.arange(10, 0, -3))
add("mk.arange_dtype", lambda L: L.jnp.arange(2, 9, 2, dtype=L.jnp.float16))
add("mk.linspace", lambda L: L.jnp.linspace(0, 1, 7))
add("mk.linspace_noend", lambda L: L.jnp.linspace(0, 1, 5, endpoint=False, retstep=True))
add("mk.linspace_int", lambda L: L.jnp.linspace(0, 10, 4, dtype=int))
add("mk.linspace_arr", lambda L: L.jnp.linspace(np.zeros(2), np.array([1., 2.]), 3, axis=1))
add("mk.logspace", lambda L: L.jnp.logspace(0, 2, 5))
add("mk.geomspace", lambda L: L.jnp.geomspace(1, 1000, 4))
add("mk.full_int", lambda L: L.jnp.full((2, 2), 3))
add("mk.full_float", lambda L: L.jnp.full((2,), 3.0))
add("mk.full_bool", lambda L: L.jnp.full((2,), True))
add("mk.full_arr", lambda L: L.jnp.full((2, 3), np.arange(3)))
add("mk.full_dtype", lambda L: L.jnp.full((2,), 7, dtype=L.jnp.int8))
add("mk.zeros_int", lambda L: L.jnp.zeros(3, dtype=int))
add("mk.zeros_float", lambda L: L.jnp.zeros((2, 3), dtype=float))
add("mk.ones_bool", lambda L: L.jnp.ones(2, bool))
add("mk.ones_like_bf16", lambda L: L.jnp.ones_like(_x(), dtype=L.jnp.bfloat16))
add("mk.zeros_like_int", lambda L: L.jnp.zeros_like(np.arange(3)))
add("mk.full_like", lambda L: L.jnp.full_like(np.arange(3), 2.7))
add("mk.full_like_shape", lambda L: L.jnp.full_like(_x(), 1, shape=(2,)))
add("mk.empty", lambda L: L.jnp.empty((2, 2)).shape)
add("mk.eye", lambda L: [L.jnp.eye(3), L.jnp.eye(2, 4, k=1), L.jnp.eye(3, k=-1, dtype=int)])
add("mk.identity", lambda L: L.jnp.identity(3, dtype=bool))
add("mk.tri", lambda L: [L.jnp.tri(3), L.jnp.tril(_x((3, 3)), k=-1), L.jnp.triu(_x((3, 3)), 1)])
add("mk.diag", lambda L: [L.jnp.diag(np.arange(3)), L.jnp.diag(_x((3, 3)), k=1),
                          L.jnp.diagonal(_x((2, 3, 3)), axis1=1, axis2=2)])
add("mk.meshgrid", lambda L: L.jnp.meshgrid(np.arange(3), np.arange(2.), indexing="ij"))
add("mk.indices", lambda L: L.jnp.indices((2, 3)))
add("mk.concat_mixed", lambda L: L.jnp.concatenate([np.arange(2), np.ones(2, np.float32)]))
add("mk.concat_axis_none", lambda L: L.jnp.concatenate([_x(), _x()], axis=None))
add("mk.concat_rank_err", lambda L: L.jnp.concatenate([_x(), np.ones(3)]))
add("mk.concat_axis_err", lambda L: L.jnp.concatenate([_x(), _x()], axis=2))
add("mk.stack", lambda L: L.jnp.stack([np.arange(3), np.arange(3)], axis=-1))
add("mk.stack_err", lambda L: L.jnp.stack([np.arange(3), np.arange(4)]))
add("mk.hstack", lambda L: [L.jnp.hstack([np.arange(2), np.arange(3)]),
                            L.jnp.vstack([np.arange(3), np.arange(3)]),
                            L.jnp.dstack([np.arange(3), np.arange(3)]),
                            L.jnp.column_stack([np.arange(3), np.arange(3)])])
add("mk.where_scalars", lambda L: L.jnp.where(np.array([True, False]), 1, 2.0))
add("mk.where_int_scalars", lambda L: L.jnp.where(np.array([True, False]), 1, 2))
add("mk.where_one_arg", lambda L: L.jnp.where(np.array([0, 1, 2, 0, 3])))
add("mk.where_size", lambda L: L.jnp.where(np.array([0, 1, 2, 0, 3]), size=4, fill_value=-1))
add("mk.nonzero_size", lambda L: L.jnp.nonzero(np.array([0, 1, 2, 0, 3]), size=2))
add("mk.argwhere", lambda L: L.jnp.argwhere(_x() > 0))
add("mk.clip", lambda L: [L.jnp.clip(_x(), 0, 1), L.jnp.clip(np.arange(5), 1.5, 3),
                          L.jnp.clip(_x(), max=0.5), L.jnp.clip(np.arange(5, dtype=np.uint8), -1, 3)])
add("mk.round", lambda L: [L.jnp.round(_x(), 1), L.jnp.round(np.arange(30, step=7), -1),
                           L.jnp.around(np.float32(2.5)), L.jnp.round(np.float16(1.25), 1)])
add("mk.astype", lambda L: [L.jnp.asarray(_x()).astype(int), L.jnp.asarray(_x()).astype(bool),
                            L.jnp.asarray(_x()).astype(L.jnp.uint8),
                            L.jnp.asarray(np.array([300., -1., np.nan, np.inf])).astype(np.int32),
                            L.jnp.asarray(np.array([300., -1., 2.5])).astype(np.uint8)])
add("mk.repeat", lambda L: [L.jnp.repeat(np.arange(3), 2), L.jnp.repeat(_x(), np.array([1, 0, 2]), axis=0),
                            L.jnp.tile(np.arange(3), (2, 2))])
add("mk.pad", lambda L: [L.jnp.pad(np.arange(3), 2), L.jnp.pad(_x(), ((1, 0), (0, 2)), mode="reflect"),
                         L.jnp.pad(np.arange(4), (1, 2), mode="edge"),
                         L.jnp.pad(np.arange(4.), 2, constant_values=-1.5),
                         L.jnp.pad(np.arange(4.), (2, 3), mode="wrap"),
                         L.jnp.pad(np.arange(4.), 2, mode="symmetric")])
add("mk.roll", lambda L: [L.jnp.roll(np.arange(5), 2), L.jnp.roll(_x(), -1, axis=1),
                          L.jnp.roll(_x(), (1, 2), axis=(0, 1))])
add("mk.flip", lambda L: [L.jnp.flip(_x()), L.jnp.fliplr(_x()), L.jnp.rot90(_x(), k=3)])
add("mk.sort", lambda L: [L.jnp.sort(_x(), axis=0), L.jnp.sort(_x(), axis=None),
                          L.jnp.argsort(np.array([3, 1, 2, 1]), stable=True),
                          L.jnp.sort(np.array([np.nan, 1., -0., 0., -np.inf])),
                          L.jnp.argsort(_x(), axis=-1, descending=True)])
add("mk.searchsorted", lambda L: [L.jnp.searchsorted(np.arange(5.), np.array([0.5, 2, 7])),
                                  L.jnp.searchsorted(np.arange(5.), 2, side="right")])
add("mk.unique", lambda L: L.jnp.unique(np.array([3, 1, 3, 2, 1]), return_counts=True,
                                        return_index=True, return_inverse=True))
add("mk.unique_size", lambda L: L.jnp.unique(np.array([3, 1, 3]), size=4, fill_value=0))
add("mk.bincount", lambda L: L.jnp.bincount(np.array([0, 2, 2, 5]), length=7))
add("mk.histogram", lambda L: L.jnp.histogram(_x().ravel(), bins=4))
add("mk.take", lambda L: [L.jnp.take(np.arange(5.), np.array([0, 4, 7, -1])),
                          L.jnp.take(np.arange(5.), np.array([0, 7]), mode="clip"),
                          L.jnp.take(np.arange(5.), np.array([0, 7]), mode="wrap"),
                          L.jnp.take(np.arange(5.), np.array([0, 7]), mode="fill", fill_value=-1),
                          L.jnp.take_along_axis(_x(), np.array([[0], [1], [3]]), axis=1)])
add("mk.index_oob", lambda L: [L.jnp.asarray(np.arange(5.))[np.array([0, 9, -9])],
                               L.jnp.asarray(np.arange(5.))[7:2:-2]])
add("mk.index_set", lambda L: [L.jnp.asarray(np.arange(5.)).at[np.array([0, 0, 9])].add(1.),
                               L.jnp.asarray(np.arange(5.)).at[1:3].set(7),
                               L.jnp.asarray(np.arange(5)).at[2].mul(2.5),
                               L.jnp.asarray(np.arange(5.)).at[np.array([1, 1])].max(9.),
                               L.jnp.asarray(np.arange(5.)).at[9].get(mode="fill", fill_value=-2.)])
add("mk.index_bool", lambda L: L.jnp.asarray(_x())[_x() > 0])
add("mk.index_none", lambda L: L.jnp.asarray(_x())[None, :, None, 1])
add("mk.index_ellipsis", lambda L: L.jnp.asarray(_x((2, 3, 4)))[..., 1:3, 0])
add("mk.index_float_err", lambda L: L.jnp.asarray(np.arange(5.))[1.0])
add("mk.reshape_err", lambda L: L.jnp.reshape(_x(), (5, 2)))
add("mk.reshape_neg", lambda L: L.jnp.reshape(_x(), (-1, 2)))
add("mk.reshape_order", lambda L: L.jnp.reshape(_x(), (4, 3), order="F"))
add("mk.squeeze_err", lambda L: L.jnp.squeeze(_x(), axis=0))
add("mk.expand_dims", lambda L: L.jnp.expand_dims(_x(), (0, -1)).shape)
add("mk.moveaxis", lambda L: L.jnp.moveaxis(_x((2, 3, 4)), 0, -1).shape)
add("mk.swapaxes_err", lambda L: L.jnp.swapaxes(_x(), 0, 3))
add("mk.transpose_axes", lambda L: L.jnp.transpose(_x((2, 3, 4)), (2, 0, 1)))
add("mk.broadcast_to", lambda L: L.jnp.broadcast_to(np.arange(3), (2, 3)))
add("mk.broadcast_err", lambda L: L.jnp.asarray(np.arange(3)) + L.jnp.asarray(np.arange(4)))
add("mk.split", lambda L: [L.jnp.split(np.arange(6), 3), L.jnp.split(np.arange(6), [1, 4]),
                           L.jnp.array_split(np.arange(7), 3)])
add("mk.split_err", lambda L: L.jnp.split(np.arange(7), 3))
add("mk.outer", lambda L: [L.jnp.outer(np.arange(3), np.arange(2.)), L.jnp.kron(np.eye(2), np.ones((2, 2)))])
add("mk.cross", lambda L: L.jnp.cross(_x((2, 3)), _x((2, 3), seed=1)))
add("mk.interp", lambda L: L.jnp.interp(np.array([0.5, 2.5, 9.]), np.arange(4.), np.arange(4.) ** 2))
add("mk.polyfit", lambda L: L.jnp.polyval(np.array([1., 2., 3.]), np.arange(3)))
add("mk.convolve", lambda L: [L.jnp.convolve(np.arange(5.), np.array([1., 0., -1.])),
                              L.jnp.convolve(np.arange(5.), np.array([1., 2.]), mode="same"),
                              L.jnp.correlate(np.arange(5.), np.array([1., 2.]), mode="valid")])
add("mk.isclose", lambda L: [L.jnp.isclose(np.array([1., np.nan]), np.array([1 + 1e-9, np.nan]), equal_nan=True),
                             L.jnp.allclose(_x(), _x() + 1e-7)])
add("mk.array_equal", lambda L: [L.jnp.array_equal(np.arange(3), np.arange(3.)),
                                 L.jnp.array_equal(np.arange(3), np.arange(4))])
add("mk.matmul_shapes", lambda L: [L.jnp.matmul(_x((2, 3, 4)), _x((4, 5))).shape,
                                   L.jnp.matmul(np.arange(3.), _x((3, 2))),
                                   L.jnp.dot(np.arange(3), np.arange(3)),
                                   L.jnp.vdot(_x(), _x()), L.jnp.inner(np.arange(3.), np.arange(3.))])
add("mk.matmul_err", lambda L: L.jnp.matmul(_x(), _x()))
add("mk.matmul_int", lambda L: L.jnp.asarray(np.arange(6, dtype=np.int8).reshape(2, 3)) @ np.arange(3, dtype=np.int8))
add("mk.matmul_bf16", lambda L: L.jnp.asarray(_x(), L.jnp.bfloat16) @ L.jnp.asarray(_x((4, 2)), L.jnp.bfloat16))
add("mk.matmul_mixed", lambda L: L.jnp.asarray(_x(), L.jnp.bfloat16) @ _x((4, 2)))
add("mk.matmul_pref", lambda L: L.jnp.matmul(np.arange(6, dtype=np.int8).reshape(2, 3), np.arange(3, dtype=np.int8),
                                             preferred_element_type=L.jnp.int32))

# promotion with Python scalars and weak types
_PY = [("i", 3), ("f", 2.5), ("b", True), ("c", 1 + 2j), ("big", 2 ** 33), ("neg", -1)]
_ADT = ["bool", "int8", "uint8", "int32", "uint32", "float16", "bfloat16", "float32"]
for _dt in _ADT:
  for _pn, _pv in _PY:
    for _op in ("add", "multiply", "true_divide", "power", "maximum", "floor_divide", "less"):
      def _p(L, dt=_dt, pv=_pv, op=_op):
        a = L.jnp.asarray(np.array([1, 2, 3])).astype(dt)
        return [getattr(L.jnp, op)(a, pv), getattr(L.jnp, op)(pv, a)]
      add(f"promo.{_op}.{_dt}.{_pn}", _p)
for _d1 in _ADT:
  for _d2 in _ADT:
    add(f"promo.arr.{_d1}+{_d2}", lambda L, a=_d1, b=_d2: L.jnp.ones(2, a) + L.jnp.ones(2, b))
add("promo.weak_scalar_arr", lambda L: [L.jnp.asarray(3.0) * L.jnp.ones(2, L.jnp.float16),
                                        L.jnp.asarray(3) + L.jnp.ones(2, L.jnp.int8),
                                        L.jnp.float32(3) + L.jnp.ones(2, L.jnp.float16),
                                        L.jnp.int32(3) + 2.0,
                                        L.jnp.float16(3) * 2,
                                        L.jnp.bfloat16(3) + L.jnp.float16(2)])
add("promo.mixed_weak", lambda L: [L.lax.add(L.jnp.asarray(2.0), 3.0), L.lax.mul(2, 3),
                                   L.jnp.add(2, 3.0), L.jnp.multiply(True, 3),
                                   L.jnp.asarray(2) ** 3, L.jnp.asarray(2) ** -1.0,
                                   L.jnp.asarray(np.int8(2)) << 9, 7 // L.jnp.asarray(2),
                                   -7 % L.jnp.asarray(3), L.jnp.asarray(-7.5) % 2])
add("promo.int_pow_neg", lambda L: L.jnp.asarray(2) ** -1)
add("promo.uint_neg", lambda L: L.jnp.asarray(np.uint8(3)) - 5)
add("promo.int8_overflow_scalar", lambda L: L.jnp.asarray(np.int8(3)) + 300)
add("promo.result_type", lambda L: [str(L.jnp.result_type(np.int8, np.uint8)),
                                    str(L.jnp.result_type(L.jnp.bfloat16, np.float16)),
                                    str(L.jnp.result_type(3, np.int8)),
                                    str(L.jnp.result_type(3.0, np.int32)),
                                    str(L.jnp.promote_types(np.int64, np.uint64)),
                                    str(L.jnp.result_type(np.float16, 1j))])
add("promo.dtype_of_ops", lambda L: [str(L.jnp.sqrt(np.arange(3)).dtype), str(L.jnp.mean(np.arange(3, dtype=np.int8)).dtype),
                                     str(L.jnp.arctan2(np.int8(1), np.int8(2)).dtype),
                                     str(L.jnp.true_divide(np.uint8(1), np.uint8(2)).dtype),
                                     str(L.jnp.sin(L.jnp.bfloat16(1)).dtype),
                                     str(L.jnp.floor(np.arange(3)).dtype),
                                     str(L.jnp.abs(np.int8(-128)).dtype)])
add("promo.bool_arith", lambda L: [L.jnp.asarray([True, False]) + L.jnp.asarray([True, True]),
                                   L.jnp.asarray([True]) * 2.5, -L.jnp.asarray(np.array([1, 2], np.uint8)),
                                   L.jnp.sum(np.array([True, True])), L.jnp.asarray([True]) - 1])
add("promo.bool_sub_err", lambda L: L.jnp.asarray([True]) - L.jnp.asarray([False]))
add("promo.weak_after_ops", lambda L: [L.jnp.sin(2.0), L.jnp.exp(L.jnp.asarray(1.0)),
                                       L.jnp.asarray(3.0).astype(float), L.jnp.round(2.5),
                                       L.jnp.sum(L.jnp.asarray(2.0)), L.jnp.maximum(2.0, 3),
                                       L.jnp.where(True, 2.0, 3.0), L.jnp.clip(2.5, 0, 1),
                                       L.jnp.abs(-2), L.jnp.square(3.0), L.jnp.reciprocal(4.0),
                                       L.jnp.logaddexp(1.0, 2.0), L.jnp.logaddexp2(1.0, 2.0),
                                       L.jnp.hypot(3.0, 4.0), L.jnp.arctan2(1.0, 2.0),
                                       L.jnp.copysign(1.0, -2.0), L.jnp.heaviside(0.0, 0.5),
                                       L.jnp.float_power(2.0, 3), L.jnp.ldexp(1.0, 3),
                                       L.jnp.nextafter(1.0, 2.0), L.jnp.fmod(5.0, 3),
                                       L.jnp.sinc(0.5), L.jnp.deg2rad(180.0), L.jnp.cbrt(8.0),
                                       L.jnp.expm1(1e-3), L.jnp.log1p(1e-3), L.jnp.exp2(3.0),
                                       L.jnp.log2(8.0), L.jnp.log10(100.0), L.jnp.sign(-2.0),
                                       L.jnp.trunc(2.7), L.jnp.fix(-2.7), L.jnp.rint(2.5),
                                       L.jnp.i0(1.0), L.jnp.angle(1.0), L.jnp.real(2.0),
                                       L.jnp.conj(2.0), L.jnp.positive(2), L.jnp.negative(2.0),
                                       L.jnp.cumsum(2.0), L.jnp.mean(2), L.jnp.var(2.0),
                                       L.jnp.linalg.norm(3.0), L.jnp.dot(2.0, 3.0),
                                       L.jnp.interp(0.5, np.arange(2.), np.arange(2.)),
                                       L.jnp.polyval(np.array([1., 2.]), 3.0), L.jnp.isnan(2.0),
                                       L.jnp.divide(7, 2), L.jnp.floor_divide(7, 2),
                                       L.jnp.remainder(7.5, 2), L.jnp.power(2, 3.0)])

# ------------------------------------------------------------------------------------- jax.nn
for _fn in ["relu", "relu6", "sigmoid", "softplus", "soft_sign", "silu", "swish", "log_sigmoid",
            "elu", "leaky_relu", "hard_tanh", "celu", "selu", "gelu", "glu", "hard_sigmoid",
            "hard_silu", "hard_swish", "tanh", "mish", "sparse_plus", "squareplus",
            "sparse_sigmoid", "log_softmax", "softmax", "standardize", "logsumexp", "identity"]:
  for _dt in ["float32", "bfloat16", "float16", "int32"]:
    def _p(L, fn=_fn, dt=_dt):
      x = L.jnp.asarray(_x((4, 6), scale=3.0)).astype(dt)
      return getattr(L.nn, fn)(x)
    add(f"nn.{_fn}.{_dt}", _p)
  def _pw(L, fn=_fn):
    return getattr(L.nn, fn)(2.0 if fn != "glu" else np.arange(4.0))
  add(f"nn.{_fn}.weak", _pw)
add("nn.gelu_exact", lambda L: L.nn.gelu(_x(scale=3.), approximate=False))
add("nn.gelu_exact_bf16", lambda L: L.nn.gelu(L.jnp.asarray(_x(scale=3.), L.jnp.bfloat16), approximate=False))
add("nn.gelu_extreme", lambda L: [L.nn.gelu(np.array([-50., -10., 0., 10., 50., np.inf, -np.inf, np.nan], np.float32), approximate=a)
                                  for a in (True, False)])
add("nn.softmax_axis", lambda L: [L.nn.softmax(_x(), axis=0), L.nn.softmax(_x(), axis=(0, 1)),
                                  L.nn.log_softmax(_x(), axis=0)])
add("nn.softmax_where", lambda L: [L.nn.softmax(_x(), where=_x(seed=3) > 0),
                                   L.nn.log_softmax(_x(), where=_x(seed=3) > 0)])
add("nn.softmax_inf", lambda L: [L.nn.softmax(np.array([-np.inf, 0., 1.], np.float32)),
                                 L.nn.softmax(np.array([-np.inf, -np.inf], np.float32)),
                                 L.nn.log_softmax(np.array([-np.inf, 0., np.inf], np.float32)),
                                 L.nn.softmax(np.array([1e30, 1e30], np.float32))])
add("nn.softmax_grad", lambda L: L.jax.grad(lambda x: L.nn.softmax(x)[1] * 3)(_x((5,))))
add("nn.log_softmax_grad", lambda L: L.jax.grad(lambda x: L.nn.log_softmax(x).sum() + L.nn.log_softmax(x)[0])(_x((5,))))
add("nn.one_hot", lambda L: [L.nn.one_hot(np.array([0, 2, 5, -1]), 4),
                             L.nn.one_hot(np.array([[1], [0]]), 3, dtype=L.jnp.int32),
                             L.nn.one_hot(np.array([1, 2]), 3, axis=0),
                             L.nn.one_hot(2, 3), L.nn.one_hot(np.array([1.7, 0.2]), 3)])
add("nn.logsumexp_b", lambda L: [L.nn.logsumexp(_x(), axis=1, b=np.array([1., 2., 0., -1.]), return_sign=True),
                                 L.nn.logsumexp(_x(), b=2.0),
                                 L.nn.logsumexp(_x(), axis=0, keepdims=True, b=np.ones((3, 1)))])
add("nn.logsumexp_where", lambda L: [L.nn.logsumexp(_x(), axis=1, where=_x(seed=4) > 0),
                                     L.nn.logsumexp(_x(), where=np.zeros((3, 4), bool))])
add("nn.logsumexp_inf", lambda L: [L.nn.logsumexp(np.array([-np.inf, -np.inf], np.float32)),
                                   L.nn.logsumexp(np.array([np.inf, 1.], np.float32)),
                                   L.nn.logsumexp(np.array([np.inf, -np.inf], np.float32)),
                                   L.nn.logsumexp(np.array([np.nan, 1.], np.float32))])
add("nn.logsumexp_neg_b", lambda L: L.nn.logsumexp(np.array([1., 2.], np.float32), b=np.array([1., -1.])))
add("nn.logsumexp_grad", lambda L: L.jax.grad(lambda x: L.nn.logsumexp(x, b=np.array([1., 2., 3.])))(np.array([1., 2., 3.], np.float32)))
add("nn.standardize", lambda L: [L.nn.standardize(_x(), axis=0), L.nn.standardize(_x(), epsilon=1.0),
                                 L.nn.standardize(_x(), axis=1, mean=0.0, variance=4.0)])
add("nn.params", lambda L: [L.nn.leaky_relu(_x(), negative_slope=0.3), L.nn.elu(_x(), alpha=0.5),
                            L.nn.celu(_x(), alpha=2.0), L.nn.glu(_x(), axis=0),
                            L.nn.hard_tanh(np.array([-2., 2.]))])
add("nn.relu_grad0", lambda L: [L.jax.grad(L.nn.relu)(0.0), L.jax.grad(L.nn.relu6)(6.0),
                                L.jax.grad(L.nn.relu6)(0.0), L.jax.grad(L.nn.hard_tanh)(1.0),
                                L.jax.grad(L.nn.silu)(0.0), L.jax.grad(L.nn.gelu)(0.5),
                                L.jax.grad(lambda x: L.nn.gelu(x, approximate=False))(0.5),
                                L.jax.grad(L.nn.softplus)(0.0), L.jax.grad(L.nn.log_sigmoid)(-100.0),
                                L.jax.grad(L.nn.elu)(0.0), L.jax.grad(L.nn.leaky_relu)(0.0),
                                L.jax.grad(L.nn.sigmoid)(0.0), L.jax.grad(L.nn.selu)(0.0),
                                L.jax.grad(L.nn.mish)(0.3)])
add("nn.dpa", lambda L: L.nn.dot_product_attention(_x((2, 3, 2, 4)), _x((2, 5, 2, 4), seed=1),
                                                   _x((2, 5, 2, 4), seed=2)))
add("nn.dpa_causal", lambda L: L.nn.dot_product_attention(_x((1, 4, 2, 4)), _x((1, 4, 2, 4), seed=1),
                                                          _x((1, 4, 2, 4), seed=2), is_causal=True, scale=0.3))
add("nn.initializers", lambda L: [L.nn.initializers.glorot_uniform()(L.random.PRNGKey(0), (3, 4)),
                                  L.nn.initializers.he_normal()(L.random.PRNGKey(1), (4, 5)),
                                  L.nn.initializers.lecun_normal()(L.random.PRNGKey(2), (2, 3)),
                                  L.nn.initializers.normal(0.5)(L.random.PRNGKey(3), (3,)),
                                  L.nn.initializers.uniform()(L.random.PRNGKey(4), (3,)),
                                  L.nn.initializers.truncated_normal(0.1)(L.random.PRNGKey(5), (3,)),
                                  L.nn.initializers.zeros(L.random.PRNGKey(5), (2,)),
                                  L.nn.initializers.orthogonal()(L.random.PRNGKey(6), (3, 3)),
                                  L.nn.initializers.variance_scaling(2.0, "fan_out", "truncated_normal")(L.random.PRNGKey(7), (4, 3)),
                                  L.nn.initializers.xavier_normal()(L.random.PRNGKey(8), (2, 2), L.jnp.bfloat16)])

# ---------------------------------------------------------------------------------- jax.random
def _keys(L):
  return [("PRNGKey", L.random.PRNGKey(0)), ("key", L.random.key(42)),
          ("PRNGKey7", L.random.PRNGKey(7))]


_RANDOM = [
    ("normal", lambda L, k: L.random.normal(k, (3, 4))),
    ("normal_bf16", lambda L, k: L.random.normal(k, (5,), L.jnp.bfloat16)),
    ("normal_f16", lambda L, k: L.random.normal(k, (5,), L.jnp.float16)),
    ("normal_scalar", lambda L, k: L.random.normal(k)),
    ("normal_odd", lambda L, k: L.random.normal(k, (7,))),
    ("uniform", lambda L, k: L.random.uniform(k, (2, 3))),
    ("uniform_range", lambda L, k: L.random.uniform(k, (4,), minval=-2., maxval=5.)),
    ("uniform_bf16", lambda L, k: L.random.uniform(k, (4,), L.jnp.bfloat16)),
    ("uniform_f16", lambda L, k: L.random.uniform(k, (4,), L.jnp.float16, -1, 1)),
    ("uniform_arr_bounds", lambda L, k: L.random.uniform(k, (2, 3), minval=np.zeros(3), maxval=np.arange(1., 4.))),
    ("bernoulli", lambda L, k: L.random.bernoulli(k, 0.3, (10,))),
    ("bernoulli_arr", lambda L, k: L.random.bernoulli(k, np.array([0.1, 0.5, 0.9]))),
    ("bernoulli_default", lambda L, k: L.random.bernoulli(k)),
    ("categorical", lambda L, k: L.random.categorical(k, np.log(np.array([0.1, 0.2, 0.7])), shape=(8,))),
    ("categorical_axis", lambda L, k: L.random.categorical(k, _x((3, 4)), axis=0)),
    ("categorical_batch", lambda L, k: L.random.categorical(k, _x((3, 4)))),
    ("categorical_inf", lambda L, k: L.random.categorical(k, np.array([-np.inf, 0., -np.inf]), shape=(4,))),
    ("permutation_int", lambda L, k: L.random.permutation(k, 10)),
    ("permutation_arr", lambda L, k: L.random.permutation(k, np.arange(12).reshape(4, 3))),
    ("permutation_axis", lambda L, k: L.random.permutation(k, np.arange(12).reshape(4, 3), axis=1)),
    ("permutation_indep", lambda L, k: L.random.permutation(k, np.arange(12).reshape(3, 4), axis=1, independent=True)),
    ("shuffle_like", lambda L, k: L.random.permutation(k, np.arange(100))),
    ("choice", lambda L, k: L.random.choice(k, 5, (3,))),
    ("choice_noreplace", lambda L, k: L.random.choice(k, 10, (4,), replace=False)),
    ("choice_p", lambda L, k: L.random.choice(k, np.arange(4) * 10, (6,), p=np.array([0.1, 0.2, 0.3, 0.4]))),
    ("choice_p_noreplace", lambda L, k: L.random.choice(k, 5, (3,), replace=False, p=np.array([0.1, 0.2, 0.3, 0.2, 0.2]))),
    ("choice_arr_axis", lambda L, k: L.random.choice(k, np.arange(12).reshape(3, 4), (2,), axis=1)),
    ("choice_scalar", lambda L, k: L.random.choice(k, np.arange(5.))),
    ("choice_err", lambda L, k: L.random.choice(k, 3, (5,), replace=False)),
    ("truncated_normal", lambda L, k: L.random.truncated_normal(k, -1., 2., (6,))),
    ("truncated_normal_bf16", lambda L, k: L.random.truncated_normal(k, -2, 2, (4,), L.jnp.bfloat16)),
    ("truncated_normal_arr", lambda L, k: L.random.truncated_normal(k, np.array([-1., 0.]), np.array([1., 3.]))),
    ("randint", lambda L, k: L.random.randint(k, (8,), 0, 10)),
    ("randint_neg", lambda L, k: L.random.randint(k, (8,), -5, 3, dtype=L.jnp.int8)),
    ("randint_big", lambda L, k: L.random.randint(k, (4,), 0, 2 ** 31 - 1)),
    ("randint_u8", lambda L, k: L.random.randint(k, (6,), 0, 300, dtype=L.jnp.uint8)),
    ("randint_arr", lambda L, k: L.random.randint(k, (3,), np.array([0, 10, 100]), np.array([5, 20, 1000]))),
    ("bits", lambda L, k: L.random.bits(k, (3,))),
    ("bits_u8", lambda L, k: L.random.bits(k, (5,), L.jnp.uint8)),
    ("bits_u64_err", lambda L, k: L.random.bits(k, (2,), L.jnp.uint64)),
    ("exponential", lambda L, k: L.random.exponential(k, (4,))),
    ("gumbel", lambda L, k: L.random.gumbel(k, (4,))),
    ("laplace", lambda L, k: L.random.laplace(k, (4,))),
    ("logistic", lambda L, k: L.random.logistic(k, (4,))),
    ("cauchy", lambda L, k: L.random.cauchy(k, (4,))),
    ("rademacher", lambda L, k: L.random.rademacher(k, (6,))),
    ("gamma", lambda L, k: L.random.gamma(k, np.array([0.5, 1., 3.]))),
    ("beta", lambda L, k: L.random.beta(k, 2., 3., (3,))),
    ("dirichlet", lambda L, k: L.random.dirichlet(k, np.array([1., 2., 3.]), (2,))),
    ("poisson", lambda L, k: L.random.poisson(k, 3.0, (5,))),
    ("poisson_big", lambda L, k: L.random.poisson(k, np.array([20., 100.]))),
    ("binomial", lambda L, k: L.random.binomial(k, 10, 0.3, (4,))),
    ("t", lambda L, k: L.random.t(k, 5.0, (3,))),
    ("chisquare", lambda L, k: L.random.chisquare(k, 3.0, (3,))),
    ("geometric", lambda L, k: L.random.geometric(k, 0.3, (4,))),
    ("multivariate_normal", lambda L, k: L.random.multivariate_normal(k, np.zeros(2), np.array([[2., 0.5], [0.5, 1.]]), (3,))),
    ("orthogonal", lambda L, k: L.random.orthogonal(k, 3)),
    ("ball", lambda L, k: L.random.ball(k, 3, shape=(2,))),
    ("weibull_min", lambda L, k: L.random.weibull_min(k, 1.0, 2.0, (3,))),
    ("loggamma", lambda L, k: L.random.loggamma(k, 0.3, (3,))),
    ("split", lambda L, k: L.random.key_data(L.random.split(k))),
    ("split3", lambda L, k: L.random.key_data(L.random.split(k, 3))),
    ("split_shape", lambda L, k: L.random.key_data(L.random.split(k, (2, 2)))),
    ("fold_in", lambda L, k: L.random.key_data(L.random.fold_in(k, 7))),
    ("fold_in_big", lambda L, k: L.random.key_data(L.random.fold_in(k, 2 ** 32 - 1))),
    ("split_then_normal", lambda L, k: [L.random.normal(s, (2,)) for s in L.random.split(k, 3)]),
    ("vmap_normal", lambda L, k: L.jax.vmap(lambda s: L.random.normal(s, (2,)))(L.random.split(k, 4))),
    ("jit_uniform", lambda L, k: L.jax.jit(lambda s: L.random.uniform(s, (3,)))(k)),
    ("clone", lambda L, k: L.random.normal(L.random.clone(k), (2,)) if hasattr(L.random, "clone") else 0),
]
for _rn, _rf in _RANDOM:
  for _ki in range(3):
    def _p(L, rf=_rf, ki=_ki):
      return rf(L, _keys(L)[ki][1])
    add(f"random.{_rn}.key{_ki}", _p)
add("random.key_data", lambda L: [L.random.key_data(L.random.key(3)), L.random.PRNGKey(3),
                                  L.random.PRNGKey(-1), L.random.PRNGKey(2 ** 40)])
add("random.key_impl", lambda L: str(L.random.key_impl(L.random.key(0))))
add("random.wrap", lambda L: L.random.key_data(L.random.wrap_key_data(np.array([1, 2], np.uint32))))
add("random.normal_threefry_x2", lambda L: L.random.normal(L.random.PRNGKey(0), (1000,)).sum())
add("random.bad_shape", lambda L: L.random.normal(L.random.PRNGKey(0), 3))
add("random.uniform_int_err", lambda L: L.random.uniform(L.random.PRNGKey(0), (2,), L.jnp.int32))
add("random.key_arith_err", lambda L: L.random.key(0) + 1)

# --------------------------------------------------------------------------------- tree_util
class _Pt:  # placeholder; namedtuple defined below
  pass


from collections import namedtuple, OrderedDict  # noqa: E402
_NT = namedtuple("_NT", ["a", "b"])

add("tree.leaves_dict", lambda L: L.tree_util.tree_leaves({"b": 1, "a": [2, (3, None)], "c": {}}))
add("tree.leaves_none", lambda L: L.tree_util.tree_leaves([None, 1, None]))
add("tree.leaves_is_leaf", lambda L: L.tree_util.tree_leaves([(1, 2), (3, 4)], is_leaf=lambda x: isinstance(x, tuple)))
add("tree.map", lambda L: L.tree_util.tree_map(lambda x, y: x * 2 + y, {"a": 1, "b": (2, 3)}, {"a": 10, "b": (20, 30)}))
add("tree.map_none", lambda L: L.tree_util.tree_map(lambda x: x + 1, [1, None, {"z": 2}]))
add("tree.map_mismatch", lambda L: L.tree_util.tree_map(lambda x, y: x, [1, 2], [1, 2, 3]))
add("tree.map_dict_keys", lambda L: L.tree_util.tree_map(lambda x, y: x, {"a": 1}, {"b": 1}))
add("tree.namedtuple", lambda L: L.tree_util.tree_leaves(_NT(a=[1, 2], b=3)))
add("tree.ordereddict", lambda L: L.tree_util.tree_leaves(OrderedDict([("z", 1), ("a", 2)])))
add("tree.structure_str", lambda L: [L.tree_util.tree_structure({"a": 1, "b": [2]}).num_leaves,
                                     L.tree_util.tree_structure({"a": 1, "b": [2]}).num_nodes,
                                     L.tree_util.tree_structure([1, 2]) == L.tree_util.tree_structure([3, 4]),
                                     L.tree_util.tree_structure([1, 2]) == L.tree_util.tree_structure((3, 4))])
add("tree.unflatten", lambda L: L.tree_util.tree_unflatten(L.tree_util.tree_structure({"a": 1, "b": (2, 3)}), [7, 8, 9]))
add("tree.flatten_with_path", lambda L: [L.tree_util.keystr(p) for p, _ in
                                         L.tree_util.tree_flatten_with_path({"a": [1, {"b": 2}], "c": _NT(3, 4)})[0]])
add("tree.keystr_simple", lambda L: [L.tree_util.keystr(p, simple=True, separator="/") for p, _ in
                                     L.tree_util.tree_flatten_with_path({"a": [1, {"b": 2}]})[0]])
add("tree.map_with_path", lambda L: L.tree_util.tree_map_with_path(lambda p, x: len(p) * 10 + x, {"a": [1, 2], "b": 3}))
add("tree.reduce", lambda L: [L.tree_util.tree_reduce(lambda a, b: a + b, [1, (2, 3)], 10),
                              L.tree_util.tree_reduce(lambda a, b: a * b, {"x": 2, "y": 5})])
add("tree.transpose", lambda L: L.tree_util.tree_transpose(L.tree_util.tree_structure([0, 0]),
                                                           L.tree_util.tree_structure((0, 0, 0)),
                                                           [(1, 2, 3), (4, 5, 6)]))
add("tree.all", lambda L: [L.tree_util.tree_all([True, (1, 0)]), L.tree_util.tree_all([])])
add("tree.ravel", lambda L: (lambda r: [r[0], r[1](r[0] * 2)])(
    L.flatten_util.ravel_pytree({"w": np.ones((2, 2), np.float32), "b": np.arange(3, dtype=np.int32)})))
add("tree.ravel_mixed", lambda L: L.flatten_util.ravel_pytree([np.ones(2, np.float16), np.ones(1, np.float32)])[0])
add("tree.jax_tree", lambda L: [L.jax.tree.leaves({"a": (1, 2)}), L.jax.tree.map(lambda x: -x, [1, (2,)]),
                                L.jax.tree.structure([1, {"k": 2}]).num_leaves,
                                L.jax.tree.reduce(max, [3, 9, 2])])
add("tree.all_leaves", lambda L: [L.tree_util.all_leaves([1, 2]), L.tree_util.all_leaves([[1]])])
add("tree.partial", lambda L: L.tree_util.tree_leaves(L.tree_util.Partial(lambda a, b: a + b, np.float32(2))))
add("tree.jit_pytree", lambda L: L.jax.jit(lambda d: {"s": d["a"] + d["b"][0], "t": (d["b"][1] * 2,)})(
    {"a": np.float32(1), "b": (np.arange(3.), 2)}))
add("tree.jit_none_out", lambda L: L.jax.jit(lambda x: (x, None, {"z": x * 2}))(np.float32(3)))

# ----------------------------------------------------------------------------- control flow
add("cf.scan_cumsum", lambda L: L.lax.scan(lambda c, x: (c + x, c * x), 0.0, np.arange(5.)))
add("cf.scan_int_carry", lambda L: L.lax.scan(lambda c, x: (c + 1, x * c), 0, np.arange(4)))
add("cf.scan_weak_carry", lambda L: L.lax.scan(lambda c, x: (c + x, None), 0.0, np.arange(3, dtype=np.float16)))
add("cf.scan_reverse", lambda L: L.lax.scan(lambda c, x: (c * 2 + x, c), 1.0, np.arange(4.), reverse=True))
add("cf.scan_length", lambda L: L.lax.scan(lambda c, _: (c * 3, c), np.int32(1), None, length=5))
add("cf.scan_unroll", lambda L: L.lax.scan(lambda c, x: (c + x, c), 0.0, np.arange(7.), unroll=3))
add("cf.scan_pytree", lambda L: L.lax.scan(lambda c, x: ({"a": c["a"] + x[0], "b": c["b"] * x[1]}, x[0] - x[1]),
                                           {"a": 0.0, "b": np.float32(1)}, (np.arange(3.), np.arange(1., 4.))))
add("cf.scan_carry_type_err", lambda L: L.lax.scan(lambda c, x: (c + x, None), np.int32(0), np.arange(3.)))
add("cf.scan_carry_shape_err", lambda L: L.lax.scan(lambda c, x: (np.zeros(2), None), 0.0, np.arange(3.)))
add("cf.scan_jit", lambda L: L.jax.jit(lambda xs: L.lax.scan(lambda c, x: (c + x ** 2, c), 0., xs))(np.arange(4.)))
add("cf.scan_grad", lambda L: L.jax.grad(lambda w: L.lax.scan(lambda c, x: (c * w + x, None), 1.0, np.arange(4.))[0])(0.5))
add("cf.scan_vmap", lambda L: L.jax.vmap(lambda v: L.lax.scan(lambda c, x: (c + x * v, c), 0., np.arange(3.)))(np.arange(2.)))
add("cf.cond", lambda L: [L.lax.cond(True, lambda x: x + 1, lambda x: x - 1, 3),
                          L.lax.cond(np.bool_(False), lambda x: x * 2., lambda x: x / 2., np.float32(3))])
add("cf.cond_weak", lambda L: L.lax.cond(True, lambda: 1.0, lambda: 2.0))
add("cf.cond_mixed_weak", lambda L: L.lax.cond(True, lambda: np.float32(1.0), lambda: 2.0))
add("cf.cond_type_err", lambda L: L.lax.cond(True, lambda: np.float32(1.0), lambda: np.int32(2)))
add("cf.cond_shape_err", lambda L: L.lax.cond(True, lambda: np.zeros(2), lambda: np.zeros(3)))
add("cf.cond_int_pred", lambda L: L.lax.cond(2, lambda: 1, lambda: 0))
add("cf.cond_float_pred", lambda L: L.lax.cond(np.float32(1.0), lambda: 1, lambda: 0))
add("cf.cond_jit", lambda L: L.jax.jit(lambda p, x: L.lax.cond(p > 0, lambda v: v * 2, lambda v: -v, x))(np.float32(-1), np.arange(3.)))
add("cf.cond_grad", lambda L: L.jax.grad(lambda x: L.lax.cond(x > 0, L.jnp.sin, L.jnp.cos, x))(0.5))
add("cf.cond_vmap", lambda L: L.jax.vmap(lambda p, x: L.lax.cond(p, lambda v: v + 1., lambda v: v * 10., x))(
    np.array([True, False, True]), np.arange(3.)))
add("cf.cond_pytree", lambda L: L.lax.cond(False, lambda a, b: (b, a), lambda a, b: (a, b), 1.0, {"k": 2}))
add("cf.switch", lambda L: [L.lax.switch(i, [lambda x: x, lambda x: x * 2, lambda x: x * 3], 5.0) for i in (-1, 0, 2, 7)])
add("cf.switch_jit", lambda L: L.jax.jit(lambda i: L.lax.switch(i, [lambda: 1., lambda: 2.]))(5))
add("cf.while", lambda L: L.lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 3, c[1] * 2.), (0, 1.)))
add("cf.while_weak", lambda L: L.lax.while_loop(lambda x: x < 5, lambda x: x + 1.5, 0.0))
add("cf.while_jit", lambda L: L.jax.jit(lambda n: L.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + c[0]), (0, 0)))(6))
add("cf.while_type_err", lambda L: L.lax.while_loop(lambda x: x < 5, lambda x: x + 1.5, 0))
add("cf.while_grad_err", lambda L: L.jax.grad(lambda x: L.lax.while_loop(lambda c: c < 5., lambda c: c * 2., x))(1.0))
add("cf.while_vmap", lambda L: L.jax.vmap(lambda n: L.lax.while_loop(lambda c: c < n, lambda c: c + 1, 0))(np.array([1, 4, 2])))
add("cf.fori", lambda L: [L.lax.fori_loop(0, 5, lambda i, c: c + i, 0),
                          L.lax.fori_loop(0, 5, lambda i, c: c + i, 0.0),
                          L.lax.fori_loop(2, 5, lambda i, c: c * i, np.float32(1)),
                          L.lax.fori_loop(5, 2, lambda i, c: c + 1, 0),
                          L.lax.fori_loop(np.int8(0), np.int8(3), lambda i, c: c + i, 0)])
add("cf.fori_jit_dyn", lambda L: L.jax.jit(lambda n: L.lax.fori_loop(0, n, lambda i, c: c * 2., 1.0))(4))
add("cf.fori_grad", lambda L: L.jax.grad(lambda x: L.lax.fori_loop(0, 3, lambda i, c: c * x, 1.0))(2.0))
add("cf.fori_unroll", lambda L: L.lax.fori_loop(0, 6, lambda i, c: c + i * i, 0, unroll=2))
add("cf.map", lambda L: L.lax.map(lambda x: x ** 2 + 1, np.arange(4.)))
add("cf.map_batch", lambda L: L.lax.map(lambda x: x.sum(), np.arange(12.).reshape(6, 2), batch_size=4))
add("cf.assoc_scan", lambda L: [L.lax.associative_scan(L.jnp.add, np.arange(7.)),
                                L.lax.associative_scan(L.jnp.maximum, np.array([3, 1, 4, 1, 5]), reverse=True)])
add("cf.cummax", lambda L: [L.lax.cummax(np.array([1, 3, 2, 5])), L.lax.cumlogsumexp(np.arange(4.)),
                            L.lax.cumsum(np.arange(4), reverse=True)])
add("cf.select_n", lambda L: L.lax.select_n(np.array([0, 1, 2]), np.zeros(3), np.ones(3), np.full(3, 2.)))
add("cf.stop_gradient", lambda L: L.jax.grad(lambda x: x * L.lax.stop_gradient(x))(3.0))
add("cf.bool_tracer_err", lambda L: L.jax.jit(lambda x: 1 if x > 0 else 2)(1.0))
add("cf.int_tracer_err", lambda L: L.jax.jit(lambda x: int(x))(1.0))
add("cf.shape_tracer_err", lambda L: L.jax.jit(lambda n: L.jnp.zeros(n))(3))
add("cf.static_argnums", lambda L: L.jax.jit(lambda n, x: L.jnp.zeros(n) + x, static_argnums=0)(3, 1.0))
add("cf.static_argnames", lambda L: L.jax.jit(lambda x, n: x * n, static_argnames="n")(np.arange(3.), n=2))

# ------------------------------------------------------------------------------ grad / vmap
add("ad.grad_int_err", lambda L: L.jax.grad(lambda x: x * 2)(3))
add("ad.grad_nonscalar_err", lambda L: L.jax.grad(lambda x: x * 2)(np.ones(3)))
add("ad.grad_allow_int", lambda L: L.jax.grad(lambda x: x * 2, allow_int=True)(3))
add("ad.grad_argnums", lambda L: L.jax.grad(lambda x, y: x * y ** 2, argnums=(0, 1))(2.0, 3.0))
add("ad.value_and_grad_aux", lambda L: L.jax.value_and_grad(lambda x: (x ** 2, {"a": x}), has_aux=True)(3.0))
add("ad.grad_where_nan", lambda L: L.jax.grad(lambda x: L.jnp.where(x > 0, L.jnp.sqrt(x), 0.).sum())(np.array([0., 4.])))
add("ad.grad_sqrt0", lambda L: [L.jax.grad(L.jnp.sqrt)(0.0), L.jax.grad(L.jnp.abs)(0.0),
                                L.jax.grad(lambda x: L.jnp.linalg.norm(x))(np.zeros(2)),
                                L.jax.grad(L.jnp.maximum, argnums=(0, 1))(1.0, 1.0),
                                L.jax.grad(lambda x: x ** 0.5)(0.0), L.jax.grad(lambda x: x ** 2)(0.0),
                                L.jax.grad(lambda x: x ** 0)(0.0), L.jax.grad(lambda x: 0.0 ** x)(0.0),
                                L.jax.grad(L.jnp.sign)(0.0), L.jax.grad(L.jnp.round)(1.5),
                                L.jax.grad(lambda x: L.jnp.clip(x, 0., 1.))(1.0),
                                L.jax.grad(lambda x: L.jnp.max(np.array([1., 2.]) * x))(1.0),
                                L.jax.grad(lambda x: L.jnp.max(L.jnp.stack([x, x])))(2.0),
                                L.jax.grad(L.jnp.arctan2)(0.0, 0.0) if False else 0.,
                                L.jax.grad(L.jnp.log)(0.0), L.jax.grad(L.jnp.exp)(1000.0)])
add("ad.grad_mean_var", lambda L: [L.jax.grad(lambda x: L.jnp.var(x))(_x((5,))),
                                   L.jax.grad(lambda x: L.jnp.std(x))(np.ones(3, np.float32)),
                                   L.jax.grad(lambda x: L.jnp.prod(x))(np.array([2., 0., 3.])),
                                   L.jax.grad(lambda x: L.jnp.prod(x))(np.array([0., 0., 3.])),
                                   L.jax.grad(lambda x: L.jnp.cumprod(x).sum())(np.array([2., 0., 3.])),
                                   L.jax.grad(lambda x: L.jnp.sort(x)[0])(np.array([2., 1., 3.])),
                                   L.jax.grad(lambda x: L.jnp.median(x))(np.array([2., 1., 3., 4.]))])
add("ad.grad_indexing", lambda L: L.jax.grad(lambda x: x[np.array([0, 0, 2])].sum() + x[1:].prod())(np.arange(1., 5.)))
add("ad.grad_at_set", lambda L: L.jax.grad(lambda x: x.at[1].set(5.).sum() * x[1])(np.arange(3.)))
add("ad.jacfwd", lambda L: L.jax.jacfwd(lambda x: L.jnp.sin(x) * x[0])(np.arange(3.)))
add("ad.jacrev", lambda L: L.jax.jacrev(lambda x: {"a": x ** 2, "b": x.sum()})(np.arange(3.)))
add("ad.hessian", lambda L: L.jax.hessian(lambda x: (x ** 3).sum() + x[0] * x[1])(np.arange(1., 3.)))
add("ad.jvp", lambda L: L.jax.jvp(lambda x: L.jnp.tanh(x) * 2, (np.arange(3.),), (np.ones(3),)))
add("ad.vjp", lambda L: (lambda r: [r[0], r[1](np.ones(3))])(L.jax.vjp(lambda x: x ** 2, np.arange(3.))))
add("ad.grad_bf16", lambda L: L.jax.grad(lambda x: (x * x).sum())(L.jnp.asarray(np.arange(3.), L.jnp.bfloat16)))
add("ad.grad_f16_weak", lambda L: L.jax.grad(lambda x: x * 2.0)(np.float16(3)))
add("ad.grad_complex_err", lambda L: L.jax.grad(lambda x: x * 2)(1j))
add("ad.grad_of_grad", lambda L: L.jax.grad(L.jax.grad(lambda x: x ** 4))(2.0))
add("ad.custom_jvp", lambda L: L.jax.grad(L.nn.relu)(np.float32(-1)))
add("ad.checkpoint", lambda L: L.jax.grad(L.jax.checkpoint(lambda x: L.jnp.sin(x) ** 2))(1.0))
add("ad.linear_cross_entropy", lambda L: L.jax.grad(
    lambda w, x, y: -(L.nn.log_softmax(x @ w) * L.nn.one_hot(y, 3)).sum(axis=-1).mean())(
        _x((4, 3)), _x((5, 4), seed=1), np.array([0, 2, 1, 1, 0])))
add("ad.mlp_value_and_grad", lambda L: L.jax.value_and_grad(
    lambda p, x: L.jnp.mean((L.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"]) ** 2))(
        {"w1": _x((4, 8)) / 4, "b1": np.zeros(8, np.float32), "w2": _x((8, 2), seed=5) / 8}, _x((6, 4), seed=3)))
add("vm.in_axes", lambda L: L.jax.vmap(lambda a, b: a * b, in_axes=(0, None))(np.arange(6.).reshape(3, 2), np.arange(2.)))
add("vm.out_axes", lambda L: L.jax.vmap(lambda a: (a, a.sum()), out_axes=(1, 0))(np.arange(6.).reshape(3, 2)))
add("vm.in_axes_dict", lambda L: L.jax.vmap(lambda d: d["x"] + d["y"], in_axes=({"x": 0, "y": None},))({"x": np.arange(3.), "y": 1.}))
add("vm.size_err", lambda L: L.jax.vmap(lambda a, b: a + b)(np.arange(3.), np.arange(4.)))
add("vm.axis_err", lambda L: L.jax.vmap(lambda a: a, in_axes=2)(np.arange(3.)))
add("vm.axis_size", lambda L: L.jax.vmap(lambda: 1.0, axis_size=3)())
add("vm.nested", lambda L: L.jax.vmap(L.jax.vmap(lambda a, b: a @ b))(_x((2, 3, 4, 5)), _x((2, 3, 5, 2), seed=1)))
add("vm.grad", lambda L: L.jax.vmap(L.jax.grad(lambda x: L.jnp.sin(x) * x))(np.arange(4.)))
add("vm.softmax", lambda L: L.jax.vmap(L.nn.softmax, in_axes=1, out_axes=1)(_x()))
add("vm.index", lambda L: L.jax.vmap(lambda x, i: x[i])(_x(), np.array([0, 3, 9])))
add("vm.dynamic_slice", lambda L: L.jax.vmap(lambda x, i: L.lax.dynamic_slice(x, (i,), (2,)))(_x(), np.array([0, 3, -1])))
add("vm.argsort", lambda L: L.jax.vmap(L.jnp.argsort)(_x()))
add("vm.weak", lambda L: L.jax.vmap(lambda x: x * 2.0)(np.arange(3)))
add("vm.spmd_axis_name", lambda L: L.jax.vmap(lambda x: x - L.lax.pmean(x, "i"), axis_name="i")(np.arange(4.)))
add("vm.psum", lambda L: L.jax.vmap(lambda x: L.lax.psum(x, "b") + L.lax.axis_index("b"), axis_name="b")(np.arange(3.)))

# ------------------------------------------------------------------------------ lax / misc
add("lax.dynamic_slice_clamp", lambda L: [L.lax.dynamic_slice(np.arange(10.), (8,), (4,)),
                                          L.lax.dynamic_slice(np.arange(10.), (-3,), (2,)),
                                          L.lax.dynamic_update_slice(np.arange(5.), np.ones(2), (4,))])
add("lax.gather_fill", lambda L: L.jnp.asarray(np.arange(5.)).at[np.array([1, 7])].get(mode="fill"))
add("lax.conv", lambda L: L.lax.conv_general_dilated(_x((1, 2, 6, 6)), _x((3, 2, 3, 3), seed=1), (1, 1), "SAME"))
add("lax.conv_stride", lambda L: L.lax.conv_general_dilated(_x((2, 5, 5, 3)), _x((3, 3, 3, 4), seed=1), (2, 2), "VALID",
                                                            dimension_numbers=("NHWC", "HWIO", "NHWC")))
add("lax.reduce_window", lambda L: L.lax.reduce_window(_x((4, 4)), -np.inf, L.lax.max, (2, 2), (2, 2), "VALID"))
add("lax.top_k", lambda L: L.lax.top_k(np.array([3., 1., 4., 1., 5.]), 3))
add("lax.sort_multi", lambda L: L.lax.sort((np.array([2, 1, 2, 0]), np.array([0., 1., 2., 3.])), num_keys=1))
add("lax.integer_pow", lambda L: [L.lax.integer_pow(np.float32(2), -2), L.lax.integer_pow(np.arange(4), 3)])
add("lax.clamp", lambda L: L.lax.clamp(0., _x(), 1.))
add("lax.convert_nan", lambda L: L.lax.convert_element_type(np.array([np.nan, 1e10, -1e10], np.float32), np.int32))
add("lax.bitcast", lambda L: L.lax.bitcast_convert_type(np.float32(1.0), np.int32))
add("lax.reduce_precision", lambda L: L.lax.reduce_precision(np.float32(1.1), 8, 7))
add("lax.erf_inv", lambda L: L.lax.erf_inv(np.array([-1., -0.5, 0., 0.99, 1.], np.float32)))
add("lax.lgamma_near", lambda L: L.lax.lgamma(np.array([0.9, 0.999, 1.0, 1.001, 1.1, 1.9, 1.999, 2.0, 2.001, 2.5, -0.5, 1e-7], np.float32)))
add("lax.digamma", lambda L: L.lax.digamma(np.array([0.5, 1., 2., 10., -0.5, 0.], np.float32)))
add("scipy.special", lambda L: [L.scipy.special.erf(0.5), L.scipy.special.gammaln(np.array([0.5, 3.])),
                                L.scipy.special.xlogy(0., 0.), L.scipy.special.xlog1py(0., -1.),
                                L.scipy.special.expit(np.array([-100., 0., 100.])),
                                L.scipy.special.logit(np.array([0., 0.5, 1.])),
                                L.scipy.special.entr(np.array([0., 0.5, -1.]))])
add("scipy.stats", lambda L: [L.scipy.stats.norm.logpdf(np.array([0., 1.]), 1., 2.),
                              L.scipy.stats.norm.cdf(np.array([-1., 0., 2.])),
                              L.scipy.stats.norm.ppf(np.array([0.1, 0.5])),
                              L.scipy.stats.bernoulli.logpmf(np.array([0, 1]), 0.3),
                              L.scipy.stats.multivariate_normal.logpdf(np.zeros(2), np.ones(2), np.eye(2))])
add("linalg", lambda L: [L.jnp.linalg.inv(_x((3, 3)) + 5 * np.eye(3)), L.jnp.linalg.det(_x((3, 3))),
                         L.jnp.linalg.slogdet(_x((3, 3))), L.jnp.linalg.solve(_x((3, 3)) + 5 * np.eye(3), np.arange(3.)),
                         L.jnp.linalg.cholesky(np.eye(3) * 2 + 0.1), L.jnp.linalg.eigh(np.diag(np.arange(3.)) + 0.5)[0],
                         L.jnp.linalg.svd(_x(), compute_uv=False), L.jnp.linalg.pinv(_x()).shape,
                         L.jnp.linalg.matrix_rank(_x())])

# --------------------------------------------------------------------------- model-like code
def _mlp_init(L, key, sizes):
  keys = L.random.split(key, len(sizes) - 1)
  return [{"w": L.random.normal(k, (m, n)) / np.sqrt(m), "b": L.jnp.zeros(n)}
          for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def _mlp(L, params, x):
  for layer in params[:-1]:
    x = L.nn.relu(x @ layer["w"] + layer["b"])
  return x @ params[-1]["w"] + params[-1]["b"]


def _xent(L, params, x, y):
  logits = _mlp(L, params, x)
  return -L.jnp.mean(L.jnp.sum(L.nn.log_softmax(logits) * L.nn.one_hot(y, logits.shape[-1]), -1))


def _train_sgd(L, steps=5, jit=True):
  key = L.random.PRNGKey(0)
  k1, k2, k3 = L.random.split(key, 3)
  params = _mlp_init(L, k1, [4, 16, 3])
  x = L.random.normal(k2, (32, 4))
  y = L.random.randint(k3, (32,), 0, 3)
  step = lambda p: L.jax.tree.map(lambda a, g: a - 0.1 * g, p, L.jax.grad(lambda q: _xent(L, q, x, y))(p))
  if jit:
    step = L.jax.jit(step)
  losses = []
  for _ in range(steps):
    params = step(params)
    losses.append(_xent(L, params, x, y))
  return losses, params


add("model.mlp_sgd_jit", lambda L: _train_sgd(L))
add("model.mlp_sgd_eager", lambda L: _train_sgd(L, steps=2, jit=False))


def _adam(L):
  opt_init, opt_update, get_params = L.optimizers.adam(1e-2)
  key = L.random.PRNGKey(1)
  params = _mlp_init(L, key, [3, 8, 2])
  x = L.random.uniform(L.random.fold_in(key, 1), (16, 3))
  y = L.random.randint(L.random.fold_in(key, 2), (16,), 0, 2)
  state = opt_init(params)

  @L.jax.jit
  def step(i, state):
    p = get_params(state)
    loss, g = L.jax.value_and_grad(lambda q: _xent(L, q, x, y))(p)
    return loss, opt_update(i, g, state)
  losses = []
  for i in range(4):
    loss, state = step(i, state)
    losses.append(loss)
  return losses, get_params(state)


add("model.adam", _adam)


def _rnn(L):
  key = L.random.PRNGKey(3)
  kw, kx = L.random.split(key)
  w = L.random.normal(kw, (5, 5)) * 0.3
  xs = L.random.normal(kx, (7, 2, 5))

  def cell(h, x):
    h = L.jnp.tanh(h @ w + x)
    return h, h.sum(-1)
  loss = lambda w_: L.lax.scan(lambda h, x: (L.jnp.tanh(h @ w_ + x), None), L.jnp.zeros((2, 5)), xs)[0].sum()
  return L.lax.scan(cell, L.jnp.zeros((2, 5)), xs), L.jax.grad(loss)(w)


add("model.rnn_scan", _rnn)
add("model.rnn_scan_jit", lambda L: L.jax.jit(lambda: _rnn(L))())


def _attention_block(L, x):
  d = x.shape[-1]
  k = L.random.PRNGKey(5)
  wq, wk, wv = (L.random.normal(kk, (d, d)) / np.sqrt(d) for kk in L.random.split(k, 3))
  mu = x.mean(-1, keepdims=True)
  var = x.var(-1, keepdims=True)
  h = (x - mu) / L.jnp.sqrt(var + 1e-5)
  q, kk, v = h @ wq, h @ wk, h @ wv
  s = q @ kk.swapaxes(-1, -2) / np.sqrt(d)
  mask = L.jnp.tril(L.jnp.ones((x.shape[-2], x.shape[-2]), bool))
  s = L.jnp.where(mask, s, -1e9)
  return x + L.nn.softmax(s, axis=-1) @ v


add("model.attention", lambda L: _attention_block(L, _x((2, 6, 8), scale=1.0)))
add("model.attention_jit", lambda L: L.jax.jit(lambda x: _attention_block(L, x))(_x((2, 6, 8), scale=1.0)))
add("model.attention_grad", lambda L: L.jax.grad(lambda x: _attention_block(L, x).sum())(_x((1, 4, 8), scale=1.0)))


def _cnn(L, x):
  k = L.random.PRNGKey(9)
  w = L.random.normal(k, (3, 3, 1, 4)) * 0.3
  y = L.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
  y = L.nn.relu(y)
  y = L.lax.reduce_window(y, 0.0, L.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
  return L.nn.log_softmax(y.reshape(y.shape[0], -1) @ L.jnp.ones((y[0].size, 3)) / 10)


add("model.cnn", lambda L: _cnn(L, _x((2, 6, 6, 1), scale=1.0)))
add("model.cnn_jit_grad", lambda L: L.jax.jit(L.jax.grad(lambda x: _cnn(L, x).sum()))(_x((2, 6, 6, 1), scale=1.0)))
add("model.batchnorm", lambda L: (lambda x: (x - x.mean(0)) / L.jnp.sqrt(x.var(0) + 1e-5))(_x((8, 5))))
add("model.vmap_per_example_grad", lambda L: L.jax.vmap(L.jax.grad(lambda w, x: L.jnp.tanh(x @ w).sum()), in_axes=(None, 0))(
    _x((4, 3)), _x((5, 4), seed=2)))
add("model.dropout", lambda L: L.jnp.where(L.random.bernoulli(L.random.PRNGKey(2), 0.8, (4, 5)), _x((4, 5)) / 0.8, 0))
add("model.l2norm", lambda L: _x() / L.jnp.linalg.norm(_x(), axis=-1, keepdims=True))
add("model.mse_jit_grad", lambda L: L.jax.jit(L.jax.value_and_grad(lambda w: L.jnp.mean((_x((10, 3)) @ w - 1.0) ** 2)))(np.ones(3, np.float32)))
add("model.fft", lambda L: [L.jnp.fft.fft(np.arange(8.)), L.jnp.fft.rfft(_x((2, 8))), L.jnp.fft.irfft(L.jnp.fft.rfft(_x((8,))))])
add("model.cumulative_logits", lambda L: L.jnp.cumsum(L.nn.softmax(_x()), axis=-1))
add("model.topk_accuracy", lambda L: L.jnp.mean(L.jnp.argmax(_x((10, 4)), -1) == np.arange(10) % 4))
add("model.clip_grads", lambda L: L.jax.tree.map(lambda g: L.jnp.clip(g, -0.5, 0.5), L.jax.grad(
    lambda p: (p["a"] ** 3).sum() + (p["b"] * 2).sum())({"a": _x((3,)), "b": _x((2,), seed=1)})))
add("model.optax_like_schedule", lambda L: [L.jnp.cos(np.pi * i / 10) * 0.5 + 0.5 for i in range(3)])

# ------------------------------------------------------------------- array object / Python API
add("obj.repr", lambda L: [repr(L.jnp.asarray(np.array([1.5, -2.0], np.float32))), repr(L.jnp.arange(3)),
                           repr(L.jnp.asarray(2.0)), repr(L.jnp.asarray(True)), repr(L.jnp.ones((2, 2), L.jnp.bfloat16)),
                           repr(L.jnp.zeros(0)), repr(L.jnp.asarray(np.array([1e10, 1e-5], np.float32))),
                           repr(L.jnp.asarray(np.uint8(7))), repr(L.jnp.asarray(1 + 2j))])
add("obj.str", lambda L: [str(L.jnp.asarray(np.array([1.5, -2.0], np.float32))), str(L.jnp.arange(3)),
                          str(L.jnp.asarray(2.0)), str(L.jnp.ones((2, 2), L.jnp.int8)), f"{L.jnp.asarray(2.5):.2f}",
                          format(L.jnp.asarray(3), "d")])
add("obj.scalars", lambda L: [float(L.jnp.asarray(2.5)), int(L.jnp.asarray(2.7)), int(L.jnp.asarray(-2.7)),
                              bool(L.jnp.asarray(0.0)), complex(L.jnp.asarray(1.5)), L.jnp.asarray(3.5).item(),
                              L.jnp.arange(3).tolist(), L.jnp.asarray([1.5, 2.5]).tolist(), L.jnp.asarray(7).item(),
                              type(L.jnp.asarray(7).item()).__name__, type(L.jnp.asarray(True).item()).__name__,
                              L.jnp.asarray(np.float16(1.5)).item(), type(L.jnp.asarray(np.float16(1.5)).item()).__name__,
                              int(L.jnp.asarray(np.uint32(4000000000))), L.jnp.asarray([[1, 2]]).tolist()])
add("obj.bool_err", lambda L: bool(L.jnp.arange(3)))
add("obj.bool_empty", lambda L: bool(L.jnp.zeros(0)))
add("obj.len_scalar_err", lambda L: len(L.jnp.asarray(3)))
add("obj.int_array_err", lambda L: int(L.jnp.arange(3)))
add("obj.iter", lambda L: [v for v in L.jnp.arange(3)])
add("obj.iter_scalar_err", lambda L: [v for v in L.jnp.asarray(3)])
add("obj.attrs", lambda L: (lambda a: [a.shape, a.ndim, a.size, a.itemsize, a.nbytes, str(a.dtype), a.T.shape,
                                       a.mT.shape, a.real.dtype.name, a.imag.shape, len(a), a.dtype == np.float32,
                                       a.dtype == L.jnp.float32, a.dtype.kind, a.weak_type])(L.jnp.ones((2, 3))))
add("obj.methods", lambda L: (lambda a: [a.sum(axis=0), a.mean(), a.max(keepdims=True), a.argmax(), a.reshape(-1),
                                         a.reshape(3, 2), a.flatten(), a.ravel(), a.squeeze(), a.transpose(), a.swapaxes(0, 1),
                                         a.astype(int), a.clip(0, 1), a.round(1), a.cumsum(), a.std(), a.var(ddof=1),
                                         a.any(), a.all(), a.prod(axis=1), a.min(axis=-1), a.ptp(), a.nonzero(),
                                         a.sort(), a.argsort(), a.take(np.array([0, 2])), a.repeat(2), a.conj(),
                                         a.dot(a.T), a.trace(), a.diagonal(), a.copy(), a.view(L.jnp.int32) if hasattr(a, "view") else 0])(
    L.jnp.asarray(_x((2, 3)))))
add("obj.isinstance", lambda L: [isinstance(L.jnp.ones(2), L.jax.Array), isinstance(np.ones(2), L.jax.Array),
                                 isinstance(L.jnp.float32(1), L.jax.Array)])
add("obj.dtype_api", lambda L: [str(L.jnp.dtype("float32")), str(L.jnp.float32), L.jnp.issubdtype(L.jnp.bfloat16, L.jnp.floating),
                                L.jnp.issubdtype(np.int8, L.jnp.integer), L.jnp.can_cast(np.int32, np.float32),
                                L.jnp.can_cast(np.float32, np.int32), str(L.jnp.finfo(L.jnp.bfloat16).eps),
                                float(L.jnp.finfo(np.float16).max), int(L.jnp.iinfo(np.int8).min), L.jnp.iinfo(np.uint16).bits,
                                str(L.jax.dtypes.canonicalize_dtype(np.float64)), str(L.jnp.zeros(2, float).dtype),
                                str(L.jnp.asarray(np.float64(1)).dtype), str(L.jnp.asarray(np.int64(1)).dtype),
                                str(L.jnp.result_type(L.jnp.float16, L.jnp.int64)), str(L.jnp.bfloat16(1).dtype),
                                L.jnp.isdtype(np.float32, "real floating"), str(L.jnp.float_), str(L.jnp.int_)])
add("obj.scalar_types", lambda L: [L.jnp.float32(1.5), L.jnp.int8(300) if False else L.jnp.int8(100), L.jnp.bool_(3),
                                   L.jnp.uint8(255), L.jnp.float16(np.pi), L.jnp.float32("1.5") if False else 0,
                                   L.jnp.int32(np.arange(3)), L.jnp.float32([1, 2])])
add("obj.x64_overflow", lambda L: L.jnp.asarray(2 ** 31))
add("obj.x64_float", lambda L: L.jnp.asarray(1e300))
add("obj.setitem_err", lambda L: L.jnp.arange(3).__setitem__(0, 1))
add("obj.hash_err", lambda L: hash(L.jnp.arange(3)))
add("obj.eq_tree", lambda L: (L.jnp.arange(3) == L.jnp.arange(3)).tolist())
add("obj.devices", lambda L: [str(L.jnp.ones(2).dtype), L.jax.device_count() >= 1, L.jax.default_backend()])
add("obj.block", lambda L: L.jax.block_until_ready({"a": L.jnp.ones(2)})["a"])
add("obj.device_put", lambda L: L.jax.device_put(np.arange(3.)))
add("obj.device_get", lambda L: [type(L.jax.device_get(L.jnp.ones(2))).__name__, L.jax.device_get({"a": L.jnp.ones(2)})["a"]])
add("obj.eval_shape", lambda L: (lambda s: [s.shape, str(s.dtype)])(L.jax.eval_shape(lambda x: x.sum(0), np.ones((3, 4), np.float32))))
add("obj.make_jaxpr_str", lambda L: str(L.jax.make_jaxpr(lambda x: L.jnp.sin(x) * 2.0)(1.0)))
add("obj.jit_repr_args", lambda L: L.jax.jit(lambda x, y: x + y)(np.int8(3), 4))
add("obj.jit_str_arg_err", lambda L: L.jax.jit(lambda x: x)("a"))
add("obj.jit_list_arg", lambda L: L.jax.jit(lambda x: x[0] + x[1])([1.0, 2.0]))
add("obj.jit_dtype_out", lambda L: L.jax.jit(lambda x: x * 2)(np.arange(3, dtype=np.uint8)))
add("obj.jit_f64_in", lambda L: L.jax.jit(lambda x: x + 1)(np.arange(3.0)))
add("obj.jit_i64_in", lambda L: L.jax.jit(lambda x: x + 1)(np.arange(3)))
add("obj.jit_bool_in", lambda L: L.jax.jit(lambda x: x + 1)(np.array([True, False])))
add("obj.jit_python_scalar_weak", lambda L: L.jax.jit(lambda x: x)(2.0))
add("obj.jit_python_int_weak", lambda L: L.jax.jit(lambda x: x * 2)(3))
add("obj.jit_none_arg", lambda L: L.jax.jit(lambda x, y: x if y is None else y)(1.0, None))
add("obj.grad_python_scalar", lambda L: L.jax.grad(lambda x: x * x)(3.0))
add("obj.conversion_dtype_arg", lambda L: [L.jnp.asarray([1, 2], dtype="float16"), L.jnp.zeros(2, "int8"),
                                           L.jnp.array([1.5], dtype=np.int32), L.jnp.array(np.array([1.5]), dtype=bool)])

# ------------------------------------------------------------------ decompositions' conventions
_SYM = (lambda a: (a + a.T) / 2 + 3 * np.eye(4, dtype=np.float32))(_x((4, 4)))
add("la.eigh", lambda L: L.jnp.linalg.eigh(_SYM))
add("la.eigh_jit", lambda L: L.jax.jit(L.jnp.linalg.eigh)(_SYM))
add("la.svd", lambda L: L.jnp.linalg.svd(_x((4, 3))))
add("la.svd_thin", lambda L: L.jnp.linalg.svd(_x((4, 3)), full_matrices=False))
add("la.svd_jit", lambda L: L.jax.jit(lambda a: L.jnp.linalg.svd(a, full_matrices=False))(_x((4, 3))))
add("la.qr", lambda L: L.jnp.linalg.qr(_x((4, 3))))
add("la.qr_complete", lambda L: L.jnp.linalg.qr(_x((4, 3)), mode="complete"))
add("la.qr_jit", lambda L: L.jax.jit(L.jnp.linalg.qr)(_x((4, 3))))
add("la.lu", lambda L: L.jax.scipy.linalg.lu(_x((4, 4))) if False else L.lax.linalg.lu(_x((4, 4))))
add("la.cholesky_jit", lambda L: L.jax.jit(L.jnp.linalg.cholesky)(_SYM))
add("la.eig_vals", lambda L: L.jnp.sort_complex(L.jnp.linalg.eigvals(_SYM.astype(np.float32))) if hasattr(L.jnp, "sort_complex") else 0)
add("la.lstsq", lambda L: L.jnp.linalg.lstsq(_x((5, 3)), _x((5,), seed=1))[0])
add("la.det_jit_grad", lambda L: L.jax.grad(L.jnp.linalg.det)(_SYM))
add("la.inv_grad", lambda L: L.jax.grad(lambda a: L.jnp.linalg.inv(a).sum())(_SYM))
add("la.eigh_grad", lambda L: L.jax.grad(lambda a: L.jnp.linalg.eigh(a)[0].sum() + L.jnp.linalg.eigh(a)[0][0])(_SYM))
add("la.svd_grad", lambda L: L.jax.grad(lambda a: L.jnp.linalg.svd(a, compute_uv=False).sum())(_x((4, 3))))
add("la.matrix_power", lambda L: [L.jnp.linalg.matrix_power(_SYM, 3), L.jnp.linalg.matrix_power(_SYM, -1)])
add("la.expm", lambda L: __import__(L.jax.__name__ + ".scipy.linalg", fromlist=["expm"]).expm(_SYM / 10))
add("la.solve_triangular", lambda L: __import__(L.jax.__name__ + ".scipy.linalg", fromlist=["x"]).solve_triangular(
    np.tril(_SYM), np.arange(4.0, dtype=np.float32), lower=True))
add("la.cho_solve", lambda L: (lambda m: m.cho_solve(m.cho_factor(_SYM), np.arange(4.0, dtype=np.float32)))(
    __import__(L.jax.__name__ + ".scipy.linalg", fromlist=["x"])))
