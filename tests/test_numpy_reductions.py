"""Reductions against NumPy: sum/prod/max/min/all/any (axis forms, keepdims, where, initial,
dtype), JAX's accumulation dtypes, mean/var/std, argmax/argmin, cumulative sums and products,
NaN-ignoring variants, quantiles, average, count_nonzero, ptp, and axis errors."""
import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

import ourjax
import ourjax.numpy as jnp
from test_numpy_helpers import (ALL, BOOL, NUMERIC, SIGNED, UNSIGNED, array_of, arrays, bf16,
                                check, np_ref)

F32, I32, U32 = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32)


@st.composite
def array_and_axis(draw, dtypes, lo=-5, hi=5, nan=False, min_dims=0, allow_none=True,
                   allow_tuple=True, **kw):
  x = draw(array_of(dtypes, lo=lo, hi=hi, nan=nan, min_dims=min_dims, **kw))
  nd = x.ndim
  options = []
  if allow_none:
    options.append(st.none())
  if nd:
    options.append(st.integers(-nd, nd - 1))
    if allow_tuple:
      options.append(st.lists(st.integers(0, nd - 1), unique=True).map(
          lambda axes: tuple(a - nd if i % 2 else a for i, a in enumerate(axes))))
  axis = draw(st.one_of(*options)) if options else None
  return x, axis


def _sum_dtype(dt):
  dt = np.dtype(dt)
  if dt == np.bool_:
    return I32
  if dt.kind == "i":
    return I32 if dt.itemsize < 4 else dt
  if dt.kind == "u":
    return U32 if dt.itemsize < 4 else dt
  return dt


def _np_axis(axis):
  return tuple(axis) if isinstance(axis, list) else axis


@pytest.mark.parametrize("name", ["sum", "prod"])
@given(xa=array_and_axis(ALL, lo=-3, hi=3), keepdims=st.booleans())
def test_sum_prod(name, xa, keepdims):
  x, axis = xa
  out = _sum_dtype(x.dtype)
  got = getattr(jnp, name)(x, axis=axis, keepdims=keepdims)
  ref = np_ref(lambda v: getattr(np, name)(v, axis=axis, keepdims=keepdims,
                                           dtype=out if out.kind != "f" and out != bf16
                                           else np.float32), x, out=out)
  check(got, ref, out, rtol=2e-2 if out == bf16 else 2e-3 if out == np.float16 else None)


@given(xa=array_and_axis(SIGNED + UNSIGNED + BOOL, lo=-3, hi=3))
def test_sum_promote_integers_false(xa):
  x, axis = xa
  out = I32 if x.dtype == np.bool_ else x.dtype
  check(jnp.sum(x, axis=axis, promote_integers=False),
        np.sum(x, axis=axis, dtype=out), out)


@given(xa=array_and_axis(NUMERIC, lo=-3, hi=3), dt=st.sampled_from(NUMERIC + BOOL))
def test_sum_dtype_argument(xa, dt):
  x, axis = xa
  assume(not (dt.kind in "iub" and (x.dtype.kind == "f" or x.dtype == bf16)))
  got = jnp.sum(x, axis=axis, dtype=dt)
  if dt == np.bool_:
    ref = np.any(x != 0, axis=axis)
  else:
    ref = np_ref(lambda v: np.sum(v, axis=axis, dtype=np.float32 if dt.kind == "f" or
                                  dt == bf16 else dt), x.astype(dt) if dt != bf16
                 else x.astype(np.float32), out=dt)
  check(got, ref, dt, rtol=2e-2 if dt in (bf16, np.dtype(np.float16)) else None)


@pytest.mark.parametrize("name", ["max", "min", "amax", "amin"])
@given(xa=array_and_axis(ALL, lo=-50, hi=50, nan=True), keepdims=st.booleans())
def test_max_min(name, xa, keepdims):
  x, axis = xa
  npfn = getattr(np, name)
  empty = any(x.shape[a] == 0 for a in (range(x.ndim) if axis is None else
                                         (axis if isinstance(axis, tuple) else (axis,))))
  if empty:
    with pytest.raises(ValueError, match="zero-size"):
      getattr(jnp, name)(x, axis=axis)
    init = 7 if x.dtype != np.bool_ else True
    got = getattr(jnp, name)(x, axis=axis, keepdims=keepdims, initial=init)
    ref = np_ref(lambda v: npfn(v, axis=axis, keepdims=keepdims, initial=init), x, out=x.dtype)
  else:
    got = getattr(jnp, name)(x, axis=axis, keepdims=keepdims)
    ref = np_ref(lambda v: npfn(v, axis=axis, keepdims=keepdims), x, out=x.dtype)
  check(got, ref, x.dtype)


@pytest.mark.parametrize("name", ["all", "any"])
@given(xa=array_and_axis(ALL, lo=-2, hi=2, nan=True), keepdims=st.booleans())
def test_all_any(name, xa, keepdims):
  x, axis = xa
  check(getattr(jnp, name)(x, axis=axis, keepdims=keepdims),
        np_ref(lambda v: getattr(np, name)(v, axis=axis, keepdims=keepdims), x), np.bool_)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "all", "any"])
@given(data=st.data())
def test_where_and_initial(name, data):
  x, axis = data.draw(array_and_axis([np.dtype(np.int32), F32], lo=-3, hi=3), label="xa")
  w = data.draw(arrays(np.bool_, x.shape[1:] if x.ndim else ()), label="where")
  kw = {"where": w}
  if name in ("max", "min"):
    kw["initial"] = 0
  elif name in ("sum", "prod"):
    kw["initial"] = data.draw(st.sampled_from([None, 2]), label="initial")
  got = getattr(jnp, name)(x, axis=axis, **kw)
  if kw.get("initial", 0) is None:   # NumPy wants an explicit identity with where on 0-d input
    kw["initial"] = {"sum": 0, "prod": 1}[name]
  ref = getattr(np, name)(x, axis=axis, **kw)
  check(got, np.asarray(ref).astype(np.asarray(got).dtype))


def test_reduction_where_needs_initial():
  with pytest.raises(ValueError, match="identity"):
    jnp.max(np.ones(3), where=np.array([True, False, True]))


@given(xa=array_and_axis(NUMERIC, lo=-100, hi=100), keepdims=st.booleans())
def test_mean(xa, keepdims):
  x, axis = xa
  out = F32 if x.dtype.kind in "iu" else x.dtype
  got = jnp.mean(x, axis=axis, keepdims=keepdims)
  ref = np_ref(lambda v: np.mean(v.astype(np.float64), axis=axis, keepdims=keepdims), x,
               out=out)
  check(got, ref, out, rtol=1e-5 if out == F32 else None, atol=1e-4)


def test_mean_dtypes_and_where():
  assert jnp.mean(np.arange(4, dtype=np.int32)).dtype == F32
  assert jnp.mean(np.arange(4, dtype=np.int8), dtype=np.float16).dtype == np.float16
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  w = np.array([[True, False, True], [False, False, True]])
  check(jnp.mean(x, axis=1, where=w), np.mean(x, axis=1, where=w))
  check(jnp.mean(x, where=w, keepdims=True), np.mean(x, where=w, keepdims=True))


def test_mean_x64(x64):
  assert jnp.mean(np.arange(4)).dtype == np.float64
  assert jnp.sum(np.arange(4, dtype=np.int32)).dtype == np.int64
  assert jnp.sum(np.arange(4, dtype=np.uint8)).dtype == np.uint64
  check(jnp.var(np.arange(10.0), ddof=1), np.var(np.arange(10.0), ddof=1))


@pytest.mark.parametrize("name", ["var", "std"])
@given(xa=array_and_axis(NUMERIC, lo=-100, hi=100), ddof=st.integers(0, 2),
       keepdims=st.booleans())
def test_var_std(name, xa, ddof, keepdims):
  x, axis = xa
  out = F32 if x.dtype.kind in "iu" else x.dtype
  got = getattr(jnp, name)(x, axis=axis, ddof=ddof, keepdims=keepdims)
  ref = np_ref(lambda v: getattr(np, name)(v.astype(np.float64), axis=axis, ddof=ddof,
                                           keepdims=keepdims), x, out=out)
  axes = range(x.ndim) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
  if int(np.prod([x.shape[a] for a in axes])) <= ddof:
    ref = np.full_like(ref, np.nan)    # JAX: NaN when N - ddof <= 0 (NumPy may give inf)
  rt = {F32: 1e-3, np.dtype(np.float16): 2e-2, bf16: 1e-1}[out]
  check(got, ref, out, rtol=rt, atol=rt)


def test_var_correction_and_where():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  check(jnp.var(x, axis=0, correction=1), np.var(x, axis=0, ddof=1))
  w = x % 3 != 0
  check(jnp.var(x, axis=1, where=w), np.var(x, axis=1, where=w), rtol=1e-5)
  check(jnp.std(x, where=w), np.std(x, where=w), rtol=1e-5)
  with pytest.raises(ValueError, match="ddof and correction"):
    jnp.var(x, ddof=1, correction=1)
  assert np.isnan(np.asarray(jnp.var(np.ones(2), ddof=2)))
  check(jnp.var(np.array([1 + 1j, 2 - 1j], np.complex64)), np.float32(1.25))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@given(data=st.data())
def test_argmax_argmin(name, data):
  x, axis = data.draw(array_and_axis(ALL, lo=-3, hi=3, nan=True, allow_tuple=False),
                      label="xa")
  keepdims = data.draw(st.booleans(), label="keepdims")
  fn, npfn = getattr(jnp, name), getattr(np, name)
  empty = x.size == 0 if axis is None else x.shape[axis] == 0
  if empty:
    with pytest.raises(ValueError, match="empty"):
      fn(x, axis=axis)
    return
  xf = x.astype(np.float32) if x.dtype in (bf16, np.dtype(np.float16)) else x
  check(fn(x, axis=axis, keepdims=keepdims), npfn(xf, axis=axis, keepdims=keepdims), I32)


def test_argmax_methods_and_nan():
  x = np.array([[1.0, np.nan, 3.0], [3.0, 3.0, 1.0]], np.float32)
  check(jnp.argmax(x, axis=1), np.array([1, 0], np.int32))
  check(jnp.asarray(x).argmin(axis=0), np.argmin(x, axis=0).astype(np.int32))
  check(jnp.nanargmax(x, axis=1), np.nanargmax(x, axis=1).astype(np.int32))
  check(jnp.nanargmin(x, axis=1), np.nanargmin(x, axis=1).astype(np.int32))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@given(data=st.data())
def test_cumsum_cumprod(name, data):
  x, axis = data.draw(array_and_axis(ALL, lo=-3, hi=3, allow_tuple=False), label="xa")
  out = I32 if x.dtype == np.bool_ else x.dtype
  got = getattr(jnp, name)(x, axis=axis)
  ref = np_ref(lambda v: getattr(np, name)(v, axis=axis, dtype=np.float32 if out.kind == "f"
                                           or out == bf16 else out), x, out=out)
  check(got, ref, out, rtol=5e-2 if out == bf16 else 5e-3 if out == np.float16 else None)
  dt = data.draw(st.sampled_from([np.dtype(np.int32), F32]), label="dtype")
  check(getattr(jnp, name)(x, axis=axis, dtype=dt),
        np_ref(lambda v: getattr(np, name)(v, axis=axis, dtype=dt), x, out=dt), dt)


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
@given(data=st.data())
def test_cumulative_array_api(name, data):
  x = data.draw(array_of([np.dtype(np.int8), F32, np.dtype(np.bool_)], lo=-3, hi=3,
                         min_dims=1), label="x")
  axis = data.draw(st.integers(-x.ndim, x.ndim - 1), label="axis")
  include_initial = data.draw(st.booleans(), label="include_initial")
  out = F32 if x.dtype == F32 else I32
  if name == "cumulative_prod" and x.dtype == np.int8:
    out = x.dtype           # (JAX's cumulative_prod keeps small integers; NumPy widens them)
  got = getattr(jnp, name)(x, axis=axis, include_initial=include_initial)
  ref = getattr(np, name)(x, axis=axis, include_initial=include_initial, dtype=out)
  check(got, ref, out)


def test_cumulative_errors():
  with pytest.raises(ValueError, match="non-scalar"):
    jnp.cumulative_sum(np.float32(1))
  with pytest.raises(ValueError, match="axis"):
    jnp.cumulative_sum(np.ones((2, 2)))
  with pytest.raises(ValueError, match="axis 2"):
    jnp.cumsum(np.ones((2, 2)), axis=2)


@pytest.mark.parametrize("name", ["nansum", "nanprod", "nanmax", "nanmin", "nanmean",
                                  "nanvar", "nanstd", "nancumsum", "nancumprod"])
@given(data=st.data())
def test_nan_reductions(name, data):
  cum = name.startswith("nancum")
  x, axis = data.draw(array_and_axis([F32], lo=-3, hi=3, nan=True, allow_tuple=not cum),
                      label="xa")
  keep = {} if cum else {"keepdims": data.draw(st.booleans(), label="keepdims")}
  if name in ("nanmax", "nanmin"):
    empty = any(x.shape[a] == 0 for a in (range(x.ndim) if axis is None else
                                           (axis if isinstance(axis, tuple) else (axis,))))
    assume(not empty)
  with np.errstate(all="ignore"), _quiet():
    ref = getattr(np, name)(x, axis=axis, **keep)
  check(getattr(jnp, name)(x, axis=axis, **keep), np.asarray(ref).astype(F32), F32, rtol=1e-5,
        atol=1e-5)


class _quiet:
  def __enter__(self):
    import warnings
    self.w = warnings.catch_warnings()
    self.w.__enter__()
    warnings.simplefilter("ignore")

  def __exit__(self, *a):
    return self.w.__exit__(*a)


def test_nan_reductions_of_ints():
  x = np.arange(6, dtype=np.int32).reshape(2, 3)
  check(jnp.nansum(x, axis=0), np.nansum(x, axis=0).astype(np.int32))
  check(jnp.nanmean(x), np.float32(2.5))


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
@given(data=st.data())
def test_quantile(method, data):
  x, axis = data.draw(array_and_axis([F32, np.dtype(np.int32)], lo=-20, hi=20, min_dims=1,
                                     min_side=1), label="xa")
  q = data.draw(st.one_of(st.floats(0, 1), st.lists(st.floats(0, 1), min_size=1,
                                                     max_size=3)), label="q")
  keepdims = data.draw(st.booleans(), label="keepdims")
  if method != "linear":
    # these jump where the position q * (n - 1) crosses a whole number (nearest: a half), and
    # a position within rounding of one may fall either side in float32 (q = 1/3 of 4 values:
    # 1.00000003 in float64, 1 in float32 on a GPU)
    axes = range(x.ndim) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    n = int(np.prod([x.shape[a] for a in axes]))
    pos = np.atleast_1d(np.asarray(q, np.float32).astype(np.float64)) * (n - 1)
    jump = 0.5 if method == "nearest" else 0.0
    frac = pos - np.floor(pos)
    assume(not np.any(np.minimum(np.abs(frac - jump), 1 - np.abs(frac - jump)) < 1e-4)
           or np.all(np.abs(pos - np.round(pos)) == 0))
  got = jnp.quantile(x, np.asarray(q, np.float32), axis=axis, method=method,
                     keepdims=keepdims)
  ref = np.quantile(x.astype(np.float64), np.asarray(q, np.float32).astype(np.float64),
                    axis=axis, method=method, keepdims=keepdims)
  check(got, ref.astype(F32), F32, rtol=1e-5, atol=1e-4)
  check(jnp.percentile(x, np.asarray(q, np.float32) * 100, axis=axis, method=method,
                       keepdims=keepdims), ref.astype(F32), F32, rtol=1e-4, atol=1e-3)


@given(data=st.data())
def test_median_and_nan_quantiles(data):
  x, axis = data.draw(array_and_axis([F32], lo=-20, hi=20, nan=True, min_dims=1, min_side=1),
                      label="xa")
  keepdims = data.draw(st.booleans(), label="keepdims")
  with _quiet():
    check(jnp.median(x, axis=axis, keepdims=keepdims),
          np.median(x, axis=axis, keepdims=keepdims).astype(F32), F32)
    check(jnp.nanmedian(x, axis=axis, keepdims=keepdims),
          np.nanmedian(x, axis=axis, keepdims=keepdims).astype(F32), F32)
    check(jnp.nanquantile(x, 0.3, axis=axis), np.nanquantile(x.astype(np.float64), 0.3,
                                                             axis=axis).astype(F32), F32,
          rtol=1e-5, atol=1e-4)
    check(jnp.nanpercentile(x, 30, axis=axis), np.nanpercentile(x.astype(np.float64), 30,
                                                                axis=axis).astype(F32), F32,
          rtol=1e-5, atol=1e-4)


def _dyadic_weights(data, shape):
  """Positive weights k/8 with small sums: exact in float32, so NumPy's float32 cumulative
  weights are ours bit for bit."""
  n = int(np.prod(shape, dtype=int))
  return np.array(data.draw(st.lists(st.integers(1, 16), min_size=n, max_size=n), label="w"),
                  np.float32).reshape(shape) / 8


@pytest.mark.parametrize("name", ["quantile", "nanquantile", "percentile", "nanpercentile"])
@given(data=st.data())
def test_weighted_quantile(name, data):
  """method='inverted_cdf' with weights shaped like ``a`` or like the reduced axis, against
  NumPy's in float32 (NaNs for the nan-variants); unweighted inverted_cdf too."""
  nan = name.startswith("nan")
  x = data.draw(array_of([F32], lo=-20, hi=20, nan=nan, min_dims=1, max_dims=3, min_side=1),
                label="x")
  axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)), label="axis")
  full = axis is None or data.draw(st.booleans(), label="full")
  w = _dyadic_weights(data, x.shape if full else (x.shape[axis],))
  keepdims = data.draw(st.booleans(), label="keepdims")
  q = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.4, 0.5, 0.77, 0.9, 1.0]),
                                  min_size=1, max_size=3), label="q"), np.float32)
  if name.endswith("percentile"):
    q = q * np.float32(100)
  kw = dict(axis=axis, method="inverted_cdf", keepdims=keepdims)
  with _quiet():
    wn = w if full or axis is None else np.broadcast_to(
        np.expand_dims(w, tuple(d for d in range(x.ndim) if d != axis % x.ndim)), x.shape)
    ref = getattr(np, name)(x, q, weights=wn, **kw)
    ref_u = getattr(np, name)(x, q, **kw)
  check(getattr(jnp, name)(x, q, weights=w, **kw), ref.astype(F32), F32)
  check(getattr(jnp, name)(x, q, **kw), ref_u.astype(F32), F32)


def test_weighted_quantile_like_jax():
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[..., ::-1] % 7
  w = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
  q = np.array([0.2, 0.7], np.float32)
  # weights over a tuple of axes, in the order the axes are named
  xs = np.moveaxis(x, 1, 0).reshape(3, 8)
  ref = np.quantile(xs, q, axis=1, weights=np.broadcast_to(w.reshape(8), (3, 8)),
                    method="inverted_cdf")
  check(jnp.quantile(x, q, axis=(0, 2), weights=w, method="inverted_cdf"), ref)
  check(jnp.quantile(x, q, axis=(2, 0), weights=w.T, method="inverted_cdf"), ref)
  check(ourjax.jit(lambda a, v: jnp.quantile(a, q, axis=(0, 2), weights=v,
                                             method="inverted_cdf"))(x, w), ref)
  # int data and weights give the default float
  check(jnp.quantile(np.arange(5), 0.5, weights=np.arange(5), method="inverted_cdf"),
        np.float32(3))
  # a negative or NaN weight gives NaN (NumPy raises; JAX cannot look at traced weights)
  check(jnp.quantile(np.ones(3), 0.5, weights=np.array([1.0, -1.0, 1.0]),
                     method="inverted_cdf"), np.float32(np.nan))
  check(jnp.nanquantile(np.ones(3), 0.5, weights=np.array([1.0, np.nan, 1.0]),
                        method="inverted_cdf"), np.float32(np.nan))
  with pytest.raises(NotImplementedError, match="Only method 'inverted_cdf' supports weights"):
    jnp.quantile(x, 0.5, axis=0, weights=np.ones(2), method="linear")
  with pytest.raises(ValueError, match="must match 'a' shape when axis is None"):
    jnp.quantile(x, 0.5, weights=w, method="inverted_cdf")
  with pytest.raises(ValueError, match=r"Weights shape \(4, 2\) must match reduction axes "
                                       r"\(2, 4\)"):
    jnp.quantile(x, 0.5, axis=(0, 2), weights=w.T, method="inverted_cdf")
  with pytest.raises(ValueError, match="complex"):
    jnp.quantile(x, 0.5, axis=0, weights=np.ones(2, np.complex64), method="inverted_cdf")
  with pytest.raises(ValueError, match="method can only be"):
    jnp.quantile(x, 0.5, weights=x, method="hazen")


def test_quantile_errors_and_traced_q():
  with pytest.raises(ValueError, match="method"):
    jnp.quantile(np.ones(3), 0.5, method="bogus")
  f = ourjax.jit(lambda q: jnp.quantile(jnp.arange(10.0), q))
  check(f(np.float32(0.25)), np.float32(2.25))
  check(jnp.median(np.arange(4)), np.float32(1.5))


@given(data=st.data())
def test_average(data):
  x = data.draw(array_of([F32, np.dtype(np.int32)], lo=-10, hi=10, min_dims=1, min_side=1),
                label="x")
  axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)), label="axis")
  returned = data.draw(st.booleans(), label="returned")
  if axis is None:
    w = data.draw(arrays(np.float32, x.shape, 0.5, 2), label="w")
  else:
    w = data.draw(arrays(np.float32, (x.shape[axis],), 0.5, 2), label="w")
  got = jnp.average(x, axis=axis, weights=w, returned=returned)
  ref = np.average(x, axis=axis, weights=w, returned=returned)
  if returned:
    check(got[0], np.asarray(ref[0]).astype(F32), F32, rtol=1e-5, atol=1e-5)
    check(got[1], np.asarray(ref[1]).astype(F32), F32, rtol=1e-5)
  else:
    check(got, np.asarray(ref).astype(F32), F32, rtol=1e-5, atol=1e-5)
  check(jnp.average(x, axis=axis), np.average(x, axis=axis).astype(F32), F32, rtol=1e-5,
        atol=1e-5)


def test_average_errors():
  with pytest.raises(ValueError, match="Axis must be specified"):
    jnp.average(np.ones((2, 3)), weights=np.ones(3))
  with pytest.raises(ValueError, match="Shape of weights must be consistent"):   # NumPy's
    jnp.average(np.ones((2, 3)), axis=1, weights=np.ones(2))


@pytest.mark.parametrize("shape,axis", [((2, 3, 4), (1, 2)), ((2, 3, 4), (2, 0)),
                                        ((2, 3, 4), (2, 1, 0)), ((2, 3, 4, 5), (3, 0, 2, 1)),
                                        ((2, 3, 4), -1)])
def test_average_nd_weights(shape, axis):
  # weights shaped like a along ``axis``, in the order given (NumPy 2's rule)
  rng = np.random.default_rng(0)
  axes = axis if isinstance(axis, tuple) else (axis,)
  x = rng.random(shape).astype(F32)
  w = rng.random(tuple(shape[a] for a in axes)).astype(F32)
  want = np.average(x.astype(np.float64), axis, w.astype(np.float64))
  np.testing.assert_allclose(np.asarray(jnp.average(x, axis, w)), want, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(ourjax.jit(lambda x, w: jnp.average(x, axis, w))(x, w)),
                             want, rtol=1e-5)


@given(xa=array_and_axis(ALL, lo=-2, hi=2, nan=True), keepdims=st.booleans())
def test_count_nonzero_ptp(xa, keepdims):
  x, axis = xa
  check(jnp.count_nonzero(x, axis=axis, keepdims=keepdims),
        np.asarray(np.count_nonzero(x.astype(np.float32) if x.dtype == bf16 else x, axis=axis,
                                    keepdims=keepdims)).astype(np.int32), I32)
  empty = any(x.shape[a] == 0 for a in (range(x.ndim) if axis is None else
                                         (axis if isinstance(axis, tuple) else (axis,))))
  if x.dtype != np.bool_ and not empty:
    ref = np_ref(lambda v: np.ptp(v, axis=axis, keepdims=keepdims), x, out=x.dtype)
    check(jnp.ptp(x, axis=axis, keepdims=keepdims), ref, x.dtype)


def test_axis_errors():
  x = np.ones((2, 3))
  for fn in (jnp.sum, jnp.max, jnp.mean, jnp.var, jnp.argmax, jnp.cumsum, jnp.median):
    with pytest.raises(ValueError, match=r"axis 2|axis -3"):
      fn(x, axis=2 if fn is not jnp.median else -3)
  with pytest.raises(ValueError, match="duplicate"):
    jnp.sum(x, axis=(0, -2))
  with pytest.raises(ourjax.errors.ConcretizationTypeError):
    ourjax.jit(lambda a, ax: jnp.sum(a, axis=ax))(x, 0)
  with pytest.raises(NotImplementedError, match="out"):
    jnp.sum(x, out=np.zeros(()))


def test_reductions_under_transformations():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  f = ourjax.jit(lambda v: (jnp.mean(v, axis=0), jnp.std(v), jnp.argmax(v, axis=1),
                            jnp.cumsum(v, axis=1), jnp.median(v, axis=0)))
  m, s, am, cs, md = f(x)
  check(m, x.mean(0))
  check(s, np.float32(x.std()), rtol=1e-6)
  check(am, np.argmax(x, 1).astype(np.int32))
  check(cs, np.cumsum(x, 1))
  check(md, np.median(x, 0).astype(np.float32))
  check(ourjax.vmap(jnp.sum)(x), x.sum(1))
  check(ourjax.grad(lambda v: jnp.var(v))(x[0]), (2 * (x[0] - x[0].mean()) / 4))
  check(ourjax.grad(lambda v: jnp.sum(jnp.cumprod(v)))(np.float32([1, 2, 3])),
        np.float32([1 + 2 + 6, 1 + 3, 2]))


@pytest.mark.parametrize("name", ["var", "std", "nanvar", "nanstd"])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("ddof", [0, 1])
def test_var_with_given_mean(name, keepdims, ddof):
  rng = np.random.default_rng(0)
  x = rng.random((5, 4, 3)).astype(F32)
  x[0, 0, 0] = np.nan if name.startswith("nan") else x[0, 0, 0]
  m = rng.random((5, 1, 1)).astype(F32)          # not x's mean: it is used as given
  want = getattr(np, name)(x.astype(np.float64), axis=(1, -1), ddof=ddof, keepdims=keepdims,
                           mean=m.astype(np.float64))
  f = lambda x, m: getattr(jnp, name)(x, axis=(1, -1), ddof=ddof, keepdims=keepdims, mean=m)
  np.testing.assert_allclose(np.asarray(f(x, m)), want, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(ourjax.jit(f)(x, m)), want, rtol=1e-5)


def test_cov_corrcoef_dtype():
  x = np.arange(5.0)
  c = jnp.cov(jnp.arange(5), dtype="bfloat16")
  assert c.dtype == jnp.bfloat16 and float(c) == np.cov(x)
  c = jnp.corrcoef(jnp.arange(5), jnp.arange(5)[::-1], dtype="float16")
  assert c.dtype == np.float16
  np.testing.assert_allclose(np.asarray(c, np.float64), np.corrcoef(x, x[::-1]), atol=1e-3)
  with pytest.raises(ValueError, match="cov: dtype must be a subclass of float or complex"):
    jnp.cov(jnp.arange(5), dtype=int)
  with pytest.raises(ValueError, match="corrcoef: dtype must be a subclass of float or complex"):
    jnp.corrcoef(jnp.arange(5), dtype=int)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint32, np.int32])
def test_argsort_dtype(dtype):
  x = np.random.default_rng(1).random(10).astype(F32)
  got = jnp.argsort(x, dtype=dtype)
  assert got.dtype == dtype
  np.testing.assert_array_equal(np.asarray(got), np.argsort(x, kind="stable"))
  got = jnp.argsort(x, dtype=dtype, descending=True)
  np.testing.assert_array_equal(np.asarray(got), np.argsort(-x, kind="stable"))


# ------------------------------------------------------------------------------------------------
# where= must be boolean; each reduction names itself


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "var", "std", "nansum", "nanprod",
                                  "nanmean", "nanvar", "nanstd", "nanmax", "nanmin", "all", "any"])
def test_non_boolean_where_is_refused_under_the_reductions_own_name(name):
  x = jnp.zeros((10,), np.float32)
  kw = {"initial": 0.0} if name in ("nanmax", "nanmin") else {}
  with pytest.raises(ValueError, match=rf"jnp\.{name}: where must be None or a boolean array"):
    getattr(jnp, name)(x, where=jnp.ones(10, dtype=int), **kw)


def test_logsumexp_refuses_a_non_boolean_where():
  from ourjax.scipy.special import logsumexp
  with pytest.raises(ValueError, match="logsumexp: where must be None or a boolean"):
    logsumexp(jnp.zeros(3), where=jnp.ones(3, int))


@pytest.mark.parametrize("name", ["mean", "var", "std", "nanmean", "nanvar", "nanstd"])
def test_boolean_where_masks_as_numpy(name):
  rng = np.random.RandomState(0)
  x = rng.randn(4, 5)
  w = rng.rand(4, 5) > 0.3
  np.testing.assert_allclose(getattr(jnp, name)(x.astype(np.float32), axis=1, where=w),
                             getattr(np, name)(x, axis=1, where=w), rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# cov


def _cov_cases():
  rng = np.random.RandomState(1)
  yield rng.rand(5) > 0.5, None, True, None, False, None, rng.rand(5) > 0.2       # bool data
  yield ((rng.rand(10, 5) * 9).astype(np.uint8), (rng.rand(5, 5) * 9).astype(np.uint8), True,
         2, True, rng.randint(1, 4, 5), rng.rand(5) + 0.5)
  yield rng.randn(5, 10), rng.randn(5, 10), False, 3, False, rng.randint(1, 4, 5), None
  yield rng.randn(1, 3), None, False, 0, False, None, None     # NumPy >= 2.2: always transposed
  yield rng.randn(3, 1), None, False, 0, False, None, None
  yield rng.randn(4, 6) + 1j * rng.randn(4, 6), None, True, None, False, None, rng.rand(6)


@pytest.mark.parametrize("case", list(_cov_cases()), ids=lambda c: str(np.shape(c[0])))
def test_cov_matches_numpy(case):
  m, y, rowvar, ddof, bias, fw, aw = case
  expect = np.cov(m, y, rowvar=rowvar, ddof=ddof, bias=bias, fweights=fw, aweights=aw)
  f = lambda m, y, fw, aw: jnp.cov(m, y, rowvar=rowvar, ddof=ddof, bias=bias, fweights=fw,
                                   aweights=aw)
  for fn in (f, ourjax.jit(f)):
    out = fn(m, y, fw, aw)
    assert out.shape == expect.shape
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-4)


def test_cov_of_no_observations_is_nan_and_of_no_variables_empty():
  assert np.isnan(jnp.cov(jnp.zeros((3, 0)))).all() and jnp.cov(jnp.zeros((3, 0))).shape == (3, 3)
  assert jnp.cov(jnp.zeros((0, 5))).shape == (0, 0)
  with pytest.raises(TypeError, match="fweights must be integer"):
    jnp.cov(jnp.ones((2, 3)), fweights=jnp.ones(3))
  with pytest.raises(RuntimeError, match="incompatible numbers of samples and aweights"):
    jnp.cov(jnp.ones((2, 3)), aweights=jnp.ones(4))


@pytest.mark.parametrize("name", ["argmax", "argmin", "nanargmax", "cumsum", "cumprod",
                                  "nancumsum", "cumulative_sum", "cumulative_prod"])
def test_single_axis_reductions_refuse_a_tuple_of_axes(name):
  with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
    getattr(jnp, name)(jnp.ones((3, 4)), axis=(0, 1))


def test_cumulative_prod_keeps_small_integers_and_cumulative_sum_widens_them():
  x = np.arange(1, 5, dtype=np.int8)
  assert jnp.cumulative_prod(x).dtype == np.int8
  assert jnp.cumulative_sum(x).dtype == jnp.int32
  np.testing.assert_array_equal(jnp.cumulative_prod(x), np.cumprod(x))


def test_var_with_an_integer_dtype_divides_as_integers():
  x = np.arange(12).reshape(3, 4).astype(np.int8)
  # JAX: computed in int32 (integer mean and division), NaN-guarded into a weak float
  out = jnp.var(x, axis=0, dtype=np.int32)
  c = x.astype(np.int32) - x.astype(np.int32).sum(0) // 3
  np.testing.assert_array_equal(out, (c * c).sum(0) // 3)
  assert out.dtype == np.float32 and out.weak_type
  assert np.isnan(float(jnp.var(x, dtype=np.int32, ddof=12)))
  assert jnp.nanvar(x, dtype=np.int32).dtype == np.int32
  assert int(jnp.nanvar(x, dtype=np.int32, ddof=12)) == 0


@pytest.mark.parametrize("name", ["sum", "mean", "max", "var", "std", "argmax", "argmin", "prod",
                                  "nanmean", "any"])
@pytest.mark.parametrize("axis", [2, -3, (0, 2)])
def test_out_of_range_axis_is_value_and_index_error(name, axis):
  # JAX raises ValueError for some reductions (sum, max) and IndexError for others (mean, var,
  # argmax: "tuple index out of range"); NumPy's AxisError is both
  if name in ("argmax", "argmin") and isinstance(axis, tuple):
    return
  x = np.ones((3, 4), np.float32)
  with pytest.raises(ValueError, match="out of bounds"):
    getattr(jnp, name)(x, axis=axis)
  with pytest.raises(IndexError):
    getattr(jnp, name)(x, axis=axis)


def test_logsumexp_out_of_range_axis_raises():
  from ourjax import nn
  x = np.ones((3, 4), np.float32)
  for axis in (2, -3, (0, 5)):
    with pytest.raises(ValueError, match="out of bounds"):
      nn.logsumexp(x, axis=axis)
  np.testing.assert_allclose(np.asarray(nn.logsumexp(x, axis=(0, -1))), np.log(12) + 1, rtol=1e-6)


def test_single_element_reductions_return_the_element():
  # XLA makes a reduce of one element per result a reshape (its identity is not added): JAX's
  # sum / cumsum / mean of [-0.0] is -0.0, eager and jitted; longer sums start from +0
  z = np.array([-0.0], np.float32)
  z2 = np.array([[-0.0], [0.0]], np.float32)
  for f in (lambda a: a, ourjax.jit):
    for fn, arg in ((jnp.sum, z), (jnp.cumsum, z), (jnp.mean, z), (jnp.nansum, z)):
      r = np.asarray(f(fn)(arg))
      assert r.reshape(-1)[0] == 0 and np.signbit(r).all(), fn
    r = np.asarray(f(lambda a: jnp.sum(a, axis=1))(z2))
    np.testing.assert_array_equal(np.signbit(r), [True, False])
    r = np.asarray(f(jnp.cumsum)(np.array([-0.0, -0.0], np.float32)))
    assert not np.signbit(r).any()            # (0 + -0 + -0)
  h = np.array([[1.5]], np.float16)
  assert jnp.cumsum(h, axis=1).dtype == np.float16 and jnp.sum(h, axis=1).dtype == np.float16


@pytest.mark.parametrize("name", ["max", "min", "nanmax", "nanmin"])
@pytest.mark.parametrize("shape,axis", [((0, 4), 1), ((3, 0), 0), ((2, 0, 3), (0, 2))])
def test_complex_max_min_over_nonempty_axes_of_an_empty_array(name, shape, axis):
  # the reduced axes are non-empty, a kept one is empty: the result is empty (NumPy, JAX)
  x = np.zeros(shape, np.complex64)
  for keepdims in (False, True):
    want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
    f = lambda a: getattr(jnp, name)(a, axis=axis, keepdims=keepdims)
    for fn in (f, ourjax.jit(f)):
      out = fn(x)
      assert out.shape == want.shape and out.dtype == np.complex64
