"""select, trapezoid, cross, cov/corrcoef, polyval, vander, convolve/correlate, bincount and
histogram against NumPy."""
import inspect
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import ourjax
import ourjax.numpy as jnp
from test_numpy_helpers import array_of, arrays, check

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


@given(data=st.data())
def test_select(data):
  shp = data.draw(hnp.array_shapes(max_dims=2, max_side=4), label="shape")
  k = data.draw(st.integers(1, 3), label="k")
  conds = [data.draw(arrays(np.bool_, shp), label="c") for _ in range(k)]
  choices = [data.draw(arrays(np.float32, shp, -5, 5), label="v") for _ in range(k)]
  check(jnp.select(conds, choices, -1.0), np.select(conds, choices, -1.0).astype(F32))
  with pytest.raises(ValueError, match="length"):
    jnp.select(conds, choices + choices[:1])


@given(data=st.data())
def test_trapezoid(data):
  y = data.draw(array_of([F32, I32], lo=-5, hi=5, min_dims=1, max_dims=3), label="y")
  axis = data.draw(st.integers(-y.ndim, y.ndim - 1), label="axis")
  check(jnp.trapezoid(y, axis=axis), np.trapezoid(y, axis=axis).astype(F32), F32, rtol=1e-5,
        atol=1e-5)
  x = np.sort(data.draw(arrays(np.float32, (y.shape[axis],), -5, 5), label="x"))
  check(jnp.trapezoid(y, x, axis=axis), np.trapezoid(y, x, axis=axis).astype(F32), F32,
        rtol=1e-4, atol=1e-4)
  check(jnp.trapezoid(y, dx=0.5, axis=axis), np.trapezoid(y, dx=0.5, axis=axis).astype(F32),
        F32, rtol=1e-5, atol=1e-5)


def _np_cross(a, b):
  """NumPy's cross product, 2-vectors as 3-vectors with z = 0 (and the z component alone when
  both are 2-vectors): what NumPy 1.x computed, and NumPy 2.5 refuses."""
  if a.shape[-1] == b.shape[-1] == 2:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
  pad = lambda x: np.concatenate([x, np.zeros(x.shape[:-1] + (1,), x.dtype)], -1) \
      if x.shape[-1] == 2 else x  # noqa: E731
  return np.cross(pad(a), pad(b))


@given(data=st.data())
def test_cross(data):
  na = data.draw(st.sampled_from([2, 3]), label="na")
  nb = data.draw(st.sampled_from([2, 3]), label="nb")
  batch = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3),
                    label="batch").input_shapes
  a = data.draw(arrays(np.float32, batch[0] + (na,), -5, 5), label="a")
  b = data.draw(arrays(np.float32, batch[1] + (nb,), -5, 5), label="b")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    ref = _np_cross(a, b)
    check(jnp.cross(a, b), ref, rtol=1e-5, atol=1e-5)
    if na == 3 and nb == 3 and a.ndim >= 2:
      check(jnp.cross(np.moveaxis(a, -1, 0), b, axisa=0, axisc=0),
            np.cross(np.moveaxis(a, -1, 0), b, axisa=0, axisc=0), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="incompatible dimensions"):
    jnp.cross(np.ones(4), np.ones(3))


@given(data=st.data())
def test_cov_corrcoef(data):
  m = data.draw(arrays(np.float32, data.draw(st.tuples(st.integers(1, 3), st.integers(2, 6)),
                                             label="shape"), -5, 5), label="m")
  rowvar = data.draw(st.booleans(), label="rowvar")
  ddof = data.draw(st.sampled_from([None, 0, 1]), label="ddof")
  x = m if rowvar else m.T
  check(jnp.cov(x, rowvar=rowvar, ddof=ddof),
        np.cov(x, rowvar=rowvar, ddof=ddof).astype(F32), F32, rtol=1e-4, atol=1e-4)
  f = data.draw(arrays(np.int32, (m.shape[1],), 1, 3), label="fweights")
  a = data.draw(arrays(np.float32, (m.shape[1],), 0.5, 2), label="aweights")
  check(jnp.cov(m, fweights=f, aweights=a), np.cov(m, fweights=f, aweights=a).astype(F32),
        F32, rtol=1e-4, atol=1e-4)
  if (np.var(m.astype(np.float64), axis=1) > 1e-2).all():   # constant rows give 0/0
    ref = np.corrcoef(x, rowvar=rowvar).astype(F32)
    check(jnp.corrcoef(x, rowvar=rowvar), ref, F32, rtol=1e-4, atol=1e-4)


@given(data=st.data())
def test_polyval_vander(data):
  p = data.draw(arrays(np.float32, (data.draw(st.integers(1, 4), label="deg"),), -3, 3),
                label="p")
  x = data.draw(array_of([F32, I32], lo=-3, hi=3, max_dims=2), label="x")
  check(jnp.polyval(p, x), np.polyval(p, x).astype(F32), F32, rtol=1e-5, atol=1e-4)
  v = data.draw(array_of([F32, I32], lo=-3, hi=3, min_dims=1, max_dims=1), label="v")
  n = data.draw(st.one_of(st.none(), st.integers(0, 4)), label="N")
  inc = data.draw(st.booleans(), label="increasing")
  check(jnp.vander(v, n, inc), np.vander(v, n, inc).astype(v.dtype), v.dtype, rtol=1e-5)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@given(data=st.data())
def test_convolve_correlate(mode, data):
  a = data.draw(arrays(np.float32, (data.draw(st.integers(1, 6), label="na"),), -3, 3),
                label="a")
  v = data.draw(arrays(np.float32, (data.draw(st.integers(1, 6), label="nv"),), -3, 3),
                label="v")
  check(jnp.convolve(a, v, mode), np.convolve(a, v, mode), rtol=1e-5, atol=1e-5)
  check(jnp.correlate(a, v, mode), np.correlate(a, v, mode), rtol=1e-5, atol=1e-5)
  check(jnp.convolve(a.astype(np.int32), v.astype(np.int32), mode),
        np.convolve(a.astype(np.int32), v.astype(np.int32), mode).astype(F32), F32)


def test_convolve_errors_and_dtypes():
  with pytest.raises(ValueError, match="1-dimensional"):
    jnp.convolve(np.ones((2, 2)), np.ones(2))
  with pytest.raises(ValueError, match="empty"):
    jnp.convolve(np.ones(0), np.ones(2))
  with pytest.raises(ValueError, match="mode"):
    jnp.correlate(np.ones(3), np.ones(2), "bogus")
  r = jnp.convolve(np.arange(3, dtype=np.int32), np.ones(2, np.int32),
                   preferred_element_type=np.int32)
  check(r, np.convolve(np.arange(3), np.ones(2, int)).astype(np.int32))


@given(data=st.data())
def test_bincount_histogram(data):
  x = data.draw(arrays(np.int32, (data.draw(st.integers(0, 8), label="n"),), 0, 6), label="x")
  minlength = data.draw(st.integers(0, 9), label="minlength")
  check(jnp.bincount(x, minlength=minlength),
        np.bincount(x, minlength=minlength).astype(np.int32))
  w = data.draw(arrays(np.float32, x.shape, -2, 2), label="w")
  check(jnp.bincount(x, w, minlength=minlength),
        np.bincount(x, w, minlength=minlength).astype(F32), F32, rtol=1e-5, atol=1e-5)
  a = data.draw(array_of([F32], lo=-5, hi=5, max_dims=2, min_side=1), label="a")
  bins = data.draw(st.integers(1, 5), label="bins")
  # edges agree to rounding; counts are compared for the edges we computed (a value equal to
  # a float32 edge may fall on either side of NumPy's float64 edge)
  counts, edges = jnp.histogram(a, bins)
  rc, re = np.histogram(a, bins)
  check(edges, re.astype(F32), F32, rtol=1e-5, atol=1e-5)
  # float counts, as JAX's (they have the dtype of the weights: ones like a by default)
  check(counts, np.histogram(a, np.asarray(edges))[0].astype(F32), F32)
  counts, edges = jnp.histogram(a, bins, range=(-2, 3), weights=np.ones_like(a) * 2)
  check(edges, np.histogram_bin_edges(a, bins, range=(-2, 3)).astype(F32), F32, rtol=1e-5,
        atol=1e-5)
  check(counts, np.histogram(a, np.asarray(edges), weights=np.ones_like(a) * 2)[0].astype(F32),
        F32)


def test_bincount_under_jit():
  f = ourjax.jit(lambda x: jnp.bincount(x, length=4))
  # negative values count in bin 0 (JAX clips them), values past length are dropped
  check(f(np.array([0, 1, 1, 3, 7, -1], np.int32)), np.array([2, 2, 0, 1], np.int32))
  with pytest.raises(ourjax.errors.ConcretizationTypeError):
    ourjax.jit(jnp.bincount)(np.array([0, 1], np.int32))


@given(n=st.integers(0, 5), m=st.one_of(st.none(), st.integers(0, 5)), k=st.integers(-3, 3))
def test_index_helpers(n, m, k):
  for g, r in zip(jnp.tril_indices(n, k, m), np.tril_indices(n, k, m)):
    check(g, r.astype(np.int32))
  for g, r in zip(jnp.triu_indices(n, k, m), np.triu_indices(n, k, m)):
    check(g, r.astype(np.int32))
  a = np.zeros((n, n if m is None else m))
  for g, r in zip(jnp.tril_indices_from(a, k), np.tril_indices_from(a, k)):
    check(g, r.astype(np.int32))
  for g, r in zip(jnp.diag_indices(n, 3), np.diag_indices(n, 3)):
    check(g, r.astype(np.int32))


@given(data=st.data())
def test_fill_diagonal_resize(data):
  shape = data.draw(st.one_of(st.tuples(st.integers(1, 6), st.integers(1, 6)),
                              st.integers(1, 3).map(lambda n: (n, n, n))), label="shape")
  a = data.draw(arrays(np.float32, shape, -5, 5), label="a")
  val = data.draw(st.one_of(st.floats(-9, 9, width=32),
                            st.lists(st.floats(-9, 9, width=32), min_size=1, max_size=3)),
                  label="val")
  wrap = data.draw(st.booleans(), label="wrap")
  ref = a.copy()
  np.fill_diagonal(ref, val, wrap=wrap)
  check(jnp.fill_diagonal(a, np.asarray(val, np.float32), wrap=wrap, inplace=False), ref)
  new = data.draw(st.tuples(st.integers(0, 4), st.integers(0, 4)), label="new shape")
  check(jnp.resize(a, new), np.resize(a, new))
  with pytest.raises(ValueError, match="immutable"):
    jnp.fill_diagonal(a, 1.0)


def test_apply_along_and_over_axes():
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  for axis in (0, 1, 2, -1):
    check(jnp.apply_along_axis(lambda v: jnp.cumsum(v) * 2, axis, a),
          np.apply_along_axis(lambda v: np.cumsum(v) * 2, axis, a))
    check(jnp.apply_along_axis(jnp.sum, axis, a), np.apply_along_axis(np.sum, axis, a))
  check(jnp.apply_over_axes(jnp.sum, a, [0, 2]), np.apply_over_axes(np.sum, a, [0, 2]))


@given(data=st.data())
def test_gradient(data):
  f = data.draw(array_of([F32, I32], lo=-9, hi=9, min_dims=1, max_dims=3, min_side=2),
                label="f")
  got, ref = jnp.gradient(f), np.gradient(f.astype(np.float64))
  if f.ndim == 1:
    got, ref = [got], [ref]
  for g, r in zip(got, ref):
    check(g, r.astype(F32), F32, rtol=1e-5, atol=1e-5)
  axis = data.draw(st.integers(-f.ndim, f.ndim - 1), label="axis")
  n = f.shape[axis]
  x = np.cumsum(data.draw(arrays(np.float32, (n,), 0.5, 2), label="x"))
  check(jnp.gradient(f, x, axis=axis), np.gradient(f.astype(np.float64), x.astype(np.float64),
                                                   axis=axis).astype(F32), F32, rtol=1e-3,
        atol=1e-3)


def test_vectorize():
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  b = np.arange(4, dtype=np.float32)
  f = jnp.vectorize(lambda x, y: x * 2 + y)
  check(f(a, b), a * 2 + b)
  mv = jnp.vectorize(lambda m, v: jnp.dot(m, v), signature="(m,n),(n)->(m)")
  check(mv(a, b), np.einsum("...ij,j->...i", a, b))
  check(mv(a, np.stack([b, b + 1])[:, None]), np.einsum("...ij,...j->...i", a,
                                                        np.stack([b, b + 1])[:, None]))
  g = jnp.vectorize(lambda x, p: x ** p, excluded={1})
  check(g(b, 2), b ** 2)
  two = jnp.vectorize(lambda v: (jnp.min(v), jnp.max(v)), signature="(n)->(),()")
  lo, hi = two(a)
  check(lo, a.min(-1))
  check(hi, a.max(-1))
  check(ourjax.jit(mv)(a, b), np.einsum("...ij,j->...i", a, b))
  with pytest.raises(ValueError, match="core dimension"):
    mv(a, np.ones(5, np.float32))


# ------------------------------------------------------------------------------------------------
# piecewise, histogram2d/histogramdd, mask_indices, packbits/unpackbits, trim_zeros, unwrap


def test_piecewise():
  x = np.linspace(-2, 2, 9, dtype=np.float32)
  conds = [x < 0, x > 1]
  funcs = [lambda v: -v, lambda v: v ** 2, 7.0]         # the last one is the default
  want = np.piecewise(x, conds, funcs)
  check(jnp.piecewise(x, conds, funcs), want)
  check(ourjax.jit(lambda v: jnp.piecewise(v, [v < 0, v > 1], funcs))(x), want)
  # later conditions win; constants and results take x's dtype; extra arguments pass through
  xi = np.arange(6, dtype=np.int32)
  check(jnp.piecewise(xi, [xi < 4, xi > 1], [1.5, lambda v, a: v * a], 3),
        np.piecewise(xi, [xi < 4, xi > 1], [1.5, lambda v, a: v * a], 3))
  g = ourjax.grad(lambda v: jnp.piecewise(v, [v < 1], [lambda t: t ** 3, lambda t: 2 * t]))
  check(g(np.float32(0.5)), np.float32(0.75))
  with pytest.raises(ValueError, match="functions are expected"):
    jnp.piecewise(x, conds, [1, 2, 3, 4])


@given(data=st.data())
def test_histogram2d_histogramdd(data):
  n = data.draw(st.integers(1, 12))
  pts = data.draw(arrays(np.float32, (n, 3), lo=-4, hi=4))
  w = data.draw(arrays(np.float32, (n,), lo=0, hi=2))
  p64 = pts.astype(np.float64)

  def reference(edges, **kw):    # NumPy's binning with the edges computed (in float32) here
    return np.histogramdd(p64[:, :len(edges)], bins=[np.asarray(e, np.float64) for e in edges],
                          **kw)[0]
  bins = data.draw(st.sampled_from([3, [2, 4, 3]]))
  h, edges = jnp.histogramdd(pts, bins=bins)
  for e, ee in zip(edges, np.histogramdd(p64, bins=bins)[1]):
    check(e, ee.astype(np.float32), rtol=1e-5, atol=1e-5)
  check(h, reference(edges), dtype=np.int32)
  h, edges = jnp.histogramdd(pts, bins=bins, weights=w)
  check(h, reference(edges, weights=w).astype(np.float32), rtol=1e-5, atol=1e-5)
  rng = [(-1, 1), None, (0, 2)]
  h, edges = jnp.histogramdd(pts, bins=2, range=rng)
  check(edges[0], np.linspace(-1, 1, 3, dtype=np.float32))
  check(h, reference(edges), dtype=np.int32)
  h, ex, ey = jnp.histogram2d(pts[:, 0], pts[:, 1], bins=[2, 3], density=True)
  check(h, reference([ex, ey], density=True).astype(np.float32), rtol=1e-4, atol=1e-4)


def test_histogram_errors_and_jit():
  pts = np.array([[0.0, 1.0], [0.5, -1.0], [2.0, 0.0]], np.float32)
  with pytest.raises(ValueError, match="one weight"):
    jnp.histogramdd(pts, weights=np.ones(2, np.float32))
  with pytest.raises(ValueError, match="bin for each"):
    jnp.histogramdd(pts, bins=[2])
  with pytest.raises(ValueError, match="range"):
    jnp.histogramdd(pts, range=[(0, 1)])
  h, ex, ey = ourjax.jit(lambda x, y: jnp.histogram2d(x, y, bins=2))(pts[:, 0], pts[:, 1])
  check(h, np.histogram2d(pts[:, 0], pts[:, 1], bins=2)[0], dtype=np.int32)


def test_mask_indices():
  for k in (-1, 0, 2):
    for fn, np_fn in ((jnp.triu, np.triu), (jnp.tril, np.tril)):
      got, want = jnp.mask_indices(4, fn, k), np.mask_indices(4, np_fn, k)
      for g, w in zip(got, want):
        check(g, w, dtype=np.int32)
  r, c = jnp.mask_indices(3, jnp.triu, 1, size=4)
  check(r, np.array([0, 0, 1, 0]), dtype=np.int32)
  check(c, np.array([1, 2, 2, 0]), dtype=np.int32)


@given(data=st.data())
def test_packbits_unpackbits(data):
  shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=11))
  a = data.draw(arrays(data.draw(st.sampled_from([np.bool_, np.int32, np.uint8])), shape,
                       lo=-2, hi=2))
  axis = data.draw(st.sampled_from([None] + list(range(-len(shape), len(shape)))))
  order = data.draw(st.sampled_from(["big", "little"]))
  packed = jnp.packbits(a, axis=axis, bitorder=order)
  want = np.packbits(a, axis=axis, bitorder=order)
  check(packed, want)
  count = data.draw(st.sampled_from([None, 0, 3, -2, 20]))
  check(jnp.unpackbits(want, axis=axis, count=count, bitorder=order),
        np.unpackbits(want, axis=axis, count=count, bitorder=order))


def test_packbits_errors():
  with pytest.raises(TypeError, match="integer or boolean"):
    jnp.packbits(np.ones(3, np.float32))
  with pytest.raises(TypeError, match="unsigned byte"):
    jnp.unpackbits(np.ones(3, np.int32))
  with pytest.raises(ValueError, match="'little' or 'big'"):
    jnp.packbits(np.ones(3, np.int32), bitorder="middle")
  with pytest.raises(ValueError, match="Non-hashable"):
    jnp.packbits(np.ones(3, np.int32), jnp.array(0))
  check(ourjax.jit(jnp.packbits)(np.array([1, 0, 1], np.int32)), np.array([160], np.uint8))


@given(data=st.data())
def test_trim_zeros(data):
  shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=5))
  a = data.draw(arrays(np.int32, shape, lo=0, hi=1))
  trim = data.draw(st.sampled_from(["fb", "f", "b", "FB"]))
  axis = data.draw(st.sampled_from([None, -1, 0]))
  check(jnp.trim_zeros(a, trim, axis), np.trim_zeros(a, trim, axis))
  with pytest.raises(ourjax.errors.ConcretizationTypeError):
    ourjax.jit(jnp.trim_zeros)(a)


@given(data=st.data())
def test_unwrap(data):
  shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=6))
  p = data.draw(arrays(np.float32, shape, lo=-20, hi=20))
  axis = data.draw(st.integers(-len(shape), len(shape) - 1))
  kw = data.draw(st.sampled_from([{}, dict(discont=4.0), dict(period=4.0),
                                  dict(period=5.0, discont=1.0)]))
  want = np.unwrap(p.astype(np.float64), axis=axis, **kw).astype(np.float32)
  check(jnp.unwrap(p, axis=axis, **kw), want, rtol=1e-4, atol=1e-4)
  pi = np.round(p).astype(np.int32)
  check(jnp.unwrap(pi, axis=axis, period=8), np.unwrap(pi, axis=axis, period=8))


def test_unwrap_jit_grad_errors():
  p = np.array([0.0, 3.0, 6.5, -0.5, 1.0, 8.0], np.float32)
  check(ourjax.jit(jnp.unwrap)(p), np.unwrap(p.astype(np.float64)).astype(np.float32),
        rtol=1e-5, atol=1e-5)
  # a sum of p and piecewise-constant corrections: the gradient of sum(unwrap(p)) is all ones
  check(ourjax.grad(lambda v: jnp.unwrap(v).sum())(p), np.ones(6, np.float32))
  with pytest.raises(ValueError, match="complex"):
    jnp.unwrap(np.array([1j, 2j]))


def _kth(r):
  return r[:, 1]   # partition: only the kth element of each row is determined


# (function, its valid static keyword arguments, the one given an array, a view of the result
# that NumPy and JAX agree on); JAX jits each with these among its static_argnames.
_STATIC_CASES = [
    ("swapaxes", dict(axis1=0, axis2=1), "axis2", None),
    ("sort", dict(axis=0, kind=None, stable=True), "axis", None),
    ("argsort", dict(axis=0, stable=True), "axis", None),
    ("partition", dict(kth=1, axis=1), "kth", _kth),
    ("argpartition", dict(kth=1, axis=1), "kth", "take"),
    ("lexsort", dict(axis=-1), "axis", None),
    ("rollaxis", dict(axis=1, start=0), "axis", None),
    ("resize", dict(new_shape=(3, 4)), "new_shape", None),
    ("ravel", dict(order="C"), "order", None),
    ("diff", dict(n=1, axis=0), "n", None),
    ("rot90", dict(k=1, axes=(0, 1)), "k", None),
    ("nansum", dict(axis=0, dtype=None, keepdims=True), "axis", None),
    ("nanprod", dict(axis=1, keepdims=False), "axis", None),
    ("nanmean", dict(axis=0, keepdims=True), "keepdims", None),
    ("nanvar", dict(axis=1, keepdims=False), "axis", None),
    ("nanstd", dict(axis=(0, 1)), "axis", None),
    ("nanmin", dict(axis=0, keepdims=True), "axis", None),
    ("nanmax", dict(axis=None, keepdims=False), "keepdims", None),
    ("nanmedian", dict(axis=1, keepdims=True), "axis", None),
    ("median", dict(axis=0, overwrite_input=False), "axis", None),
    ("cumsum", dict(axis=1), "axis", None),
    ("cumprod", dict(axis=0), "axis", None),
    ("nancumsum", dict(axis=0), "axis", None),
    ("nancumprod", dict(axis=1), "axis", None),
    ("count_nonzero", dict(axis=0, keepdims=True), "axis", None),
    ("triu", dict(k=1), "k", None),
    ("tril", dict(k=-1), "k", None),
    ("round", dict(decimals=1), "decimals", None),
    ("around", dict(decimals=2), "decimals", None),
    ("diagonal", dict(offset=1, axis1=0, axis2=1), "offset", None),
    ("angle", dict(deg=True), "deg", None),
    ("vander", dict(N=3, increasing=True), "N", None),
]


@pytest.mark.parametrize("name,kw,static,view", _STATIC_CASES,
                         ids=[c[0] for c in _STATIC_CASES])
def test_array_static_argument_is_a_value_error(name, kw, static, view):
  """An array (eager, or a jit/vmap tracer) for a static argument raises jit's ValueError, as
  in JAX; the same call with Python values (scalars, None, tuples, strings) is unchanged."""
  f = getattr(jnp, name)
  x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
  x[0, 0] = 0.0
  if name == "vander":
    x = x[0]
  got = f(x, **kw)
  want = getattr(np, name)(x.astype(np.float64), **kw)
  if view == "take":
    got, want = jnp.take_along_axis(jnp.asarray(x), got, 1)[:, 1], np.sort(x, 1)[:, 1]
  elif view is not None:
    got, want = view(got), view(want)
  check(got, want, dtype=I32 if np.asarray(want).dtype.kind in "biu" else F32)
  bad = dict(kw, **{static: jnp.array(1)})
  with pytest.raises(ValueError, match="Non-hashable static arguments"):
    f(x, **bad)
  with pytest.raises(ValueError, match="Non-hashable static arguments"):
    ourjax.jit(lambda v, s: f(v, **dict(kw, **{static: s})))(x, 1)
  with pytest.raises(ValueError, match="Non-hashable static arguments"):
    ourjax.vmap(lambda s: f(x, **dict(kw, **{static: s})))(np.arange(2))
  # passed by position where the parameter allows it
  params = list(inspect.signature(f).parameters.values())
  pos = [p.name for p in params].index(static)
  if (params[pos].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
      and all(p.name in kw for p in params[1:pos])):
    args = [kw[p.name] for p in params[1:pos]]
    with pytest.raises(ValueError, match="Non-hashable static arguments"):
      f(x, *args, jnp.array(1))
