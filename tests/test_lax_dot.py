"""lax.dot_general / dot / batch_matmul and lax.conv_general_dilated (with conv, padding helpers
and dimension-number specs): values against NumPy einsum and a naive float64 convolution loop,
dtype rules against JAX's, transposes by <J v, u> = <v, J^T u>, gradients against central
finite differences, and vmap against a Python loop."""
import functools
import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
from ourjax import lax
from ourjax.config import enable_x64

# ------------------------------------------------------------------------------------------------
# helpers


def _rand(rng, shape, dtype):
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    return rng.integers(-4, 5, shape).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


def in_x64(f):
  """Run the (hypothesis) test body with 64-bit types on; function-scoped fixtures are not
  re-entered per example, so hypothesis tests use this instead of the ``x64`` fixture."""
  @functools.wraps(f)
  def wrapped(*args, **kwargs):
    with enable_x64(True):
      return f(*args, **kwargs)
  return wrapped


def _np(x):
  return np.asarray(x)


def _inner(a, b):
  return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


@st.composite
def dot_problems(draw, max_group=2):
  """Shapes and dimension numbers with 0..2 batch, contracting and free dims per side, laid
  out in a random order in each operand; sizes include 0 and 1."""
  size = st.integers(0, 3)
  nb, nc, nl, nr = (draw(st.integers(0, max_group)) for _ in range(4))
  bs = [draw(size) for _ in range(nb)]
  cs = [draw(size) for _ in range(nc)]
  ls = [draw(size) for _ in range(nl)]
  rs = [draw(size) for _ in range(nr)]
  lhs_roles = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + \
      [("f", i) for i in range(nl)]
  rhs_roles = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + \
      [("f", i) for i in range(nr)]
  lhs_roles = draw(st.permutations(lhs_roles))
  rhs_roles = draw(st.permutations(rhs_roles))
  # contracting pairs may be matched in any order
  c_match = draw(st.permutations(list(range(nc))))

  def shape(roles, free):
    return tuple(bs[i] if r == "b" else cs[i] if r == "c" else free[i] for r, i in roles)
  lhs_shape, rhs_shape = shape(lhs_roles, ls), shape(rhs_roles, rs)
  lb = tuple(lhs_roles.index(("b", i)) for i in range(nb))
  rb = tuple(rhs_roles.index(("b", i)) for i in range(nb))
  lc = tuple(lhs_roles.index(("c", i)) for i in c_match)
  rc = tuple(rhs_roles.index(("c", i)) for i in c_match)
  return lhs_shape, rhs_shape, ((lc, rc), (lb, rb))


def _einsum_dot(lhs, rhs, dn):
  """dot_general by einsum, in float64."""
  (lc, rc), (lb, rb) = dn
  letters = iter("abcdefghijklmnopqrstuvwxyz")
  ls = [None] * lhs.ndim
  rs = [None] * rhs.ndim
  for a, b in zip(lb, rb):
    ls[a] = rs[b] = next(letters)
  for a, b in zip(lc, rc):
    ls[a] = rs[b] = next(letters)
  for i in range(lhs.ndim):
    ls[i] = ls[i] or next(letters)
  for i in range(rhs.ndim):
    rs[i] = rs[i] or next(letters)
  out = [ls[a] for a in lb] + [ls[i] for i in range(lhs.ndim) if i not in lb + lc] + \
      [rs[i] for i in range(rhs.ndim) if i not in rb + rc]
  return np.einsum(f"{''.join(ls)},{''.join(rs)}->{''.join(out)}", lhs.astype(np.float64),
                   rhs.astype(np.float64))


# ------------------------------------------------------------------------------------------------
# dot_general values and dtypes


@given(dot_problems(), st.sampled_from(["float32", "int32", "float16", "bfloat16"]),
       st.integers(0, 2**31))
def test_dot_general_matches_einsum(problem, dtype, seed):
  lhs_shape, rhs_shape, dn = problem
  dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
  rng = np.random.default_rng(seed)
  x, y = _rand(rng, lhs_shape, dtype), _rand(rng, rhs_shape, dtype)
  out = lax.dot_general(x, y, dn)
  want = _einsum_dot(x, y, dn)
  assert out.shape == want.shape and out.dtype == dtype
  tol = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-2}.get(dtype, 3e-2)
  if np.issubdtype(dtype, np.integer):
    np.testing.assert_array_equal(_np(out), want.astype(dtype))
  else:
    np.testing.assert_allclose(_np(out).astype(np.float64), want, rtol=tol, atol=tol * 4)


@given(dot_problems(), st.integers(0, 2**31))
@in_x64
def test_dot_general_float64(problem, seed):
  lhs_shape, rhs_shape, dn = problem
  rng = np.random.default_rng(seed)
  x, y = _rand(rng, lhs_shape, np.float64), _rand(rng, rhs_shape, np.float64)
  out = lax.dot_general(x, y, dn)
  assert out.dtype == np.float64
  np.testing.assert_allclose(_np(out), _einsum_dot(x, y, dn), rtol=1e-12, atol=1e-12)


def test_dot_general_dtype_rules():
  f16, f32 = np.ones((2, 3), np.float16), np.ones((3, 4), np.float32)
  # mixed operand types: the "higher" type wins (XLA's rule, as JAX follows)
  assert lax.dot_general(f16, f32, (((1,), (0,)), ((), ()))).dtype == np.float32
  i8, i32 = np.ones((2, 3), np.int8), np.ones((3, 4), np.int32)
  assert lax.dot_general(i8, i32, (((1,), (0,)), ((), ()))).dtype == np.int32
  # preferred_element_type widens the result and the accumulation
  i8b = np.full((1, 300), 100, np.int8)
  out = lax.dot(i8b, i8b.T, preferred_element_type=np.int32)
  assert out.dtype == np.int32 and int(_np(out)[0, 0]) == 100 * 100 * 300
  assert lax.dot(i8b, i8b.T, preferred_element_type=np.float32).dtype == np.float32
  with pytest.raises(TypeError, match="narrower"):
    lax.dot(np.ones((2, 2), np.int32), np.ones((2, 2), np.int32), preferred_element_type=np.int8)
  # ordered by (complex, exponent range, mantissa, width, signed): int8 over uint8, bfloat16
  # (wider exponent) over float16
  assert lax.dot(np.ones((2, 2), np.int8), np.ones((2, 2), np.uint8)).dtype == np.int8
  assert lax.dot(np.ones((2, 2), np.float16),
                 np.ones((2, 2), ml_dtypes.bfloat16)).dtype == ml_dtypes.bfloat16
  # weak types: the result is weak only when both operands are
  assert lax.dot(np.ones(3, np.float32), np.ones(3, np.float32)).weak_type is False


def test_dot_general_shape_errors():
  x = np.ones((2, 3), np.float32)
  with pytest.raises(TypeError, match="contracting dimensions to have the same shape"):
    lax.dot_general(x, x, (((0,), (1,)), ((), ())))
  with pytest.raises(TypeError, match="nonnegative and less than"):
    lax.dot_general(x, x, (((2,), (0,)), ((), ())))
  with pytest.raises(TypeError, match="equal numbers of lhs_batch"):
    lax.dot_general(x, x, (((), ()), ((0,), ())))
  with pytest.raises(TypeError, match="disjoint"):
    lax.dot_general(x, x, (((0,), (0,)), ((0,), (0,))))
  with pytest.raises(TypeError, match="Incompatible shapes for dot"):
    lax.dot(x, x)
  with pytest.raises(ValueError, match="at least 2D"):
    lax.batch_matmul(np.ones(3), np.ones(3))


@given(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2**31))
def test_dot_vector_matrix_forms(m, n, k, seed):
  rng = np.random.default_rng(seed)
  a, b = _rand(rng, (m, n), np.float32), _rand(rng, (n, k), np.float32)
  v, w = _rand(rng, (n,), np.float32), _rand(rng, (n,), np.float32)
  for x, y in ((a, b), (a, v), (v, b), (v, w)):
    np.testing.assert_allclose(_np(lax.dot(x, y)), np.dot(x.astype(np.float64), y),
                               rtol=1e-5, atol=1e-5)


@given(st.integers(0, 2), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3),
       st.integers(0, 2**31))
def test_batch_matmul(b, m, n, k, seed):
  rng = np.random.default_rng(seed)
  x, y = _rand(rng, (2, b, m, n), np.float32), _rand(rng, (2, b, n, k), np.float32)
  np.testing.assert_allclose(_np(lax.batch_matmul(x, y)), np.matmul(x.astype(np.float64), y),
                             rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# dot_general derivatives


@settings(max_examples=20)
@given(dot_problems(), st.integers(0, 2**31))
@in_x64
def test_dot_general_transposes(problem, seed):
  """<J v, u> = <v, J^T u> for the linear maps x -> dot(x, y) and y -> dot(x, y)."""
  lhs_shape, rhs_shape, dn = problem
  rng = np.random.default_rng(seed)
  x, y = _rand(rng, lhs_shape, np.float64), _rand(rng, rhs_shape, np.float64)
  f = lambda a, b: lax.dot_general(a, b, dn)
  out, f_vjp = ourjax.vjp(f, x, y)
  u = _rand(rng, out.shape, np.float64)
  vx, vy = _rand(rng, lhs_shape, np.float64), _rand(rng, rhs_shape, np.float64)
  ctx, cty = f_vjp(u)
  assert ctx.shape == lhs_shape and cty.shape == rhs_shape
  np.testing.assert_allclose(_inner(f(vx, y), u), _inner(vx, ctx), rtol=1e-9, atol=1e-9)
  np.testing.assert_allclose(_inner(f(x, vy), u), _inner(vy, cty), rtol=1e-9, atol=1e-9)
  # the JVP is bilinear: f(tx, y) + f(x, ty)
  _, t = ourjax.jvp(f, (x, y), (vx, vy))
  np.testing.assert_allclose(_np(t), _einsum_dot(vx, y, dn) + _einsum_dot(x, vy, dn),
                             rtol=1e-9, atol=1e-9)


def test_dot_general_grad_finite_differences(x64):
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 2, 5))
  dn = (((2,), (0,)), ((0,), (1,)))
  f = lambda a, b: lax.reduce_sum(lax.sin(lax.dot_general(a, b, dn)), (0, 1, 2))
  gx, gy = ourjax.grad(f, (0, 1))(x, y)
  eps = 1e-6
  for g, arg in ((gx, 0), (gy, 1)):
    base = [x, y]
    flat = np.zeros(base[arg].size)
    for i in range(base[arg].size):
      e = np.zeros(base[arg].size)
      e[i] = eps
      plus = list(base)
      minus = list(base)
      plus[arg] = base[arg] + e.reshape(base[arg].shape)
      minus[arg] = base[arg] - e.reshape(base[arg].shape)
      flat[i] = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
    np.testing.assert_allclose(_np(g).ravel(), flat, rtol=1e-6, atol=1e-7)


def test_dot_general_grad_mixed_and_preferred_types():
  x, y = np.ones((2, 3), np.float16), np.ones((3, 4), np.float32)
  gx, gy = ourjax.grad(lambda a, b: lax.reduce_sum(lax.dot(a, b), (0, 1)), (0, 1))(x, y)
  assert gx.dtype == np.float16 and gy.dtype == np.float32
  np.testing.assert_array_equal(_np(gx), np.full((2, 3), 4, np.float16))
  b16 = np.ones((2, 3), ml_dtypes.bfloat16)
  g = ourjax.grad(lambda a: lax.reduce_sum(
      lax.dot(a, b16.T, preferred_element_type=np.float32), (0, 1)))(b16)
  assert g.dtype == ml_dtypes.bfloat16
  np.testing.assert_array_equal(_np(g).astype(np.float32), np.full((2, 3), 2, np.float32))


# ------------------------------------------------------------------------------------------------
# dot_general vmap


def _loop(f, in_axes, args):
  size = next(a.shape[d] for a, d in zip(args, in_axes) if d is not None)
  outs = []
  for i in range(size):
    outs.append(np.asarray(f(*[a if d is None else np.take(a, i, axis=d)
                               for a, d in zip(args, in_axes)])))
  return np.stack(outs)


@settings(max_examples=30)
@given(dot_problems(max_group=1), st.integers(1, 3), st.data(), st.integers(0, 2**31))
def test_dot_general_vmap(problem, size, data, seed):
  lhs_shape, rhs_shape, dn = problem
  rng = np.random.default_rng(seed)
  in_axes = data.draw(st.sampled_from([(0, 0), (0, None), (None, 0), (-1, 0), (None, -1),
                                       (1, -1)]).filter(
      lambda ax: all(d is None or -(n + 1) <= d <= n for d, n in
                     zip(ax, (len(lhs_shape), len(rhs_shape))))))
  args = []
  for shape, d in zip((lhs_shape, rhs_shape), in_axes):
    if d is None:
      args.append(_rand(rng, shape, np.float32))
    else:
      s = list(shape)
      s.insert(d % (len(shape) + 1), size)
      args.append(_rand(rng, tuple(s), np.float32))
  f = lambda a, b: lax.dot_general(a, b, dn)
  out = ourjax.vmap(f, in_axes=in_axes)(*args)
  want = _loop(f, [None if d is None else d % args[i].ndim for i, d in enumerate(in_axes)], args)
  np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# convolution: a naive float64 reference


def _naive_conv(x, w, strides, padding, lhs_dil, rhs_dil, G=1, B=1):
  """x: (N, C, *sp), w: (O, I, *k), explicit (lo, hi) padding (negative crops); a loop over
  output positions and kernel taps, in float64."""
  x, w = x.astype(np.float64), w.astype(np.float64)
  nsp = x.ndim - 2
  # dilate the input
  dil_shape = x.shape[:2] + tuple((n - 1) * d + 1 if n else 0 for n, d in zip(x.shape[2:],
                                                                                lhs_dil))
  xd = np.zeros(dil_shape)
  xd[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in lhs_dil)] = x
  # pad (negative pads crop)
  for ax, (lo, hi) in enumerate(padding):
    a = ax + 2
    if lo < 0:
      xd = np.take(xd, range(-lo, xd.shape[a]), axis=a)
    if hi < 0:
      xd = np.take(xd, range(0, xd.shape[a] + hi), axis=a)
    pw = [(0, 0)] * xd.ndim
    pw[a] = (max(lo, 0), max(hi, 0))
    xd = np.pad(xd, pw)
  N, C = x.shape[:2]
  O, I = w.shape[:2]
  ks = w.shape[2:]
  eff = [(k - 1) * d + 1 for k, d in zip(ks, rhs_dil)]
  out_sp = [max(0, (n - e) // s + 1) if n >= e else 0
            for n, e, s in zip(xd.shape[2:], eff, strides)]
  out = np.zeros((N // B, O) + tuple(out_sp))
  og, ob = O // G, O // B
  for o in range(O):
    g, bg = o // og, o // ob
    xs = xd[bg * (N // B):(bg + 1) * (N // B), g * I:(g + 1) * I]
    for pos in itertools.product(*[range(n) for n in out_sp]):
      acc = np.zeros(N // B)
      for kpos in itertools.product(*[range(k) for k in ks]):
        idx = tuple(p * s + k * d for p, s, k, d in zip(pos, strides, kpos, rhs_dil))
        acc += xs[(slice(None), slice(None)) + idx] @ w[(o, slice(None)) + kpos]
      out[(slice(None), o) + pos] = acc
  return out


@st.composite
def conv_problems(draw, nsp=None, groups=True):
  nsp = draw(st.sampled_from([1, 2])) if nsp is None else nsp
  G = B = 1
  if groups:
    kind = draw(st.sampled_from(["none", "feature", "batch"]))
    if kind == "feature":
      G = draw(st.integers(2, 3))
    elif kind == "batch":
      B = draw(st.integers(2, 3))
  N = B * draw(st.integers(0 if B == 1 else 1, 2))
  I = draw(st.integers(1, 2))
  C = I * G
  O = max(G, B) * draw(st.integers(1, 2))
  sp = [draw(st.integers(1, 6)) for _ in range(nsp)]
  ks = [draw(st.integers(1, 3)) for _ in range(nsp)]
  strides = [draw(st.integers(1, 3)) for _ in range(nsp)]
  lhs_dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
  rhs_dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
  padding = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(nsp)]
  # keep the padded, dilated input at least as large as the dilated kernel
  for i in range(nsp):
    need = (ks[i] - 1) * rhs_dil[i] + 1
    have = (sp[i] - 1) * lhs_dil[i] + 1 + sum(padding[i])
    if have < need:
      padding[i] = (padding[i][0], padding[i][1] + need - have)
  return dict(lhs_shape=(N, C, *sp), rhs_shape=(O, I, *ks), strides=tuple(strides),
              padding=tuple(padding), lhs_dilation=tuple(lhs_dil), rhs_dilation=tuple(rhs_dil),
              G=G, B=B)


def _conv(p, x, w, **kw):
  return lax.conv_general_dilated(x, w, p["strides"], p["padding"], p["lhs_dilation"],
                                  p["rhs_dilation"], feature_group_count=p["G"],
                                  batch_group_count=p["B"], **kw)


@settings(max_examples=30)
@given(conv_problems(), st.integers(0, 2**31))
def test_conv_matches_naive_loop(p, seed):
  rng = np.random.default_rng(seed)
  x, w = _rand(rng, p["lhs_shape"], np.float32), _rand(rng, p["rhs_shape"], np.float32)
  out = _conv(p, x, w)
  want = _naive_conv(x, w, p["strides"], p["padding"], p["lhs_dilation"], p["rhs_dilation"],
                     p["G"], p["B"])
  assert out.shape == want.shape and out.dtype == np.float32
  np.testing.assert_allclose(_np(out), want, rtol=1e-4, atol=1e-4)


@settings(max_examples=15)
@given(conv_problems(nsp=2, groups=False), st.integers(0, 2**31))
def test_conv_string_dimension_numbers(p, seed):
  """('NHWC', 'HWIO', 'NHWC') and a spec with permuted spatial letters equal the NCHW conv of
  the transposed operands."""
  rng = np.random.default_rng(seed)
  x, w = _rand(rng, p["lhs_shape"], np.float32), _rand(rng, p["rhs_shape"], np.float32)
  want = _np(_conv(p, x, w))
  out = _conv(p, x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0),
              dimension_numbers=("NHWC", "HWIO", "NHWC"))
  np.testing.assert_allclose(_np(out).transpose(0, 3, 1, 2), want, rtol=1e-5, atol=1e-5)
  # spatial dims follow the order of the rhs spec: lhs 'NWCH' pairs W with the rhs's W
  dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NWCH", "OIHW", "HCNW"))
  assert dn == lax.ConvDimensionNumbers((0, 2, 3, 1), (0, 1, 2, 3), (2, 1, 0, 3))
  out2 = _conv(p, x.transpose(0, 3, 1, 2), w, dimension_numbers=("NWCH", "OIHW", "HCNW"))
  np.testing.assert_allclose(_np(out2).transpose(2, 1, 0, 3), want, rtol=1e-5, atol=1e-5)


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(1, 4), st.integers(1, 3)),
                min_size=1, max_size=3),
       st.sampled_from(["SAME", "SAME_LOWER", "VALID", "same"]))
def test_padtype_to_pads(dims, padding):
  in_shape, window, strides = zip(*dims)
  pads = lax.padtype_to_pads(in_shape, window, strides, padding)
  for n, k, s, (lo, hi) in zip(in_shape, window, strides, pads):
    if padding.upper() == "VALID":
      assert (lo, hi) == (0, 0)
      continue
    out = max(0, (n + lo + hi - k) // s + 1)
    assert out == -(-n // s) or (n == 0 and out <= 1)
    assert lo >= 0 and hi >= 0 and abs(lo - hi) <= 1
    assert (hi >= lo) if padding.upper() == "SAME" else (lo >= hi)
  with pytest.raises(RuntimeError, match="Unrecognized padding"):
    lax.padtype_to_pads(in_shape, window, strides, "FULL")


def test_conv_same_padding_output_shape_and_wrappers():
  rng = np.random.default_rng(1)
  x, w = _rand(rng, (2, 3, 9, 8), np.float32), _rand(rng, (4, 3, 3, 2), np.float32)
  out = lax.conv(x, w, (2, 3), "SAME")
  assert out.shape == (2, 4, 5, 3)
  pads = lax.padtype_to_pads((9, 8), (3, 2), (2, 3), "SAME")
  np.testing.assert_allclose(_np(out), _naive_conv(x, w, (2, 3), pads, (1, 1), (1, 1)),
                             rtol=1e-5, atol=1e-5)
  out = lax.conv_with_general_padding(x, w, (1, 1), ((1, 0), (0, 2)), (2, 1), (1, 2))
  np.testing.assert_allclose(_np(out), _naive_conv(x, w, (1, 1), ((1, 0), (0, 2)), (2, 1),
                                                   (1, 2)), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="String padding is not implemented"):
    lax.conv_general_dilated(x, w, (1, 1), "SAME", lhs_dilation=(2, 1))
  with pytest.raises(ValueError, match="feature_group_count must divide"):
    lax.conv_general_dilated(x, w, (1, 1), "VALID", feature_group_count=2)
  with pytest.raises(TypeError, match="same dtypes"):
    lax.conv(x, w.astype(np.float16), (1, 1), "VALID")
  # integer convolution, and preferred_element_type
  xi, wi = x.astype(np.int8), w.astype(np.int8)
  out = lax.conv(xi, wi, (1, 1), "VALID", preferred_element_type=np.int32)
  assert out.dtype == np.int32
  np.testing.assert_array_equal(_np(out), _naive_conv(xi, wi, (1, 1), ((0, 0), (0, 0)), (1, 1),
                                                      (1, 1)).astype(np.int32))


def test_conv_transpose_is_gradient_of_conv(x64):
  """conv_transpose with transpose_kernel is the input cotangent of a strided conv whose input
  is ``stride`` times the size of conv_transpose's input (SAME), or that plus the overhang of
  the kernel (VALID)."""
  rng = np.random.default_rng(2)
  w = rng.standard_normal((3, 2, 2, 4))
  dn = ("NHWC", "HWIO", "NHWC")
  for padding, strides in (("SAME", (2, 2)), ("VALID", (2, 1)), ("SAME", (1, 3))):
    ct = rng.standard_normal((1, 4, 3, 4))
    if padding == "SAME":
      in_sp = [n * s for n, s in zip(ct.shape[1:3], strides)]
    else:
      in_sp = [n * s + max(k - s, 0) for n, s, k in zip(ct.shape[1:3], strides, w.shape[:2])]
    x = np.ones((1, *in_sp, 2))
    f = lambda a: lax.conv_general_dilated(a, w, strides, padding, dimension_numbers=dn)
    _, f_vjp = ourjax.vjp(f, x)
    want, = f_vjp(ct)
    got = lax.conv_transpose(ct, w, strides, padding, dimension_numbers=dn,
                             transpose_kernel=True)
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------------------
# convolution derivatives


@settings(max_examples=25)
@given(conv_problems(), st.integers(0, 2**31))
@in_x64
def test_conv_transposes(p, seed):
  """<J v, u> = <v, J^T u> for the lhs and the rhs (groups, strides, dilations, padding)."""
  rng = np.random.default_rng(seed)
  x, w = _rand(rng, p["lhs_shape"], np.float64), _rand(rng, p["rhs_shape"], np.float64)
  f = lambda a, b: _conv(p, a, b)
  out, f_vjp = ourjax.vjp(f, x, w)
  u = _rand(rng, out.shape, np.float64)
  vx, vw = _rand(rng, x.shape, np.float64), _rand(rng, w.shape, np.float64)
  ctx, ctw = f_vjp(u)
  assert ctx.shape == x.shape and ctw.shape == w.shape
  np.testing.assert_allclose(_inner(f(vx, w), u), _inner(vx, ctx), rtol=1e-9, atol=1e-9)
  np.testing.assert_allclose(_inner(f(x, vw), u), _inner(vw, ctw), rtol=1e-9, atol=1e-9)


def test_conv_grad_finite_differences(x64):
  rng = np.random.default_rng(3)
  p = dict(strides=(2, 1), padding=((1, 0), (0, 1)), lhs_dilation=(1, 2), rhs_dilation=(2, 1),
           G=2, B=1)
  x, w = rng.standard_normal((2, 4, 5, 3)), rng.standard_normal((4, 2, 2, 2))
  f = lambda a, b: lax.reduce_sum(lax.tanh(_conv(p, a, b)), (0, 1, 2, 3))
  gx, gw = ourjax.grad(f, (0, 1))(x, w)
  eps = 1e-6
  for g, arg in ((gx, 0), (gw, 1)):
    base = [x, w]
    num = np.zeros(base[arg].size)
    for i in range(base[arg].size):
      e = np.zeros(base[arg].size)
      e[i] = eps
      plus, minus = list(base), list(base)
      plus[arg] = base[arg] + e.reshape(base[arg].shape)
      minus[arg] = base[arg] - e.reshape(base[arg].shape)
      num[i] = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
    np.testing.assert_allclose(_np(g).ravel(), num, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------------------------
# convolution vmap


@settings(max_examples=30)
@given(conv_problems(), st.integers(1, 3), st.data(), st.integers(0, 2**31))
def test_conv_vmap(p, size, data, seed):
  rng = np.random.default_rng(seed)
  nd = len(p["lhs_shape"])
  lhs_axis = data.draw(st.sampled_from([None, 0, 1, nd]))
  rhs_axis = data.draw(st.sampled_from([0, 2, nd] + ([] if lhs_axis is None else [None])))
  in_axes = (lhs_axis, rhs_axis)
  args = []
  for shape, d in zip((p["lhs_shape"], p["rhs_shape"]), in_axes):
    s = list(shape)
    if d is not None:
      s.insert(d, size)
    args.append(_rand(rng, tuple(s), np.float32))
  f = lambda a, b: _conv(p, a, b)
  out = ourjax.vmap(f, in_axes=in_axes)(*args)
  np.testing.assert_allclose(_np(out), _loop(f, in_axes, args), rtol=1e-4, atol=1e-4)


def test_conv_vmap_empty_batch():
  x, w = np.ones((0, 1, 3, 4), np.float32), np.ones((2, 3, 2), np.float32)
  out = ourjax.vmap(lambda a: lax.conv(a, w, (1,), "VALID"))(x)
  assert out.shape == (0, 1, 2, 3)
