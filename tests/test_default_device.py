"""``ourjax.default_device`` / ``jax_default_device`` as JAX's: where uncommitted values go.
Inside the block ``device_put(x)`` puts ``x`` on the named device and a jitted call of
uncommitted arguments runs there, its results uncommitted; committed arguments still decide;
values other than a Device or a platform name raise JAX's ValueError.  Several CPU devices
stand in for several GPUs (``cpu_devices``); a GPU case checks that 'cpu' keeps a GPU host's
call on the CPU."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import backends
from ourjax.config import config

from cpu_devices import N, four_cpu_devices  # noqa: F401  (the autouse fixture)


def _f32(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_names_and_validation():
  d = ourjax.devices("cpu")[0]
  assert (str(d), repr(d)) == ("cpu:0", "CpuDevice(id=0)")
  for bad in (3, "tpu0", object()):
    with pytest.raises(ValueError, match="default_device must be passed"):
      with ourjax.default_device(bad):
        pass
    with pytest.raises(ValueError, match="default_device must be passed"):
      ourjax.config.update("jax_default_device", bad)
  assert config.jax_default_device is None


@pytest.mark.parametrize("k", [1, 3])
def test_device_put_and_jit_go_to_the_default_device(k):
  devs = ourjax.devices()
  f = ourjax.jit(lambda a, b: a * b + 1.0)
  x, y = _f32(4, 3), _f32(4, 3, seed=1)
  want = x * y + np.float32(1.0)
  r0 = f(x, y)                              # (compiled and on the fast path before the block)
  assert r0.devices() == {devs[0]}
  with ourjax.default_device(devs[k]):
    assert backends.configured_default_device() is devs[k]
    # (a CPU device other than the first holds a one-device ShardedArray, which counts as
    # committed: JAX's arrays there would be uncommitted; a GPU host's case below is)
    p = ourjax.device_put(x)
    assert p.devices() == {devs[k]}
    np.testing.assert_array_equal(np.asarray(p), x)
    for _ in range(3):                      # (first call, then what the fast path would take)
      r = f(x, jnp.asarray(y))
      assert r.devices() == {devs[k]}
      np.testing.assert_allclose(np.asarray(r), want, rtol=1e-6)
    # committed arguments decide over the default device
    c = f(ourjax.device_put(x, devs[0]), jnp.asarray(y))
    assert c.devices() == {devs[0]} and c.committed
  # outside the block: the first device again, through the fast path's earlier entry
  r = f(x, y)
  assert r.devices() == {devs[0]} and not r.committed
  np.testing.assert_allclose(np.asarray(r), want, rtol=1e-6)


def test_config_update_and_platform_name():
  devs = ourjax.devices()
  try:
    ourjax.config.update("jax_default_device", devs[2])
    assert ourjax.device_put(_f32(2)).devices() == {devs[2]}
    assert ourjax.jit(jnp.sin)(_f32(2)).devices() == {devs[2]}
  finally:
    ourjax.config.update("jax_default_device", None)
  with ourjax.default_device("cpu"):       # a platform name: its first device
    assert backends.configured_default_device() is ourjax.devices("cpu")[0]
    assert ourjax.device_put(_f32(2)).devices() == {ourjax.devices("cpu")[0]}


@pytest.mark.skipif(not backends._cuda_available(), reason="needs a CUDA GPU")
def test_cpu_default_device_on_a_gpu_host(monkeypatch):
  monkeypatch.setitem(ourjax.config._values, "jax_platforms", None)   # (the GPU's platform)
  x = _f32(64, 8)
  f = ourjax.jit(lambda a: jnp.tanh(a) * 2.0)
  g = f(x)
  assert next(iter(g.devices())).platform == "gpu"
  with ourjax.default_device(ourjax.devices("cpu")[0]):
    for _ in range(2):
      r = f(x)
      assert r.devices() == {ourjax.devices("cpu")[0]} and not r.committed
      np.testing.assert_allclose(np.asarray(r), np.tanh(x) * 2, rtol=1e-5)
    assert ourjax.device_put(x).devices() == {ourjax.devices("cpu")[0]}
  assert next(iter(f(x).devices())).platform == "gpu"
