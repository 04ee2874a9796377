"""Strategies and comparison helpers shared by the tests/test_numpy_*.py files (no tests here).

Arrays are drawn as NumPy arrays of a drawn dtype and shape; ``check`` compares an ourjax result
with a NumPy reference: the dtype exactly (JAX's rules, given by the test), the shape exactly,
the values to a tolerance that depends on the dtype."""
import warnings

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

bf16 = np.dtype(ml_dtypes.bfloat16)
BOOL = [np.dtype(np.bool_)]
SIGNED = [np.dtype(t) for t in (np.int8, np.int16, np.int32)]
UNSIGNED = [np.dtype(t) for t in (np.uint8, np.uint32)]
INTS = SIGNED + UNSIGNED
FLOATS = [np.dtype(np.float16), bf16, np.dtype(np.float32)]
NUMERIC = INTS + FLOATS
ALL = BOOL + NUMERIC
X64_FLOATS = [np.dtype(np.float64)]
X64_INTS = [np.dtype(np.int64), np.dtype(np.uint64)]


def tol(dt):
  dt = np.dtype(dt)
  if dt == bf16:
    return 2e-2
  if dt == np.float16:
    return 2e-3
  if dt == np.float32 or dt == np.complex64:
    return 2e-5
  if dt == np.float64:
    return 1e-12
  return 0


def shapes(min_dims=0, max_dims=3, min_side=0, max_side=4):
  return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                          max_side=max_side)


def _elements(dt, lo=None, hi=None, nan=False, inf=False):
  dt = np.dtype(dt)
  if dt == np.bool_:
    return st.booleans()
  if dt.kind in "iu":
    info = np.iinfo(dt)
    lo_ = info.min if lo is None else max(info.min, int(lo))
    hi_ = info.max if hi is None else min(info.max, int(hi))
    return st.integers(lo_, hi_)
  width = 64 if dt == np.float64 else 32
  lo_ = -1e4 if lo is None else lo
  hi_ = 1e4 if hi is None else hi
  if width == 32:   # bounds representable in float32, rounded inwards
    f32 = np.float32
    lo_ = f32(lo_) if f32(lo_) >= lo_ else np.nextafter(f32(lo_), f32(np.inf))
    hi_ = f32(hi_) if f32(hi_) <= hi_ else np.nextafter(f32(hi_), f32(-np.inf))
    lo_, hi_ = float(lo_), float(hi_)
  base = st.floats(lo_, hi_, width=width, allow_nan=False, allow_infinity=False,
                   allow_subnormal=False)
  extra = []
  if nan:
    extra.append(st.just(float("nan")))
  if inf:
    extra += [st.just(float("inf")), st.just(float("-inf"))]
  return st.one_of(base, *extra) if extra else base


def arrays(dt, shape, lo=None, hi=None, nan=False, inf=False):
  """A NumPy array of ``dt`` (float16/bfloat16 values are drawn as float32 and rounded)."""
  dt = np.dtype(dt)
  if dt in (bf16, np.dtype(np.float16)):   # drawn as float32 and rounded
    return hnp.arrays(np.float32, shape, elements=_elements(np.float32, lo, hi, nan, inf)).map(
        lambda a: a.astype(dt))
  return hnp.arrays(dt, shape, elements=_elements(dt, lo, hi, nan, inf))


@st.composite
def array_of(draw, dtypes, shape=None, lo=None, hi=None, nan=False, inf=False, **shape_kw):
  dt = draw(st.sampled_from(dtypes))
  shp = draw(shapes(**shape_kw)) if shape is None else shape
  return draw(arrays(dt, shp, lo, hi, nan, inf))


@st.composite
def broadcastable_pair(draw, dt1, dt2, lo=None, hi=None, nan=False, inf=False, max_dims=3):
  """Two arrays whose shapes broadcast together (with size-1 and missing axes)."""
  s1, s2 = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=max_dims,
                                                  max_side=4)).input_shapes
  return (draw(arrays(dt1, s1, lo, hi, nan, inf)), draw(arrays(dt2, s2, lo, hi, nan, inf)))


def check(got, expected, dtype=None, rtol=None, atol=None, weak=None):
  """``got`` (an ourjax value) matches ``expected`` (NumPy): shape, dtype (``dtype`` or the
  expected array's), weak type if given, and values (NaN where NaN)."""
  from ourjax.array import Array
  assert isinstance(got, Array), f"expected an ourjax Array, got {type(got).__name__}"
  g = np.asarray(got)
  e = np.asarray(expected)
  dt = np.dtype(dtype) if dtype is not None else e.dtype
  assert g.dtype == dt, f"dtype {g.dtype} != expected {dt}"
  assert g.shape == e.shape, f"shape {g.shape} != expected {e.shape}"
  if weak is not None:
    assert got.weak_type == weak, f"weak_type {got.weak_type} != expected {weak}"
  if dt.kind in "biu":
    np.testing.assert_array_equal(g, e.astype(dt) if e.dtype != dt else e)
    return
  r = tol(dt) if rtol is None else rtol
  a = r if atol is None else atol
  gf = g.astype(np.complex128 if dt.kind == "c" else np.float64)
  ef = e.astype(np.complex128 if dt.kind == "c" else np.float64)
  np.testing.assert_allclose(gf, ef, rtol=r, atol=a, equal_nan=True)


def np_ref(fn, *xs, compute=None, out=None):
  """``fn`` on NumPy copies of ``xs`` in ``compute`` dtype (default: float32 for the narrow
  floats), the result cast to ``out``."""
  args = []
  for x in xs:
    x = np.asarray(x)
    if compute is not None and x.dtype != np.bool_:
      x = x.astype(compute)
    elif x.dtype in (bf16, np.dtype(np.float16)) and compute is None:
      x = x.astype(np.float32)
    args.append(x)
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    r = fn(*args)
    if out is not None:
      if isinstance(r, tuple):
        return tuple(np.asarray(v).astype(out) for v in r)
      r = np.asarray(r).astype(out)
  return r
