"""Elementwise ``ourjax.numpy`` functions against NumPy: values on drawn arrays (every dtype a
function takes, scalars, 0-d and empty arrays, broadcasting), result dtypes and weak types by
JAX's promotion rules, and errors."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from test_numpy_helpers import (ALL, BOOL, FLOATS, INTS, NUMERIC, SIGNED, UNSIGNED, array_of,
                                arrays, bf16, broadcastable_pair, check, np_ref, shapes)

F32 = np.dtype(np.float32)


def _float_out(dt):
  """The dtype of a float-valued function of ``dt`` (ints and bool -> float32)."""
  dt = np.dtype(dt)
  return dt if dt.kind == "f" or dt == bf16 else F32


# name, numpy function, input dtypes, value range (lo, hi)
FLOAT_UNARY = [
    ("sin", np.sin, None), ("cos", np.cos, None), ("tan", np.tan, (-1.5, 1.5)),
    ("arcsin", np.arcsin, (-1, 1)), ("arccos", np.arccos, (-1, 1)), ("arctan", np.arctan, None),
    ("sinh", np.sinh, (-8, 8)), ("cosh", np.cosh, (-8, 8)), ("tanh", np.tanh, None),
    ("arcsinh", np.arcsinh, None), ("arccosh", np.arccosh, (1, 1e3)),
    ("arctanh", np.arctanh, (-0.99, 0.99)), ("exp", np.exp, (-10, 10)),
    ("exp2", np.exp2, (-10, 10)), ("expm1", np.expm1, (-10, 10)), ("log", np.log, (1e-3, 1e4)),
    ("log1p", np.log1p, (0, 1e4)), ("log2", np.log2, (1e-3, 1e4)),
    ("log10", np.log10, (1e-3, 1e4)), ("sqrt", np.sqrt, (0, 1e4)), ("cbrt", np.cbrt, None),
    ("deg2rad", np.deg2rad, None), ("rad2deg", np.rad2deg, (-100, 100)),
    ("radians", np.radians, None), ("degrees", np.degrees, (-100, 100)),
    ("reciprocal", lambda x: 1 / x, (0.5, 100)), ("fabs", np.fabs, None),
    ("sinc", np.sinc, (-20, 20)), ("rint", np.rint, None),
]


def _check_unary_float(name, npfn, rng, x):
  dt = x.dtype
  out_dt = _float_out(dt)
  got = getattr(jnp, name)(x)
  ref = np_ref(npfn, x.astype(out_dt) if dt.kind in "biu" else x, out=out_dt)
  check(got, ref, out_dt, rtol=max(4e-5, 4 * (2e-3 if out_dt == np.float16 else 1e-2 if
                                                   out_dt == bf16 else 1e-6)))


@pytest.mark.parametrize("name,npfn,rng", FLOAT_UNARY, ids=[f[0] for f in FLOAT_UNARY])
@given(data=st.data())
def test_float_unary(name, npfn, rng, data):
  lo, hi = rng or (-100, 100)
  dt = data.draw(st.sampled_from(FLOATS + [np.dtype(np.int8), np.dtype(np.int32),
                                           np.dtype(np.uint8)]), label="dtype")
  if dt.kind in "iu":   # integer inputs: a range where the float32 result stays finite
    if name in ("exp", "exp2", "expm1", "sinh", "cosh"):
      lo, hi = max(lo, -8), min(hi, 8)
    lo, hi = int(np.ceil(lo)), int(np.floor(hi))
  x = data.draw(arrays(dt, data.draw(shapes()), lo, hi), label="x")
  _check_unary_float(name, npfn, rng, x)


@pytest.mark.parametrize("name", ["sin", "exp", "sqrt", "log", "tanh", "arctan"])
def test_float_unary_nan_inf(name):
  x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], np.float32)
  with np.errstate(all="ignore"):
    check(getattr(jnp, name)(x), getattr(np, name)(x))


@pytest.mark.parametrize("name,weak_in,out,weak_out", [
    ("sin", 1, F32, True), ("sin", 1.5, F32, True), ("sin", True, F32, False),
    ("exp", np.int8(2), F32, False), ("sqrt", np.float16(4), np.float16, False),
])
def test_float_unary_scalar_dtypes(name, weak_in, out, weak_out):
  got = getattr(jnp, name)(weak_in)
  check(got, getattr(np, name)(np.float64(weak_in)).astype(out), out, weak=weak_out,
        rtol=1e-3)


# dtype-preserving unary functions
SAME_UNARY = [
    ("negative", np.negative, SIGNED + FLOATS), ("positive", np.positive, ALL),
    ("absolute", np.absolute, ALL), ("abs", np.abs, SIGNED + UNSIGNED + FLOATS),
    ("sign", np.sign, SIGNED + FLOATS), ("square", np.square, SIGNED + FLOATS),
    ("floor", np.floor, ALL), ("ceil", np.ceil, ALL), ("trunc", np.trunc, ALL),
    ("invert", np.invert, BOOL + INTS),
    ("bitwise_not", np.bitwise_not, INTS), ("conjugate", np.conjugate, NUMERIC),
    ("real", np.real, NUMERIC), ("round", np.round, FLOATS + INTS),
]


@pytest.mark.parametrize("name,npfn,dts", SAME_UNARY, ids=[f[0] for f in SAME_UNARY])
@given(data=st.data())
def test_same_dtype_unary(name, npfn, dts, data):
  x = data.draw(array_of(dts, lo=-1000, hi=1000), label="x")
  got = getattr(jnp, name)(x)
  if x.dtype == np.bool_ and name in ("floor", "ceil", "trunc", "positive"):
    ref = x
  else:
    ref = np_ref(npfn, x, out=x.dtype)
  check(got, ref, x.dtype)


def test_imag_of_real_is_zero():
  check(jnp.imag(np.arange(3, dtype=np.int8)), np.zeros(3, np.int8))
  check(jnp.imag(np.float32(2)), np.float32(0))


def test_square_of_bool_and_negative_bool():
  check(jnp.square(np.array([True, False])), np.array([1, 0], np.int32))
  with pytest.raises(TypeError, match="neg"):
    jnp.negative(np.array([True]))
  with pytest.raises(TypeError, match="sub"):
    jnp.subtract(np.array([True]), np.array([False]))


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite", "signbit", "isposinf",
                                  "isneginf", "logical_not"])
@given(data=st.data())
def test_predicates(name, data):
  x = data.draw(array_of(ALL, nan=True, inf=True), label="x")
  got = getattr(jnp, name)(x)
  xf = x.astype(np.float32) if x.dtype in (bf16, np.dtype(np.float16)) else x
  if name == "signbit" and x.dtype == np.bool_:
    ref = np.zeros(x.shape, bool)
  elif name in ("isposinf", "isneginf") and x.dtype.kind in "biu":
    ref = np.zeros(x.shape, bool)
  else:
    ref = getattr(np, name)(xf)
  check(got, ref, np.bool_)


# ------------------------------------------------------------------------------------------------
# Binary functions


def _nonzero(y):
  y = y.copy()
  y[y == 0] = 1
  return y


BINARY_SAME = [
    # name, numpy fn, dtypes, value range
    ("add", np.add, ALL, None), ("subtract", np.subtract, NUMERIC, None),
    ("multiply", np.multiply, ALL, None), ("maximum", np.maximum, ALL, None),
    ("minimum", np.minimum, ALL, None), ("bitwise_and", np.bitwise_and, BOOL + INTS, None),
    ("bitwise_or", np.bitwise_or, BOOL + INTS, None),
    ("bitwise_xor", np.bitwise_xor, BOOL + INTS, None),
    ("floor_divide", np.floor_divide, INTS + FLOATS, "nonzero"),
    ("remainder", np.remainder, INTS + FLOATS, "nonzero"), ("mod", np.mod, SIGNED, "nonzero"),
    ("fmod", np.fmod, INTS + FLOATS, "nonzero"),
    ("fmax", np.fmax, FLOATS, "nan"), ("fmin", np.fmin, FLOATS, "nan"),
    ("copysign", np.copysign, FLOATS, None), ("arctan2", np.arctan2, FLOATS, None),
    ("hypot", np.hypot, FLOATS, None), ("logaddexp", np.logaddexp, FLOATS, None),
    ("logaddexp2", np.logaddexp2, FLOATS, None), ("divide", np.divide, FLOATS, "nonzero"),
    ("true_divide", np.true_divide, FLOATS, "nonzero"), ("heaviside", np.heaviside, FLOATS,
                                                          None),
]


@pytest.mark.parametrize("name,npfn,dts,kind", BINARY_SAME, ids=[f[0] for f in BINARY_SAME])
@given(data=st.data())
def test_binary_same_dtype(name, npfn, dts, kind, data):
  dt = data.draw(st.sampled_from(dts), label="dtype")
  lo, hi = (-100, 100)
  x, y = data.draw(broadcastable_pair(dt, dt, lo, hi, nan=kind == "nan"), label="xy")
  if kind == "nonzero":
    y = _nonzero(y)
  got = getattr(jnp, name)(x, y)
  if name in ("floor_divide", "remainder", "mod", "fmod") and dt.kind == "f":
    # reference in the same precision: these are exact or nearly so
    ref = np_ref(npfn, x, y, out=dt)
  elif name in ("divide", "true_divide") and np.ndim(y) == 0 < np.ndim(x) and dt != np.float64:
    # a division by a scalar is a product with its reciprocal, rounded to the type (float32's
    # for bfloat16), as XLA's CPU computes it for JAX: 0 / 4.4e-6 in float16 is 0 * inf = nan
    with np.errstate(all="ignore"):
      recip = np.float32(1) / np.float32(y)
      recip = recip if dt == bf16 else recip.astype(dt)
    ref = np_ref(np.multiply, x, recip, out=dt)
  else:
    ref = np_ref(npfn, x, y, out=dt)
  r = None
  if name in ("floor_divide",) and dt.kind == "f":
    # Compared exactly, except where the quotient is rounded: JAX (and so ourjax) takes
    # (x - x mod y) / y in the operands' precision, NumPy floors the quotient computed
    # wider, so the two may differ by one, or by one unit in the last place of a quotient
    # too large for the dtype to hold every integer (float16 98.5 // 0.046875 is 2102 in
    # JAX, 2100 in NumPy).
    ok = np.asarray(got).astype(np.float64)
    diff = np.abs(ok - ref.astype(np.float64))
    ulp = np.spacing(np.abs(ref)).astype(np.float64)
    assert np.all((diff <= np.maximum(1, ulp)) | np.isnan(diff)), (x, y, got, ref)
    return
  check(got, ref, dt, rtol=r)


COMPARISONS = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
               "logical_and", "logical_or", "logical_xor"]


@pytest.mark.parametrize("name", COMPARISONS)
@given(data=st.data())
def test_comparisons(name, data):
  dt = data.draw(st.sampled_from(ALL), label="dtype")
  x, y = data.draw(broadcastable_pair(dt, dt, -3, 3, nan=dt.kind == "f"), label="xy")
  check(getattr(jnp, name)(x, y), np_ref(getattr(np, name), x, y), np.bool_)


@given(data=st.data())
def test_shifts(data):
  dt = data.draw(st.sampled_from(INTS), label="dtype")
  bits = dt.itemsize * 8
  x = data.draw(arrays(dt, data.draw(shapes())), label="x")
  s = data.draw(arrays(dt, x.shape, 0, bits - 1), label="s")
  check(jnp.left_shift(x, s), np.left_shift(x, s))
  check(jnp.right_shift(x, s), np.right_shift(x, s))


@given(data=st.data())
def test_power(data):
  dt = data.draw(st.sampled_from(INTS + FLOATS), label="dtype")
  x = data.draw(arrays(dt, data.draw(shapes()), -5 if dt.kind != "u" else 0, 5), label="x")
  e = data.draw(arrays(dt, x.shape, 0, 4), label="e")
  check(jnp.power(x, e), np_ref(np.power, x, e, out=dt), dt)
  k = data.draw(st.integers(0, 4), label="k")
  check(jnp.power(x, k), np_ref(np.power, x, k, out=dt), dt)
  check(jnp.asarray(x) ** k, np_ref(np.power, x, k, out=dt), dt)


def test_power_special_cases():
  # bool ** bool is an int32 power in JAX (NumPy keeps bool)
  check(jnp.power(np.array([True, False]), np.array([False, True])),
        np.array([1, 0], np.int32))
  with pytest.raises(TypeError, match="negative"):
    jnp.power(np.arange(3, dtype=np.int32), -1)
  check(jnp.power(np.float32(2), -1), np.float32(0.5))
  # integer ** traced negative exponent: 1 for x == 1, 0 otherwise (truncated reciprocal)
  check(jnp.power(np.array([1, -1, 2], np.int32), np.array([-2, -3, -1], np.int32)),
        np.array([1, -1, 0], np.int32))
  check(jnp.float_power(np.int8(2), 3), np.float32(8))


# ------------------------------------------------------------------------------------------------
# Promotion and weak types


@given(data=st.data())
def test_binary_promotion(data):
  d1 = data.draw(st.sampled_from(ALL), label="d1")
  d2 = data.draw(st.sampled_from(ALL), label="d2")
  x, y = data.draw(broadcastable_pair(d1, d2, -50, 50), label="xy")
  out = jnp.promote_types(d1, d2)
  for name in ("add", "multiply", "maximum"):
    got = getattr(jnp, name)(x, y)
    ref = np_ref(getattr(np, name), x.astype(out), y.astype(out), out=out)
    check(got, ref, out)
  check(jnp.less(x, y), np_ref(np.less, x.astype(out), y.astype(out)), np.bool_)


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.float16, bf16, np.float32])
def test_python_scalars_are_weak(dt):
  x = np.ones(3, dt)
  assert jnp.add(x, 1).dtype == dt
  assert not jnp.add(x, 1).weak_type
  assert (x * jnp.asarray(2)).dtype == dt
  r = jnp.add(x, 1.5)
  if np.dtype(dt).kind == "f" or np.dtype(dt) == bf16:
    assert r.dtype == dt and not r.weak_type
  else:
    assert r.dtype == np.float32 and r.weak_type
  assert jnp.add(1, 2).dtype == np.int32 and jnp.add(1, 2).weak_type
  assert jnp.add(1, 2.0).dtype == np.float32 and jnp.add(1, 2.0).weak_type
  assert jnp.add(True, 2).dtype == np.int32


def test_python_int_overflow():
  # as JAX: a Python int must fit the default int dtype; it then wraps into a narrower one
  assert np.asarray(jnp.add(np.ones(2, np.int8), 300)).tolist() == [45, 45]
  assert np.asarray(jnp.add(np.ones(2, np.uint8), -1)).tolist() == [0, 0]
  with pytest.raises(OverflowError):
    jnp.add(np.ones(2, np.int8), 2 ** 31)


def test_x64_dtypes(x64):
  x = np.arange(4, dtype=np.int64)
  assert jnp.add(x, 1).dtype == np.int64
  assert jnp.sin(x).dtype == np.float64
  assert jnp.add(1, 2).dtype == np.int64
  assert jnp.sin(1.0).dtype == np.float64
  f = np.linspace(0, 1, 5)
  check(jnp.exp(f), np.exp(f), np.float64)
  assert jnp.add(np.float32(1), np.float64(2)).dtype == np.float64


def test_no_x64_narrows():
  assert jnp.add(np.arange(3, dtype=np.int64), 1).dtype == np.int32
  assert jnp.sin(np.arange(3.0)).dtype == np.float32


def test_lists_rejected():
  with pytest.raises(TypeError, match="sin"):
    jnp.sin([1.0, 2.0])
  with pytest.raises(TypeError):
    jnp.add([1], 2)


def test_broadcast_error_names_op_and_shapes():
  # JAX's exceptions: a failed rank promotion is a ValueError listing the shapes; equal ranks
  # reach the lax op (named by its primitive), a TypeError
  with pytest.raises(ValueError, match=r"Incompatible shapes for broadcasting: "
                     r"shapes=\[\(2, 3\), \(4,\)\]"):
    jnp.add(np.ones((2, 3)), np.ones(4))
  with pytest.raises(TypeError, match=r"mul got incompatible shapes for broadcasting: "
                     r"\(2, 3\), \(3, 2\)"):
    jnp.multiply(np.ones((2, 3)), np.ones((3, 2)))


# ------------------------------------------------------------------------------------------------
# where, clip, isclose & co.


@given(data=st.data())
def test_where(data):
  d1 = data.draw(st.sampled_from(ALL), label="d1")
  d2 = data.draw(st.sampled_from(ALL), label="d2")
  x, y = data.draw(broadcastable_pair(d1, d2, -50, 50), label="xy")
  c = data.draw(arrays(np.bool_, np.broadcast_shapes(x.shape, y.shape)[-1:]), label="c")
  out = jnp.promote_types(d1, d2)
  check(jnp.where(c, x, y), np.where(c, x.astype(out), y.astype(out)), out)
  out0 = np.dtype(np.int32) if d1 == np.bool_ else d1    # bool with a weak int: int32
  check(jnp.where(c.astype(np.int32), x, 0), np.where(c, x, np.zeros((), x.dtype)).astype(out0),
        out0)


def test_where_errors_and_weak():
  # one of x and y missing: JAX's array check of the missing one, a TypeError
  with pytest.raises(TypeError, match="where requires ndarray or scalar arguments, got "
                     "<class 'NoneType'> at position 2"):
    jnp.where(True, 1)
  with pytest.raises(TypeError, match="at position 1"):
    jnp.where(True, None, 1)
  r = jnp.where(True, 1.0, 2.0)
  assert r.dtype == np.float32 and r.weak_type
  with pytest.raises(ValueError, match=r"Incompatible shapes for broadcasting: "
                     r"shapes=\[\(2,\), \(3,\), \(\)\]"):
    jnp.where(np.ones(2, bool), np.ones(3), 0)


@given(data=st.data())
def test_clip(data):
  dt = data.draw(st.sampled_from(SIGNED + FLOATS), label="dtype")
  x = data.draw(arrays(dt, data.draw(shapes()), -100, 100), label="x")
  lo = data.draw(st.one_of(st.none(), st.integers(-50, 0)), label="lo")
  hi = data.draw(st.one_of(st.none(), st.integers(0, 50)), label="hi")
  ref = x
  if lo is not None:
    ref = np.maximum(ref, np.array(lo, dt))
  if hi is not None:
    ref = np.minimum(ref, np.array(hi, dt))
  check(jnp.clip(x, lo, hi), ref, dt)
  check(jnp.clip(x, min=lo, max=hi), ref, dt)
  check(jnp.clip(x, a_min=lo, a_max=hi), ref, dt)
  check(jnp.asarray(x).clip(lo, hi), ref, dt)


def test_clip_array_bounds_and_errors():
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  lo = np.array([1, 0, 2], np.float32)
  check(jnp.clip(x, lo, 4), np.clip(x, lo, 4))
  check(jnp.clip(x, None, None), x)
  with pytest.raises(ValueError, match="complex"):
    jnp.clip(np.ones(2, np.complex64), 0, 1)
  with pytest.raises(ValueError, match="No input"):
    jnp.clip()


@given(data=st.data())
def test_isclose(data):
  dt = data.draw(st.sampled_from([np.dtype(np.float32), np.dtype(np.float16)]), label="dtype")
  x, y = data.draw(broadcastable_pair(dt, dt, -10, 10, nan=True, inf=True), label="xy")
  rel = data.draw(st.sampled_from([0.0, 1e-4, 1e-3, 1e-2]), label="rel")
  near = (x * (1 + rel)).astype(dt)      # some pairs close, some not
  eq_nan = data.draw(st.booleans(), label="equal_nan")
  for a, b in ((x, y), (x, near)):
    ref = np.isclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=eq_nan)
    check(jnp.isclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=eq_nan), ref, np.bool_)
    check(jnp.allclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=eq_nan),
          np.array(ref.all()), np.bool_)


def test_isclose_ints_and_inf():
  check(jnp.isclose(np.array([1, 2, 3]), np.array([1, 3, 3])), np.array([True, False, True]))
  check(jnp.isclose(np.float32([np.inf, -np.inf, np.inf, np.nan]),
                    np.float32([np.inf, np.inf, 1, np.nan])),
        np.array([True, False, False, False]))
  assert bool(jnp.allclose(1.0, 1.0 + 1e-9))


@given(data=st.data())
def test_array_equal(data):
  dt = data.draw(st.sampled_from(ALL), label="dtype")
  x = data.draw(array_of([dt], lo=-3, hi=3, nan=dt.kind == "f"), label="x")
  y = data.draw(st.one_of(st.just(x.copy()), arrays(dt, x.shape, -3, 3),
                          array_of([dt], lo=-3, hi=3)), label="y")
  for equal_nan in (False, True):
    got = jnp.array_equal(x, y, equal_nan=equal_nan)
    ref = np.array_equal(x.astype(np.float32) if dt == bf16 else x,
                         y.astype(np.float32) if dt == bf16 else y,
                         equal_nan=equal_nan and dt.kind == "f" or dt == bf16 and equal_nan)
    check(got, np.array(ref), np.bool_)


def test_array_equiv():
  assert bool(jnp.array_equiv(np.ones((2, 3)), np.ones(3)))
  assert not bool(jnp.array_equiv(np.ones((2, 3)), np.ones(2)))


@given(data=st.data())
def test_nan_to_num(data):
  x = data.draw(array_of(FLOATS + INTS, nan=True, inf=True), label="x")
  kw = data.draw(st.fixed_dictionaries({}, optional={"nan": st.floats(-5, 5),
                                                      "posinf": st.floats(0, 9),
                                                      "neginf": st.floats(-9, 0)}), label="kw")
  got = jnp.nan_to_num(x, **kw)
  xf = x.astype(np.float32) if x.dtype == bf16 else x
  ref = np.nan_to_num(xf, **kw)
  if x.dtype == bf16:   # infinities become bfloat16's extremes, not float32's
    import ml_dtypes
    fi = ml_dtypes.finfo(bf16)
    ref = np.where(np.isposinf(xf), kw.get("posinf", float(fi.max)), ref)
    ref = np.where(np.isneginf(xf), kw.get("neginf", float(fi.min)), ref)
  check(got, ref.astype(x.dtype), x.dtype)


# ------------------------------------------------------------------------------------------------
# frexp / ldexp / modf / gcd / lcm / interp / misc


@given(data=st.data())
def test_frexp_ldexp(data):
  dt = data.draw(st.sampled_from([np.dtype(np.float16), np.dtype(np.float32)]), label="dtype")
  x = data.draw(array_of([dt], nan=True, inf=True), label="x")
  x = np.concatenate([x.ravel(), np.array([0, -0.0, np.finfo(dt).tiny / 4], dt)])
  m, e = jnp.frexp(x)
  rm, re = np.frexp(x)
  check(m, rm, dt)
  check(e, re, np.int32)
  check(jnp.ldexp(m, e), np.ldexp(rm, re), dt)
  n = data.draw(arrays(np.int32, x.shape, -30, 30), label="n")
  with np.errstate(all="ignore"):
    ref = np.ldexp(x, n)
  check(jnp.ldexp(x, n), ref, dt)


def test_ldexp_large_exponents():
  check(jnp.ldexp(np.float32(1e-30), 200), np.float32(np.ldexp(np.float64(1e-30), 200)))
  check(jnp.ldexp(np.float32(3), -140), np.ldexp(np.float32(3), -140))
  with pytest.raises(ValueError, match="ldexp not supported for input types"):   # (JAX's)
    jnp.ldexp(1.0, 2.5)


def test_modf():
  x = np.array([1.5, -2.25, 0.0, 3.0], np.float32)
  f, i = jnp.modf(x)
  rf, ri = np.modf(x)
  check(f, rf)
  check(i, ri)


@given(data=st.data())
def test_gcd_lcm(data):
  dt = data.draw(st.sampled_from(SIGNED + [np.dtype(np.uint8)]), label="dtype")
  # small enough that lcm does not overflow (where NumPy and JAX differ)
  lim = 11 if dt.itemsize == 1 else 100
  x, y = data.draw(broadcastable_pair(dt, dt, -lim if dt.kind == "i" else 0, lim), label="xy")
  check(jnp.gcd(x, y), np.gcd(x, y), dt)
  check(jnp.lcm(x, y), np.lcm(x, y), dt)
  with pytest.raises(ValueError, match="integers"):
    jnp.gcd(1.0, 2.0)


@given(data=st.data())
def test_interp(data):
  n = data.draw(st.integers(1, 6), label="n")
  xp = np.sort(data.draw(arrays(np.float32, (n,), -10, 10), label="xp"))
  xp = np.unique(xp)
  # (JAX takes an interval narrower than spacing(eps) as empty and gives its left value, where
  # NumPy divides by it: xp=[-1.25e-33, 0] at 0 is fp[0] for JAX, fp[1] for NumPy)
  xp = xp[np.concatenate([[True], np.diff(xp) > 1e-6])]
  fp = data.draw(arrays(np.float32, xp.shape, -10, 10), label="fp")
  x = data.draw(array_of([np.dtype(np.float32)], lo=-12, hi=12), label="x")
  check(jnp.interp(x, xp, fp), np.interp(x, xp, fp), np.float32, rtol=1e-4, atol=1e-4)
  check(jnp.interp(x, xp, fp, left=-99.0, right=99.0),
        np.interp(x, xp, fp, left=-99.0, right=99.0), np.float32, rtol=1e-4, atol=1e-4)


def test_interp_period():
  xp = np.array([190, -190, 350, -350], np.float32)
  fp = np.array([5, 10, 3, 4], np.float32)
  x = np.array([-180, -170, -185, 185, -10, -5, 0, 365], np.float32)
  check(jnp.interp(x, xp, fp, period=360), np.interp(x, xp, fp, period=360), np.float32,
        rtol=1e-5,
        atol=1e-5)


def test_misc_predicates():
  assert jnp.iscomplexobj(np.ones(2, np.complex64)) and not jnp.iscomplexobj(np.ones(2))
  assert jnp.isrealobj(1.0)
  assert jnp.isscalar(1.0) and jnp.isscalar(jnp.float32(2)) and not jnp.isscalar(np.ones(2))
  check(jnp.isreal(np.array([1, 2])), np.array([True, True]))
  check(jnp.iscomplex(np.array([1 + 1j, 2], np.complex64)), np.array([True, False]))
  check(jnp.angle(np.array([-1.0, 1.0], np.float32)), np.angle(np.array([-1.0, 1.0],
                                                                       np.float32)))
  check(jnp.bitwise_count(np.array([7, -1, 0], np.int8)),
        np.array([3, 1, 0], np.uint8))


def test_round():
  x = np.array([0.5, 1.5, 2.5, -0.5, 1.2345, -7.25], np.float32)
  check(jnp.round(x), np.round(x))
  check(jnp.round(x, 2), np.round(x, 2), rtol=1e-6)
  check(jnp.around(x, 1), np.around(x, 1), rtol=1e-6)
  check(jnp.round(np.array([15, 25, -35], np.int32), -1), np.array([20, 20, -40], np.int32))
  check(jnp.asarray(x).round(1), np.round(x, 1), rtol=1e-6)
  check(jnp.round(x, np.int64(1)), np.round(x, 1), rtol=1e-6)
  for bad in (1.5, 1.0):       # decimals must be an integer: NumPy's TypeError, as JAX's
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
      np.round(x, bad)
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
      jnp.round(x, bad)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("dt", [np.float16, np.float32, np.complex64])
def test_round_with_more_decimals_than_the_dtype_holds_is_a_no_op(dt, jit):
  # JAX: decimals past log10(finfo.max) leave the input as it is (10**decimals would be inf
  # and the result NaN); float16 scales in float32 so that 10**5 .. 10**38 do not overflow
  x = (np.array([5.3951, -1.0449, 3.918, -0.0007, 12.3456]) * (1 + 0.5j if dt == np.complex64
                                                              else 1)).astype(dt)
  f = lambda v, d: jnp.round(v, d)
  if jit:
    f = ourjax.jit(f, static_argnums=1)
  for d in (39, 100, 1000):
    out = f(x, d)
    assert out.dtype == dt
    np.testing.assert_array_equal(out, x)
  if dt == np.float16:
    for d in (5, 10, 38):      # float16's max is 65504: these factors exist only in float32
      out = f(x, d)
      assert out.dtype == dt
      np.testing.assert_array_equal(out, x)   # finer than float16's precision: unchanged
    np.testing.assert_array_equal(f(x, 2), np.round(x.astype(np.float32), 2).astype(dt))


def test_divmod_and_operators():
  x = np.array([7, -7, 8], np.int32)
  y = np.array([2, 2, -3], np.int32)
  q, r = divmod(jnp.asarray(x), jnp.asarray(y))
  check(q, x // y)
  check(r, x % y)
  a = jnp.asarray(np.float32([1.5, -2.0]))
  check(-a, -np.float32([1.5, -2.0]))
  check(abs(a), np.float32([1.5, 2.0]))
  check(~jnp.asarray(x), ~x)
  check(2 - a, 2 - np.float32([1.5, -2.0]))
  check(2 ** jnp.asarray(x[:1]), np.array([128], np.int32))
  assert (a == a).dtype == np.bool_


def test_ufuncs_under_jit_and_grad():
  f = ourjax.jit(lambda x, y: jnp.where(x > 0, jnp.clip(x, 0, 1), jnp.hypot(x, y)))
  x = np.float32([-1, 0.5, 2])
  y = np.float32([1, 1, 1])
  check(f(x, y), np.where(x > 0, np.clip(x, 0, 1), np.hypot(x, y)))
  g = ourjax.grad(lambda x: jnp.sum(jnp.logaddexp(x, 0.0)))(x)
  check(g, 1 / (1 + np.exp(-x)), rtol=1e-5)
  h = ourjax.vmap(lambda v: jnp.isclose(v, 0.5))(x)
  check(h, np.isclose(x, 0.5))


# ------------------------------------------------------------------------------------------------
# 64-bit dtypes (x64 enabled)

X64_DTS = [np.dtype(t) for t in (np.float64, np.int64, np.uint64, np.int8, np.float32,
                                 np.bool_)]


@given(data=st.data())
def test_x64_binary_and_unary(data):
  from ourjax.config import enable_x64
  with enable_x64(True):
    d1 = data.draw(st.sampled_from(X64_DTS), label="d1")
    d2 = data.draw(st.sampled_from(X64_DTS), label="d2")
    x, y = data.draw(broadcastable_pair(d1, d2, -50, 50), label="xy")
    out = np.dtype(jnp.promote_types(d1, d2))
    for name in ("add", "multiply", "maximum"):
      check(getattr(jnp, name)(x, y), np_ref(getattr(np, name), x.astype(out), y.astype(out),
                                             out=out), out)
    fout = out if out.kind == "f" else np.dtype(np.float64)
    if out.kind in "biu" and out.itemsize < 8:
      fout = np.dtype(np.float32)   # bool and narrow ints -> float32, as in JAX
    check(jnp.sin(x.astype(out)), np_ref(np.sin, x.astype(out).astype(fout), out=fout), fout,
          rtol=1e-12 if fout == np.float64 else 1e-6)
    check(jnp.sum(x), np.sum(x, dtype={"b": np.int64, "i": np.int64, "u": np.uint64}.get(
        d1.kind, d1)), {"b": np.dtype(np.int64), "i": np.dtype(np.int64),
                        "u": np.dtype(np.uint64)}.get(d1.kind, d1), rtol=1e-6)
    assert jnp.add(1, 1).dtype == np.int64 and jnp.add(1.0, 1).dtype == np.float64
    assert jnp.add(np.ones(2, np.float32), 1.0).dtype == np.float32


# ------------------------------------------------------------------------------------------------
# ufunc methods


UFUNC_METHOD_NAMES = ["add", "multiply", "maximum", "minimum", "subtract", "logaddexp",
                      "logical_and", "logical_or", "bitwise_xor", "hypot", "fmax"]


@pytest.mark.parametrize("name", UFUNC_METHOD_NAMES)
@given(data=st.data())
def test_ufunc_methods(name, data):
  uf, npuf = getattr(jnp, name), getattr(np, name)
  assert isinstance(uf, jnp.ufunc) and uf.nin == 2 and uf.nout == 1
  dts = {"logical_and": [np.dtype(np.bool_)], "logical_or": [np.dtype(np.bool_)],
         "bitwise_xor": [np.dtype(np.int32), np.dtype(np.uint8)]}.get(name, [F32])
  x = data.draw(array_of(dts, lo=-3, hi=3, min_dims=1, max_dims=3, min_side=1), label="x")
  multi = [st.none()] if name != "subtract" else []   # subtract is not reorderable
  axis = data.draw(st.one_of(*multi, st.integers(-x.ndim, x.ndim - 1)), label="axis")
  keepdims = data.draw(st.booleans(), label="keepdims")
  tol = 1e-5 if x.dtype == F32 else None
  with np.errstate(all="ignore"):
    ref = npuf.reduce(x, axis=axis, keepdims=keepdims)
  out_dt = {"add": np.dtype(np.int32)}.get(name) if x.dtype.kind in "iu" else None
  check(uf.reduce(x, axis=axis, keepdims=keepdims), np.asarray(ref).astype(
      out_dt or np.asarray(uf.reduce(x, axis=axis, keepdims=keepdims)).dtype), rtol=tol,
      atol=tol)
  ax = data.draw(st.integers(-x.ndim, x.ndim - 1), label="accumulate axis")
  with np.errstate(all="ignore"):
    ref = npuf.accumulate(x, axis=ax)
  check(uf.accumulate(x, axis=ax), ref.astype(np.asarray(uf.accumulate(x, axis=ax)).dtype),
        rtol=tol, atol=tol)
  y = data.draw(array_of([x.dtype], lo=-3, hi=3, max_dims=2), label="y")
  with np.errstate(all="ignore"):
    check(uf.outer(x, y), npuf.outer(x, y).astype(x.dtype), rtol=tol, atol=tol)


def test_ufunc_at_and_errors():
  a = np.zeros(5, np.float32)
  idx = np.array([0, 1, 1, 4])
  ref = a.copy()
  np.add.at(ref, idx, 2.0)
  check(jnp.add.at(a, idx, 2.0, inplace=False), ref)
  ref = np.ones(5, np.float32)
  np.multiply.at(ref, idx, 3.0)
  check(jnp.multiply.at(np.ones(5, np.float32), idx, 3.0, inplace=False), ref)
  with pytest.raises(NotImplementedError, match="inplace"):
    jnp.add.at(a, idx, 1.0)
  with pytest.raises(ValueError, match="identity"):
    jnp.maximum.reduce(np.zeros((0,), np.float32))
  with pytest.raises(ValueError, match="reorderable"):
    jnp.subtract.reduce(np.ones((2, 2)), axis=None)
  check(jnp.subtract.reduce(np.zeros((0, 2), np.float32), initial=1.0), np.ones(2, np.float32))
  check(ourjax.jit(lambda v: jnp.hypot.accumulate(v))(np.float32([3, 4, 12])),
        np.hypot.accumulate(np.float32([3, 4, 12])))


@given(x=array_of([np.dtype(np.float16), np.dtype(np.float32)], nan=True, inf=True))
def test_spacing(x):
  with np.errstate(all="ignore"):
    want = np.spacing(x)
    # -0.0 steps toward -inf in JAX (NumPy's spacing(-0.0) is +tiny); float16 toward +inf
    want = np.where((x == 0) & np.signbit(x), -want, want)
    if x.dtype == np.float16:
      want = np.nextafter(x, np.float16(np.inf)) - x
  check(jnp.spacing(x), want.astype(x.dtype), rtol=0, atol=0)
  check(ourjax.jit(jnp.spacing)(x), want.astype(x.dtype), rtol=0, atol=0)


def test_spacing_types():
  check(jnp.spacing(np.array([1, -4], np.int32)), np.spacing(np.float32([1, -4])))
  check(jnp.spacing(1.0), np.spacing(np.float32(1)), weak=False)
  check(jnp.spacing(np.float32([0, 1e-40])), np.float32([1.4e-45, 1.4e-45]), rtol=0.01)
  with pytest.raises(ValueError, match="complex"):
    jnp.spacing(np.array([1j]))


_BACKENDS = {"eager": lambda f: f, "cpu": ourjax.jit,
             "reference": lambda f: ourjax.jit(f, backend="reference")}


@pytest.mark.parametrize("backend", sorted(_BACKENDS))
@given(data=st.data())
def test_integer_division_by_zero(backend, data):
  """Integer x / 0 as JAX gives it, in every backend: fmod and remainder 0 (NumPy's values),
  lax.rem x and lax.div -1 (all ones unsigned; XLA's semantics)."""
  dt = np.dtype(data.draw(st.sampled_from([np.int8, np.int32, np.uint8, np.uint32]), label="dt"))
  info = np.iinfo(dt)
  x = np.array(data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1,
                                  max_size=6), label="x"), dt)
  y = np.array(data.draw(st.lists(st.sampled_from([0, 0, 1, 3, int(info.max)]), min_size=x.size,
                                  max_size=x.size), label="y"), dt)
  wrap = _BACKENDS[backend]
  with np.errstate(all="ignore"):
    for name, got_f, want in [
        ("fmod", jnp.fmod, np.fmod(x, y)), ("remainder", jnp.remainder, np.remainder(x, y)),
        ("lax.rem", ourjax.lax.rem, np.where(y == 0, x, np.fmod(x, np.where(y == 0, 1, y)))),
        ("lax.div", ourjax.lax.div,
         np.where(y == 0, np.array(-1).astype(dt), (np.sign(x) * np.sign(y) * (
             np.abs(x.astype(np.int64)) // np.maximum(np.abs(y.astype(np.int64)), 1))).astype(dt)))]:
      got = np.asarray(wrap(got_f)(x, y))
      np.testing.assert_array_equal(got, want.astype(dt), err_msg=f"{name}{x, y} [{backend}]")


@pytest.mark.parametrize("backend", sorted(_BACKENDS))
@given(data=st.data())
def test_hypot_infinity_beats_nan(backend, data):
  """hypot(+-inf, nan) = hypot(nan, +-inf) = inf (C99, NumPy, JAX) in every backend."""
  dt = data.draw(st.sampled_from([np.float32, np.float16]), label="dt")
  vals = st.one_of(st.sampled_from([np.inf, -np.inf, np.nan, 0.0, -0.0]),
                   st.floats(-1e4, 1e4, width=16))
  x = np.array(data.draw(st.lists(vals, min_size=1, max_size=6), label="x"), dt)
  y = np.array(data.draw(st.lists(vals, min_size=x.size, max_size=x.size), label="y"), dt)
  got = np.asarray(_BACKENDS[backend](jnp.hypot)(x, y))
  np.testing.assert_allclose(got, np.hypot(x, y), rtol=2e-3, err_msg=f"hypot{x, y}")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_sign_keeps_signed_zeros_eagerly_and_compiled(dtype):
  """jnp.sign(-0.0) is -0.0 (XLA's and JAX's sign; NumPy's gives +0.0), eagerly and compiled:
  arctan2 tells the two apart."""
  x = np.array([-0.0, 0.0, -2.5, 3.0, np.nan], dtype)
  for f in (jnp.sign, ourjax.jit(jnp.sign, backend="cpu")):
    got = np.asarray(f(x))
    np.testing.assert_array_equal(got, np.array([-0.0, 0.0, -1.0, 1.0, np.nan], dtype))
    assert list(np.signbit(got[:2])) == [True, False]
  assert float(jnp.arctan2(jnp.sign(dtype(-0.0)), dtype(-0.0))) == pytest.approx(-np.pi, 1e-3)


def test_logaddexp2_weak_type_values_and_gradient():
  # as JAX's: weakly typed Python scalars give a weakly typed result
  assert jnp.logaddexp2(1.0, 2.0).weak_type
  assert not jnp.logaddexp2(np.float32(1), 2.0).weak_type
  x = np.array([-np.inf, np.inf, np.nan, 1., 3., -np.inf, 0.5, -120.], np.float32)
  y = np.array([-np.inf, np.inf, 1., 1., -2., 5., 0.25, -121.], np.float32)
  with np.errstate(invalid="ignore"):
    want = np.logaddexp2(x.astype(np.float64), y.astype(np.float64))
  for f in (jnp.logaddexp2, ourjax.jit(jnp.logaddexp2)):
    got = np.asarray(f(x, y))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-7)
  # d/dx log2(2^x + 2^y) = 2^x / (2^x + 2^y)
  g = ourjax.grad(jnp.logaddexp2)(3.0, 1.0)
  np.testing.assert_allclose(float(g), 8 / 10, rtol=1e-6)


def test_integer_power_and_floor_divide_weak_types_as_jax():
  b = jnp.asarray(np.array([True, False, True]))
  # JAX's integer power accumulates from strongly typed ones: 3 ** bool_array is strong int32
  r = jnp.power(3, b)
  assert r.dtype == np.int32 and not r.weak_type
  np.testing.assert_array_equal(np.asarray(r), [3, 1, 3])
  # floor_divide keeps the promoted operands' weak type (bool array with a Python int: weak)
  r = jnp.floor_divide(b, 3)
  assert r.dtype == np.int32 and r.weak_type
  r = jnp.floor_divide(-1, b)
  assert r.weak_type
  np.testing.assert_array_equal(np.asarray(r), [-1, -2, -1])   # (XLA's -1 // 0 = -1, then -1)
  assert not jnp.floor_divide(np.arange(3, dtype=np.int32), 2).weak_type


def test_copysign_heaviside_shape_mismatch_is_value_error():
  # JAX computes them with where: its broadcast error is a ValueError (add's is a TypeError)
  for f in (jnp.copysign, jnp.heaviside):
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
      f(np.ones(3, np.float32), np.ones(4, np.float32))
  with pytest.raises(TypeError):
    jnp.add(np.ones(3, np.float32), np.ones(4, np.float32))
  np.testing.assert_array_equal(np.asarray(jnp.copysign(np.ones((2, 1)), np.array([-1., 1.]))),
                                [[-1, 1], [-1, 1]])
