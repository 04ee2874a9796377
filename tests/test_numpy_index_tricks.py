"""``jnp.mgrid``/``jnp.ogrid`` against NumPy's (values; integer grids in the default integer
type, others in the default float type), and ``jnp.index_exp``/``jnp.s_``."""
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
