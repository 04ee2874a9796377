"""ourjax.numpy.fft against numpy.fft in float64 (hypothesis shapes, axes, lengths, norms;
JAX's result dtypes), gradients of real-valued losses through the transforms against central
finite differences (x64), jit and vmap against eager, lax.fft's errors."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.config import enable_x64

ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
N_D = ["fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2"]
REAL_IN = {"rfft", "ihfft", "rfftn", "rfft2"}
REAL_OUT = {"irfft", "hfft", "irfftn", "irfft2"}


def _input(rng, shape, name, dtype):
  if name in REAL_IN or dtype != "complex64":
    x = rng.standard_normal(shape)
    return x.astype(np.int32 if dtype == "int32" else np.float32) if dtype != "complex64" \
        else x.astype(np.float32)
  return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _check(got, want, real_out):
  assert got.dtype == (np.float32 if real_out else np.complex64), got.dtype
  assert got.shape == want.shape, (got.shape, want.shape)
  scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
  np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=2e-5 * scale)


@settings(max_examples=40)
@given(st.sampled_from(ONE_D), st.lists(st.integers(1, 6), min_size=1, max_size=3),
       st.sampled_from(["float32", "complex64", "int32"]), st.data())
def test_one_dimensional_against_numpy(name, shape, dtype, data):
  axis = data.draw(st.integers(-len(shape), len(shape) - 1))
  n = data.draw(st.one_of(st.none(), st.integers(1, 8)))
  if name in ("irfft", "hfft") and n is None and shape[axis] == 1:
    n = 2   # (NumPy rejects the default n = 0)
  norm = data.draw(st.sampled_from([None, "backward", "ortho", "forward"]))
  x = _input(np.random.default_rng(data.draw(st.integers(0, 2 ** 31))), shape, name, dtype)
  got = getattr(jnp.fft, name)(x, n=n, axis=axis, norm=norm)
  want = getattr(np.fft, name)(x.astype(np.complex128 if x.dtype == np.complex64
                                        else np.float64), n=n, axis=axis, norm=norm)
  _check(got, want, name in REAL_OUT)


@settings(max_examples=40)
@given(st.sampled_from(N_D), st.lists(st.integers(1, 5), min_size=1, max_size=4),
       st.sampled_from(["float32", "complex64"]), st.data())
def test_n_dimensional_against_numpy(name, shape, dtype, data):
  ndim = len(shape)
  if name.endswith("2"):
    if ndim < 2:
      shape, ndim = shape + [3], ndim + 1
    axes = tuple(data.draw(st.permutations(range(-ndim, 0)))[:2])
  else:
    axes = data.draw(st.one_of(st.none(), st.lists(st.integers(0, ndim - 1), min_size=1,
                                                   max_size=ndim, unique=True)))
  k = ndim if axes is None else len(axes)
  s = data.draw(st.one_of(st.none(), st.lists(st.integers(1, 6), min_size=k, max_size=k)))
  if name.startswith("irfft") and s is None:
    last = shape[(axes or [ndim - 1])[-1]]
    if last == 1:
      s = [shape[a] for a in (axes or range(ndim))][:-1] + [2]
  norm = data.draw(st.sampled_from([None, "ortho", "forward"]))
  x = _input(np.random.default_rng(data.draw(st.integers(0, 2 ** 31))), tuple(shape), name,
             dtype)
  kw = {} if (name.endswith("2") and axes == (-2, -1)) else {"axes": axes}
  got = getattr(jnp.fft, name)(x, s=s, norm=norm, **kw)
  if s is not None and axes is None:   # (the last len(s) axes, which NumPy wants spelled out)
    kw = {"axes": tuple(range(ndim - len(s), ndim))}
  want = getattr(np.fft, name)(x.astype(np.complex128 if x.dtype == np.complex64
                                        else np.float64), s=s, norm=norm, **kw)
  _check(got, want, name.startswith("irfft"))


def test_frequencies_and_shifts():
  for n in range(1, 8):
    for d in (1.0, 0.5, 3):
      np.testing.assert_allclose(np.asarray(jnp.fft.fftfreq(n, d)), np.fft.fftfreq(n, d),
                                 rtol=1e-6)
      np.testing.assert_allclose(np.asarray(jnp.fft.rfftfreq(n, d)), np.fft.rfftfreq(n, d),
                                 rtol=1e-6)
  assert jnp.fft.fftfreq(4).dtype == np.float32
  assert jnp.fft.fftfreq(4, dtype=jnp.float16).dtype == np.float16
  assert jnp.fft.rfftfreq(5, dtype=jnp.int32).dtype == np.float32   # (as JAX's)
  x = np.arange(30.0).reshape(5, 6)
  for axes in (None, 0, 1, (0,), (1, 0)):
    np.testing.assert_array_equal(np.asarray(jnp.fft.fftshift(x, axes)),
                                  np.fft.fftshift(x, axes))
    np.testing.assert_array_equal(np.asarray(jnp.fft.ifftshift(x, axes)),
                                  np.fft.ifftshift(x, axes))


def test_result_dtypes_follow_jax():
  assert jnp.fft.fft(np.arange(4)).dtype == np.complex64
  assert jnp.fft.fft(np.ones(4, np.float16)).dtype == np.complex64
  assert jnp.fft.irfft(np.ones(3, np.complex64)).dtype == np.float32
  assert not jnp.fft.fft(lax.broadcast_in_dim(2.0, (3,), ())).weak_type
  with enable_x64(True):
    assert jnp.fft.fft(np.ones(3)).dtype == np.complex128
    assert jnp.fft.rfft(np.ones(3)).dtype == np.complex128
    assert jnp.fft.fft(np.ones(3, np.float32)).dtype == np.complex64
    assert jnp.fft.irfft(np.ones(3, np.complex128)).dtype == np.float64
    np.testing.assert_allclose(np.asarray(jnp.fft.fft(np.arange(5.0))), np.fft.fft(np.arange(5.0)),
                               rtol=1e-13, atol=1e-13)


# ------------------------------------------------------------------------------------------------
# Gradients of real-valued losses (float64) against central finite differences


_LOSSES = {
    "fft": lambda x: jnp.sum(jnp.abs(jnp.fft.fft(x * jnp.arange(1.0, x.shape[-1] + 1))) ** 2),
    "ifft_ortho": lambda x: jnp.sum(jnp.real(jnp.fft.ifft(x + 1j * x[::-1], norm="ortho"))
                                    * jnp.arange(x.shape[-1])),
    "rfft": lambda x: jnp.sum(jnp.abs(jnp.fft.rfft(x))),
    "rfft_n": lambda x: jnp.sum(jnp.imag(jnp.fft.rfft(x, n=7)) ** 3),
    "irfft": lambda x: jnp.sum(jnp.fft.irfft(x * (1 + 2j)) * jnp.arange(2 * x.shape[-1] - 2)),
    "irfft_odd": lambda x: jnp.sum(jnp.fft.irfft(x * (1 - 0.5j), n=2 * x.shape[-1] - 1) ** 2),
    "hfft": lambda x: jnp.sum(jnp.fft.hfft(x * 1j + x ** 2) ** 2),
    "ihfft": lambda x: jnp.sum(jnp.abs(jnp.fft.ihfft(x, norm="forward"))),
    "fft2": lambda x: jnp.sum(jnp.real(jnp.fft.fft2(jnp.reshape(x, (2, -1)))) ** 2),
    "rfftn": lambda x: jnp.sum(jnp.abs(jnp.fft.rfftn(jnp.reshape(x, (2, -1)))) ** 2),
    "irfft2": lambda x: jnp.sum(jnp.fft.irfft2(jnp.reshape(x, (2, -1)) * 1j) ** 3),
}


@pytest.mark.usefixtures("x64")
@settings(max_examples=5)
@given(st.sampled_from(sorted(_LOSSES)), st.integers(0, 2 ** 31))
def test_gradients_against_finite_differences(name, seed):
  f = _LOSSES[name]
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(6)
  g = np.asarray(ourjax.grad(f)(x))
  assert g.dtype == np.float64
  eps = 1e-6
  for v in (np.eye(6)[rng.integers(6)], rng.standard_normal(6)):
    fd = (float(f(x + eps * v)) - float(f(x - eps * v))) / (2 * eps)
    np.testing.assert_allclose(np.dot(g, v), fd, rtol=1e-6, atol=1e-6)
  _, tan = ourjax.jvp(f, (x,), (v,))
  np.testing.assert_allclose(float(tan), np.dot(g, v), rtol=1e-9, atol=1e-9)


def test_gradient_values_match_jax():
  """A few gradients taken from JAX 0.10.2 (float32)."""
  x = np.array([1.0, 2.0, 0.5, -1.0, 3.0], np.float32)
  np.testing.assert_allclose(
      np.asarray(ourjax.grad(lambda x: jnp.real(jnp.fft.fft(x) * jnp.arange(5)).sum())(x)),
      [10.0, -2.5, -2.5, -2.5, -2.5], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(
      np.asarray(ourjax.grad(lambda x: (jnp.fft.irfft(x * (1 + 2j)) * jnp.arange(8)).sum())(x)),
      [3.5, 3.8284, 1.0, -0.1716, -0.5], atol=1e-4)
  np.testing.assert_allclose(
      np.asarray(ourjax.grad(lambda x: jnp.abs(jnp.fft.rfft(x)).sum())(x)),
      [1.1535, 1.658, 0.4226, -0.5632, 2.3291], atol=1e-4)


# ------------------------------------------------------------------------------------------------
# jit and vmap


@pytest.mark.parametrize("name", ONE_D + N_D)
def test_jit_matches_eager(name):
  rng = np.random.default_rng(0)
  x = _input(rng, (3, 4), name, "complex64")
  f = getattr(jnp.fft, name)
  np.testing.assert_allclose(np.asarray(ourjax.jit(f)(x)), np.asarray(f(x)), rtol=1e-6,
                             atol=1e-6)


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fftn", "irfft2"])
@pytest.mark.parametrize("axis", [0, 1])
def test_vmap_against_loop(name, axis):
  xs = _input(np.random.default_rng(1), (3, 4, 5), name, "complex64")
  f = getattr(jnp.fft, name)
  got = ourjax.vmap(f, in_axes=axis)(xs)
  want = np.stack([np.asarray(f(np.take(xs, i, axis))) for i in range(xs.shape[axis])])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
  got = ourjax.jit(ourjax.vmap(f, in_axes=axis))(xs)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# Errors (JAX's types and messages)


def test_errors():
  x = np.ones((3, 4), np.float32)
  c = x.astype(np.complex64)
  cases = [
      (lambda: jnp.fft.fft(x, n=0), ValueError, "Shape should be positive"),
      (lambda: jnp.fft.fft(x, axis=(0, 1)), ValueError, "does not support multiple axes"),
      (lambda: jnp.fft.fft(x, norm="bad"), ValueError, "Invalid norm value bad"),
      (lambda: jnp.fft.rfft(c), ValueError, "only real valued inputs supported for rfft"),
      (lambda: jnp.fft.fftn(x, s=(2,), axes=(0, 1)), ValueError, "Shape and axes have"),
      (lambda: jnp.fft.fftn(x, axes=(0, 0)), ValueError, "does not support repeated axes"),
      (lambda: jnp.fft.fft2(x, axes=(0,)), ValueError, "only supports 2 axes"),
      (lambda: jnp.fft.fftfreq([4]), ValueError, "only takes an int"),
      (lambda: jnp.fft.fftfreq(4, [1.0]), ValueError, "only takes a single value"),
      (lambda: jnp.fft.fft([1.0, 2.0]), TypeError, "requires ndarray or scalar arguments"),
      (lambda: lax.fft(c, "fft", (5,)), ValueError, "minor dimensions must be equal"),
      (lambda: lax.fft(c, "fft", (1, 3, 4)), ValueError, "at least as many input dimensions"),
      (lambda: lax.fft(c, "foo", (4,)), ValueError, "Unknown FFT type 'foo'"),
      (lambda: lax.fft(c, 3.0, (4,)), TypeError, "Unknown FFT type value"),
      (lambda: lax.fft(x.astype(np.float16), "rfft", (4,)), ValueError,
       "RFFT input must be float32 or float64"),
      (lambda: lax.fft(c[:, :3], "irfft", (2, 4)), ValueError, "all except the last"),
  ]
  for fn, exc, match in cases:
    with pytest.raises(exc, match=match):
      fn()


def test_lax_fft_types_and_jaxpr():
  x = np.arange(5.0, dtype=np.float32)
  assert lax.FftType.RFFT == 2 and [t.name for t in lax.FftType] == ["FFT", "IFFT", "RFFT",
                                                                      "IRFFT"]
  np.testing.assert_allclose(np.asarray(lax.fft(x, lax.FftType.FFT, (5,))), np.fft.fft(x),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(lax.fft(x, "fft", ())), x.astype(np.complex64))
  assert "fft[fft_lengths=(5,) fft_type=2]" in str(
      ourjax.make_jaxpr(lambda x: lax.fft(x, "rfft", (5,)))(x))
