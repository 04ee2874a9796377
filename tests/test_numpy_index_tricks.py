"""``jnp.mgrid``/``jnp.ogrid`` against NumPy's (values; integer grids in the default integer
type, others in the default float type), ``jnp.index_exp``/``jnp.s_``, and ``jnp.r_``/``jnp.c_``
(against NumPy's, and JAX's rules where they differ: trans1d on N-D items, weak types)."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp

_KEYS = [(), np.s_[:4], np.s_[:4, ], np.s_[:], np.s_[:5, :5], np.s_[:3, :2], np.s_[1:4:2],
         np.s_[1:5:3, :5], np.s_[:3:2, :2, :5], np.s_[-1:1:5j], np.s_[3:4:7j],
         np.s_[1:6:8j, 2:4], np.s_[0:3.5:0.5], np.s_[1.3:4.2:0.3]]


def _check(got, want):
  got = np.asarray(got)
  assert got.shape == np.shape(want)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  kind = np.asarray(want).dtype.kind
  assert got.dtype == (np.int32 if kind in "iu" else np.float32)


@pytest.mark.parametrize("key", _KEYS, ids=str)
def test_mgrid(key):
  _check(jnp.mgrid[key], np.mgrid[key])


@pytest.mark.parametrize("key", _KEYS[1:], ids=str)
def test_ogrid(key):
  got, want = jnp.ogrid[key], np.ogrid[key]
  if isinstance(want, (list, tuple)):
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
      _check(g, w)
  else:
    _check(got, want)


def test_grids_under_jit_and_errors():
  np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda: jnp.mgrid[:4])()), np.arange(4))
  g = ourjax.jit(lambda: jnp.ogrid[:2, :3])()
  assert [x.shape for x in g] == [(2, 1), (1, 3)]
  with pytest.raises(ourjax.errors.ConcretizationTypeError, match="slice start of jnp.ogrid"):
    ourjax.jit(lambda a, b: jnp.ogrid[a:b])(0, 2)
  with pytest.raises(ourjax.errors.ConcretizationTypeError, match="slice stop of jnp.mgrid"):
    ourjax.jit(lambda b: jnp.mgrid[0:b])(2)


def test_index_exp_and_s_():
  assert jnp.s_[1:2:20] == np.s_[1:2:20]
  assert jnp.index_exp[5:3:2j] == np.index_exp[5:3:2j]
  x = np.arange(10)
  np.testing.assert_array_equal(np.asarray(jnp.asarray(x)[jnp.s_[::3]]), x[::3])


# ------------------------------------------------------------------------------------------------
# r_ and c_

_A = np.arange(6, dtype=np.float32).reshape(2, 3)
_B = np.ones((2, 3), np.int32)
_I = np.array([1, 2, 3], np.int32)
_CONCAT = [
    lambda m: m.r_[1, 2, 3], lambda m: m.r_[1.0, 2, 3], lambda m: m.r_[0:5],
    lambda m: m.r_[0:1:5j], lambda m: m.r_[-1:1:6j, 0, 0, 0, 5, 6], lambda m: m.r_[1:10:2],
    lambda m: m.r_[5:0:-1], lambda m: m.r_[0:3:0.5], lambda m: m.r_[:3, 1],
    lambda m: m.r_[_I, 0, 0, _I], lambda m: m.r_[_A, _B], lambda m: m.r_["-1", _A, _B],
    lambda m: m.r_["1", _A, _B], lambda m: m.r_["0,2", [1, 2, 3], [4, 5, 6]],
    lambda m: m.r_["0,2,0", [1, 2, 3], [4, 5, 6]], lambda m: m.r_["1,2,0", [1, 2, 3], [4, 5, 6]],
    lambda m: m.r_["0,2,1", [1, 2, 3]], lambda m: m.r_["0,3,1", [1, 2]],
    lambda m: m.r_["0,3,-2", [1, 2]], lambda m: m.r_["0,3,1", 0:3], lambda m: m.r_["0,2", 1, 2],
    lambda m: m.r_["0,2,0", _A], lambda m: m.r_["0,4,-2", _A], lambda m: m.r_["r", [1, 2, 3], 4],
    lambda m: m.r_["c", [1, 2, 3], [4, 5, 6]], lambda m: m.r_["c", _A, _A],
    lambda m: m.c_[_I, _I], lambda m: m.c_[np.array([[1, 2, 3]]), 0, 0, np.array([[4, 5, 6]])],
    lambda m: m.c_[_A, _B], lambda m: m.c_[1:4, 4:7], lambda m: m.c_[0:1:3j, 1:4],
    lambda m: m.c_[1, 2], lambda m: m.c_[[1, 2], [3, 4]], lambda m: m.c_["0", [1, 2], [3, 4]],
    lambda m: m.r_[True, False], lambda m: m.r_[np.float16(1), 2], lambda m: m.r_[1 + 2j, 3],
    lambda m: m.r_[np.array(5), 6], lambda m: m.r_[[], 1], lambda m: m.r_[1.2:4.8:0.24],
    lambda m: m.c_[1.2:4.8:0.24], lambda m: m.c_["0,4,-1", [1, 2, 3], [4, 5, 6]],
]


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")   # NumPy's 'r'/'c' matrices
@pytest.mark.parametrize("case", range(len(_CONCAT)))
def test_r_c_like_numpy(case):
  """Values and shapes as NumPy's; dtypes NumPy's in the default (32-bit) types."""
  got, want = _CONCAT[case](jnp), _CONCAT[case](np)
  want = np.asarray(want)
  dt = {"i": np.int32, "f": np.float32, "c": np.complex64}.get(want.dtype.kind, want.dtype)
  if want.dtype == np.float16:
    dt = np.float16
  assert got.shape == want.shape
  assert got.dtype == dt
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_r_c_like_jax():
  a3 = np.arange(6, dtype=np.float32).reshape(2, 3)
  # trans1d rotates the padded axes so the last lands at trans1d, for N-D items too (NumPy
  # instead keeps an N-D item's axes together)
  np.testing.assert_array_equal(jnp.r_["0,4,2", a3], a3.reshape(1, 2, 3, 1))
  np.testing.assert_array_equal(jnp.r_["0,3,0", [[1, 2]]], np.array([1, 2]).reshape(2, 1, 1))
  np.testing.assert_array_equal(jnp.r_["0,2,5", [1, 2]], np.array([[1, 2]]))
  # Python scalars are weakly typed; a NumPy scalar's type is kept
  assert jnp.r_[1, 2].weak_type and jnp.r_[1, 2].dtype == np.int32
  assert jnp.r_[0:3, 2.5].weak_type and jnp.r_[0:3, 2.5].dtype == np.float32
  x8 = jnp.r_[np.array([1, 2], np.int8), 3]
  assert x8.dtype == np.int8 and not x8.weak_type
  assert jnp.r_[np.int8(3):7].dtype == np.int8
  f = ourjax.jit(lambda v: jnp.r_[v, 0, v])
  np.testing.assert_array_equal(f(np.ones(2, np.float32)), [1, 1, 0, 1, 1])
  assert len(jnp.r_) == 0 and len(jnp.c_) == 0
  with pytest.raises(ValueError, match="could not understand directive 'x,2'"):
    jnp.r_["x,2", 1]
  with pytest.raises(ValueError, match="must be placed at the beginning"):
    jnp.r_[1, "r", 2]
  with pytest.raises(ValueError, match="at least one array"):
    jnp.r_["r"]
  with pytest.raises(ValueError, match="out of bounds"):
    jnp.r_["2", a3, a3]
