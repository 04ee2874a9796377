"""The CUDA backend on a GPU (skipped without one): every kind of kernel against the reference
backend on fresh random inputs, outputs fully written (the allocator's cache is poisoned with
NaN bytes first), device-resident Arrays, the caching allocator, errors."""
import gc
import zlib

import numpy as np
import pytest
from hypothesis import given, settings

from ourjax.backends.cuda import driver

if not driver.available():
  pytest.skip(f"no CUDA GPU ({driver.unavailable_reason()})", allow_module_level=True)

import ourjax  # noqa: E402
import ourjax.numpy as jnp  # noqa: E402
from ourjax.backends.cuda import backend as cuda_backend  # noqa: E402
from ourjax.backends.cuda import memory  # noqa: E402
from ourjax.errors import DeviceError, DeviceOutOfMemoryError  # noqa: E402

import jaxpr_programs  # noqa: E402
from cuda_cases import CASES  # noqa: E402


def _leaves(x):
  return ourjax.tree_util.tree_leaves(x)


def _poison(nbytes_list):
  """Fill cached blocks of these sizes with 0xFF bytes (NaN for floats) and return them to the
  cache, so that outputs allocated next start out poisoned."""
  dev = driver.get_device(0)
  blocks = [dev.allocator.allocate(n) for n in nbytes_list for _ in range(2)]
  for blk in blocks:
    dev.memset8(blk.ptr, 0xFF, blk.size)
  del blocks
  gc.collect()


def _rel_err(a, e):
  a, e = np.asarray(a, np.float64), np.asarray(e, np.float64)
  denom = np.linalg.norm(e.ravel())
  return np.linalg.norm((a - e).ravel()) / (denom if denom else 1.0)


def _compare(name, got, want, tol):
  got, want = _leaves(got), _leaves(want)
  assert len(got) == len(want), name
  for k, (g, w) in enumerate(zip(got, want)):
    assert g.shape == w.shape and g.dtype == w.dtype, (name, k, g.shape, g.dtype, w.shape,
                                                       w.dtype)
    g, w = np.asarray(g), np.asarray(w)
    if w.dtype.kind in "fV" and tol == 0:
      # exact, NaN where the reference has NaN (assert_array_equal does not take ml_dtypes'
      # float8 NaNs as equal)
      g64, w64 = g.astype(np.float64), w.astype(np.float64)
      gn, wn = np.isnan(g64), np.isnan(w64)
      bad = np.argwhere((gn != wn) | (~wn & (g64 != w64)))
      assert bad.size == 0, f"{name} output {k}: differs at {bad[:5].tolist()}"
    elif w.dtype.kind in "biu" or tol == 0:
      np.testing.assert_array_equal(g, w, err_msg=f"{name} output {k}")
    else:
      # NaN exactly where the reference has NaN (an unwritten poisoned output is NaN too),
      # the relative error over the rest
      gn, wn = np.isnan(g.astype(np.float64)), np.isnan(w.astype(np.float64))
      assert (gn == wn).all(), f"{name} output {k}: NaN at {np.argwhere(gn != wn)[:5].tolist()}"
      err = _rel_err(g[~wn], w[~wn])
      assert err <= tol, f"{name} output {k}: relative error {err:.3g} > {tol}"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_case_matches_reference(case):
  name, fn, make_args, tol = case
  rng = np.random.default_rng(zlib.crc32(name.encode()))   # (the same inputs in every process)
  for trial in range(2):                       # fresh inputs each time, same executable
    args = make_args(rng)
    want = ourjax.jit(fn, backend="reference")(*args)
    _poison([np.asarray(x).nbytes for x in _leaves(want)])
    got = ourjax.jit(fn, backend="cuda")(*args)
    for x in _leaves(got):
      assert x._device_buf is not None, f"{name}: result is not on the device"
    _compare(name, got, want, tol)


def test_batch_chunks_of_a_convolution_match_reference(monkeypatch):
  """A convolution cut into batch chunks (conv_to_dot.MAX_PATCH_BYTES lowered), each chunk an
  implicit GEMM reading the whole input from its own first batch element."""
  from ourjax.lowering.passes import conv_to_dot
  from cuda_cases import CHUNKED_CONV
  monkeypatch.setattr(conv_to_dot, "MAX_PATCH_BYTES", 1 << 16)
  name, fn, make_args, tol = CHUNKED_CONV
  args = make_args(np.random.default_rng(3))
  want = ourjax.jit(fn, backend="reference")(*args)
  _compare(name, ourjax.jit(fn, backend="cuda")(*args), want, tol)


@settings(max_examples=30, deadline=None)
@given(jaxpr_programs.programs())
def test_random_programs_match_eager(prog):
  """(f32 dots at the highest precision, as eager computes them: by default the tensor cores
  round their operands to tf32, as JAX's do)"""
  args = prog.inputs
  expected = prog(*args)
  before = ourjax.config.jax_default_matmul_precision
  ourjax.config.update("jax_default_matmul_precision", "highest")
  try:
    got = ourjax.jit(prog, backend="cuda")(*args)
  finally:
    ourjax.config.update("jax_default_matmul_precision", before)
  jaxpr_programs.assert_outputs_close(got, expected, "cuda")


def test_device_arrays():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  f = ourjax.jit(lambda a: a * 2.0, backend="cuda")
  y = f(x)
  assert y._device_buf is not None and y._npy is None
  dev = list(y.devices())[0]
  assert dev.platform == "gpu" and "CudaDevice" in repr(dev)
  y.block_until_ready()
  assert y.is_ready()
  assert "Array(" in repr(y) and str(y).startswith("[[")
  np.testing.assert_array_equal(np.asarray(y), x * 2)
  z = f(y)                       # a device array goes back in without a copy to the host
  np.testing.assert_array_equal(np.asarray(z), x * 4)
  assert float(f(np.float32(1.5))) == 3.0


def test_default_backend_and_device_put_get():
  assert ourjax.default_backend() == "gpu"
  gpus = ourjax.devices("cuda")
  assert gpus and gpus[0].platform == "gpu"
  x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
  a = ourjax.device_put(x)
  assert a._device_buf is not None
  assert list(a.devices())[0].platform == "gpu"
  np.testing.assert_array_equal(ourjax.device_get(a), x)
  h = ourjax.device_put(a, ourjax.devices("cpu")[0])
  assert h._device_buf is None and list(h.devices())[0].platform == "cpu"
  np.testing.assert_array_equal(np.asarray(h), x)
  y = ourjax.jit(lambda v: v + 1)(a)         # default jit runs on the GPU
  assert y._device_buf is not None
  ourjax.block_until_ready({"y": y})
  np.testing.assert_allclose(np.asarray(y), x + 1)


def test_allocator_reuses_blocks_and_reports_stats():
  dev = driver.get_device(0)
  stats0 = memory.memory_stats()
  f = ourjax.jit(lambda a: a + 1.0, backend="cuda")
  x = ourjax.device_put(np.ones((1000, 1000), np.float32))
  for _ in range(5):
    y = f(x)
    del y
    gc.collect()
  stats = dev.allocator.memory_stats()
  assert stats["num_cache_hits"] > stats0["num_cache_hits"]
  assert stats["bytes_in_use"] >= 4_000_000
  assert stats["peak_bytes_in_use"] >= stats["bytes_in_use"]
  assert stats["bytes_limit"] > 0
  assert ourjax.devices("cuda")[0].memory_stats()["bytes_in_use"] == stats["bytes_in_use"]


def test_out_of_memory_names_the_bytes_and_keeps_other_arrays():
  keep = ourjax.device_put(np.arange(1000, dtype=np.float32))
  dev = driver.get_device(0)
  huge = 1 << 50
  with pytest.raises(DeviceOutOfMemoryError) as e:
    dev.allocator.allocate(huge)
  assert str(huge) in str(e.value) and "free" in str(e.value)
  np.testing.assert_array_equal(np.asarray(keep), np.arange(1000, dtype=np.float32))
  # and through jit: an output too large for the device
  f = ourjax.jit(lambda a: jnp.broadcast_to(a[0], (1 << 22, 1 << 22)), backend="cuda")
  with pytest.raises(DeviceOutOfMemoryError):
    f(keep)
  np.testing.assert_array_equal(np.asarray(keep), np.arange(1000, dtype=np.float32))


def test_bad_ptx_raises_device_error_with_the_jit_log():
  dev = driver.get_device(0)
  with pytest.raises(DeviceError) as e:
    dev.load_module(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() "
                    "{ bogus.instruction; }", "broken")
  assert "broken" in str(e.value) and "cuModuleLoadDataEx" in str(e.value)


def test_host_fallback_runs_and_returns_device_arrays():
  x = (np.arange(6) + 1j).astype(np.complex64)
  c = ourjax.jit(lambda v: v * v, backend="cuda")
  y = c(x)
  np.testing.assert_allclose(np.asarray(y), x * x)
  assert y._device_buf is not None


def test_executable_called_many_times_and_interleaved():
  f = ourjax.jit(lambda a, b: jnp.sum(a * b, axis=-1), backend="cuda")
  g = ourjax.jit(lambda a: ourjax.nn.softmax(a), backend="cuda")
  rng = np.random.default_rng(3)
  outs = []
  for _ in range(20):
    a = rng.standard_normal((64, 300)).astype(np.float32)
    b = rng.standard_normal((64, 300)).astype(np.float32)
    outs.append((f(a, b), g(a), (a * b).sum(-1), a))
  for y, s, want, a in outs:
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-4, atol=1e-4)
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(s), e / e.sum(-1, keepdims=True), rtol=1e-5,
                               atol=1e-7)


def test_empty_and_scalar_shapes():
  f = ourjax.jit(lambda a: (a * 2.0, jnp.sum(a)), backend="cuda")
  y, s = f(np.zeros((0, 5), np.float32))
  assert np.asarray(y).shape == (0, 5) and float(s) == 0.0
  g = ourjax.jit(lambda a: a + 1, backend="cuda")
  assert int(g(np.int32(41))) == 42


@pytest.mark.parametrize("precision,tol", [("highest", 1e-5), (None, 3e-3)])
def test_grad_on_gpu(precision, tol):
  """At the highest precision the f32 products are exact; by default (as in JAX on a GPU) the
  tensor cores round them to tf32 (10-bit significands)."""
  def loss(w, x):
    return jnp.sum(jnp.tanh(jnp.matmul(x, w, precision=precision)) ** 2)
  rng = np.random.default_rng(5)
  w = rng.standard_normal((64, 32)).astype(np.float32) * 0.1
  x = rng.standard_normal((16, 64)).astype(np.float32)
  g = ourjax.jit(ourjax.grad(loss), backend="cuda")(w, x)
  want = ourjax.jit(ourjax.grad(loss), backend="reference")(w, x)
  assert _rel_err(g, want) < tol


# -- CUDA graph replay (backend.py: _GraphReplay) -------------------------------------------------

def _reductions(x, n=7):
  """Dependent full reductions: ~20 kernels, replayed as a graph."""
  for _ in range(n):
    x = x / (1.0 + jnp.sum(x * x))
  return x


def _reductions_np(x, n=7):
  x = np.asarray(x, np.float64)
  for _ in range(n):
    x = x / (1.0 + np.sum(x * x))
  return x


def _called_executable(jitted):
  (entry,) = jitted._cache.values()
  return entry.executable.compiled


def _graph_workout(monkeypatch, graphs: bool):
  """Two graph executables (one with a copy node) and a one-kernel one, called many times with
  different argument buffers, interleaved, some results kept alive; checked against NumPy."""
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1" if graphs else "0")
  f = ourjax.jit(lambda v: _reductions(v), backend="cuda")
  g = ourjax.jit(lambda v: (v, v * 2.0 + jnp.sum(v)), backend="cuda")
  h = ourjax.jit(lambda v, w: v * w + 1.0, backend="cuda")
  rng = np.random.default_rng(11)
  hosts = [rng.standard_normal((64, 300)).astype(np.float32) for _ in range(4)]
  xs = [ourjax.device_put(x) for x in hosts]
  results, kept = [], []
  for i in range(24):
    j = i % 4 if i % 5 else (i + 1) % 4
    src = hosts[j]
    x = xs[j] if i % 3 else src              # device arrays and host arrays
    y = f(x)
    a, b = g(y)
    z = h(b, xs[(i + 2) % 4])
    want_y = _reductions_np(src)
    want_b = want_y * 2 + want_y.sum()
    results.append((y, a, b, z, want_y, want_b, hosts[(i + 2) % 4]))
    if i % 4 == 0:
      kept.append(f(xs[(i + 3) % 4]))          # an extra result that stays alive
  for y, a, b, z, want_y, want_b, w in results:
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=2e-5, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(y))
    np.testing.assert_allclose(np.asarray(b), want_b, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(z), np.asarray(b) * w + 1, rtol=1e-6, atol=1e-6)
  for k, y in enumerate(kept):
    np.testing.assert_allclose(np.asarray(y), _reductions_np(hosts[(4 * k + 3) % 4]),
                               rtol=2e-5, atol=1e-9)
  exes = [_called_executable(fn) for fn in (f, g, h)]
  return [np.asarray(r[0]) for r in results], exes


def test_graph_replay_many_calls_interleaved(monkeypatch):
  ys, (fe, ge, he) = _graph_workout(monkeypatch, graphs=True)
  assert fe.graph_reason is None and fe._graph is not None, fe.graph_reason
  assert ge.graph_reason is None and ge._graph is not None, ge.graph_reason
  assert "GRAPH_MIN_LAUNCHES" in he.graph_reason
  ys_off, (fe_off, _, _) = _graph_workout(monkeypatch, graphs=False)
  assert fe_off.graph_reason == "OURJAX_CUDA_GRAPHS=0" and fe_off._graph is None
  for y, y_off in zip(ys, ys_off):          # the same kernels on the same inputs
    np.testing.assert_allclose(y, y_off, rtol=1e-6, atol=0)


def test_graph_replay_in_a_loop_needs_no_updates(monkeypatch):
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1")
  f = ourjax.jit(lambda v: _reductions(v, 5), backend="cuda")
  host = np.random.default_rng(2).standard_normal((64, 300)).astype(np.float32)
  x = ourjax.device_put(host)
  y = f(x)
  for _ in range(4):
    y = f(x)
  exe = _called_executable(f)
  updates = exe._graph.updates
  for _ in range(20):
    y = f(x)                        # outputs alternate between two blocks: two instances
  assert exe._graph.updates == updates
  np.testing.assert_allclose(np.asarray(y), _reductions_np(host, 5), rtol=2e-5, atol=1e-9)
  # a loop that feeds results back: still right
  z = x
  for _ in range(3):
    z = f(z)
  want = host
  for _ in range(3):
    want = _reductions_np(want, 5)
  np.testing.assert_allclose(np.asarray(z), want, rtol=1e-4, atol=1e-12)
  prof = exe.profile(x, reps=1)                  # per-kernel timing launches one by one
  assert len(prof) == len(exe.kernels) and exe.graph_reason is None


def test_graph_replay_with_donation_and_fast_caller(monkeypatch):
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1")
  rng = np.random.default_rng(4)
  f = ourjax.jit(lambda v, w: (_reductions(v, 3) + w, jnp.max(w)), backend="cuda",
                 donate_argnums=0)
  for _ in range(3):
    v, w = (rng.standard_normal((64, 300)).astype(np.float32) for _ in range(2))
    a, m = f(ourjax.device_put(v), ourjax.device_put(w))
    np.testing.assert_allclose(np.asarray(a), _reductions_np(v, 3) + w, rtol=2e-5, atol=1e-6)
    assert float(m) == w.max()
  mexe = f._cache[next(iter(f._cache))].executable
  exe = mexe.compiled
  assert exe.graph_reason is None
  call = exe.fast_caller(mexe.kept_args, [ourjax.Array(c) for c in mexe.hoisted], ourjax.Array)
  v, w = (rng.standard_normal((64, 300)).astype(np.float32) for _ in range(2))
  a, m = call((ourjax.device_put(v), w))        # a device and a host argument
  np.testing.assert_allclose(a.to_host(), _reductions_np(v, 3) + w, rtol=2e-5, atol=1e-6)
  assert m.to_host() == w.max()


def test_no_device_memory_leak_over_10000_calls():
  """Outputs, arenas and uploaded arguments go back to the allocator: after 10,000 calls
  (results dropped as they come, host and device arguments, a multi-kernel executable that is
  replayed as a graph) the bytes in use are what they were, give or take what the cache
  keeps for the live inputs."""
  dev = driver.get_device(0)
  f = ourjax.jit(lambda a, b: (jnp.sum(a * b, axis=-1), ourjax.nn.softmax(a) + b),
                 backend="cuda")
  rng = np.random.default_rng(0)
  a = ourjax.device_put(rng.standard_normal((64, 300)).astype(np.float32))
  host_b = rng.standard_normal((64, 300)).astype(np.float32)
  b = ourjax.device_put(host_b)
  s, y = f(a, b)
  ourjax.block_until_ready((s, y))
  del s, y
  gc.collect()
  before = dev.allocator.memory_stats()["bytes_in_use"]
  for i in range(10_000):
    s, y = f(a, host_b if i % 10 == 0 else b)
  ourjax.block_until_ready((s, y))
  np.testing.assert_allclose(np.asarray(s), (np.asarray(a) * host_b).sum(-1), rtol=1e-4,
                             atol=1e-4)
  del s, y
  gc.collect()
  assert dev.allocator.memory_stats()["bytes_in_use"] == before


def test_scan_gradient_accumulators_match_reference():
  """A scan's weight gradients accumulate a dot per step (dW + x_t^T dz_t): on the GPU each step's
  product is added, never written over the accumulator (the CPU planner's accumulating GEMM
  has no GPU translation; planned there it gave the last step's product alone)."""
  rng = np.random.default_rng(3)
  W = rng.standard_normal((16, 32)).astype(np.float32) * 0.3
  xs = rng.standard_normal((6, 8, 16)).astype(np.float32)

  def loss(W, xs):
    def cell(h, x):
      h = jnp.tanh(x @ W + h)
      return h, h
    return jnp.sum(ourjax.lax.scan(cell, jnp.zeros((8, 32), np.float32), xs)[1] ** 2)
  g = ourjax.grad(loss)
  with ourjax.default_matmul_precision("highest"):
    want = np.asarray(ourjax.jit(g, backend="reference")(W, xs))
    got = np.asarray(ourjax.jit(g, backend="cuda")(W, xs))
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
