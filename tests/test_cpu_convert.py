"""Float to integer conversion on the CPU: truncation toward zero, saturation at the integer
type's bounds and NaN to 0 (XLA's and JAX's), for every float source and integer target, at
the edges of each range (the vectorized form clamps in the float type, see
``emitter._float_to_int_saturating``), against a float64 NumPy reference."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def _reference(x64, dt):
  info = np.iinfo(dt)
  out = []
  for v in x64:
    if np.isnan(v):
      out.append(0)
    elif v >= float(info.max) + 1:
      out.append(info.max)
    elif v <= float(info.min):
      out.append(info.min)
    else:
      out.append(int(np.trunc(v)))
  return np.array(out, dt)


def _edges(dt):
  """Values around each bound of ``dt`` (and of the other integer types), specials."""
  out = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 3.3, -7.7, 1e30, -1e30]
  for t in INTS:
    info = np.iinfo(t)
    for bound in (float(info.min), float(info.max) + 1):
      out += [bound, np.nextafter(bound, 0), np.nextafter(bound, np.inf),
              np.nextafter(bound, -np.inf), bound - 0.5, bound + 0.5]
  return np.array(out, np.float64)


@pytest.fixture(autouse=True)
def _x64():
  with ourjax.experimental.enable_x64():
    yield


@pytest.mark.parametrize("src", FLOATS, ids=lambda t: np.dtype(t).name)
def test_float_to_int_edges(src):
  x = np.tile(_edges(src), 7).astype(src)          # (several vectors and a tail)
  for dt in INTS:
    got = np.asarray(ourjax.jit(lambda a: a.astype(dt), backend="cpu")(x))
    np.testing.assert_array_equal(got, _reference(x.astype(np.float64), dt),
                                  err_msg=f"{np.dtype(src).name} -> {np.dtype(dt).name}")


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(FLOATS), st.sampled_from(INTS), st.integers(1, 300), st.data())
def test_float_to_int_random(src, dt, n, data):
  scale = data.draw(st.sampled_from([1.0, 200.0, 7e4, 5e9, 3e19]))
  x = (np.random.default_rng(n).standard_normal(n) * scale).astype(src)
  got = np.asarray(ourjax.jit(lambda a: a.astype(dt), backend="cpu")(x))
  np.testing.assert_array_equal(got, _reference(x.astype(np.float64), dt))
