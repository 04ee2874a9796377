"""jnp behaviours that JAX's own test files (lax_numpy_test & co.) exercise and ourjax got wrong:
each checked against NumPy (float64 where it matters) or JAX's documented semantics."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp


def test_repeat_traced_counts_of_an_empty_axis_give_the_empty_operand():
  # JAX returns the operand when there is nothing to repeat, whatever total_repeat_length says
  f = ourjax.jit(lambda a, r: jnp.repeat(a, r, total_repeat_length=0))
  out = f(jnp.zeros((0,), jnp.int8), 0)
  assert out.shape == (0,) and out.dtype == np.int8
  g = ourjax.jit(lambda a, r: jnp.repeat(a, r, axis=1, total_repeat_length=2))
  assert g(jnp.zeros((2, 0)), jnp.zeros((0,), jnp.int32)).shape == (2, 0)
  # non-empty operands still repeat as NumPy does
  x = np.arange(6.0).reshape(2, 3)
  h = ourjax.jit(lambda a, r: jnp.repeat(a, r, axis=1, total_repeat_length=6))
  np.testing.assert_array_equal(h(x, jnp.array([1, 2, 3])), np.repeat(x, [1, 2, 3], axis=1))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_compress_method_takes_the_condition_first(axis):
  x = np.arange(12.0).reshape(3, 4)
  n = x.size if axis is None else x.shape[axis]
  cond = np.arange(n) % 2 == 0
  np.testing.assert_array_equal(jnp.asarray(x).compress(cond, axis=axis),
                                x.compress(cond, axis=axis))
  k = int(cond.sum())   # traced conditions need a static size, as in JAX
  np.testing.assert_array_equal(
      ourjax.jit(lambda c, a: a.compress(c, axis=axis, size=k))(cond, x),
      x.compress(cond, axis=axis))


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.float16, np.float32,
                                   np.complex64, np.bool_])
def test_byteswap_matches_numpy(dtype):
  rng = np.random.RandomState(0)
  x = (rng.randn(3, 4) * 50).astype(dtype)
  if np.dtype(dtype).kind == "c":
    x = x + 1j * (rng.randn(3, 4) * 50).astype(dtype)
  expect = x.byteswap()
  for out in (jnp.asarray(x).byteswap(), ourjax.jit(lambda a: a.byteswap())(x)):
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(out).view(np.uint8), expect.view(np.uint8))
  np.testing.assert_array_equal(jnp.asarray(x).byteswap().byteswap(), x)


def test_histogram_explicit_edges_take_the_inexact_value_dtype():
  edges = np.array([-5, 0, 4])
  assert jnp.histogram_bin_edges(jnp.ones(5, jnp.int16), edges).dtype == np.float32
  assert jnp.histogram_bin_edges(jnp.ones(5, jnp.float16), edges).dtype == np.float16
  rng = np.random.RandomState(1)
  sample = (rng.randn(40, 3) * 3).astype(np.int16)
  bins = [np.array([-5, 0, 4]), np.array([-4, -1, 2]), np.array([-6, -1, 4])]
  hist, out_edges = jnp.histogramdd(sample, bins=bins)
  np_hist, _ = np.histogramdd(sample.astype(np.float64), bins=bins)
  np.testing.assert_array_equal(hist, np_hist)
  assert all(e.dtype == np.float32 for e in out_edges)
  h2, ex, ey = jnp.histogram2d(sample[:, 0], sample[:, 1], bins=bins[:2])
  np.testing.assert_array_equal(h2, np.histogram2d(sample[:, 0].astype(float),
                                                   sample[:, 1].astype(float), bins=bins[:2])[0])


def test_split_counts_are_truncated_to_int():
  x = np.arange(24.0).reshape(12, 2)
  for sections in (2.0, np.float32(3), 4):
    parts = jnp.split(x, sections)
    expect = np.split(x, int(sections))
    assert len(parts) == len(expect)
    for p, e in zip(parts, expect):
      np.testing.assert_array_equal(p, e)
  # a concrete tracer (jvp) is fine; a traced count under jit is a concretization error
  jnp_out = ourjax.jvp(lambda s: jnp.split(jnp.zeros((12, 2)), s), (2.0,), (1.0,))[0]
  assert len(jnp_out) == 2
  with pytest.raises(TypeError, match="Abstract tracer value encountered"):
    ourjax.jit(lambda s: jnp.split(jnp.zeros((12, 2)), s))(2.0)


@pytest.mark.parametrize("yshape,dxshape,axis", [
    ((3, 10), (3, 1), -1), ((2, 3), (3,), 0), ((3, 4, 5), (4, 5), 0), ((3, 4, 5), (3, 5), 1),
    ((2, 3, 4, 5), (2, 1, 3, 5), 2), ((3, 4, 5), (2, 4, 5), 0), ((3, 4, 5), (3, 3, 5), 1)])
def test_trapezoid_with_an_array_of_spacings_broadcasts_like_numpy(yshape, dxshape, axis):
  rng = np.random.RandomState(2)
  y, dx = rng.randn(*yshape), rng.randn(*dxshape)
  expect = np.trapezoid(y, dx=dx, axis=axis)
  got = jnp.trapezoid(y.astype(np.float32), dx=dx.astype(np.float32), axis=axis)
  assert got.shape == expect.shape
  np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


def test_equality_and_isclose_of_typed_keys():
  k = ourjax.random.key(0)
  ks = ourjax.random.split(k, 3)
  assert bool(jnp.isclose(k, k)) and bool(jnp.equal(k, k)) and not bool(jnp.not_equal(k, k))
  np.testing.assert_array_equal(ourjax.jit(jnp.isclose)(k, ks),
                                [bool(k == ks[i]) for i in range(3)])
  np.testing.assert_array_equal(jnp.not_equal(ks, ks[0]), [False, True, True])
  with pytest.raises(TypeError, match="does not accept dtype"):
    jnp.less(k, k)


def test_like_functions_accept_shape_dtype_structs():
  x = ourjax.ShapeDtypeStruct((1, 2, 3), np.dtype("int32"))
  for fn, value in ((jnp.zeros_like, 0), (jnp.ones_like, 1)):
    out = fn(x)
    assert out.shape == x.shape and out.dtype == x.dtype and not out.weak_type
    np.testing.assert_array_equal(out, np.full(x.shape, value))
  np.testing.assert_array_equal(jnp.full_like(x, 2), np.full(x.shape, 2, np.int32))
  assert jnp.empty_like(x).shape == x.shape
  assert ourjax.lax.full_like(x, 2.5, np.float32).dtype == np.float32


def test_iscomplexobj_of_a_list_of_tracers():
  out = ourjax.jit(lambda z: jnp.array(jnp.iscomplexobj([z])))(1 + 1j)
  assert bool(out)
  assert not bool(ourjax.jit(lambda z: jnp.array(jnp.iscomplexobj([z])))(1.0))


def test_masked_arrays_jnp_array_drops_the_mask_everything_else_refuses():
  m = np.ma.array([1, 2], mask=[True, False])
  np.testing.assert_array_equal(jnp.array(m), np.array(m))
  for f in (jnp.asarray, lambda v: jnp.add(v, 1), ourjax.jit(jnp.asarray)):
    with pytest.raises(ValueError, match="numpy masked arrays are not supported"):
      f(m)


def test_rint_of_complex_rounds_each_part_to_even():
  x = np.array([1.5 + 2.5j, -0.5 - 1.5j, 2.5 + 0.49j, 3.5 - 4.5j], np.complex64)
  for out in (jnp.rint(x), ourjax.jit(jnp.rint)(x)):
    assert out.dtype == np.complex64
    np.testing.assert_array_equal(out, np.rint(x))


def test_save_load_roundtrip_and_refused_impure_readers(tmp_path):
  import io
  x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
  buf = io.BytesIO()
  jnp.save(buf, jnp.asarray(x))
  buf.seek(0)
  out = jnp.load(buf)
  assert isinstance(out, ourjax.Array) and out.dtype == np.float32
  np.testing.assert_array_equal(out, x)
  path = tmp_path / "a.npz"
  jnp.savez(path, a=x)
  np.testing.assert_array_equal(np.load(path)["a"], x)
  for fn in (jnp.fromfile, jnp.fromiter):
    with pytest.raises(NotImplementedError, match="non-pure"):
      fn(iter([1, 2]))


def test_from_dlpack_of_a_numpy_array():
  x = np.arange(5, dtype=np.int16)
  out = jnp.from_dlpack(x)
  assert isinstance(out, ourjax.Array) and out.dtype == np.int16
  np.testing.assert_array_equal(out, x)
  with pytest.raises(TypeError):
    jnp.from_dlpack([1, 2])


def test_frompyfunc_is_a_vectorized_ufunc():
  f = jnp.frompyfunc(lambda a, b: a * b + 1, 2, 1, identity=0)
  x = np.arange(4.0)
  np.testing.assert_allclose(f(x, 2.0), x * 2 + 1)
  acc = 0.0
  for v in x:                      # NumPy's reduce folds from the identity, left to right
    acc = acc * v + 1
  np.testing.assert_allclose(f.reduce(x), acc)
  assert (f.nin, f.nout, f.identity) == (2, 1, 0)
  lo, hi = jnp.frompyfunc(lambda a: (a - 1, a + 1), 1, 2)(np.arange(3))
  np.testing.assert_array_equal(lo, np.arange(3) - 1)
  np.testing.assert_array_equal(hi, np.arange(3) + 1)


def test_numpy_parameter_names():
  import inspect
  for name, params in (("real", ["val"]), ("imag", ["val"]), ("isneginf", ["x", "out"]),
                       ("isposinf", ["x", "out"]), ("issubdtype", ["arg1", "arg2"]),
                       ("isdtype", ["dtype", "kind"])):
    assert list(inspect.signature(getattr(jnp, name)).parameters) == params, name
  assert bool(jnp.issubdtype(arg1=np.float32, arg2=np.floating))
  with pytest.raises(NotImplementedError):
    jnp.isneginf(jnp.ones(2), out=jnp.ones(2))


@pytest.mark.parametrize("da,db", [("int8", "bfloat16"), ("float16", "float32"),
                                   ("bool", "int32"), ("float32", "complex64"),
                                   ("int8", "uint8")])
def test_mixed_dtype_products_keep_their_operands(da, db):
  # JAX's jnp.dot/matmul: one dot_general on the operands as given, the promoted dtype as its
  # preferred_element_type (no convert_element_type of an input)
  import ml_dtypes
  rng = np.random.RandomState(3)
  a = (rng.randn(3, 4) * 3).astype(getattr(ml_dtypes, da, da))
  b = (rng.randn(4, 2) * 3).astype(getattr(ml_dtypes, db, db))
  expect_dtype = jnp.result_type(a, b)
  for fn in (jnp.dot, jnp.matmul):
    jaxpr = ourjax.make_jaxpr(fn)(a, b)
    assert [str(e.primitive) for e in jaxpr.eqns] == ["dot_general"]
    out = ourjax.jit(fn)(a, b)
    assert out.dtype == expect_dtype
    wide = lambda x: x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    ref = np.dot(wide(a), wide(b))
    np.testing.assert_allclose(np.asarray(out).astype(ref.dtype if expect_dtype.kind != "c"
                                                      else np.complex128), ref, rtol=2e-2)


def test_matmul_squeezes_batch_dims_that_are_one_on_both_sides():
  x = np.random.RandomState(4).randn(1, 5, 4).astype(np.float32)
  y = np.random.RandomState(5).randn(1, 4, 3).astype(np.float32)
  jaxpr = ourjax.make_jaxpr(jnp.matmul)(x, y)
  [dot] = [e for e in jaxpr.eqns if str(e.primitive) == "dot_general"]
  assert [v.aval.shape for v in dot.invars] == [(5, 4), (4, 3)]
  np.testing.assert_allclose(jnp.matmul(x, y), np.matmul(x, y), rtol=1e-5)
  for sa, sb in (((2, 1, 5, 4), (1, 1, 4, 3)), ((1, 1, 5, 4), (3, 4, 3)), ((4,), (1, 1, 4, 2))):
    a = np.random.RandomState(6).randn(*sa).astype(np.float32)
    b = np.random.RandomState(7).randn(*sb).astype(np.float32)
    np.testing.assert_allclose(ourjax.jit(jnp.matmul)(a, b), np.matmul(a, b), rtol=1e-5)


def test_piecewise_traces_its_functions_once_and_matches_numpy():
  calls = []

  def g(v):
    calls.append(1)
    return v * 2

  def h(v):
    return v + 1

  x = np.arange(-3.0, 4.0, dtype=np.float32)
  for _ in range(4):
    out = jnp.piecewise(x, [x < 0, x > 2], [g, h, 7.0])
  assert len(calls) == 1                       # a jit with the functions as static arguments
  np.testing.assert_allclose(out, np.piecewise(x, [x < 0, x > 2], [lambda v: v * 2,
                                                                  lambda v: v + 1, 7.0]))
  # extra positional and keyword arguments are passed to every function
  np.testing.assert_allclose(
      jnp.piecewise(x, [x < 0], [lambda v, a, k=1: v * a * k, lambda v, a, k=1: a + k], 3.0, k=2),
      np.piecewise(x, [x < 0], [lambda v, a, k=1: v * a * k, lambda v, a, k=1: a + k], 3.0, k=2))


def test_grad_seed_keeps_the_output_weak_type():
  # JAX seeds the cotangent with ones_like(output): a weak output gives a weak gradient with no
  # conversion at the end (and so no literal True in the jaxpr of where's gradient)
  f = lambda x: jnp.where(x > 0, x, -x)
  g = ourjax.grad(f)(3.0)
  assert g.weak_type and float(g) == 1.0
  assert "True" not in str(ourjax.make_jaxpr(ourjax.grad(f))(3.0))
  assert not ourjax.grad(lambda x: x * jnp.float32(2))(jnp.float32(3.0)).weak_type


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint16, np.int32])
def test_unravel_index_with_the_shape_traced(dtype):
  # jit(unravel_index)(i, shape) traces the sizes: same coordinates as with a static shape
  # (NumPy's for in-range indices; negatives from the end; out of range clipped)
  shape = (2, 3)
  idx = np.array([0, 1, 5, 3, 4], dtype)
  traced = ourjax.jit(jnp.unravel_index)(idx, shape)
  for t, e in zip(traced, np.unravel_index(idx, shape)):
    assert t.dtype == dtype
    np.testing.assert_array_equal(t, e)
  if np.dtype(dtype).kind == "i":
    odd = np.array([-2, 7, -9, 100 if np.iinfo(dtype).max >= 100 else 50], dtype)
    for t, s in zip(ourjax.jit(jnp.unravel_index)(odd, shape), jnp.unravel_index(odd, shape)):
      np.testing.assert_array_equal(t, s)


def test_pow_derivative_at_zero_float_versus_integer_exponent():
  # JAX: lax.pow(x, y) with a float y has d/dx = y * x**(y-1), nan at 0 ** 0.0; an integer
  # exponent array gives 0 there (jnp.power passes it to lax.pow without converting it)
  assert np.isnan(float(ourjax.grad(ourjax.lax.pow)(0.0, 0.0)))
  assert float(ourjax.grad(ourjax.jit(lambda x, n: x ** n))(0.0, 0)) == 0.0
  assert float(ourjax.grad(ourjax.jit(lambda x, n: x ** n))(2.0, 3)) == 12.0
  jac = ourjax.jacfwd(lambda x: x ** jnp.arange(3))(0.0)
  np.testing.assert_array_equal(jac, [0.0, 1.0, 0.0])
  x, n = np.array([0.0, 2.0, np.nan], np.float32), np.array([0, 3, 0], np.int32)
  np.testing.assert_array_equal(ourjax.lax.pow(x, n), np.power(x, n))   # nan ** 0 is 1
  out = jnp.power(jnp.asarray(x, jnp.float16), jnp.asarray(n))
  assert out.dtype == np.float16 and not out.weak_type


def test_histogram_drops_values_outside_and_nans_like_jax():
  # slots from searchsorted(edges, v, 'right'): below the first edge and above the last (NaN
  # sorts last) are dropped; the last edge counts in the last bin; NaN edges count nothing
  a = np.array([-3.0, 0.0, 0.5, np.nan, 1.0, 2.0, 5.0], np.float32)
  counts, _ = jnp.histogram(a, bins=np.array([0.0, 1.0, 2.0]))
  np.testing.assert_array_equal(counts, [2.0, 2.0])   # {0, 0.5} and {1, 2}
  np.testing.assert_array_equal(counts, np.histogram(a[~np.isnan(a)], [0.0, 1.0, 2.0])[0])
  counts, edges = jnp.histogram(np.array([1.0, np.nan, 2.0, 3.0]), bins=3)
  assert np.isnan(np.asarray(edges)).all()
  np.testing.assert_array_equal(counts, [0.0, 0.0, 0.0])
  w = np.linspace(0.1, 0.7, 7).astype(np.float32)
  edges = np.array([-1.0, 0.0, 1.0, 2.0], np.float32)   # exact edges (linspace's are not)
  got, _ = jnp.histogram(a, bins=edges, weights=w)
  ok = ~np.isnan(a)
  np.testing.assert_allclose(got, np.histogram(a[ok], bins=edges, weights=w[ok])[0], rtol=1e-6)


def test_linalg_array_api_functions():
  # jnp.linalg.trace/outer follow the array API (JAX): trace over the last two axes, outer of
  # vectors only; eigvalsh takes symmetrize_input
  x = np.arange(24.0).reshape(2, 3, 4)
  np.testing.assert_allclose(jnp.linalg.trace(x), np.trace(x, axis1=-2, axis2=-1))
  np.testing.assert_allclose(jnp.linalg.trace(x, offset=1), np.trace(x, 1, axis1=-2, axis2=-1))
  np.testing.assert_allclose(jnp.linalg.outer(np.arange(2.0), np.arange(3.0)),
                             np.outer(np.arange(2.0), np.arange(3.0)))
  with pytest.raises(ValueError, match="one-dimensional"):
    jnp.linalg.outer(np.ones((2, 2)), np.arange(3.0))
  a = np.array([[2.0, 1.0], [0.0, 3.0]])
  np.testing.assert_allclose(jnp.linalg.eigvalsh(a, symmetrize_input=False),
                             np.linalg.eigvalsh(a), rtol=1e-6)   # the lower triangle: diag(2, 3)
  np.testing.assert_allclose(jnp.linalg.tensordot(np.ones((2, 3)), np.ones((3, 4)), axes=1),
                             np.full((2, 4), 3.0))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_reductions_accumulate_in_float32_unless_a_dtype_is_given(dtype):
  x = jnp.asarray(np.linspace(0.5, 3.0, 10), dtype)
  prims = lambda f: [str(e.primitive) for e in ourjax.make_jaxpr(f)(x).eqns]
  assert prims(jnp.sum) == ["convert_element_type", "reduce_sum", "convert_element_type"]
  assert prims(lambda v: jnp.sum(v, dtype=dtype)) == ["reduce_sum"]
  assert prims(lambda v: jnp.prod(v, dtype=dtype)) == ["reduce_prod"]
  assert prims(lambda v: jnp.mean(v, dtype=dtype)) == ["reduce_sum", "div"]
  ref = np.asarray(x, np.float64)
  for f, r in ((lambda v: jnp.sum(v, dtype=dtype), ref.sum()), (jnp.mean, ref.mean()),
               (lambda v: jnp.mean(v, dtype=dtype), ref.mean())):
    out = f(x)
    assert out.dtype == x.dtype
    np.testing.assert_allclose(float(out), r, rtol=2e-2)


def test_creation_functions_accept_out_sharding():
  # JAX 0.10's signatures: the values are the same whatever the placement
  np.testing.assert_array_equal(jnp.zeros(3, out_sharding=None), np.zeros(3))
  np.testing.assert_array_equal(jnp.full((2,), 7, out_sharding=None), [7, 7])
  np.testing.assert_array_equal(jnp.ones_like(np.arange(3), out_sharding=None), np.ones(3))
  np.testing.assert_array_equal(jnp.arange(4, out_sharding=None), np.arange(4))
  np.testing.assert_array_equal(jnp.asarray([1, 2], out_sharding=None), [1, 2])


def test_lexsort_of_scalar_keys_is_the_one_index():
  out = jnp.lexsort((1.0, 2.0, 3.0))
  assert out.shape == () and int(out) == np.lexsort((1.0, 2.0, 3.0)) == 0


@pytest.mark.parametrize("value,expect", [
    (1.0, True), (np.array(16), True), (np.array([1]), False), (np.int32(1), True),
    (None, False), ([1], False), ((), False), ("a", True), (slice(10), False)])
def test_isscalar_counts_zero_dimensional_arrays(value, expect):
  assert jnp.isscalar(value) is expect
  if isinstance(value, np.ndarray):
    assert jnp.isscalar(jnp.asarray(value)) is expect


@pytest.mark.parametrize("n,m", [(0, 1), (3, 4), (4, 3)])
@pytest.mark.parametrize("k", [2 ** 100, -2 ** 100, 5, -5, 4, -4, 1, -1, 0])
def test_eye_takes_any_python_int_offset(n, m, k):
  np.testing.assert_array_equal(jnp.eye(n, m, k=k), np.eye(n, m, k=k))
  if abs(k) < 2 ** 31:
    np.testing.assert_array_equal(jnp.tri(n, m, k=k), np.tri(n, m, k=k))
  else:                       # (JAX's tri takes int32 offsets only)
    with pytest.raises(OverflowError):
      jnp.tri(n, m, k=k)


@pytest.mark.parametrize("src", ["int4", "uint4", np.int8, np.float32, np.bool_])
@pytest.mark.parametrize("dst", ["int4", "uint4", np.int16, np.float32, np.uint8])
def test_view_counts_bits_of_sub_byte_types(src, dst):
  import ml_dtypes
  src = getattr(ml_dtypes, src) if isinstance(src, str) else src
  dst = getattr(ml_dtypes, dst) if isinstance(dst, str) else dst
  rng = np.random.RandomState(0)
  x = (rng.rand(2, 32) > 0.5) if src is np.bool_ else \
      rng.randint(-8 if src is ml_dtypes.int4 else 0, 8, (2, 32)).astype(src)
  bits = lambda d: ml_dtypes.iinfo(d).bits if d in (ml_dtypes.int4, ml_dtypes.uint4) else \
      8 * np.dtype(d).itemsize
  # the reference: the little-endian bit string of each row, regrouped
  def row_bits(v, w):
    raw = v.view(np.uint8) if w < 8 else v.view(f"u{w // 8}")
    return "".join(format(int(b) & ((1 << w) - 1), f"0{w}b")[::-1] for b in raw)
  sw, dw = bits(src), bits(dst)
  for fn in (lambda a: jnp.asarray(a).view(dst), ourjax.jit(lambda a: a.view(dst))):
    out = np.asarray(fn(x))
    assert out.shape == (2, 32 * sw // dw) and out.dtype == np.dtype(dst)
    for r in range(2):
      assert row_bits(out[r], dw) == row_bits(x[r], sw)


@pytest.mark.parametrize("name,err", [
    ("floor", TypeError), ("ceil", TypeError), ("trunc", TypeError), ("modf", TypeError),
    ("signbit", ValueError), ("isposinf", ValueError), ("isneginf", ValueError)])
def test_rounding_and_sign_tests_refuse_complex_values(name, err):
  with pytest.raises(err):
    getattr(jnp, name)(jnp.array([1 + 2j]))
  x = np.array([-1.5, 0.5, 2.0], np.float32)     # real values still work, as NumPy
  want = getattr(np, name)(x)
  got = getattr(jnp, name)(x)
  for w, g in zip(want if isinstance(want, tuple) else [want], got if isinstance(got, tuple)
                  else [got]):
    np.testing.assert_array_equal(g, w)


def test_round_refuses_booleans_and_bitwise_count_counts_them():
  with pytest.raises(ValueError, match="not inexact"):
    jnp.round(jnp.array([True, False]))
  out = jnp.bitwise_count(np.array([True, False]))
  assert out.dtype == np.uint8
  np.testing.assert_array_equal(out, np.bitwise_count(np.array([True, False])))
  with pytest.raises(TypeError, match="ediff1d"):
    jnp.ediff1d(np.array([True, False]))
