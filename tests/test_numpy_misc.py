"""select, trapezoid, cross, cov/corrcoef, polyval, vander, convolve/correlate, bincount and
histogram against NumPy."""
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
    ref = np.cross(a, b)
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
  check(f(np.array([0, 1, 1, 3, 7, -1], np.int32)), np.array([1, 2, 0, 1], np.int32))
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
