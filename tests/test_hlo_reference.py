"""The NumPy reference: ``reference_ops`` against direct formulas and Python loops, and the HLO
executor on every op."""
import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_programs import assert_bitwise_equal, random_array
from ourjax.backends import reference
from ourjax.backends import reference_ops as rops
from ourjax.lowering.hlo import Builder, Module, Shape, scalar_computation, to_dtype

BF16 = np.dtype(ml_dtypes.bfloat16)


def S(dtype, *dims):
  return Shape(dtype, dims)


def run1(build, *args):
  """Build a one-computation module from ``build(b, *params)`` and run it on ``args``."""
  m = Module("t")
  b = Builder(m, "main")
  params = [b.parameter(Shape.of(a)) for a in args]
  root = build(b, *params) if not callable(getattr(build, "__self__", None)) else build(*params)
  m.entry = b.build(root)
  out = reference.compile(m)(*args)
  return out if root.shape.is_tuple else out[0]


# ---------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------

_UNARY_FORMULAS = {
    "abs": np.abs, "negate": np.negative, "floor": np.floor, "ceil": np.ceil,
    "round-nearest-even": np.rint, "is-finite": np.isfinite, "exponential": np.exp,
    "exp2": np.exp2, "exponential-minus-one": np.expm1, "log": np.log, "log-plus-one": np.log1p,
    "tanh": np.tanh, "sine": np.sin, "cosine": np.cos, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "cbrt": np.cbrt, "logistic": lambda x: 1 / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("op", sorted(_UNARY_FORMULAS))
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f64"])
def test_unary_float_ops(op, dtype):
  x = random_array(np.random.default_rng(0), dtype, (64,))
  got = run1(lambda b, p: b.emit(op, (p,)), x)
  with np.errstate(all="ignore"):
    cdt = np.float32 if dtype == "bf16" else to_dtype(dtype)
    want = np.asarray(_UNARY_FORMULAS[op](x.astype(cdt)))
    want = want.astype(got.dtype)
  assert_bitwise_equal(got, want, op)


def test_special_functions():
  x = np.array([-3.5, -1.0, -0.5, 0.0, 0.1, 0.5, 1.0, 2.5, 10.0, np.inf, np.nan])
  erf = run1(lambda b, p: b.erf(p), x)
  np.testing.assert_allclose(erf[:-2], [math.erf(v) for v in x[:-2]], rtol=1e-15)
  assert erf[-2] == 1.0 and np.isnan(erf[-1])
  lg = run1(lambda b, p: b.lgamma(p), x)
  assert lg[1] == np.inf and lg[3] == np.inf  # poles
  np.testing.assert_allclose(lg[4:-2], [math.lgamma(v) for v in x[4:-2]], rtol=1e-14)
  dg = rops.digamma(np.array([1.0, 0.5, 2.0, 10.0, -0.5, 0.0, -2.0, np.inf]))
  euler = 0.5772156649015329
  want = [-euler, -euler - 2 * math.log(2), 1 - euler, sum(1 / k for k in range(1, 10)) - euler,
          2 - euler - 2 * math.log(2)]
  np.testing.assert_allclose(dg[:5], want, rtol=1e-13, atol=1e-13)
  assert np.isnan(dg[5]) and np.isnan(dg[6]) and dg[7] == np.inf
  z = np.random.default_rng(0).uniform(-20, 40, 200)
  np.testing.assert_allclose(rops.digamma(z + 1) - rops.digamma(z), 1 / z, rtol=1e-9, atol=1e-9)
  # digamma is the derivative of lgamma
  for v in (0.3, 1.7, 4.2, -1.3):
    h = 1e-6
    fd = (math.lgamma(v + h) - math.lgamma(v - h)) / (2 * h)
    assert abs(rops.digamma(np.array(v)) - fd) < 1e-6
  y = np.concatenate([np.linspace(-0.999999, 0.999999, 201), [1 - 1e-15, -1 + 1e-15]])
  inv = rops.erf_inv(y)
  np.testing.assert_allclose([math.erf(v) for v in inv], y, rtol=1e-14, atol=1e-16)
  e = rops.erf_inv(np.array([1.0, -1.0, 1.5, np.nan, -0.0]))
  assert e[0] == np.inf and e[1] == -np.inf and np.isnan(e[2]) and np.isnan(e[3])
  assert e[4] == 0 and np.signbit(e[4])
  f = rops.erf_inv(np.array([0.3, -0.9], np.float32))
  assert f.dtype == np.float32



def test_float64_digamma_is_accurate_to_an_ulp_of_its_terms():
  """The reference digamma (eager ops) in float64 against a long-double one: the asymptotic
  series cut at z^-10 was 1.4e-14 off (1e-12 relative near the zero 1.4616...), where JAX (and
  the compiled kernel) are within an ulp or two."""
  from test_llvm_math import digamma_ld
  rng = np.random.default_rng(1)
  x0 = 1.4616321449683622
  x = np.concatenate([rng.uniform(0.01, 30, 3000), x0 + rng.uniform(-0.01, 0.01, 300),
                      -rng.uniform(0.01, 20, 1000), rng.uniform(30, 1e6, 300)])
  ref = digamma_ld(x)
  err = np.abs(rops.digamma(x).astype(np.longdouble) - ref) / (1 + np.abs(ref))
  assert float(err.max()) < 2e-15, x[np.argmax(err)]


def test_round_and_sign():
  x = np.array([-2.5, -1.5, -0.5, -0.3, -0.0, 0.0, 0.5, 1.5, 2.5, 0.49999997, np.inf, np.nan],
               np.float32)
  afz = rops.round_half_away_from_zero(x)
  assert_bitwise_equal(afz, np.array([-3, -2, -1, -0.0, -0.0, 0, 1, 2, 3, 0, np.inf, np.nan],
                                     np.float32))
  assert_bitwise_equal(rops.round_half_to_even(x), np.array(
      [-2, -2, -0.0, -0.0, -0.0, 0, 0, 2, 2, 0, np.inf, np.nan], np.float32))
  assert_bitwise_equal(rops.sign(np.array([-3.0, -0.0, 0.0, 2.0, np.nan])),
                       np.array([-1.0, -0.0, 0.0, 1.0, np.nan]))
  assert_bitwise_equal(rops.sign(np.array([-5, 0, 7], np.int8)), np.array([-1, 0, 1], np.int8))
  assert_bitwise_equal(rops.sign(np.array([0, 200], np.uint8)), np.array([0, 1], np.uint8))


def _c_div(a, b):
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b >= 0) else -q


@pytest.mark.parametrize("dtype", ["s8", "s32", "u8", "u32", "s64"])
def test_integer_division_semantics(dtype):
  dt = to_dtype(dtype)
  info = np.iinfo(dt)
  vals = sorted(v for v in {info.min, info.min + 1, -7, -2, -1, 0, 1, 2, 7, info.max - 1,
                            info.max} if info.min <= v <= info.max)
  x, y = (np.array(v, dt) for v in zip(*itertools.product(vals, vals)))
  q = run1(lambda b, p, r: b.divide(p, r), x, y)
  r = run1(lambda b, p, r: b.remainder(p, r), x, y)
  for a, bb, qq, rr in zip(x.tolist(), y.tolist(), q.tolist(), r.tolist()):
    if bb == 0:
      assert qq == (-1 if info.min < 0 else info.max) and rr == a
    elif a == info.min and bb == -1 and info.min < 0:
      assert qq == info.min and rr == 0
    else:
      assert qq == _c_div(a, bb) and rr == a - bb * _c_div(a, bb), (a, bb)


def test_integer_power():
  x = np.array([2, -2, 3, 1, -1, -1, 0, 5, 7], np.int32)
  y = np.array([10, 3, 0, -5, -3, -4, 0, -1, 40], np.int32)
  got = rops.integer_pow(x, y)
  want = [1024, -8, 1, 1, -1, 1, 1, 0, int(np.int32(np.uint32((7 ** 40) % 2 ** 32)))]
  assert got.tolist() == want


@pytest.mark.parametrize("dtype", ["s8", "u8", "s32", "u16"])
def test_shifts_popcount_clz(dtype):
  dt = to_dtype(dtype)
  bits = dt.itemsize * 8
  rng = np.random.default_rng(1)
  x = random_array(rng, dt, (200,))
  y = np.concatenate([np.arange(-2, bits + 3), rng.integers(0, bits, 200 - bits - 5)]).astype(dt)
  mask = (1 << bits) - 1
  signed = np.iinfo(dt).min < 0
  left = run1(lambda b, p, q: b.shift_left(p, q), x, y)
  logical = run1(lambda b, p, q: b.shift_right_logical(p, q), x, y)
  arith = run1(lambda b, p, q: b.shift_right_arithmetic(p, q), x, y)
  for a, s, l, rl, ra in zip(x.tolist(), y.tolist(), left.tolist(), logical.tolist(),
                             arith.tolist()):
    ua, us = a & mask, s & mask
    wl = 0 if us >= bits else (ua << us) & mask
    wrl = 0 if us >= bits else ua >> us
    sa = ua - (1 << bits) if ua >> (bits - 1) else ua
    wra = (sa >> min(us, bits - 1)) & mask
    conv = (lambda v: v - (1 << bits) if signed and v >> (bits - 1) else v)
    assert (l, rl, ra) == (conv(wl), conv(wrl), conv(wra)), (a, s)
  pc = run1(lambda b, p: b.popcnt(p), x)
  clz = run1(lambda b, p: b.count_leading_zeros(p), x)
  for a, p, c in zip(x.tolist(), pc.tolist(), clz.tolist()):
    ua = a & mask
    assert p == bin(ua).count("1") and c == bits - ua.bit_length()


def test_bitwise_and_logical_ops():
  x = np.array([True, True, False, False])
  y = np.array([True, False, True, False])
  assert run1(lambda b, p, q: b.and_(p, q), x, y).tolist() == [True, False, False, False]
  assert run1(lambda b, p, q: b.xor(p, q), x, y).tolist() == [False, True, True, False]
  assert run1(lambda b, p, q: b.add(p, q), x, y).tolist() == [True, True, True, False]
  assert run1(lambda b, p: b.not_(p), x).tolist() == [False, False, True, True]
  i = np.array([0b1100, -1], np.int32)
  assert run1(lambda b, p: b.not_(p), i).tolist() == [~0b1100, 0]


def test_binary_float_ops_in_narrow_types():
  rng = np.random.default_rng(2)
  for dt in ("bf16", "f16"):
    x, y = random_array(rng, dt, (100,)), random_array(rng, dt, (100,))
    for op, fn in [("add", np.add), ("divide", np.divide), ("atan2", np.arctan2),
                   ("remainder", np.fmod), ("maximum", rops.maximum)]:
      got = run1(lambda b, p, q: b.emit(op, (p, q)), x, y)
      with np.errstate(all="ignore"):
        want = fn(x.astype(np.float32), y.astype(np.float32)).astype(x.dtype)
      assert_bitwise_equal(got, want, f"{op} {dt}")
    p = run1(lambda b, p, q: b.power(p, q), x, y)
    with np.errstate(all="ignore"):
      assert_bitwise_equal(p, np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype))


def test_compare_ieee_and_total_order():
  x = np.array([np.nan, -np.nan, -0.0, 0.0, 1.0, -np.inf], np.float32)
  y = np.array([np.nan, 1.0, 0.0, -0.0, np.nan, -np.inf], np.float32)
  assert run1(lambda b, p, q: b.eq(p, q), x, y).tolist() == [False, False, True, True, False,
                                                             True]
  assert run1(lambda b, p, q: b.ne(p, q), x, y).tolist() == [True, True, False, False, True,
                                                             False]
  tot = run1(lambda b, p, q: b.compare(p, q, "LT", total_order=True), x, y)
  assert tot.tolist() == [False, True, True, False, True, False]
  keys = rops.total_order_key(np.array([-np.nan, -np.inf, -1.0, -0.0, 0.0, 1e-45, np.inf, np.nan],
                                       np.float32))
  assert np.all(np.diff(keys.astype(np.int64)) > 0)


def test_select_clamp():
  p = np.array([True, False, True])
  x, y = np.array([1.0, 2.0, 3.0], np.float32), np.array([-1.0, -2.0, -3.0], np.float32)
  assert run1(lambda b, c, u, v: b.select(c, u, v), p, x, y).tolist() == [1, -2, 3]
  got = run1(lambda b, u: b.clamp(b.constant(-1.5, "f32"), u, b.constant(2.5, "f32")),
             np.array([-3.0, 0.0, 3.0, np.nan], np.float32))
  assert_bitwise_equal(got, np.array([-1.5, 0, 2.5, np.nan], np.float32))


def test_convert_semantics():
  x = np.array([np.nan, np.inf, -np.inf, 3.9, -3.9, 1e10, -1e10, -0.0, 127.5, -128.7])
  assert rops.convert_element_type(x, np.int8).tolist() == [0, 127, -128, 3, -3, 127, -128, 0,
                                                            127, -128]
  assert rops.convert_element_type(x, np.uint8).tolist() == [0, 255, 0, 3, 0, 255, 0, 0, 127, 0]
  assert rops.convert_element_type(x, np.int64)[1] == np.iinfo(np.int64).max
  assert rops.convert_element_type(x, np.bool_).tolist() == [True, True, True, True, True, True,
                                                             True, False, True, True]
  assert rops.convert_element_type(np.array([300, -1], np.int32), np.uint8).tolist() == [44, 255]
  got = run1(lambda b, p: b.convert(p, "bf16"), np.array([1.00390625, 1.01171875], np.float32))
  assert got.tolist() == [1.0, 1.015625]  # round to nearest even
  c = rops.convert_element_type(np.array([1 + 2j]), np.float32)
  assert c.tolist() == [1.0]


def test_bitcast_convert():
  x = np.array([1.0, -2.0], np.float32)
  u = run1(lambda b, p: b.bitcast_convert(p, "u32"), x)
  assert u.tolist() == [0x3F800000, 0xC0000000]
  by = run1(lambda b, p: b.bitcast_convert(p, "u8"), x)
  assert by.shape == (2, 4) and by[0].tolist() == [0, 0, 0x80, 0x3F]
  back = run1(lambda b, p: b.bitcast_convert(p, "f32"), by)
  assert_bitwise_equal(back, x)


# ---------------------------------------------------------------------------------------------
# structural
# ---------------------------------------------------------------------------------------------

def _pad_loop(x, v, cfg):
  shape = [lo + hi + n + max(n - 1, 0) * it for n, (lo, hi, it) in zip(x.shape, cfg)]
  out = np.full(shape, v, x.dtype)
  for idx in np.ndindex(x.shape):
    pos = [lo + i * (it + 1) for i, (lo, hi, it) in zip(idx, cfg)]
    if all(0 <= p < n for p, n in zip(pos, shape)):
      out[tuple(pos)] = x[idx]
  return out


@settings(max_examples=40)
@given(st.data())
def test_pad_against_loop(data):
  rank = data.draw(st.integers(1, 3))
  shape = [data.draw(st.integers(0, 4)) for _ in range(rank)]
  cfg = []
  for n in shape:
    it = data.draw(st.integers(0, 2))
    core = n + max(n - 1, 0) * it
    lo = data.draw(st.integers(-core, 3))
    hi = data.draw(st.integers(-(core + lo), 3))
    cfg.append((lo, hi, it))
  x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) + 1
  got = run1(lambda b, p: b.pad(p, b.constant(-1.0, "f32"), cfg), x)
  np.testing.assert_array_equal(got, _pad_loop(x, -1.0, cfg))


def test_shape_ops():
  x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
  assert np.array_equal(run1(lambda b, p: b.transpose(p, (2, 0, 1)), x), x.transpose(2, 0, 1))
  assert np.array_equal(run1(lambda b, p: b.reshape(p, (4, 6)), x), x.reshape(4, 6))
  assert np.array_equal(run1(lambda b, p: b.slice(p, (1, 0, 1), (2, 3, 4), (1, 2, 2)), x),
                        x[1:2, 0:3:2, 1:4:2])
  assert np.array_equal(run1(lambda b, p: b.reverse(p, (0, 2)), x), x[::-1, :, ::-1])
  assert np.array_equal(run1(lambda b, p: b.concatenate([p, p], 1), x),
                        np.concatenate([x, x], 1))
  bc = run1(lambda b, p: b.broadcast(p, (5, 2, 3, 4), (1, 2, 3)), x)
  assert np.array_equal(bc, np.broadcast_to(x, (5, 2, 3, 4)))
  deg = run1(lambda b, p: b.broadcast(p, (3, 4), (0, 1)), np.array([[1], [2], [3]], np.int32))
  assert deg.tolist() == [[1] * 4, [2] * 4, [3] * 4]
  it = run1(lambda b: b.iota(S("f32", 2, 3), 1))
  assert it.tolist() == [[0, 1, 2], [0, 1, 2]]


def test_dynamic_slice_and_update_clamp():
  x = np.arange(20, dtype=np.float32).reshape(4, 5)
  for (i, j), want in [((1, 2), x[1:3, 2:5]), ((-5, 9), x[0:2, 2:5]), ((3, 0), x[2:4, 0:3])]:
    got = run1(lambda b, p: b.dynamic_slice(p, [b.constant(i), b.constant(j)], (2, 3)), x)
    assert np.array_equal(got, want), (i, j)
  u = -np.ones((2, 2), np.float32)
  got = run1(lambda b, p, q: b.dynamic_update_slice(
      p, q, [b.constant(np.uint8(200)), b.constant(np.uint8(1))]), x, u)
  want = x.copy()
  want[2:4, 1:3] = -1
  assert np.array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------

def test_reduce_fast_and_generic():
  rng = np.random.default_rng(3)
  x = rng.standard_normal((3, 4, 5)).astype(np.float32)
  m = Module("r")
  b = Builder(m, "main")
  p = b.parameter(Shape.of(x))
  mx = b.reduce(p, b.constant(-np.inf, "f32"), (0, 2), scalar_computation(m, "maximum", "f32"))
  # a reducer that is not a single op: sum of squares, evaluated sequentially
  rb = Builder(m, "sumsq")
  acc, v = rb.parameter(S("f32")), rb.parameter(S("f32"))
  sq = rb.build(rb.add(acc, rb.multiply(v, v)))
  ss = b.reduce(p, b.constant(1.0, "f32"), (1,), sq)
  m.entry = b.build(b.tuple([mx, ss]))
  got_max, got_ss = reference.compile(m)(x)
  assert np.array_equal(got_max, x.max(axis=(0, 2)))
  want = np.ones((3, 5), np.float32)
  for k in range(4):
    want = want + x[:, k, :] * x[:, k, :]
  assert_bitwise_equal(got_ss, want)


def test_variadic_reduce_argmax():
  x = np.array([[3.0, 7.0, 7.0, 1.0], [np.nan, 2.0, 5.0, 5.0]], np.float32)
  m = Module("argmax")
  rb = Builder(m, "argmax_reducer")
  av, ai, xv, xi = (rb.parameter(S(d)) for d in ("f32", "s32", "f32", "s32"))
  take = rb.or_(rb.gt(xv, av), rb.and_(rb.eq(xv, av), rb.lt(xi, ai)))
  red = rb.build(rb.tuple([rb.select(take, xv, av), rb.select(take, xi, ai)]))
  b = Builder(m, "main")
  p = b.parameter(Shape.of(x))
  idx = b.iota(S("s32", 2, 4), 1)
  m.entry = b.build(b.reduce([p, idx], [b.constant(-np.inf, "f32"), b.constant(0)], (1,), red))
  vals, idxs = reference.compile(m)(x)
  assert vals.tolist()[0] == 7.0 and idxs.tolist() == [1, 2]


def _reduce_window_loop(x, init, fn, window, strides, padding, base_dil, win_dil):
  xd = _pad_loop(x, init, [(lo, hi, bd - 1) for (lo, hi), bd in zip(padding, base_dil)])
  out_shape = [max(0, (n - ((w - 1) * d + 1)) // s + 1) for n, w, s, d in
               zip(xd.shape, window, strides, win_dil)]
  out = np.full(out_shape, init, x.dtype)
  for o in np.ndindex(*out_shape):
    acc = init
    for k in np.ndindex(*window):
      acc = fn(acc, xd[tuple(oi * s + ki * d for oi, s, ki, d in zip(o, strides, k, win_dil))])
    out[o] = acc
  return out


def test_reduce_window_against_loop():
  rng = np.random.default_rng(4)
  x = rng.integers(-9, 9, (5, 6)).astype(np.int32)
  for window, strides, padding, bd, wd in [
      ((2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),
      ((3, 2), (2, 1), ((1, 1), (0, 2)), (1, 1), (1, 2)),
      ((2, 3), (1, 2), ((1, 0), (2, 1)), (2, 1), (1, 1))]:
    m = Module("rw")
    b = Builder(m, "main")
    p = b.parameter(Shape.of(x))
    m.entry = b.build(b.reduce_window(p, b.constant(0), scalar_computation(m, "add", "s32"),
                                      window, strides, padding, bd, wd))
    got = reference.compile(m)(x)[0]
    want = _reduce_window_loop(x, 0, lambda a, v: a + v, window, strides, padding, bd, wd)
    assert np.array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# dot and convolution
# ---------------------------------------------------------------------------------------------

@settings(max_examples=30)
@given(st.data())
def test_dot_general_against_einsum(data):
  nb, nc, nl, nr = (data.draw(st.integers(0, 2)) for _ in range(4))
  sizes = [data.draw(st.integers(1, 3)) for _ in range(nb + nc + nl + nr)]
  letters = "abcdefghij"
  bl, cl = letters[:nb], letters[nb:nb + nc]
  ll, rl = letters[nb + nc:nb + nc + nl], letters[nb + nc + nl:nb + nc + nl + nr]
  size = dict(zip(letters, sizes))
  lhs_l = "".join(data.draw(st.permutations(bl + cl + ll)))
  rhs_l = "".join(data.draw(st.permutations(bl + cl + rl)))
  rng = np.random.default_rng(data.draw(st.integers(0, 99)))
  lhs = rng.integers(-5, 5, [size[c] for c in lhs_l]).astype(np.float64)
  rhs = rng.integers(-5, 5, [size[c] for c in rhs_l]).astype(np.float64)
  dims = (([lhs_l.index(c) for c in cl], [rhs_l.index(c) for c in cl]),
          ([lhs_l.index(c) for c in bl], [rhs_l.index(c) for c in bl]))
  lfree = "".join(c for c in lhs_l if c in ll)
  rfree = "".join(c for c in rhs_l if c in rl)
  want = np.einsum(f"{lhs_l},{rhs_l}->{bl}{lfree}{rfree}", lhs, rhs)
  got = run1(lambda b, p, q: b.dot_general(p, q, dims), lhs, rhs)
  assert np.array_equal(got, want)


def test_dot_precision_and_signed_zero():
  x = np.array([[1.0, 2.0 ** -8]], BF16)
  y = np.array([[1.0], [1.0]], BF16)
  # accumulates in f32: 1 + 2^-8 rounds to bf16 at the end
  got = run1(lambda b, p, q: b.dot(p, q, (1,), (0,), preferred_element_type="f32"), x, y)
  assert got.tolist() == [[1.00390625]]
  z = run1(lambda b, p, q: b.dot(p, q, (1,), (0,)),
           np.array([[-0.0]], np.float32), np.array([[1.0]], np.float32))
  assert not np.signbit(z[0, 0])  # the sum starts from +0
  i = run1(lambda b, p, q: b.dot(p, q, (0,), (0,), preferred_element_type="s32"),
           np.array([100, 100], np.int8), np.array([100, 100], np.int8))
  assert i.tolist() == 20000


def _conv_loop(lhs, rhs, strides, padding, lhs_dil, rhs_dil, G, BG):
  """NCHW / OIHW cross-correlation by definition."""
  N, C = lhs.shape[:2]
  O, I = rhs.shape[:2]
  nd = lhs.ndim - 2
  x = _pad_loop(lhs, 0, [(0, 0, 0), (0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in
                                                  zip(padding, lhs_dil)])
  ks = rhs.shape[2:]
  out_sp = [max(0, (n - ((k - 1) * d + 1)) // s + 1) for n, k, s, d in
            zip(x.shape[2:], ks, strides, rhs_dil)]
  out = np.zeros((N // BG, O) + tuple(out_sp))
  og = O // (G * BG)
  for n, o in itertools.product(range(N // BG), range(O)):
    g = o // (O // G) if G > 1 else 0
    bg = o // (O // BG) if BG > 1 else 0
    for pos in np.ndindex(*out_sp):
      acc = 0.0
      for i in range(I):
        for k in np.ndindex(*ks):
          xi = tuple(p * s + kk * d for p, s, kk, d in zip(pos, strides, k, rhs_dil))
          acc += x[(bg * (N // BG) + n, g * I + i) + xi] * rhs[(o, i) + k]
      out[(n, o) + pos] = acc
  del og, nd
  return out


@pytest.mark.parametrize("case", [
    dict(lhs=(2, 3, 5, 4), rhs=(4, 3, 2, 2), strides=(1, 1), padding=((0, 0), (0, 0))),
    dict(lhs=(1, 2, 6, 5), rhs=(3, 2, 3, 2), strides=(2, 1), padding=((1, 2), (-1, 1)),
         lhs_dil=(1, 2), rhs_dil=(2, 1)),
    dict(lhs=(2, 4, 5), rhs=(6, 2, 3), strides=(1,), padding=((1, 1),), G=2),
    dict(lhs=(4, 2, 5), rhs=(6, 2, 2), strides=(2,), padding=((0, 1),), BG=2),
    dict(lhs=(1, 3, 4, 4, 3), rhs=(2, 3, 2, 1, 2), strides=(1, 2, 1),
         padding=((0, 0), (1, 0), (0, 1))),
])
def test_convolution_against_loop(case):
  rng = np.random.default_rng(5)
  lhs = rng.integers(-3, 4, case["lhs"]).astype(np.float64)
  rhs = rng.integers(-3, 4, case["rhs"]).astype(np.float64)
  nd = lhs.ndim - 2
  lhs_dil, rhs_dil = case.get("lhs_dil", (1,) * nd), case.get("rhs_dil", (1,) * nd)
  G, BG = case.get("G", 1), case.get("BG", 1)
  want = _conv_loop(lhs, rhs, case["strides"], case["padding"], lhs_dil, rhs_dil, G, BG)
  got = run1(lambda b, p, q: b.convolution(p, q, case["strides"], case["padding"], lhs_dil,
                                           rhs_dil, feature_group_count=G,
                                           batch_group_count=BG), lhs, rhs)
  assert np.array_equal(got, want)
  # the same convolution with NHWC / HWIO / NHWC layouts
  perm_l = (0,) + tuple(range(2, nd + 2)) + (1,)
  perm_r = tuple(range(2, nd + 2)) + (1, 0)
  spec_l = (0, nd + 1) + tuple(range(1, nd + 1))
  spec_r = (nd + 1, nd) + tuple(range(nd))
  got2 = rops.conv_general_dilated(lhs.transpose(perm_l), rhs.transpose(perm_r), case["strides"],
                                   case["padding"], lhs_dil, rhs_dil, (spec_l, spec_r, spec_l),
                                   G, BG)
  assert np.array_equal(got2, want.transpose(perm_l))


# ---------------------------------------------------------------------------------------------
# gather / scatter
# ---------------------------------------------------------------------------------------------

def _gather_loop(operand, indices, offset_dims, collapsed, start_map, slice_sizes, obatch=(),
                 ibatch=(), mode="clip", fill=None):
  batch_shape = indices.shape[:-1]
  offset_operand_dims = [d for d in range(operand.ndim) if d not in collapsed and d not in obatch]
  out_rank = len(batch_shape) + len(offset_dims)
  batch_positions = [i for i in range(out_rank) if i not in offset_dims]
  out_shape = [0] * out_rank
  for i, p in enumerate(batch_positions):
    out_shape[p] = batch_shape[i]
  for k, p in enumerate(offset_dims):
    out_shape[p] = slice_sizes[offset_operand_dims[k]]
  out = np.zeros(out_shape, operand.dtype)
  for o in np.ndindex(*out_shape):
    g = tuple(o[p] for p in batch_positions)
    start = [0] * operand.ndim
    for k, d in enumerate(start_map):
      start[d] = int(indices[g + (k,)])
    for od, idim in zip(obatch, ibatch):
      start[od] = g[idim]
    oob = any(not 0 <= start[d] <= operand.shape[d] - slice_sizes[d] for d in start_map)
    start = [min(max(s, 0), n - k) for s, n, k in zip(start, operand.shape, slice_sizes)]
    full = list(start)
    for k, p in enumerate(offset_dims):
      full[offset_operand_dims[k]] += o[p]
    out[o] = fill if (mode == "fill" and oob) else operand[tuple(full)]
  return out


GATHER_CASES = [
    # x[idx] on rows: offset keeps columns
    dict(operand=(5, 3), indices=(4, 1), offset_dims=(1,), collapsed=(0,), start_map=(0,),
         slice_sizes=(1, 3)),
    # 2-d point gather with windows
    dict(operand=(5, 6), indices=(2, 3, 2), offset_dims=(2, 3), collapsed=(), start_map=(1, 0),
         slice_sizes=(2, 3)),
    # offset dim before the batch dim
    dict(operand=(4, 6), indices=(3, 1), offset_dims=(0,), collapsed=(1,), start_map=(1,),
         slice_sizes=(4, 1)),
    # batching dims (vmapped gather)
    dict(operand=(3, 7, 2), indices=(3, 4, 1), offset_dims=(2,), collapsed=(1,), start_map=(1,),
         slice_sizes=(1, 1, 2), obatch=(0,), ibatch=(0,)),
]


@pytest.mark.parametrize("case", GATHER_CASES)
@pytest.mark.parametrize("mode", ["clip", "fill"])
def test_gather_against_loop(case, mode):
  rng = np.random.default_rng(6)
  operand = rng.standard_normal(case["operand"]).astype(np.float32)
  indices = rng.integers(-3, 9, case["indices"]).astype(np.int32)
  kw = dict(offset_dims=case["offset_dims"], collapsed_slice_dims=case["collapsed"],
            start_index_map=case["start_map"], slice_sizes=case["slice_sizes"],
            operand_batching_dims=case.get("obatch", ()),
            start_indices_batching_dims=case.get("ibatch", ()), mode=mode)
  got = run1(lambda b, p, q: b.gather(p, q, **kw), operand, indices)
  want = _gather_loop(operand, indices, case["offset_dims"], case["collapsed"],
                      case["start_map"], case["slice_sizes"], case.get("obatch", ()),
                      case.get("ibatch", ()), mode, np.nan)
  assert_bitwise_equal(got, want)


def _scatter_loop(operand, indices, updates, uwd, iwd, sd2od, obatch=(), ibatch=(), fn=None,
                  mode="drop"):
  out = operand.copy()
  scatter_dims = [d for d in range(updates.ndim) if d not in uwd]
  window_operand_dims = [d for d in range(operand.ndim) if d not in iwd and d not in obatch]
  wsize = [1] * operand.ndim
  for od, ud in zip(window_operand_dims, uwd):
    wsize[od] = updates.shape[ud]
  for u in np.ndindex(*updates.shape):
    g = tuple(u[d] for d in scatter_dims)
    start = [0] * operand.ndim
    for k, d in enumerate(sd2od):
      start[d] = int(indices[g + (k,)])
    for od, idim in zip(obatch, ibatch):
      start[od] = g[idim]
    if mode == "clip":
      start = [min(max(s, 0), n - w) for s, n, w in zip(start, operand.shape, wsize)]
    elif not all(0 <= s <= n - w for s, n, w in zip(start, operand.shape, wsize)):
      continue
    full = list(start)
    for k, ud in enumerate(uwd):
      full[window_operand_dims[k]] += u[ud]
    full = tuple(full)
    out[full] = updates[u] if fn is None else fn(out[full], updates[u])
  return out


SCATTER_CASES = [
    dict(operand=(6, 3), indices=(5, 1), updates=(5, 3), uwd=(1,), iwd=(0,), sd2od=(0,)),
    dict(operand=(5, 6), indices=(4, 2), updates=(4, 2, 2), uwd=(1, 2), iwd=(), sd2od=(0, 1)),
    dict(operand=(4, 5), indices=(3, 1), updates=(4, 3), uwd=(0,), iwd=(1,), sd2od=(1,)),
    dict(operand=(3, 6), indices=(3, 2, 1), updates=(3, 2), uwd=(), iwd=(1,), sd2od=(1,),
         obatch=(0,), ibatch=(0,)),
]


@pytest.mark.parametrize("case", SCATTER_CASES)
@pytest.mark.parametrize("kind", ["set", "add", "mul_generic"])
@pytest.mark.parametrize("mode", ["drop", "clip"])
def test_scatter_against_loop(case, kind, mode):
  rng = np.random.default_rng(7)
  operand = rng.integers(-5, 5, case["operand"]).astype(np.float32)
  indices = rng.integers(-2, 7, case["indices"]).astype(np.int32)
  updates = rng.integers(-5, 5, case["updates"]).astype(np.float32)
  m = Module("s")
  if kind == "set":
    ub = Builder(m, "set")
    ub.parameter(S("f32"))
    comp = ub.build(ub.parameter(S("f32")))
    fn = None
  elif kind == "add":
    comp, fn = scalar_computation(m, "add", "f32"), (lambda a, v: a + v)
  else:  # not a single op: evaluated element by element
    ub = Builder(m, "mul_plus_one")
    a, v = ub.parameter(S("f32")), ub.parameter(S("f32"))
    comp = ub.build(ub.add(ub.multiply(a, v), ub.constant(1.0, "f32")))
    fn = lambda a, v: a * v + np.float32(1)  # noqa: E731
  b = Builder(m, "main")
  ps = [b.parameter(Shape.of(v)) for v in (operand, indices, updates)]
  m.entry = b.build(b.scatter(*ps, comp, update_window_dims=case["uwd"],
                              inserted_window_dims=case["iwd"],
                              scatter_dims_to_operand_dims=case["sd2od"],
                              input_batching_dims=case.get("obatch", ()),
                              scatter_indices_batching_dims=case.get("ibatch", ()), mode=mode))
  got = reference.compile(m)(operand, indices, updates)[0]
  want = _scatter_loop(operand, indices, updates, case["uwd"], case["iwd"], case["sd2od"],
                       case.get("obatch", ()), case.get("ibatch", ()), fn, mode)
  assert_bitwise_equal(got, want)


# ---------------------------------------------------------------------------------------------
# sort
# ---------------------------------------------------------------------------------------------

def test_lax_sort_order_and_stability():
  keys = np.array([3.0, np.nan, -0.0, 1.0, 0.0, -np.inf, 1.0, -np.nan, -0.0], np.float32)
  vals = np.arange(9, dtype=np.int32)
  sk, sv = rops.sort([keys, vals], dimension=0, num_keys=1)
  assert sv.tolist() == [5, 2, 4, 8, 3, 6, 0, 1, 7]  # -0 ties +0; NaNs last, stable
  assert_bitwise_equal(sk, keys[sv])
  # two keys, along axis 0 of a matrix
  k1 = np.array([[2, 1], [1, 1], [2, 0], [1, 0]], np.int32)
  k2 = np.array([[0, 5], [9, 4], [-1, 3], [9, 2]], np.int32)
  a, bb = rops.sort([k1, k2], dimension=0, num_keys=2)
  assert a[:, 0].tolist() == [1, 1, 2, 2] and bb[:, 0].tolist() == [9, 9, -1, 0]


def test_sort_with_comparator_computation():
  rng = np.random.default_rng(8)
  keys = rng.integers(0, 4, (3, 10)).astype(np.float32)
  vals = np.tile(np.arange(10, dtype=np.int32), (3, 1))
  m = Module("sort")
  cb = Builder(m, "lt")
  k0, k1, v0, v1 = cb.parameter(S("f32")), cb.parameter(S("f32")), cb.parameter(S("s32")), \
      cb.parameter(S("s32"))
  comp = cb.build(cb.compare(k0, k1, "LT", total_order=True))
  b = Builder(m, "main")
  pk, pv = b.parameter(Shape.of(keys)), b.parameter(Shape.of(vals))
  m.entry = b.build(b.sort([pk, pv], 1, comp, is_stable=True))
  sk, sv = reference.compile(m)(keys, vals)
  order = np.argsort(keys, axis=1, kind="stable")
  assert np.array_equal(sv, order) and np.array_equal(sk, np.sort(keys, axis=1))
  # descending with a comparator that is not vectorisable-shaped: falls back gracefully
  m2 = Module("sort2")
  gt = scalar_computation(m2, "GT", "s32")
  b2 = Builder(m2, "main")
  p = b2.parameter(S("s32", 7))
  m2.entry = b2.build(b2.sort(p, 0, gt))
  x = np.array([3, 1, 4, 1, 5, 9, 2], np.int32)
  assert reference.compile(m2)(x)[0].tolist() == sorted(x.tolist(), reverse=True)


# ---------------------------------------------------------------------------------------------
# control flow, tuples, fusion, the executable
# ---------------------------------------------------------------------------------------------

def test_while_loop_and_conditional():
  m = Module("loop")
  state = Shape.tuple([S("s32"), S("f32", 3)])
  cb = Builder(m, "cond")
  cp = cb.parameter(state)
  cond = cb.build(cb.lt(cb.get_tuple_element(cp, 0), cb.constant(5)))
  bb = Builder(m, "body")
  bp = bb.parameter(state)
  i = bb.get_tuple_element(bp, 0)
  v = bb.get_tuple_element(bp, 1)
  fi = bb.broadcast(bb.convert(i, "f32"), (3,), ())
  body = bb.build(bb.tuple([bb.add(i, bb.constant(1)), bb.add(v, fi)]))
  t1 = Builder(m, "double")
  t1.build(t1.multiply(t1.parameter(S("f32", 3)), t1.full(2.0, S("f32", 3))))
  t2 = Builder(m, "negate")
  t2.build(t2.negate(t2.parameter(S("f32", 3))))
  b = Builder(m, "main")
  x = b.parameter(S("f32", 3))
  k = b.parameter(S("s32"))
  w = b.get_tuple_element(b.while_loop(b.tuple([b.constant(0), x]), cond, body), 1)
  c = b.conditional(k, [w, w], [t1.computation, t2.computation])
  p = b.conditional(b.lt(k, b.constant(1)), [w, w], [t1.computation, t2.computation])
  m.entry = b.build(b.tuple([w, c, p]))
  exe = reference.compile(m)
  x0 = np.array([1.0, 2.0, 3.0], np.float32)
  w0, c0, p0 = exe(x0, np.int32(0))
  assert w0.tolist() == [11.0, 12.0, 13.0] and c0.tolist() == [22, 24, 26]
  assert p0.tolist() == [22, 24, 26]
  _, c1, p1 = exe(x0, np.int32(1))
  assert c1.tolist() == [-11, -12, -13] and p1.tolist() == [-11, -12, -13]
  _, c7, _ = exe(x0, np.int32(7))  # out of range: the last branch
  assert c7.tolist() == [-11, -12, -13]
  _, cm, _ = exe(x0, np.int32(-1))
  assert cm.tolist() == [-11, -12, -13]


def test_fusion_runs_its_computation():
  m = Module("f")
  fb = Builder(m, "fused_computation")
  a, c = fb.parameter(S("f32", 2)), fb.parameter(S("f32", 2))
  fb.build(fb.multiply(fb.add(a, c), c))
  b = Builder(m, "main")
  p, q = b.parameter(S("f32", 2)), b.parameter(S("f32", 2))
  m.entry = b.build(b.fusion([p, q], fb.computation, "kLoop"))
  got = reference.compile(m)(np.array([1, 2], np.float32), np.array([3, 4], np.float32))[0]
  assert got.tolist() == [12, 24]


def test_executable_checks_arguments_and_copies_outputs():
  m = Module("id")
  b = Builder(m, "main")
  p = b.parameter(S("f32", 2))
  m.entry = b.build(b.tuple([p, b.constant(np.array([1.0, 2.0], np.float32))]))
  exe = reference.compile(m)
  x = np.zeros(2, np.float32)
  out, const = exe(x)
  assert out is not x and const.flags.writeable
  assert exe([1.0, 2.0])[0].dtype == np.float32
  with pytest.raises(reference.ReferenceError, match=r"argument 0 \(%p0\) must be f32\[2\]"):
    exe(np.zeros(3, np.float32))
  with pytest.raises(reference.ReferenceError, match="takes 1 arguments, got 2"):
    exe(x, x)


def test_reference_ops_keep_rank_zero():
  v = np.arange(3.0)
  assert rops.dot_general(v, v, (((0,), (0,)), ((), ()))).shape == ()
  assert rops.round_to(np.array(1.0), np.float32).shape == ()
  assert rops.reduce(v, np.array(0.0), computation=np.add, dimensions=(0,)).shape == ()
  assert rops.convert_element_type(np.array(2.5), np.int32).shape == ()
  assert rops.broadcast_in_dim(np.array(1.0), (), ()).shape == ()
  assert rops.elementwise(np.sin, np.array(1.0, BF16)).shape == ()
  assert rops.dynamic_slice(np.array(3.0), (), ()).shape == ()


@settings(max_examples=25)
@given(st.integers(0, 70), st.integers(1, 3), st.integers(0, 2 ** 31))
def test_sort_by_comparator_is_the_stable_sort(n, rows, seed):
  rng = np.random.default_rng(seed)
  k1, k2 = rng.integers(0, 3, (rows, n)), rng.integers(0, 3, (rows, n))
  pos = np.tile(np.arange(n), (rows, 1))

  def less(a, b):
    return (a[0] < b[0]) | ((a[0] == b[0]) & (a[1] > b[1]))  # k1 ascending, then k2 descending
  _, _, got = rops.sort_by_comparator([k1, k2, pos], dimension=1, less_than=less)
  want = np.array([sorted(range(n), key=lambda i: (k1[r, i], -k2[r, i])) for r in range(rows)])
  assert np.array_equal(got, want.reshape(rows, n))
