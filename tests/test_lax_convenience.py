"""lax functions composed of other primitives (ourjax/lax/convenience.py), against NumPy."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax

shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


@given(shapes, st.data())
def test_split_matches_numpy_and_differentiates(shape, data):
  axis = data.draw(st.integers(-len(shape), len(shape) - 1))
  n = shape[axis]
  cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
  sizes = np.diff([0] + cuts + [n]).tolist()
  x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
  got = lax.split(x, sizes, axis)
  want = np.split(x, np.cumsum(sizes[:-1]), axis=axis)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(np.asarray(g), w)
  # the gradient of sum(piece_i * (i+1)) puts i+1 on piece i
  g = ourjax.grad(lambda v: sum((p * (i + 1)).sum() for i, p in
                                enumerate(lax.split(v, sizes, axis))))(x)
  want_g = np.concatenate([np.full(w.shape, i + 1, np.float32) for i, w in enumerate(want)],
                          axis=axis)
  np.testing.assert_array_equal(np.asarray(g), want_g)


def test_split_errors():
  with pytest.raises(ValueError, match="nonnegative"):
    lax.split(np.arange(5), [-1])
  with pytest.raises(ValueError, match="Sum of sizes 6 must be equal"):
    lax.split(np.arange(5), [6])
  with pytest.raises(ValueError, match="axis 1 is out of bounds"):
    lax.split(np.arange(5), sizes=(), axis=1)


@given(shapes, st.lists(st.integers(0, 3), min_size=1, max_size=3))
def test_tile_matches_numpy(shape, reps):
  x = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
  np.testing.assert_array_equal(np.asarray(lax.tile(x, reps)), np.tile(x, reps))
  np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda v: lax.tile(v, reps))(x)),
                                np.tile(x, reps))


@given(st.lists(st.integers(1, 3), min_size=1, max_size=4).map(tuple), st.data())
def test_collapse(shape, data):
  start = data.draw(st.integers(-len(shape), len(shape) - 1))
  stop = data.draw(st.one_of(st.none(), st.integers(start % len(shape) + 1, len(shape))))
  lo, hi, _ = slice(start, stop).indices(len(shape))
  want = shape[:lo] + (int(np.prod(shape[lo:hi])),) + shape[hi:]
  x = np.zeros(shape, np.float32)
  assert lax.collapse(x, start, stop).shape == want
  assert ourjax.jit(lambda v: lax.collapse(v, start, stop))(x).shape == want


@given(st.floats(0.1, 10), st.floats(-10, 10))
def test_reciprocal_and_complex(a, b):
  np.testing.assert_allclose(float(lax.reciprocal(np.float32(a))), 1 / np.float32(a),
                             rtol=1e-6)
  z = lax.complex(np.float32(a), np.float32(b))
  assert z.dtype == np.complex64
  assert complex(z) == complex(np.float32(a), np.float32(b))
  # d/dx Im(complex(x, 3x)) = 3, d/dx Re(...) = 1
  assert float(ourjax.grad(lambda x: lax.complex(x, 3 * x).imag)(np.float32(a))) == 3.0
  assert float(ourjax.grad(lambda x: lax.complex(x, 3 * x).real)(np.float32(a))) == 1.0
  with pytest.raises(TypeError):
    lax.complex(np.float32(a), np.int32(b))


def test_small_wrappers():
  assert lax.broadcast_shapes((1, 3), (2, 1)) == (2, 3)
  e = lax.empty((2, 2), dtype=jnp.float32)
  assert e.shape == (2, 2) and e.dtype == np.float32
  assert lax.optimization_barrier((2, 3)) == (2, 3)
  assert float(ourjax.grad(lambda x: lax.optimization_barrier(x * x))(3.0)) == 6.0
  assert float(lax.platform_dependent(2.0, cpu=lambda x: x * 3, cuda=lambda x: x * 3,
                                      default=lambda x: x)) == 6.0
  dn = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                   scatter_dims_to_operand_dims=(0,))
  out = lax.scatter_apply(jnp.arange(5.0), jnp.array([[1], [3]]), jnp.exp, dn,
                          update_shape=(2,))
  np.testing.assert_allclose(np.asarray(out), [0, np.e, 2, np.exp(3), 4], rtol=1e-6)


def test_composite_runs_its_decomposition_and_refuses_jvp():
  sq = lax.composite(lambda x, *, scale=1.0: x * x * scale, name="my.square")
  assert float(sq(3.0)) == 9.0
  assert float(ourjax.jit(sq)(3.0)) == 9.0
  assert float(sq(3.0, scale=2.0)) == 18.0
  np.testing.assert_array_equal(np.asarray(ourjax.vmap(sq)(jnp.arange(3.0))), [0, 1, 4])
  with pytest.raises(ValueError, match="JVP rule for composite not implemented"):
    ourjax.jvp(sq, (1.0,), (2.0,))
  with pytest.raises(ValueError, match="JVP rule for composite not implemented"):
    ourjax.grad(sq)(1.0)


@pytest.mark.parametrize("unroll", [0, True, False, 1, 2])
def test_scan_accepts_every_non_negative_unroll(unroll):
  f = lambda c, x: (c + x, c * x)  # noqa: E731
  xs = np.arange(1.0, 6.0, dtype=np.float32)
  c, ys = lax.scan(f, np.float32(1), xs, unroll=unroll)
  want_c, want_ys = 1.0, []
  for x in xs:
    want_ys.append(want_c * x)
    want_c += x
  assert float(c) == want_c
  np.testing.assert_array_equal(np.asarray(ys), want_ys)


def test_scan_rejects_a_negative_unroll():
  with pytest.raises(ValueError, match="non-negative"):
    lax.scan(lambda c, x: (c, x), 0.0, np.arange(3.0), unroll=-1)


def test_shape_as_value_of_static_shapes():
  from ourjax import lax as _lax
  empty = _lax.shape_as_value(())
  assert empty.shape == (0,) and empty.dtype == np.int32
  for shape in ((2,), (2, 3), (4, 0, 7)):
    out = _lax.shape_as_value(shape)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.array(shape))
  assert _lax.shape_as_value((2 ** 31, 1)).dtype == np.int64


def test_parameter_names_are_jaxs():
  import inspect
  from ourjax import lax as _lax
  names = lambda f: list(inspect.signature(f).parameters)
  assert names(_lax.convert_element_type) == ["operand", "new_dtype"]
  assert names(_lax.bitcast_convert_type) == ["operand", "new_dtype"]
  assert names(_lax.nextafter) == ["x1", "x2"]
  assert names(ourjax.random.key_dtype) == ["impl_spec"]
  assert _lax.convert_element_type(operand=np.int32(3), new_dtype=np.float32).dtype == np.float32
  np.testing.assert_array_equal(_lax.full((2,), 1.5, sharding=None), [1.5, 1.5])
  np.testing.assert_array_equal(_lax.full_like(np.zeros(2), 3, sharding=None), [3.0, 3.0])


def test_select_n_takes_any_integer_which():
  # JAX accepts any integer type for select_n's `which` (int64 under x64, uint8): out-of-range
  # indices clamp
  cases = (np.zeros(3, np.float32), np.ones(3, np.float32), np.full(3, 2.0, np.float32))
  for w in (np.array([0, 1, 2], np.uint8), np.array([0, 1, 5], np.int16)):
    for f in (lax.select_n, ourjax.jit(lax.select_n)):
      np.testing.assert_array_equal(np.asarray(f(w, *cases)), [0, 1, 2])
  with pytest.raises(TypeError, match="must be boolean or integer"):
    lax.select_n(np.array([0.0, 1.0, 0.0]), *cases)
  with pytest.raises(TypeError, match="cannot have > 2 cases"):
    lax.select_n(np.array([True, False, True]), *cases)
