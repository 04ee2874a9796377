"""Eager operations on GPU arrays (``ourjax/_eager_device.py``): each runs as a compiled
single-primitive executable on the operands' GPU and its results stay there.

The dispatch tests run on ``cuda_fake_driver``'s stand-in driver (no GPU: nothing is computed,
but every copy and launch is counted); the value tests need a GPU and are skipped without one.
"""
from __future__ import annotations

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import _eager_device, core, lax
from ourjax.array import Array
from ourjax.backends.cuda import driver

cuda_fake_driver = pytest.importorskip("cuda_fake_driver")   # needs cuda.bindings (types only)


def _on_gpu(r) -> bool:
  return (type(r) is Array and r._npy is None and r._device_buf is not None
          and r._device_buf.platform == "gpu")


# a chain of eager operations on device operands, of many kinds (elementwise, broadcasting,
# reductions, structural, indexing, comparisons and selects, a matrix product, casts)
def _chain(jnp, x, y, row):
  a = x + y
  b = jnp.exp(a) * 2.0
  c = b + row
  d = jnp.sum(c, axis=1)
  e = jnp.where(x > y, x, y)
  f = e.T @ y
  g = jnp.cumsum(f, axis=0)[1:5]
  h = jnp.maximum(g, 0.5).astype(jnp.int32)
  i = jnp.argmax(x, axis=-1)
  return [a, b, c, d, e, f, g, h, i, jnp.tanh(x).reshape(-1), x[3]]


@pytest.fixture
def fake():
  _eager_device.clear_cache()
  with cuda_fake_driver.installed() as f:
    yield f
  _eager_device.clear_cache()


def _inputs(rng=None):
  rng = rng or np.random.default_rng(0)
  return (rng.standard_normal((8, 6)).astype(np.float32),
          rng.standard_normal((8, 6)).astype(np.float32),
          rng.standard_normal(6).astype(np.float32))


def test_device_operands_run_on_the_device_without_copies_to_the_host(fake):
  x, y, row = (ourjax.device_put(v) for v in _inputs())
  before = fake.calls.get("cuMemcpyHtoDAsync", 0)
  outs = _chain(jnp, x, y, row)
  assert all(_on_gpu(r) for r in outs)
  assert {d for r in outs for d in r.devices()} == {ourjax.devices("cuda")[0]}
  assert fake.calls.get("cuMemcpyDtoHAsync", 0) == 0     # no value came back to the host
  assert fake.calls["cuLaunchKernel"] >= len(outs)
  # the only uploads were the Python scalars 2.0 and 0.5 (each ``x[3]`` index too)
  assert fake.calls.get("cuMemcpyHtoDAsync", 0) - before <= 4
  # types are the abstract evaluation's
  want = _chain(jnp, *(Array(v) for v in _inputs()))
  assert [r.aval for r in outs] == [w.aval for w in want]


def test_jnp_functions_on_the_gpu_run_as_one_program(fake):
  """A replayed ``jnp`` function (softmax, mean, var...) with an operand on the GPU is compiled
  whole at its second call, as JAX's jitted ones: one dispatch (one event) per call; its first
  call runs its primitives one by one there.  A Python scalar that changes at every call (part
  of the signature) never compiles the whole function."""
  x = ourjax.device_put(_inputs()[0])
  fns = [lambda v: ourjax.nn.softmax(v, axis=-1), lambda v: jnp.mean(v, axis=0),
         lambda v: jnp.var(v), lambda v: ourjax.nn.gelu(v)]
  for fn in fns:
    before = fake.calls["cuEventRecord"]
    assert _on_gpu(fn(x)) and fake.calls["cuEventRecord"] > before + 1
    fn(x)
    before = fake.calls["cuEventRecord"]
    r = fn(x)
    assert _on_gpu(r) and fake.calls["cuEventRecord"] == before + 1
  def loads():
    c = fake.calls
    return c.get("cuLinkComplete", 0) + c.get("cuModuleLoadData", 0) + \
        c.get("cuModuleLoadDataEx", 0)
  assert _on_gpu(jnp.clip(x, 0.0, 0.5))
  n = loads()
  for k in range(1, 5):
    assert _on_gpu(jnp.clip(x, 0.0, float(k)))
  assert loads() == n          # (nothing compiled: the primitives' programs are reused)
  assert fake.calls.get("cuMemcpyDtoHAsync", 0) == 0
  # the types are those of the host calls
  xh = Array(_inputs()[0])
  assert [fn(x).aval for fn in fns] == [fn(xh).aval for fn in fns]


def _body(c, v):
  return c + v, c * 2


def test_a_scan_on_the_gpu_is_compiled_once_its_body_comes_again(fake):
  """``lax.scan`` with an operand on the GPU: its first call evaluates the body op by op (a
  body traced anew at every call would otherwise compile at every call), the next ones with
  the same body run it compiled, in one dispatch, without copies to the host."""
  x = ourjax.device_put(np.ones((5, 3), np.float32))
  c, ys = lax.scan(_body, jnp.zeros(3), x)
  assert _on_gpu(c) and _on_gpu(ys)
  reads, events = fake.calls.get("cuMemcpyDtoHAsync", 0), fake.calls["cuEventRecord"]
  c, ys = lax.scan(_body, jnp.zeros(3), x)
  assert _on_gpu(c) and _on_gpu(ys) and c.aval == core.ShapedArray((3,), np.dtype(np.float32))
  assert fake.calls.get("cuMemcpyDtoHAsync", 0) == reads
  assert fake.calls["cuEventRecord"] == events + 1


def _cond(c):
  return c[0] < 10.0


def _double(c):
  return c * 2


def test_a_while_loop_on_the_gpu_is_compiled_once_it_comes_again(fake):
  x = ourjax.device_put(np.ones(3, np.float32))
  lax.while_loop(_cond, _double, x)     # (host-driven: reads the predicate)
  reads = fake.calls.get("cuMemcpyDtoHAsync", 0)
  assert reads > 0
  r = lax.while_loop(_cond, _double, x)
  assert _on_gpu(r) and r.aval == core.ShapedArray((3,), np.dtype(np.float32))
  # (the compiled program reads its predicate: the backend's host-driven loop, kernel by
  # kernel on the stand-in driver, whose zeros end it at once)
  assert fake.calls.get("cuMemcpyDtoHAsync", 0) == reads + 1
  assert [v for k, v in _eager_device._cache.items() if k[0] is lax.while_p and callable(v)]
  p = ourjax.device_put(np.int32(1))
  assert _on_gpu(lax.cond(p, _double, _cond_branch, x))      # (cond: host-driven)


def _cond_branch(c):
  return c - 1


def test_ever_new_shapes_compile_from_their_second_call(fake, monkeypatch):
  """Past CHURN_SIGNATURES compiled signatures of a primitive, a new signature's first call
  runs on the host (results back on the GPU) and only a signature that comes again compiles:
  a loop over ever new shapes does not compile at every step."""
  monkeypatch.setattr(_eager_device, "CHURN_SIGNATURES", 2)
  x = ourjax.device_put(np.ones(40, np.float32))

  def loads():
    c = fake.calls
    return c.get("cuLinkComplete", 0) + c.get("cuModuleLoadData", 0) + \
        c.get("cuModuleLoadDataEx", 0)
  parts = [ourjax.device_put(np.ones(n, np.float32)) for n in range(1, 9)]
  for p in parts[:2]:
    assert _on_gpu(jnp.exp(p))                   # (compiled at the first call)
  n = loads()
  for p in parts[2:]:
    assert _on_gpu(jnp.exp(p))                   # (on the host, put back on the GPU)
  assert loads() == n
  assert _on_gpu(jnp.exp(parts[5])) and loads() > n      # (its second call compiles)
  assert _on_gpu(x * 2.0)                        # (another primitive: its own count)


def test_one_compile_per_signature(fake):
  x, y, _ = (ourjax.device_put(v) for v in _inputs())
  x + y
  n, loads = len(_eager_device._cache), fake.calls.get("cuLinkComplete", 0)
  for _ in range(5):
    z = x + y
    z = z + y                                  # (a result: same signature)
  assert len(_eager_device._cache) == n
  assert fake.calls.get("cuLinkComplete", 0) == loads
  x - y
  assert len(_eager_device._cache) == n + 1


def test_host_operands_follow_the_device_operand(fake):
  """NumPy arrays, Python scalars and host Arrays (JAX's uncommitted values) meet a device
  operand on its GPU; a host Array is copied there once and keeps the copy."""
  xh, yh, _ = _inputs()
  x = ourjax.device_put(xh)
  y = Array(yh)
  for other in (yh, 3.0, np.float32(2.0), y, Array(np.float32(5.0))):
    assert _on_gpu(x + other) and _on_gpu(other * x)
  ups = fake.calls["cuMemcpyHtoDAsync"]
  for _ in range(3):
    x + y
  assert fake.calls["cuMemcpyHtoDAsync"] == ups          # y's device copy was kept
  assert fake.calls.get("cuMemcpyDtoHAsync", 0) == 0


def test_small_host_operands_are_copied_once_per_value(fake):
  """Scalars and small host arrays meeting a device operand are kept on the device per value:
  ``x * 2.0`` in a loop copies 2.0 once; a new value (or a NumPy array written in between) is
  copied again."""
  x = ourjax.device_put(np.ones((4, 4), np.float32))
  idx = np.array([1, 2], np.int32)
  x * 2.0, x[idx], x + np.float32(2.0)
  ups = fake.calls["cuMemcpyHtoDAsync"]
  for _ in range(3):
    assert _on_gpu(x * 2.0) and _on_gpu(x[idx]) and _on_gpu(x + np.float32(2.0))
  assert fake.calls["cuMemcpyHtoDAsync"] == ups
  x * 3.0
  idx[0] = 3
  x[idx]
  assert fake.calls["cuMemcpyHtoDAsync"] == ups + 2
  big = np.ones((16, 16), np.float32)        # (larger than _SMALL_BYTES: copied by each call)
  x[:1, :1] + big, x[:1, :1] + big
  assert fake.calls["cuMemcpyHtoDAsync"] == ups + 4


def test_host_only_operations_stay_in_numpy(fake):
  """Operands all on the host: NumPy runs the operation, whatever the default backend (a GPU
  being present changes nothing for them)."""
  x, y, row = (Array(v) for v in _inputs())
  with ourjax.config._override("ourjax_arrays_on_default_device", False):
    outs = _chain(jnp, x, y, row)
  assert all(type(r) is Array and r._device_buf is None for r in outs)
  assert fake.calls.get("cuLaunchKernel", 0) == 0 and not _eager_device._cache


def test_a_device_array_read_on_the_host_still_computes_on_the_device(fake):
  x = ourjax.device_put(_inputs()[0])
  x._npy = np.asarray(_inputs()[0])      # (what reading it leaves: a host copy beside it)
  x._npy.flags.writeable = False
  assert _on_gpu(jnp.exp(x))


def test_a_bad_call_raises_every_time(fake):
  x = ourjax.device_put(np.ones(3, np.float32))
  y = ourjax.device_put(np.ones(4, np.float32))
  for _ in range(2):
    with pytest.raises(TypeError, match="add"):
      lax.add(x, y)
  assert not _eager_device._cache


def test_operands_on_two_gpus_raise(fake, monkeypatch):
  monkeypatch.setattr(fake, "cuDeviceGetCount", lambda: fake._ok("cuDeviceGetCount", 2),
                      raising=False)
  gpus = ourjax.devices("cuda")
  assert len(gpus) == 2
  x = ourjax.device_put(np.ones(3, np.float32), gpus[0])
  y = ourjax.device_put(np.ones(3, np.float32), gpus[1])
  with pytest.raises(ValueError, match=r"Received incompatible devices for jitted computation. "
                     r"Got argument x of add .* device ids \[0\] on platform GPU and argument y "
                     r"of add .* device ids \[1\] on platform GPU"):
    x + y
  for _ in range(3):            # (a replayed jnp function: each call raises)
    with pytest.raises(ValueError, match="incompatible devices"):
      jnp.where(x > 0, x, y)
  assert _on_gpu(y * 2.0) and y.devices() == {gpus[1]} and (y * 2.0).devices() == {gpus[1]}


def test_a_primitive_without_a_lowering_runs_on_the_host_and_returns_to_the_device(fake):
  p = core.Primitive("eager_device_test_double")
  p.def_impl(lambda x: np.asarray(x) * 2)
  p.def_abstract_eval(lambda x: core.ShapedArray(x.shape, x.dtype))
  try:
    xh = np.arange(4, dtype=np.float32)
    x = ourjax.device_put(xh)
    fake.host_values = {}
    r = p.bind(x)
    assert _on_gpu(r) and r.aval == core.ShapedArray((4,), np.dtype(np.float32))
    assert _eager_device._cache and all(v is _eager_device._HOST
                                        for v in _eager_device._cache.values())
  finally:
    # (a primitive of this test only: test_lowering's coverage test lists every registered one)
    core.abstract_eval_rules.pop(p, None)


def test_arrays_on_the_default_device_when_asked(fake):
  """``ourjax_arrays_on_default_device``: jnp's creation functions place their results on the
  GPU (the default backend), so eager work on them runs there; off (the default), they are
  host arrays.  Inside a trace nothing is placed."""
  assert _on_gpu(ourjax.device_put(np.ones(3, np.float32)))
  with ourjax.config._override("ourjax_arrays_on_default_device", False):
    assert jnp.ones(3)._device_buf is None
  old = ourjax.config.read("ourjax_arrays_on_default_device")
  ourjax.config.update("ourjax_arrays_on_default_device", True)
  try:
    made = [jnp.ones((4, 5)), jnp.zeros(3, jnp.int32), jnp.arange(6), jnp.array([1.0, 2.0]),
            jnp.asarray(np.eye(3, dtype=np.float32)), jnp.full((2,), 7.0), jnp.eye(2),
            jnp.linspace(0, 1, 5)]
    assert all(_on_gpu(m) for m in made)
    assert _on_gpu(jnp.exp(made[0]) + made[0])
    assert fake.calls.get("cuMemcpyDtoHAsync", 0) == 0
    consts = ourjax.make_jaxpr(lambda v: v + jnp.ones(3))(np.ones(3, np.float32)).consts
    assert all(getattr(c, "_device_buf", None) is None for c in consts)
  finally:
    ourjax.config.update("ourjax_arrays_on_default_device", old)


def test_no_gpu_no_device_dispatch():
  """Without a GPU (the real driver's state), arrays are host Arrays and nothing reaches the
  device module."""
  if driver.available():
    pytest.skip("a GPU is present")
  _eager_device.clear_cache()
  outs = _chain(jnp, *(jnp.asarray(v) for v in _inputs()))
  assert all(r._device_buf is None for r in outs) and not _eager_device._cache


# ------------------------------------------------------------------------------------------------
# On a GPU: values against NumPy's (and JAX-style placement), copies counted at the driver


class _CountingDriver:
  """The bindings module with every entry point counted (``calls[name]``)."""

  def __init__(self, real):
    self._real, self.calls = real, {}

  def __getattr__(self, name):
    attr = getattr(self._real, name)
    if not name.startswith("cu") or not callable(attr):
      return attr
    calls = self.calls

    def counted(*a):
      calls[name] = calls.get(name, 0) + 1
      return attr(*a)
    return counted


gpu = pytest.mark.skipif(not driver.available(), reason="no CUDA GPU")


@gpu
@pytest.mark.parametrize("made_by", ["device_put", "jnp.asarray on the default device"])
def test_values_on_the_gpu_match_numpy(monkeypatch, made_by):
  rng = np.random.default_rng(1)
  ins = _inputs(rng)
  if made_by == "device_put":
    devs = [ourjax.device_put(v) for v in ins]
  else:
    with ourjax.config._override("ourjax_arrays_on_default_device", True):
      devs = [jnp.asarray(v) for v in ins]
    assert all(_on_gpu(d) for d in devs)
  for d in devs:
    d.block_until_ready()
  counting = _CountingDriver(driver._driver())
  monkeypatch.setattr(driver, "_drv", counting)
  outs = _chain(jnp, *devs)
  for r in outs:
    r.block_until_ready()
  assert counting.calls.get("cuMemcpyDtoHAsync", 0) == 0
  assert counting.calls.get("cuMemcpyDtoH", 0) == 0
  assert all(_on_gpu(r) for r in outs)
  monkeypatch.undo()
  want = _chain(np, *ins)
  for r, w in zip(outs, want):
    got = np.asarray(r)
    assert got.shape == np.shape(w)
    if got.dtype.kind == "f":
      np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-5)
    else:
      np.testing.assert_array_equal(got, w)


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_dtypes_and_multiple_results_on_the_gpu(dtype):
  rng = np.random.default_rng(2)
  xh = (rng.standard_normal((5, 7)) * 4).astype(dtype)
  x = ourjax.device_put(xh)
  for fn, ref in [(lambda v: v == v, lambda v: v == v), (lambda v: v.T, lambda v: v.T),
                  (lambda v: jnp.max(v, axis=0), lambda v: np.max(v, axis=0))]:
    r = fn(x)
    assert _on_gpu(r)
    np.testing.assert_array_equal(np.asarray(r), ref(xh))
  if dtype != np.bool_:
    vals, idx = lax.top_k(x, 3)      # (two results)
    assert _on_gpu(vals) and _on_gpu(idx)
    np.testing.assert_array_equal(np.asarray(vals), -np.sort(-xh, axis=-1)[:, :3])


@gpu
def test_jnp_functions_on_the_gpu_match_numpy():
  xh = np.random.default_rng(4).standard_normal((16, 33)).astype(np.float32)
  x = ourjax.device_put(xh)
  for _ in range(2):                         # (the first call compiles, the second reuses)
    s = ourjax.nn.softmax(x, axis=-1)
    m, v = jnp.mean(x, axis=0), jnp.var(x)
    assert _on_gpu(s) and _on_gpu(m) and _on_gpu(v)
    e = np.exp(xh - xh.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(s), e / e.sum(-1, keepdims=True), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(np.asarray(m), xh.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(v), xh.var(), rtol=1e-5)


@gpu
def test_scalars_kept_on_the_gpu_give_each_value():
  xh = np.arange(6, dtype=np.float32)
  x = ourjax.device_put(xh)
  for s in (2.0, -0.0, 0.0, 3, np.float32(1.5), float("nan"), 2.0):
    np.testing.assert_array_equal(np.asarray(x * s), xh * np.float32(s))
  idx = np.array([1, 4], np.int32)
  for k in range(3):
    idx[0] = k
    np.testing.assert_array_equal(np.asarray(x[idx]), xh[idx])
    np.testing.assert_array_equal(np.asarray(x.at[k].set(-1.0)),
                                  np.where(np.arange(6) == k, -1.0, xh))


@gpu
def test_scan_on_the_gpu_matches_numpy():
  xh = np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32)
  x = ourjax.device_put(xh)
  for _ in range(3):                    # host-driven first, then compiled
    c, ys = lax.scan(_body, jnp.zeros(4), x)
    assert _on_gpu(c) and _on_gpu(ys)
    carry, want = np.zeros(4, np.float32), []
    for row in xh:
      want.append(carry * 2)
      carry = carry + row
    np.testing.assert_allclose(np.asarray(c), carry, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ys), np.stack(want), rtol=1e-6)


@gpu
def test_while_and_cond_on_the_gpu_match_numpy():
  x = ourjax.device_put(np.array([1.5, 2.0, 3.0], np.float32))
  for _ in range(3):
    r = lax.while_loop(_cond, _double, x)
    assert _on_gpu(r)
    np.testing.assert_array_equal(np.asarray(r), [12.0, 16.0, 24.0])
    for k in (0, 1):
      r = lax.cond(ourjax.device_put(np.int32(k)), _double, _cond_branch, x)
      assert _on_gpu(r)
      np.testing.assert_array_equal(np.asarray(r), [0.5, 1.0, 2.0] if k == 0 else
                                    [3.0, 4.0, 6.0])


@gpu
def test_large_arrays_on_the_gpu():
  rng = np.random.default_rng(3)
  xh = rng.standard_normal((1024, 1024)).astype(np.float32)
  x = ourjax.device_put(xh)
  r = jnp.sqrt(jnp.abs(x)) + x[0]
  assert _on_gpu(r)
  np.testing.assert_allclose(np.asarray(r), np.sqrt(np.abs(xh)) + xh[0], rtol=1e-6)
