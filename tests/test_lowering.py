"""Lowering (``lowering/from_jaxpr.py`` and the rules beside the primitives): every primitive
has a lowering rule, and every rule, run by the reference executor on the lowered and optimized
module, computes what the primitive's eager implementation computes.

``CASES`` names, per primitive, functions that bind it and inputs to run them on; a primitive
missing from ``CASES`` (or without a rule) fails ``test_coverage`` so gaps are visible.  Integer
and boolean results must be equal; float results equal up to a few ulps, with NaNs in the same
places.
"""
from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import core, lax
from ourjax.config import enable_x64
from ourjax.interpreters import ad
from ourjax.lax.reductions import _chooser_identity
from ourjax.lowering import from_jaxpr, hlo

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)


@pytest.fixture(autouse=True)
def strict_lowering(monkeypatch):
  monkeypatch.setenv("OURJAX_STRICT_LOWERING", "1")


def _tol(dt):
  dt = np.dtype(dt)
  if dt in (BF16, F16):
    return 1e-2
  if dt in (np.dtype(np.float32), np.dtype(np.complex64)):
    return 2e-6
  return 1e-13


def assert_same(actual, expected, what="", summed=0):
  """``summed``: the results are sums of this many products, added in another order by the
  compiled code (a GEMM): an absolute tolerance of that many roundings of the largest result."""
  a, e = np.asarray(actual), np.asarray(expected)
  assert a.shape == e.shape and a.dtype == e.dtype, (what, a.shape, a.dtype, e.shape, e.dtype)
  if a.dtype.kind in "biu" or a.size == 0:
    np.testing.assert_array_equal(a, e, err_msg=what)
    return
  if a.dtype.kind == "c":   # relative to the magnitude (a part may cancel)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=f"{what}: NaN positions")
    ok = ~np.isnan(e) & (a != e)
    err = np.abs(a[ok].astype(np.complex128) - e[ok])
    assert np.all(err <= 4 * _tol(a.dtype) * (np.abs(e[ok]) + 1e-30)), (what, a, e)
    return
  a64, e64 = a.astype(np.float64), e.astype(np.float64)
  np.testing.assert_array_equal(np.isnan(a64), np.isnan(e64), err_msg=f"{what}: NaN positions")
  ok = ~np.isnan(e64)
  atol = _tol(a.dtype) * 1e-3
  if summed:
    finite = np.abs(e64[np.isfinite(e64)])
    atol += _tol(a.dtype) * summed * float(np.max(finite, initial=0.0))
  np.testing.assert_allclose(a64[ok], e64[ok], rtol=_tol(a.dtype), atol=atol, err_msg=what)


def check(fn, *args, what="", summed=0):
  """eager fn(*args) == jit(fn)(*args) (strict lowering, the default backend)."""
  expected = fn(*args)
  actual = ourjax.jit(fn)(*args)
  exp_leaves = ourjax.tree_util.tree_leaves(expected)
  act_leaves = ourjax.tree_util.tree_leaves(actual)
  assert len(exp_leaves) == len(act_leaves)
  for a, e in zip(act_leaves, exp_leaves):
    assert ourjax.core.get_aval(a).weak_type == ourjax.core.get_aval(e).weak_type, what
    assert_same(a, e, what, summed)


# ------------------------------------------------------------------------------------------------
# Inputs


_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, np.inf, -np.inf, np.nan, 1e-3,
            100.0, 0.75, -0.999]


def values(dtype, shape, rng, kind="any"):
  dt = np.dtype(dtype)
  n = int(np.prod(shape))
  if dt == np.bool_:
    return rng.randint(0, 2, shape).astype(bool)
  if dt.kind in "iu":
    info = np.iinfo(dt)
    if kind == "shift":
      return rng.randint(-2, info.bits + 3, shape).astype(dt)
    if kind == "small":
      return rng.randint(0 if dt.kind == "u" else -4, 5, shape).astype(dt)
    v = rng.randint(max(info.min, -1000), min(info.max, 1000) + 1, n).astype(dt)
    v[: min(n, 3)] = np.array([info.min, info.max, 0][: min(n, 3)]).astype(dt)
    return v.reshape(shape)
  if dt.kind == "c":   # finite: complex infinities follow no one convention
    part = np.float32 if dt == np.complex64 else np.float64
    kind = "finite" if kind == "any" else kind
    return (values(part, shape, rng, kind) + 1j * values(part, shape, rng, kind)).astype(dt)
  if kind == "unit":
    v = rng.uniform(-1.2, 1.2, n)
  elif kind == "positive":
    v = rng.uniform(0.0, 4.0, n)
  elif kind in ("finite", "small"):
    v = np.round(rng.randn(n) * 3, 1)
  else:
    v = rng.randn(n) * 3
    k = min(n, len(_SPECIAL))
    v[rng.permutation(n)[:k]] = _SPECIAL[:k]
  return v.astype(dt).reshape(shape)


FLOATS = [np.float32, BF16, F16]
ALL_DTYPES = [np.float32, BF16, F16, np.int32, np.int8, np.uint8, np.uint32, np.bool_,
              np.complex64]


def _accepts(prim, dtype, arity):
  try:
    prim.abstract_eval(*[core.ShapedArray((2,), dtype)] * arity)
    return True
  except (TypeError, ValueError):
    return False


# ------------------------------------------------------------------------------------------------
# The cases: primitive name -> list of (fn, args builder(rng))


CASES: dict[str, list] = {}


def case(name, fn, make_args, xfail=None):
  """``xfail``: the reason the eager impl and the lowering disagree (a known bug to fix)."""
  CASES.setdefault(name, []).append((fn, make_args, xfail))


UNARY = ["neg", "sign", "floor", "ceil", "is_finite", "exp", "exp2", "log", "log1p", "expm1",
         "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
         "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "erf", "erfc", "erf_inv", "lgamma", "digamma",
         "abs", "not", "population_count", "clz", "real", "imag", "square", "conj", "stop_gradient"]
BINARY = ["add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "and", "or", "xor",
          "shift_left", "shift_right_arithmetic", "shift_right_logical", "nextafter", "eq", "ne",
          "lt", "le", "gt", "ge", "add_any"]
_UNIT = {"asin", "acos", "atanh", "erf_inv"}


def _prims():
  from ourjax.lax import elementwise as ew
  ps = {p.name: p for p in vars(ew).values() if isinstance(p, core.Primitive)}
  ps["add_any"] = ad.add_any_p
  return ps


def _elementwise_cases():
  ps = _prims()
  for name in UNARY:
    p = ps[name]
    kind = "unit" if name in _UNIT else "any"
    for dt in ALL_DTYPES:
      if _accepts(p, dt, 1):
        case(name, p.bind, lambda rng, dt=dt, kind=kind: [values(dt, (3, 5), rng, kind)])
    # scalars broadcast in lax only for binary ops; a 0-d operand still lowers
    if _accepts(p, np.float32, 1):
      case(name, p.bind, lambda rng, kind=kind: [values(np.float32, (), rng, kind)])
  for name in BINARY:
    p = ps[name]
    kind = "shift" if name.startswith("shift") else "any"
    for dt in ALL_DTYPES:
      if not _accepts(p, dt, 2):
        continue
      if np.dtype(dt).kind == "c" and name == "rem":
        continue   # (JAX rejects complex rem; the eager impl fails on it)
      xfail = None
      case(name, p.bind, lambda rng, dt=dt, kind=kind: [values(dt, (4, 3), rng),
                                                        values(dt, (4, 3), rng, kind)], xfail)
      if name == "add_any":
        continue   # (add_any takes equal shapes)
      # a rank-0 operand broadcasts (both sides)
      case(name, p.bind, lambda rng, dt=dt, kind=kind: [values(dt, (), rng),
                                                        values(dt, (2, 3), rng, kind)], xfail)
      case(name, p.bind, lambda rng, dt=dt, kind=kind: [values(dt, (2, 3), rng),
                                                        values(dt, (), rng, kind)], xfail)
  for dt in [np.int32, np.uint8]:    # division by zero and INT_MIN / -1
    for name in ("div", "rem"):
      case(name, ps[name].bind, lambda rng, dt=dt: [
          values(dt, (6,), rng), np.array([0, -1, 1, 0, 3, -7], dtype=np.int64).astype(dt)])
  for y in (0, 1, 2, 3, 5, -1, -2):
    for dt in (np.float32, BF16, np.int32, np.complex64):
      if y < 0 and dt == np.int32:
        continue
      case("integer_pow", lambda x, y=y: lax.integer_pow(x, y),
           lambda rng, dt=dt: [values(dt, (3, 4), rng, "small" if dt == np.int32 else "any")])
  for rm in (lax.RoundingMethod.AWAY_FROM_ZERO, lax.RoundingMethod.TO_NEAREST_EVEN):
    for dt in FLOATS:
      case("round", lambda x, rm=rm: lax.round(x, rm), lambda rng, dt=dt: [values(dt, (16,), rng)])
  for src in ALL_DTYPES:
    for dst in ALL_DTYPES:
      if np.dtype(src).kind == "c" and np.dtype(dst).kind != "c":
        continue
      case("convert_element_type", lambda x, dst=dst: lax.convert_element_type(x, dst),
           lambda rng, src=src: [values(src, (3, 5), rng)])
  for src, dst in [(np.float32, np.int32), (np.int32, np.float32), (np.float32, np.uint8),
                   (np.uint8, np.int8), (BF16, np.int16), (np.int32, np.uint32)]:
    case("bitcast_convert_type", lambda x, dst=dst: lax.bitcast_convert_type(x, dst),
         lambda rng, src=src: [values(src, (3, 4), rng)])
  for dt in (np.float32, np.int32, np.bool_):
    case("select_n", lax.select_n, lambda rng, dt=dt: [values(np.bool_, (3, 4), rng),
                                                       values(dt, (3, 4), rng),
                                                       values(dt, (3, 4), rng)])
    case("select_n", lax.select_n, lambda rng, dt=dt: [
        rng.randint(0, 4, (3, 4)).astype(np.int32), *[values(dt, (3, 4), rng) for _ in range(4)]])
    case("select_n", lax.select_n, lambda rng, dt=dt: [
        np.int32(2), *[values(dt, (3, 4), rng) for _ in range(3)]])
    case("select_n", lax.select_n, lambda rng, dt=dt: [values(np.bool_, (), rng),
                                                       values(dt, (5,), rng),
                                                       values(dt, (5,), rng)])
  for dt in (np.float32, np.int32, np.uint8):
    case("clamp", lax.clamp, lambda rng, dt=dt: [values(dt, (), rng, "small"),
                                                 values(dt, (3, 4), rng),
                                                 np.asarray(10, dt)])
    case("clamp", lax.clamp, lambda rng, dt=dt: [values(dt, (3, 4), rng, "small"),
                                                 values(dt, (3, 4), rng),
                                                 values(dt, (3, 4), rng)])
  case("copy", lambda x: lax.copy_p.bind(x), lambda rng: [values(np.float32, (3,), rng)])


_elementwise_cases()

# structural
F32 = np.float32
case("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1, 2)),
     lambda rng: [values(F32, (3, 4), rng)])
case("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (0, 2)),
     lambda rng: [values(np.int32, (1, 4), rng)])
case("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (3, 2), ()),
     lambda rng: [values(np.bool_, (), rng)])
case("reshape", lambda x: lax.reshape(x, (6, 2)), lambda rng: [values(F32, (3, 4), rng)])
case("reshape", lambda x: lax.reshape(x, ()), lambda rng: [values(np.int32, (1, 1), rng)])
case("transpose", lambda x: lax.transpose(x, (2, 0, 1)),
     lambda rng: [values(F32, (2, 3, 4), rng)])
case("squeeze", lambda x: lax.squeeze(x, (0, 2)), lambda rng: [values(F32, (1, 3, 1), rng)])
case("iota", lambda x: x + lax.broadcasted_iota(np.int32, (3, 4), 1),
     lambda rng: [values(np.int32, (3, 4), rng)])
case("iota", lambda x: x * lax.iota(F32, 5), lambda rng: [values(F32, (5,), rng)])
case("rev", lambda x: lax.rev(x, (0, 2)), lambda rng: [values(F32, (2, 3, 4), rng)])
case("rev", lambda x: lax.rev(x, ()), lambda rng: [values(np.int8, (3,), rng)])
case("pad", lambda x, v: lax.pad(x, v, ((1, 2, 0), (-1, 1, 2))),
     lambda rng: [values(F32, (2, 4), rng), F32(7.0)])
case("pad", lambda x, v: lax.pad(x, v, ((0, 0, 1),)),
     lambda rng: [values(np.int32, (0,), rng), np.int32(3)])
case("concatenate", lambda x, y: lax.concatenate([x, y, x], 1),
     lambda rng: [values(F32, (2, 3), rng), values(F32, (2, 1), rng)])

# slicing
case("slice", lambda x: lax.slice(x, (1, 0), (3, 4), (1, 2)),
     lambda rng: [values(F32, (4, 5), rng)])
case("slice", lambda x: lax.slice(x, (1,), (1,)), lambda rng: [values(np.int32, (3,), rng)])
for _starts in [(0, 0), (2, 3), (-1, 9), (7, -4)]:
  case("dynamic_slice", lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)),
       lambda rng, s=_starts: [values(F32, (4, 5), rng), np.int32(s[0]), np.int32(s[1])])
  case("dynamic_update_slice", lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)),
       lambda rng, s=_starts: [values(F32, (4, 5), rng), values(F32, (2, 3), rng),
                               np.int32(s[0]), np.int32(s[1])])


def _gather_args(rng, mode):
  x = values(F32, (5, 4), rng)
  idx = rng.randint(-2, 7, (3, 1)).astype(np.int32)
  return [x, idx]


_GDN = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                  start_index_map=(0,))
for _mode in (lax.GatherScatterMode.CLIP, lax.GatherScatterMode.FILL_OR_DROP,
              lax.GatherScatterMode.PROMISE_IN_BOUNDS):
  case("gather", lambda x, i, m=_mode: lax.gather(x, i, _GDN, (1, 4), mode=m),
       lambda rng, m=_mode: _gather_args(rng, m))
case("gather", lambda x, i: lax.sorting._take_along(x, i, 1),   # batching dims
     lambda rng: [values(F32, (3, 5), rng), rng.randint(0, 5, (3, 4)).astype(np.int32)])
_SDN = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                   scatter_dims_to_operand_dims=(0,))
for _name, _fn in [("scatter", lax.scatter), ("scatter-add", lax.scatter_add),
                   ("scatter-sub", lax.scatter_sub), ("scatter-mul", lax.scatter_mul),
                   ("scatter-min", lax.scatter_min), ("scatter-max", lax.scatter_max)]:
  for _mode in (lax.GatherScatterMode.CLIP, lax.GatherScatterMode.FILL_OR_DROP):
    for _dt in (F32, np.int32):
      # (a plain scatter's places are distinct once clipped: where two updates meet, which
      # one is kept is the backend's choice, in JAX too)
      case(_name, lambda x, i, u, f=_fn, m=_mode: f(x, i, u, _SDN, mode=m),
           lambda rng, dt=_dt, s=_name == "scatter": [
               values(dt, (5, 3), rng),
               (rng.choice([-1, 1, 2, 3, 5], 4, replace=False)[:, None] if s
                else rng.randint(-1, 6, (4, 1))).astype(np.int32),
               values(dt, (4, 3), rng)])
  case(_name, lambda x, i, u, f=_fn: f(x, i, u, _SDN, unique_indices=True,
                                       indices_are_sorted=True),
       lambda rng: [values(BF16, (5, 3), rng), np.array([[0], [2], [3]], np.int32),
                    values(BF16, (3, 3), rng)])

# reductions
for _name in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and",
              "reduce_or", "reduce_xor"):
  _fn = getattr(lax, _name)
  _p = getattr(lax, _name + "_p")
  for _dt in ALL_DTYPES:
    if not _accepts(_p, _dt, 0) and not _p.abstract_eval:
      continue
    try:
      _p.abstract_eval(core.ShapedArray((2, 3), _dt), axes=(1,), out_sharding=None)
    except (TypeError, ValueError):
      continue
    for _axes in [(0,), (1,), (0, 2), (), (0, 1, 2)]:
      case(_name, lambda x, f=_fn, a=_axes: f(x, a),
           lambda rng, dt=_dt: [values(dt, (3, 4, 2), rng, "small" if _name == "reduce_prod"
                                       else "any")])
    case(_name, lambda x, f=_fn: f(x, (1,)), lambda rng, dt=_dt: [values(dt, (3, 0), rng)])
for _fn, _name in ((lax.argmax, "argmax"), (lax.argmin, "argmin")):
  for _dt in (F32, BF16, np.int32, np.uint8, np.bool_):
    for _ax in (0, 1):
      case(_name, lambda x, f=_fn, a=_ax: f(x, a, np.int32),
           lambda rng, dt=_dt: [values(dt, (6, 5), rng, "small")])
  case(_name, lambda x, f=_fn: f(x, 1, np.int32),
       lambda rng: [np.array([[np.nan, 1, np.nan], [2, 2, 1], [0, -0.0, 0],
                              [-np.inf, -np.inf, -np.inf]], F32)])
for _dt in (F32, BF16, F16, np.float64):
  for _e, _m in [(8, 7), (5, 10), (3, 2), (11, 52), (8, 23), (4, 0)]:
    case("reduce_precision", lambda x, e=_e, m=_m: lax.reduce_precision(x, e, m),
         lambda rng, dt=_dt: [np.concatenate([values(dt, (16,), rng), np.array(
             [65504.0, 70000.0, 1e-5, -1e-7, 3.4e38, 1.0009765625], dt)])])
case("reduce", lambda x, y: lax.reduce((x, y), (F32(0), np.int32(1)),
                                       lambda a, b: (a[0] + b[0], a[1] * b[1]), (1,)),
     lambda rng: [values(F32, (3, 4), rng), values(np.int32, (3, 4), rng, "small")])
case("reduce", lambda x: lax.reduce(x, F32(1), lambda a, b: a * 0.5 + b, (0, 1)),
     lambda rng: [values(F32, (3, 4), rng)])
case("reduce", lambda x: lax.reduce(x, np.int32(0), lambda a, b: a * 3 + b, (1,)),
     lambda rng: [values(np.int32, (3, 0), rng)])
for _dt in (F32, BF16, np.int32, np.complex64):
  case("reduce_window_sum", lambda x: lax.reduce_window(x, x.dtype.type(0), lax.add, (2, 3),
                                                        (1, 2), "SAME", (1, 2), (2, 1)),
       lambda rng, dt=_dt: [values(dt, (4, 5), rng, "finite")])
for _dt in (F32, BF16, np.int32, np.uint8, np.bool_):
  for _name, _op, _high in (("reduce_window_max", lax.max, False),
                            ("reduce_window_min", lax.min, True)):
    case(_name, lambda x, op=_op, h=_high: lax.reduce_window(
        x, np.asarray(_chooser_identity(not h, x.dtype)).astype(x.dtype), op, (2, 2), (2, 1),
        ((1, 0), (-1, 2)), (1, 2), (1, 1)), lambda rng, dt=_dt: [values(dt, (4, 5), rng)])
case("reduce_window", lambda x: lax.reduce_window(x, F32(2), lambda a, b: a * 0.5 + b, (2, 2),
                                                  (1, 1), "SAME", (2, 1)),
     lambda rng: [values(F32, (3, 4), rng, "finite")])
case("reduce_window", lambda x, i: lax.reduce_window(
    (x, i), (F32(0), np.int32(-1)), lambda a, b: (lax.max(a[0], b[0]), lax.max(a[1], b[1])),
    (3,), (2,), ((1, 1),)), lambda rng: [values(F32, (6,), rng), values(np.int32, (6,), rng)])
for _t, _shape, _lens, _dt in [("fft", (2, 5), (5,), np.complex64),
                               ("ifft", (3, 4), (3, 4), np.complex64),
                               ("rfft", (2, 6), (6,), F32), ("rfft", (3, 4, 5), (4, 5), F32),
                               ("irfft", (2, 4), (6,), np.complex64),
                               ("irfft", (2, 3, 3), (3, 5), np.complex64)]:
  case("fft", lambda x, t=_t, n=_lens: lax.fft(x, t, n),
       lambda rng, s=_shape, dt=_dt: [values(dt, s, rng, "finite")])
# linear algebra: compiled lax compositions against LAPACK (eager), on well-conditioned inputs;
# eigen/singular vectors are compared with their signs fixed (they are unique only up to sign)
_LA = lax.linalg
SUMMED = {"conv_general_dilated": 24, "cholesky": 24, "triangular_solve": 24, "lu": 24,
          "qr": 24, "eigh": 24, "svd": 24, "igamma_grad_a": 24, "betainc_grad_a": 24,
          "betainc_grad_b": 24}


def _spd(rng, n, batch=()):
  a = rng.randn(*batch, n, n).astype(F32)
  return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=F32)).astype(F32)


def _signfix(v, axis=-2):
  """Columns (axis -2) or rows (axis -1) of v scaled so that their largest entry is positive."""
  i = jnp.argmax(jnp.abs(v), axis=axis, keepdims=True)
  return v * jnp.sign(jnp.take_along_axis(v, i, axis=axis))


case("cholesky", _LA.cholesky_p.bind, lambda rng: [_spd(rng, 4)])
case("cholesky", _LA.cholesky_p.bind, lambda rng: [_spd(rng, 3, (2,))])
for _kw in [dict(left_side=True, lower=True), dict(left_side=True, lower=False, transpose_a=True),
            dict(left_side=False, lower=True, unit_diagonal=True),
            dict(left_side=False, lower=False, transpose_a=True, conjugate_a=True)]:
  _kw = dict(dict(left_side=False, lower=False, transpose_a=False, conjugate_a=False,
                  unit_diagonal=False), **_kw)
  case("triangular_solve", lambda a, b, kw=_kw: _LA.triangular_solve_p.bind(a, b, **kw),
       lambda rng, kw=_kw: [rng.randn(2, 4, 4).astype(F32) + 4 * np.eye(4, dtype=F32),
                            rng.randn(2, 4, 3).astype(F32) if kw["left_side"]
                            else rng.randn(2, 3, 4).astype(F32)])
for _shape in [(4, 4), (3, 5), (5, 3), (2, 3, 3)]:
  case("lu", _LA.lu_p.bind, lambda rng, s=_shape: [rng.randn(*s).astype(F32)])
for _shape, _full in [((5, 3), False), ((5, 3), True), ((3, 3), True), ((3, 5), False)]:
  case("qr", lambda x, f=_full: _LA.qr_p.bind(x, full_matrices=f),
       lambda rng, s=_shape: [rng.randn(*s).astype(F32)])
for _lower in (True, False):
  case("eigh", lambda x, lo=_lower: (lambda v, w: (_signfix(v), w))(
      *_LA.eigh_p.bind(x, lower=lo, sort_eigenvalues=True)),
      lambda rng: [_spd(rng, 4, (2,))])
for _shape, _full, _uv in [((4, 3), False, True), ((3, 5), False, True), ((4, 4), True, True),
                           ((5, 3), True, False)]:
  case("svd", lambda x, f=_full, uv=_uv: (lambda s, *uvh: (s,) + (
      (_signfix(uvh[0]), _signfix(uvh[1], -1)) if uvh else ()))(
      *_LA.svd_p.bind(x, full_matrices=f, compute_uv=uv)) if not (f and uv) else
      _LA.svd_p.bind(x, full_matrices=f, compute_uv=uv)[0],
      lambda rng, s=_shape: [rng.randn(*s).astype(F32)])
# special functions: float64 compositions rounded to the operands' dtype, eager and compiled
from ourjax.lax import special as _sp  # noqa: E402
for _p, _n, _kind in [(_sp.igamma_p, 2, "positive"), (_sp.igammac_p, 2, "positive"),
                      (_sp.igamma_grad_a_p, 2, "positive"),
                      (_sp.regularized_incomplete_beta_p, 3, "unitpos"),
                      (_sp._betainc_grad_a_p, 3, "unitpos"), (_sp._betainc_grad_b_p, 3, "unitpos"),
                      (_sp.bessel_i0e_p, 1, "any"), (_sp.bessel_i1e_p, 1, "any")]:
  case(_p.name, _p.bind, lambda rng, n=_n, k=_kind: [
      (rng.uniform(0.05, 0.95, (3, 4)).astype(F32) if k == "unitpos" else
       values(F32, (3, 4), rng, k)) for _ in range(n)])
for _name in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"):
  _fn = getattr(lax, _name)
  for _dt in (F32, BF16, np.int32, np.complex64):
    try:
      getattr(lax, _name + "_p").abstract_eval(core.ShapedArray((2,), _dt), axis=0,
                                               reverse=False)
    except TypeError:
      continue
    for _ax in (0, 1):
      for _rev in (False, True):
        case(_name, lambda x, f=_fn, a=_ax, r=_rev: f(x, a, r),
             lambda rng, dt=_dt: [values(dt, (5, 4), rng, "small" if _name == "cumprod"
                                         else "any")])
  case(_name, lambda x, f=_fn: f(x, 0), lambda rng: [values(F32, (0, 3), rng)])

# sorting
for _dt in (F32, BF16, np.int32, np.bool_, np.complex64):
  for _d in (0, 1):
    case("sort", lambda x, d=_d: lax.sort(x, dimension=d),
         lambda rng, dt=_dt: [values(dt, (6, 7), rng, "small")])
case("sort", lambda k, v: lax.sort_key_val(k, v), lambda rng: [
    rng.randint(0, 3, (4, 9)).astype(F32), values(np.int32, (4, 9), rng)])
case("sort", lambda a, b, c: lax.sort((a, b, c), num_keys=2), lambda rng: [
    rng.randint(0, 2, (20,)).astype(np.int32), values(F32, (20,), rng, "small"),
    values(np.uint8, (20,), rng)])
case("sort", lambda x: lax.sort(x), lambda rng: [np.array(
    [np.nan, -0.0, 0.0, -np.nan, np.inf, -np.inf, 1, -1, 0.0, -0.0], F32)])
for _dt in (F32, BF16, np.int32, np.uint8):
  for _k in (0, 1, 3, 7):
    case("top_k", lambda x, k=_k: lax.top_k(x, k), lambda rng, dt=_dt: [
        values(dt, (4, 7), rng, "small")])
  case("top_k", lambda x: lax.top_k(x, 2, axis=0), lambda rng, dt=_dt: [
      values(dt, (5, 3), rng, "small")])
case("top_k", lambda x: lax.top_k(x, 6), lambda rng: [np.array(
    [np.nan, -0.0, 0.0, 1.0, -np.nan, 1.0, np.inf], F32)])

# dot / conv
for _dn, _ls, _rs in [((((1,), (0,)), ((), ())), (3, 4), (4, 5)),
                      ((((2,), (1,)), ((0,), (0,))), (2, 3, 4), (2, 4, 5)),
                      ((((0, 2), (2, 0)), ((), ())), (3, 2, 4), (4, 5, 3)),
                      ((((), ()), ((), ())), (3,), (2,)),
                      ((((1,), (1,)), ((0,), (0,))), (2, 0), (2, 0))]:
  for _dt, _pref in [(F32, None), (BF16, None), (BF16, F32), (np.int8, np.int32),
                     (np.int32, None), (np.bool_, None), (np.complex64, None)]:
    case("dot_general", lambda a, b, dn=_dn, p=_pref: lax.dot_general(
        a, b, dn, preferred_element_type=p),
        lambda rng, dt=_dt, ls=_ls, rs=_rs: [values(dt, ls, rng, "small"),
                                             values(dt, rs, rng, "small")])
case("dot_general", lambda a, b: lax.dot(a, b), lambda rng: [
    values(np.int32, (3, 4), rng, "small"), values(F32, (4,), rng, "small")])
for _kw in [dict(window_strides=(1, 1), padding="VALID"),
            dict(window_strides=(2, 1), padding="SAME", rhs_dilation=(1, 2)),
            dict(window_strides=(1, 2), padding=((1, 0), (2, 1)), lhs_dilation=(2, 1)),
            dict(window_strides=(1, 1), padding="VALID", feature_group_count=2),
            dict(window_strides=(1, 1), padding="VALID", batch_group_count=2),
            dict(window_strides=(1, 1), padding="SAME",
                 dimension_numbers=("NHWC", "HWIO", "NCHW"))]:
  def _conv_args(rng, kw=_kw):
    nhwc = kw.get("dimension_numbers") is not None
    c = 4
    lhs = values(F32, (2, 6, 5, c) if nhwc else (2, c, 6, 5), rng, "small")
    i = c // kw.get("feature_group_count", 1)
    rhs = values(F32, (3, 2, i, 4) if nhwc else (4, i, 3, 2), rng, "small")
    return [lhs, rhs]
  case("conv_general_dilated", lambda l, r, kw=_kw: lax.conv_general_dilated(l, r, **kw),
       _conv_args)
case("conv_general_dilated", lambda l, r: lax.conv_general_dilated(
    l, r, (1,), "SAME", preferred_element_type=np.int32),
    lambda rng: [values(np.int8, (1, 2, 7), rng, "small"), values(np.int8, (3, 2, 3), rng,
                                                                  "small")])


# control flow
def _cf_cond(x, i):
  return lax.switch(i, [lambda x: x + 1, lambda x: x * 2, lambda x: -x], x)


for _i in (-3, 0, 1, 2, 9):
  case("cond", _cf_cond, lambda rng, i=_i: [values(F32, (3,), rng), np.int32(i)])
case("cond", lambda p, x, y: lax.cond(p, lambda a, b: (a + b, b), lambda a, b: (a * b, a), x, y),
     lambda rng: [np.bool_(rng.randint(2)), values(F32, (2,), rng), values(F32, (2,), rng)])
case("cond", lambda x: lax.cond(True, lambda: x, lambda: x + 1),
     lambda rng: [values(np.int32, (2,), rng)])
case("while", lambda x: lax.while_loop(lambda c: c[0] < 7, lambda c: (c[0] + 1, c[1] * 0.5 + x),
                                       (0, x)),
     lambda rng: [values(F32, (3,), rng)])
case("while", lambda n, x: lax.fori_loop(0, n, lambda k, c: c + k * x, x),
     lambda rng: [np.int32(rng.randint(0, 5)), values(np.int32, (2, 2), rng, "small")])
case("while", lambda x: lax.while_loop(lambda c: False, lambda c: c, x),
     lambda rng: [values(F32, (), rng)])


def _scan_fn(c, x):
  return c * 0.5 + x, (c * x, x.sum())


for _rev in (False, True):
  case("scan", lambda c, xs, r=_rev: lax.scan(_scan_fn, c, xs, reverse=r),
       lambda rng: [values(F32, (3,), rng, "small"), values(F32, (5, 3), rng, "small")])
case("scan", lambda xs: lax.scan(lambda c, x: (c + x, None), 0, xs),
     lambda rng: [values(np.int32, (4,), rng)])
case("scan", lambda xs: lax.scan(lambda c, x: (c, x * 2), (), xs, length=0),
     lambda rng: [values(F32, (0, 2), rng)])
case("scan", lambda w, xs: lax.map(lambda x: jnp.dot(w, x), xs),
     lambda rng: [values(F32, (2, 3), rng, "small"), values(F32, (4, 3), rng, "small")])


# calls
@ourjax.custom_jvp
def _cj(x):
  return jnp.sin(x) * 2


_cj.defjvp(lambda p, t: (_cj(p[0]), t[0]))


@ourjax.custom_vjp
def _cv(x):
  return jnp.cos(x) + x


_cv.defvjp(lambda x: (_cv(x), x), lambda r, g: (g,))
case("custom_jvp_call", _cj, lambda rng: [values(F32, (4,), rng)])
case("custom_vjp_call", _cv, lambda rng: [values(F32, (4,), rng)])
case("custom_linear_solve",
     lambda d, b: ourjax.lax.custom_linear_solve(lambda v: (d * d + 1) * v, b,
                                                 lambda mv, r: r / (d * d + 1), symmetric=True),
     lambda rng: [values(F32, (4,), rng), values(F32, (4,), rng)])


def _cvm_rule(axis_size, in_batched, x):
  return jnp.sin(x), in_batched[0]


_cvm = ourjax.custom_batching.custom_vmap(lambda x: jnp.sin(x) * 2 + 1)
_cvm.def_vmap(_cvm_rule)
case("custom_vmap_call", _cvm, lambda rng: [values(F32, (4,), rng)])
case("checkpoint", ourjax.checkpoint(lambda x: jnp.sin(jnp.sin(x))),
     lambda rng: [values(F32, (4,), rng)])
case("checkpoint", lambda x: ourjax.grad(ourjax.checkpoint(lambda x: jnp.sin(x).sum()))(x),
     lambda rng: [values(F32, (4,), rng)])
case("name", lambda x: ourjax.ad_checkpoint.checkpoint_name(x * 2, "h") + 1,
     lambda rng: [values(F32, (4,), rng)])
case("jit", lambda x, y: ourjax.jit(lambda a: a * y)(x) + 1,
     lambda rng: [values(F32, (4,), rng), values(F32, (4,), rng)])


# ------------------------------------------------------------------------------------------------
# Tests


def _case_params():
  params = []
  for name, cs in sorted(CASES.items()):
    for k, (_, _, xfail) in enumerate(cs):
      marks = [pytest.mark.xfail(reason=xfail, strict=False)] if xfail else []
      params.append(pytest.param(name, k, id=f"{name}-{k}", marks=marks))
  return params


@pytest.mark.parametrize("name,k", _case_params())
def test_lowering_matches_eager(name, k):
  fn, make_args, _ = CASES[name][k]
  rng = np.random.RandomState(zlib.crc32(f"{name}-{k}".encode()))
  args = make_args(rng)
  # native convolutions run as GEMMs (lowering/passes/conv_to_dot.py): sums in another order;
  # compiled decompositions are other algorithms than LAPACK's (rounded differently)
  check(fn, *args, what=f"{name} case {k}", summed=SUMMED.get(name, 0))


def _import_all_of_ourjax():
  import importlib
  import pkgutil
  for m in pkgutil.walk_packages(ourjax.__path__, "ourjax."):
    if ".backends." in m.name:
      continue
    try:
      importlib.import_module(m.name)
    except ImportError:   # (a module being written elsewhere; its primitives are checked later)
      pass


def test_coverage():
  """Every primitive (of every ourjax module) has a lowering rule and at least one case here."""
  _import_all_of_ourjax()
  # host callbacks are never lowered: a jaxpr holding one runs through the jaxpr evaluator
  # (backends.compile_jaxpr; tests/test_callbacks.py)
  # named-axis collectives are never lowered either: the SPMD executor runs them between the
  # compiled segments of a per-device program (interpreters/spmd.py; tests/test_spmd.py)
  # general eigenproblems (lax.linalg.eig) have no compiled code either: the host's LAPACK
  from ourjax.lax import parallel, linalg
  prims = sorted((p for p in core.abstract_eval_rules if p not in core.host_callback_primitives
                  and p not in parallel.COLLECTIVES and p not in linalg.HOST_ONLY),
                 key=lambda p: p.name)
  no_rule = [p.name for p in prims if p not in from_jaxpr.lowering_rules]
  assert not no_rule, f"primitives without a lowering rule: {no_rule}"
  untested = [p.name for p in prims if p.name not in CASES and p.name != "custom_lin"]
  assert not untested, f"primitives without a lowering test case: {untested}"


def test_custom_lin_raises_like_jax():
  """custom_lin (a custom_vjp function under forward mode) lowers to JAX's error."""
  @ourjax.custom_vjp
  def f(x):
    return jnp.sin(x)
  f.defvjp(lambda x: (jnp.sin(x), x), lambda r, g: (g * jnp.cos(r),))
  with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
    ourjax.jit(lambda x: ourjax.jvp(f, (x,), (x,)))(1.0)


@pytest.mark.parametrize("name", ["add", "exp", "div", "max", "pow", "sqrt", "rem"])
def test_elementwise_x64(name):
  p = _prims()[name]
  rng = np.random.RandomState(0)
  with enable_x64(True):
    for dt in (np.float64, np.int64, np.complex128):
      arity = 1 if name in UNARY else 2
      if _accepts(p, dt, arity) and not (name == "rem" and dt == np.complex128):
        check(p.bind, *[values(dt, (3, 4), rng) for _ in range(arity)], what=f"{name} {dt}")


def test_x64_reductions_and_dot():
  rng = np.random.RandomState(1)
  with enable_x64(True):
    x = values(np.float64, (4, 5), rng, "small")
    check(lambda x: (lax.reduce_sum(x, (1,)), lax.cumsum(x, 0), lax.argmax(x, 1, np.int64),
                     lax.dot(x, x.T), lax.sort(x)), x)


def test_strict_lowering_reports_missing_rule(monkeypatch):
  """Without a rule, strict lowering raises naming the primitive and the user's line; without
  strictness the jaxpr runs op by op."""
  p = core.Primitive("no_rule_here")
  p.def_abstract_eval(lambda x: x)
  p.def_impl(lambda x: x * 2)
  f = lambda x: p.bind(x) + 1  # noqa: E731
  with pytest.raises(from_jaxpr.LoweringError, match="no_rule_here.*test_lowering.py"):
    ourjax.jit(f)(np.ones(3, np.float32))
  monkeypatch.delenv("OURJAX_STRICT_LOWERING")
  np.testing.assert_array_equal(ourjax.jit(f)(np.ones(3, np.float32)), 3 * np.ones(3))


def test_nested_jit_is_one_module():
  inner = ourjax.jit(lambda x: jnp.sin(x) * 2)
  outer = ourjax.jit(lambda x: inner(x) + inner(x + 1))
  text = outer.lower(np.ones(3, np.float32)).as_text("hlo")
  assert text.count("ENTRY") == 1 and "sine" in text
  np.testing.assert_allclose(outer(np.ones(3, np.float32)),
                             np.sin(1) * 2 + np.sin(2) * 2, rtol=1e-6)


def test_control_flow_lowers_to_hlo_control_flow():
  def f(x, i):
    y = lax.switch(i, [jnp.sin, jnp.cos], x)
    z = lax.fori_loop(0, 3, lambda k, c: c * 2, y)
    return lax.scan(lambda c, v: (c + v, c), 0.0, z)
  text = ourjax.jit(f).lower(np.ones(4, np.float32), 1).as_text("hlo")
  for op in ("conditional(", "while(", "dynamic-slice(", "dynamic-update-slice("):
    assert op in text, op


def test_sort_and_argmax_use_comparators():
  text = ourjax.jit(lambda x: (lax.sort(x), lax.argmax(x, 0, np.int32))).lower(
      np.ones(5, np.float32)).as_text("hlo")
  assert "sort(" in text and "reduce(" in text and "TOTALORDER" in text


def test_keep_unused_prunes_parameters():
  def f(x, y, z):
    return x + z
  args = [np.ones(3, np.float32)] * 3
  pruned = ourjax.jit(f).lower(*args).as_text("hlo")
  kept = ourjax.jit(f, keep_unused=True).lower(*args).as_text("hlo")
  assert pruned.count("parameter(") == 2 and kept.count("parameter(") == 3
  np.testing.assert_array_equal(ourjax.jit(f)(*args), 2 * np.ones(3))
  np.testing.assert_array_equal(ourjax.jit(f, keep_unused=True)(*args), 2 * np.ones(3))


def test_large_constants_are_hoisted():
  c = np.arange(100, dtype=np.float32)
  f = ourjax.jit(lambda x: x + c)
  lowered = from_jaxpr.lower(f.trace(np.ones(100, np.float32)).jaxpr)
  assert len(lowered.hoisted) == 1
  assert len(lowered.module.entry.parameters) == 2
  np.testing.assert_array_equal(f(np.ones(100, np.float32)), c + 1)


def test_lowered_modules_verify():
  """Every case's lowered (unoptimized) module passes the verifier."""
  for name in ("sort", "scan", "while", "cond", "argmax", "cumsum", "reduce"):
    fn, make_args, _ = CASES[name][0]
    args = make_args(np.random.RandomState(0))
    closed = ourjax.jit(fn).trace(*args).jaxpr
    hlo.verify(from_jaxpr.lower(closed, name).module)


# ------------------------------------------------------------------------------------------------
# Programs JAX runs: lax binary ops with size-1 dimensions, pow with an integer exponent

from hypothesis import given as _given, settings as _settings, strategies as _st  # noqa: E402

_SIZE_ONE_OPS = [("add", np.add, np.float32), ("sub", np.subtract, np.float32),
                 ("mul", np.multiply, np.float32), ("div", np.divide, np.float32),
                 ("rem", np.fmod, np.float32), ("max", np.maximum, np.float32),
                 ("atan2", np.arctan2, np.float32), ("lt", np.less, np.float32),
                 ("shift_left", np.left_shift, np.int32), ("and_", np.bitwise_and, np.int32)]


@pytest.mark.parametrize("name,ref,dt", _SIZE_ONE_OPS, ids=[o[0] for o in _SIZE_ONE_OPS])
@_settings(max_examples=10, deadline=None)
@_given(data=_st.data())
def test_lax_binary_ops_broadcast_size_one_dims(name, ref, dt, data):
  """As JAX 0.10's: operands of the same rank broadcast along their size-1 dimensions ((2, 3)
  with (2, 1), (2, 1) with (1, 3)), eager, jitted and differentiated; other shapes are
  errors."""
  rank = data.draw(_st.integers(1, 3), label="rank")
  full = data.draw(_st.lists(_st.integers(1, 4), min_size=rank, max_size=rank), label="shape")
  pick = data.draw(_st.lists(_st.integers(0, 2), min_size=rank, max_size=rank), label="which")
  sx = tuple(1 if p == 1 else n for n, p in zip(full, pick))
  sy = tuple(1 if p == 2 else n for n, p in zip(full, pick))
  rng = np.random.default_rng(data.draw(_st.integers(0, 99), label="seed"))
  if dt == np.int32:
    x = rng.integers(0, 100, sx).astype(dt)
    y = rng.integers(0, 8, sy).astype(dt)
  else:
    x = rng.uniform(-3, 3, sx).astype(dt)
    y = rng.uniform(0.5, 3, sy).astype(dt)
  fn = getattr(lax, name)
  want = ref(x, y)
  for f in (fn, ourjax.jit(fn)):
    got = np.asarray(f(x, y))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)
  if name in ("add", "mul", "sub", "div"):
    gx, gy = ourjax.grad(lambda a, b: jnp.sum(fn(a, b)), argnums=(0, 1))(x, y)
    assert gx.shape == sx and gy.shape == sy
  with pytest.raises(TypeError, match="incompatible shapes"):
    fn(np.ones((2, 3), dt), np.ones((3, 2), dt))


@_settings(max_examples=20, deadline=None)
@_given(xs=_st.lists(_st.floats(-4, 4, width=32).filter(lambda v: v == 0 or abs(v) > 1e-3),
                     min_size=1, max_size=5),
        n=_st.integers(-6, 6), dt=_st.sampled_from([np.int8, np.int32, np.uint8]))
def test_lax_pow_takes_an_integer_exponent(xs, n, dt):
  """lax.pow(x, y) with y of an integer dtype, negative values included (JAX converts y to
  x's dtype): eager, jitted, and its gradient in x."""
  if dt == np.uint8:
    n = abs(n)
  x = np.array(xs, np.float32)
  y = np.full(x.shape, n, dt)
  with np.errstate(all="ignore"):
    want = np.power(x.astype(np.float64), float(n))
  for f in (lax.pow, ourjax.jit(lax.pow)):
    got = np.asarray(f(x, y))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-30)
  np.testing.assert_allclose(np.asarray(lax.pow(x, np.int32(n))), want, rtol=1e-5, atol=1e-30)
  ok = x != 0
  with np.errstate(all="ignore"):
    dwant = n * np.power(x.astype(np.float64), n - 1.0)
  g = np.asarray(ourjax.grad(lambda v: jnp.sum(lax.pow(v, y)))(x))
  np.testing.assert_allclose(g[ok], dwant[ok], rtol=1e-4, atol=1e-30)
