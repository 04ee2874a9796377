"""``jnp`` argument checks with JAX's exception types and words (the messages JAX's own tests
match), and the behaviours that came with them: interp's 'extrapolate', frombuffer and
fromstring."""
import re

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp


@pytest.mark.parametrize("f,err,msg", [
    (lambda: jnp.arange(1j), ValueError,
     "Passing complex start/stop/step to jnp.arange is no longer supported"),
    (lambda: jnp.arange(0, 2, 0.5j), ValueError,
     "Passing complex start/stop/step to jnp.arange is no longer supported"),
    (lambda: jnp.sum(jnp.zeros(10), where=jnp.ones(10, int)), ValueError,
     "jnp.sum: where must be None or a boolean array"),
    (lambda: jnp.max(jnp.zeros(10), where=jnp.ones(10, int), initial=0.), ValueError,
     "jnp.max: where must be None or a boolean array"),
    (lambda: jnp.hypot(jnp.ones(2, jnp.complex64), jnp.ones(2)), ValueError,
     "jnp.hypot is not well defined for complex-valued inputs"),
    (lambda: jnp.trace(jnp.ones((2, 3, 2)), axis1=1, axis2=-2), ValueError,
     "axis1 and axis2 can not be same"),
    (lambda: jnp.rot90(jnp.ones(2)), ValueError,
     "rot90 requires its first argument to have ndim at least two, but got first argument of"),
    (lambda: jnp.zeros(2, 3), TypeError,
     r"Did you accidentally write `jax\.numpy\.zeros\(2, 3\)` when you meant "
     r"`jax\.numpy\.zeros\(\(2, 3\)\)`"),
    (lambda: jnp.broadcast_to(jnp.zeros((3, 4, 5)), (4, 5)), ValueError,
     "Cannot broadcast to shape with fewer dimensions"),
    (lambda: jnp.interp(0.0, jnp.arange(2.0), jnp.arange(3.0)), ValueError,
     "xp and fp must be one-dimensional arrays of equal size"),
    (lambda: jnp.interp(0.0, jnp.arange(3.0), jnp.arange(3.0), left="interpolate"), ValueError,
     "the only valid string value of `left` is 'extrapolate', but got: 'interpolate'"),
    (lambda: jnp.tensordot(np.ones((3, 2, 2)), np.ones(2), axes=2), TypeError,
     "Number of tensordot axes.*exceeds input ranks"),
    (lambda: jnp.tensordot(np.ones((3, 2, 2)), np.ones(2), axes=("bad", "axes")), TypeError,
     "tensordot requires both axes lists to be either ints, tuples or lists"),
    (lambda: jnp.zeros((2, 3.0)), TypeError,
     "Shapes must be 1D sequences of concrete values of integer type"),
])
def test_errors(f, err, msg):
  with pytest.raises(err, match=msg):
    f()


def test_valid_neighbours_of_the_errors():
  assert jnp.arange(4, dtype=jnp.complex64).dtype == np.complex64
  assert float(jnp.sum(jnp.arange(4.0), where=np.array([True, False, True, False]))) == 2.0
  np.testing.assert_allclose(np.asarray(jnp.hypot(3.0, 4.0)), 5.0)
  np.testing.assert_array_equal(np.asarray(jnp.rot90(np.arange(4).reshape(2, 2))),
                                np.rot90(np.arange(4).reshape(2, 2)))


def test_interp_extrapolate():
  xp, fp = np.arange(3.0), np.array([0.0, 2.0, 3.0])
  x = np.array([-1.0, 0.5, 2.5, 5.0])
  got = jnp.interp(x, xp, fp, left="extrapolate", right="extrapolate")
  # the end segments' lines continued: slope 2 on the left, 1 on the right
  np.testing.assert_allclose(np.asarray(got), [-2.0, 1.0, 3.5, 6.0])
  got = ourjax.jit(lambda x: jnp.interp(x, xp, fp, left="extrapolate"))(x)
  np.testing.assert_allclose(np.asarray(got), [-2.0, 1.0, 3.0, 3.0])
  np.testing.assert_allclose(np.asarray(jnp.interp(x, xp, fp)), np.interp(x, xp, fp))


def test_frombuffer_fromstring():
  buf = b"\x01\x00\x00\x00\x02\x00\x00\x00"
  for kw in [dict(dtype="int32"), dict(dtype="uint8", count=3, offset=1), dict(dtype="uint8")]:
    got, want = jnp.frombuffer(buf, **kw), np.frombuffer(buf, **kw)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)
  assert jnp.frombuffer(b"\x00" * 8).dtype == np.float32       # float: the default float type
  got = jnp.fromstring("1,2,3", sep=",", dtype=int)
  np.testing.assert_array_equal(np.asarray(got), [1, 2, 3])
  assert got.dtype == np.int32
  assert re.match("float", str(jnp.fromstring("1 2.5", sep=" ").dtype))


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_logaddexp_complex(name):
  rng = np.random.default_rng(0)
  x1 = (rng.normal(size=50) * 3 + 1j * rng.normal(size=50) * 3).astype(np.complex64)
  x2 = (rng.normal(size=50) * 3 + 1j * rng.normal(size=50) * 3).astype(np.complex64)
  a, b = x1.astype(np.complex128), x2.astype(np.complex128)
  want = np.log(np.exp(a) + np.exp(b)) if name == "logaddexp" else np.log2(2 ** a + 2 ** b)
  f = getattr(jnp, name)
  for g in (f, ourjax.jit(f)):
    got = np.asarray(g(x1, x2))
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # the derivative (holomorphic): exp(x1) / (exp(x1) + exp(x2)) for logaddexp
  if name == "logaddexp":
    d = ourjax.grad(lambda z: f(z, x2[0]).real)(x1[0])
    w = np.exp(a[0]) / (np.exp(a[0]) + np.exp(b[0]))
    np.testing.assert_allclose(complex(d), w, rtol=1e-4)   # (JAX's convention for grad of Re f)


def test_bincount_clips_negative_values():
  x = np.array([-3, 2, -1, 0, 4], np.int32)
  w = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
  xc = np.clip(x, 0, None)                      # JAX's rule: negative values count in bin 0
  np.testing.assert_array_equal(np.asarray(jnp.bincount(x)), np.bincount(xc))
  np.testing.assert_allclose(np.asarray(jnp.bincount(x, w)), np.bincount(xc, w))
  got = ourjax.jit(lambda x: jnp.bincount(x, length=6))(x)
  np.testing.assert_array_equal(np.asarray(got), np.bincount(xc, minlength=6))


def test_size_along_axes():
  a = jnp.zeros((2, 3, 4))
  assert jnp.size(a, (0, 2)) == 8 and jnp.size(a, ()) == 1 and jnp.size(a, -1) == 4
  with pytest.raises(ValueError, match="repeated axis"):
    jnp.size(a, (1, -2))


def test_cumulative_sum_to_bool_and_astype():
  x = np.array([[0.1], [0.1], [0.0]])
  got = jnp.cumulative_sum(x, axis=-1, dtype=jnp.bool_)
  np.testing.assert_array_equal(np.asarray(got), np.cumulative_sum(x, axis=-1, dtype=np.bool_))
  np.testing.assert_array_equal(np.asarray(jnp.cumsum(np.array([0.0, 0.5, 0.0]), dtype=bool)),
                                np.cumsum(np.array([0.0, 0.5, 0.0]), dtype=bool))
  assert jnp.astype(jnp.ones(2, jnp.int32), None).dtype == np.float32   # the default float
  with pytest.warns(DeprecationWarning, match="Casting from complex to real dtypes"):
    out = jnp.ones(2, jnp.complex64).astype(jnp.float32)
  np.testing.assert_array_equal(np.asarray(out), [1.0, 1.0])


def test_frexp_derivative_round_complex_unravel_dtype():
  x = np.array([3.0, -0.1, 0.0, 7e30, 1.0, 1e-3], np.float32)
  m, e = jnp.frexp(x)
  mr, er = np.frexp(x)
  np.testing.assert_array_equal(np.asarray(m), mr)
  np.testing.assert_array_equal(np.asarray(e), er)
  g = ourjax.vmap(ourjax.grad(lambda v: jnp.frexp(v)[0]))(x)
  np.testing.assert_allclose(np.asarray(g), 2.0 ** -er.astype(np.float64), rtol=1e-7)
  z = np.array([1.26 + 2.71j, -0.55 - 1.45j, 2.5 + 0.5j], np.complex64)
  for d in (0, 1):
    np.testing.assert_allclose(np.asarray(jnp.round(z, d)), np.round(z, d), rtol=1e-6)
  for dt in (np.int8, np.uint16, np.int32):
    idx = np.array([3, 5, 7], dt)
    got = jnp.unravel_index(idx, (2, 4))
    for g_, w in zip(got, np.unravel_index(idx, (2, 4))):
      assert g_.dtype == dt
      np.testing.assert_array_equal(np.asarray(g_), w)


def test_array_contains():
  assert 1 in jnp.arange(4) and 100 not in jnp.arange(4) and 2.0 in jnp.arange(3)
  with pytest.raises(ValueError, match="search array must be one-dimensional"):
    _ = 1 in jnp.array(1)
  with pytest.raises(ValueError, match="query value must be a scalar"):
    _ = jnp.arange(2) in jnp.arange(2)
  for bad in ("abc", None):
    with pytest.raises(TypeError, match="Array.__contains__: unsupported operand type"):
      _ = bad in jnp.arange(2)


@pytest.mark.parametrize("name", ["ndim", "shape", "size"])
def test_ndim_shape_size_of_sequences_warn(name):
  with pytest.warns(DeprecationWarning, match=f"{name} requires ndarray or scalar arguments"):
    got = getattr(jnp, name)([1, 2, 3])
  assert got == getattr(np, name)([1, 2, 3])


def test_array_copy_semantics_and_positional_arguments():
  import copy
  x = jnp.arange(3.0)
  assert jnp.asarray(x) is x and jnp.array(x, copy=False) is x
  for y in (jnp.array(x), jnp.copy(x), copy.copy(x), copy.deepcopy(x)):
    assert y is not x and y.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
  y, ydot = ourjax.jvp(lambda v: jnp.array(v, copy=True), (x,), (jnp.ones(3),))
  assert y is not x
  with pytest.warns(DeprecationWarning, match="Passing the copy, order, and ndmin arguments"):
    assert jnp.array(x, None, False) is x
  with pytest.raises(TypeError, match="got multiple values for argument 'copy'"):
    jnp.array(x, None, True, copy=False)
  with pytest.raises(TypeError, match="takes at most 5 positional arguments"):
    jnp.array(x, None, True, "K", 0, "extra")
  assert jnp.array(3, ndmin=2).shape == (1, 1)
