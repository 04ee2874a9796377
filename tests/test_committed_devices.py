"""JAX's placement rule for committed arrays, on CPU devices: ``device_put(x, device)`` commits
``x`` to ``device``; a jitted call or an eager operation with committed operands runs on their
device (uncommitted operands follow them there) and its results are committed to it; operands
committed to different devices raise JAX's ValueError; without committed operands a call runs
on the default device and its results are uncommitted."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import backends

from cpu_devices import N, four_cpu_devices  # noqa: F401  (the autouse fixture)

assert N >= 2


def _f32(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_device_put_on_a_device_commits():
  devs = ourjax.devices()
  x = _f32(3)
  assert ourjax.device_put(x, devs[0]).committed
  assert ourjax.device_put(x, devs[1]).committed
  assert not ourjax.device_put(x).committed
  for d in devs[:2]:      # a one-device sharding commits to its device (JAX), the first too
    c = ourjax.device_put(x, ourjax.sharding.SingleDeviceSharding(d))
    assert c.committed and backends.committed_device(c) is d
  assert not jnp.ones(3).committed
  u = jnp.asarray(x)
  c = ourjax.device_put(u, devs[0])
  assert c.committed and not u.committed        # (the argument itself stays uncommitted)
  np.testing.assert_array_equal(np.asarray(c), x)


@pytest.mark.parametrize("k", [0, 1])
def test_jit_runs_where_its_committed_arguments_are(k):
  devs = ourjax.devices()
  f = ourjax.jit(lambda a, b: a * b + 1.0)
  x, y = _f32(4, 3), _f32(4, 3, seed=1)
  want = x * y + np.float32(1.0)
  xc = ourjax.device_put(x, devs[k])
  for other in (y, jnp.asarray(y), ourjax.device_put(y, devs[k])):
    for _ in range(3):         # (the first call, then the dispatch fast path)
      r = f(xc, other)
      assert r.devices() == {devs[k]} and r.committed
      np.testing.assert_allclose(np.asarray(r), want, rtol=1e-6)
  r = f(x, jnp.asarray(y))           # nothing committed: the default device, uncommitted
  assert r.devices() == {devs[0]} and not r.committed
  # a committed result fed back stays there
  r2 = f(f(xc, y), y)
  assert r2.devices() == {devs[k]} and r2.committed
  np.testing.assert_allclose(np.asarray(r2), want * y + np.float32(1.0), rtol=1e-5)


def test_jit_of_arguments_committed_to_different_devices_raises():
  devs = ourjax.devices()
  x = ourjax.device_put(_f32(3), devs[1])
  y = ourjax.device_put(_f32(3), devs[0])

  def g(x, y):
    return x + y
  with pytest.raises(ValueError, match=r"Received incompatible devices for jitted computation. "
                     r"Got argument x of g with shape float32\[3\] and with device ids \[1\] on "
                     r"platform CPU and argument y of g with shape float32\[3\] and with device "
                     r"ids \[0\] on platform CPU"):
    ourjax.jit(g)(x, y)


def test_eager_operations_follow_committed_operands():
  devs = ourjax.devices()
  x = _f32(5)
  xc = ourjax.device_put(x, devs[1])
  for r, want in ((xc * 2, x * 2), (jnp.sin(xc), np.sin(x)), (xc + jnp.asarray(x), x + x)):
    assert r.devices() == {devs[1]} and r.committed
    np.testing.assert_allclose(np.asarray(r), want, rtol=1e-6)
  with pytest.raises(ValueError, match="Received incompatible devices for jitted computation. "
                     "Got argument x of add"):
    xc + ourjax.device_put(x, devs[0])


def test_on_a_gpu_host_cpu_committed_arguments_compile_for_the_cpu(monkeypatch):
  """Where the default backend is CUDA, a call whose arguments are committed to a CPU device
  compiles for the CPU backend and runs on the host (it never reaches the CUDA backend, which
  this machine may not have)."""
  cpu0 = ourjax.devices("cpu")[0]
  x = ourjax.device_put(_f32(6), cpu0)
  monkeypatch.setattr(backends, "default_backend_name", lambda: "cuda")
  assert ourjax.default_backend() == "gpu"
  compiled = []
  real = backends.compile_jaxpr

  def spy(closed, backend, *a, **k):
    compiled.append(backend)
    return real(closed, backend, *a, **k)
  monkeypatch.setattr(backends, "compile_jaxpr", spy)
  r = ourjax.jit(lambda a: jnp.exp(a) - 1.0)(x)
  assert compiled == ["cpu"]
  assert r.devices() == {cpu0} and r.committed and r._device_buf is None
  np.testing.assert_allclose(np.asarray(r), np.expm1(np.asarray(x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [0, 1])
def test_repeated_calls_commit_results_and_leave_passed_through_arguments_alone(k):
  # (the dispatch fast path, taken from the second call on, marks its new results committed;
  # a result that is an uncommitted argument passed through comes out as a new committed array)
  dev = ourjax.devices()[k]
  x = ourjax.device_put(_f32(4), dev)
  u = jnp.asarray(_f32(4, seed=1))
  f = ourjax.jit(lambda a, b: (a, b, a + b))
  for _ in range(4):
    a, b, c = f(x, u)
    assert a.committed and b.committed and c.committed
    assert a.devices() == b.devices() == c.devices() == {dev}
    assert not u.committed and b is not u
    np.testing.assert_array_equal(np.asarray(c), np.asarray(x) + np.asarray(u))
  # (without committed arguments the results are not committed)
  assert not any(r.committed for r in f(u, u))


@pytest.mark.parametrize("k", [0, 1])
def test_full_like_follows_a_committed_argument_and_places_by_sharding(k):
  """JAX's lax.full_like (and so jnp.zeros_like/ones_like/full_like/empty_like): a strongly
  typed result of a committed x is committed to x's device (whatever the shape asked); a weak
  one, or one of an uncommitted x, is not; ``sharding=`` places the result (lax.full too)."""
  from ourjax import lax
  devs = ourjax.devices()
  u = jnp.array([1, 2, 3], np.int32)
  c = ourjax.device_put(u, devs[k])
  fills = [lambda a: lax.full_like(a, 1.5), lambda a: lax.full_like(a, 1, shape=(2, 2)),
           jnp.zeros_like, jnp.empty_like, lambda a: jnp.ones_like(a, shape=(4,)),
           lambda a: jnp.full_like(a, 7)]
  for fill in fills:
    assert not fill(u).committed
    out = fill(c)
    assert out.committed and backends.committed_device(out) is devs[k]
    np.testing.assert_array_equal(np.asarray(out), np.asarray(fill(u)))
  w = ourjax.device_put(jnp.asarray(2.0), devs[k])     # weakly typed: JAX leaves it uncommitted
  assert w.weak_type and not lax.full_like(w, 0).committed
  assert lax.full_like(w, 0, dtype=np.float32).committed
  for placed in (lax.full_like(u, 3, sharding=devs[k]), lax.full((2,), 3, sharding=devs[k]),
                 lax.full((2,), 3, sharding=ourjax.sharding.SingleDeviceSharding(devs[k]))):
    assert placed.committed and backends.committed_device(placed) is devs[k]
