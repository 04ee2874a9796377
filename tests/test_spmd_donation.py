"""Donated arguments of ``pmap`` and sharded ``jit`` on OURJAX_NUM_CPU_DEVICES CPU devices:
each device's block of a donated argument becomes the buffer of a result of its type (the
segment that reads it last computes the result there, ``spmd.Program``), the donated arrays
are deleted (JAX's error on reading them), and the results equal those of the same function
without donation and of NumPy; values shared between arguments or lanes are copied first."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.sharding import NamedSharding, PartitionSpec as P

from cpu_devices import N, four_cpu_devices, random_f32  # noqa: F401,E402  (autouse)


def _lane_addresses(a):
  """Each device's data address of a pmap result or a sharded array."""
  if a._lane_info is not None:
    return [v._npy.ctypes.data for v in a._lane_info[1]]
  return [s.data._npy.ctypes.data for s in a.addressable_shards]


def _step(p, g):
  # a gradient-style update: the update reads p after the all-reduce
  return p - 0.5 * lax.pmean(g * p, "i"), lax.psum(jnp.sum(p * p), "i")


@settings(max_examples=6, deadline=None)
@given(shape=st.sampled_from([(3,), (2, 5), (4, 1, 3)]), seed=st.integers(0, 2**16))
def test_pmap_donated_blocks_hold_the_results(shape, seed):
  rng = np.random.default_rng(seed)
  p0, g = random_f32(rng, (N,) + shape), random_f32(rng, (N,) + shape)
  donating = ourjax.pmap(_step, axis_name="i", donate_argnums=0)
  plain = ourjax.pmap(_step, axis_name="i")
  p, q, want = p0, p0, p0.astype(np.float64)
  for k in range(3):
    old = p
    p, s = donating(p, g)
    q, t = plain(q, g)
    mean = (g * want).mean(0)
    s_want = (want * want).sum()
    want = want - 0.5 * mean
    if k:
      # a pmap result passed back: its devices' blocks now hold the new values
      assert _lane_addresses(p) == addresses
      assert old.is_deleted()
      with pytest.raises(RuntimeError, match=rf"Array has been deleted with shape=float32\["):
        np.asarray(old)
    addresses = _lane_addresses(p)
    np.testing.assert_array_equal(np.asarray(p), np.asarray(q))
    np.testing.assert_array_equal(np.asarray(s), np.asarray(t))
    np.testing.assert_allclose(np.asarray(p), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(s), np.full(N, s_want), rtol=1e-4)
  assert not g.flags.writeable or np.isfinite(g).all()       # (NumPy arguments untouched)


def test_pmap_donated_input_read_by_a_later_collective_is_not_overwritten():
  # x's last compute segment (x * 2) runs before the psum that reads x: no segment may take
  # its buffer, and the results are those of the undonated call
  f = ourjax.pmap(lambda x: (x * 2.0, lax.psum(x, "i")), axis_name="i", donate_argnums=0)
  x0 = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
  a, _ = f(x0)
  b, s = f(a)
  np.testing.assert_array_equal(np.asarray(b), x0 * 4)
  np.testing.assert_array_equal(np.asarray(s), np.tile((x0 * 2).sum(0), (N, 1)))
  assert a.is_deleted()


def test_pmap_donated_values_shared_elsewhere_are_copied():
  # one result returned twice: donating one of them leaves the other as it was
  twice = ourjax.pmap(lambda x: (x + 1.0, x + 1.0))
  a, b = twice(np.zeros((N, 2), np.float32))
  f = ourjax.pmap(lambda x, y: x * 3.0 + y, donate_argnums=0)
  np.testing.assert_array_equal(np.asarray(f(a, b)), np.full((N, 2), 4.0))
  np.testing.assert_array_equal(np.asarray(b), np.ones((N, 2)))
  # a constant returned as it is, then donated: the next call returns it unchanged
  const = np.arange(2, dtype=np.float32)
  k = ourjax.pmap(lambda x: (x * 2.0, const))
  _, c = k(np.zeros((N, 2), np.float32))
  np.testing.assert_array_equal(np.asarray(f(c, c)), np.tile(const * 4.0, (N, 1)))
  np.testing.assert_array_equal(np.asarray(k(np.zeros((N, 2), np.float32))[1]),
                                np.tile(const, (N, 1)))
  # a replicated (in_axes=None) donated value is the same Array on every CPU device
  w = ourjax.device_put(np.arange(3, dtype=np.float32))
  g = ourjax.pmap(lambda w, x: w * 2.0 + x, in_axes=(None, 0), donate_argnums=0)
  x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
  np.testing.assert_array_equal(np.asarray(g(w, x)), np.arange(3) * 2.0 + x)
  assert w.is_deleted()


def _loss(w, x):
  return jnp.mean(jnp.tanh(x @ w) ** 2)


def _train(w, x):
  loss, gw = ourjax.value_and_grad(_loss)(w, x)
  return w - 0.1 * gw, loss


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), split=st.booleans())
def test_sharded_jit_donated_blocks_hold_the_results(seed, split):
  rng = np.random.default_rng(seed)
  mesh = ourjax.make_mesh((N,), ("x",))
  rep, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("x"))
  wsh = NamedSharding(mesh, P(None, "x")) if split else rep    # (tensor parallel: columns)
  w0, x = random_f32(rng, (3, 8)), random_f32(rng, (16, 3))
  donating = ourjax.jit(_train, in_shardings=(wsh, rows), out_shardings=(wsh, rep),
                        donate_argnums=0)
  plain = ourjax.jit(_train, in_shardings=(wsh, rows), out_shardings=(wsh, rep))
  single = ourjax.jit(_train)
  w, v, u = w0, w0, w0
  for k in range(3):
    old = w
    w, loss = donating(w, x)
    v, loss_v = plain(v, x)
    u, loss_u = single(u, x)
    if k:
      assert old.is_deleted() and _lane_addresses(w) == addresses
      with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[3,8\]"):
        np.asarray(old)
    addresses = _lane_addresses(w)
    assert w.sharding == wsh
    np.testing.assert_array_equal(np.asarray(w), np.asarray(v))
    np.testing.assert_array_equal(np.asarray(loss), np.asarray(loss_v))
    np.testing.assert_allclose(np.asarray(w), np.asarray(u), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(loss), float(loss_u), rtol=1e-5)
