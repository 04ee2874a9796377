"""Buffer donation (``jit(..., donate_argnums=...)``) against JAX's semantics: results equal the
undonated call's (random shape-preserving programs, hypothesis, including ones that read a
donated input after the output that reuses it is computed), the donated buffer really holds
the output afterwards, donated arrays are deleted (JAX's errors and warning), training-loop
style repeated calls, the planner's decisions on the CPU and (compiled without a GPU) the CUDA
backend, and ``Compiled.memory_analysis()``."""
from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.errors import JaxRuntimeError

F32 = np.float32


@pytest.fixture(autouse=True)
def _cpu_semantics(request):
  """Tests of the CPU backend's donation (host buffer addresses, its plan's metadata) run on
  the CPU backend also where a GPU makes CUDA the default; the CUDA ones name their backend."""
  if "cuda" in request.node.name or "gpu" in request.node.name:
    yield
    return
  from ourjax.config import config
  saved = config.jax_platforms
  ourjax.config.update("jax_platforms", "cpu")
  try:
    yield
  finally:
    ourjax.config.update("jax_platforms", saved)


def _addr(a) -> int:
  """The address of a host Array's data (what JAX's ``unsafe_buffer_pointer`` gives)."""
  return a._npy.ctypes.data


def _fresh(x):
  """An Array that owns its buffer (as a jitted result or an eager one does)."""
  return ourjax.jit(lambda v: v + 0)(np.asarray(x))


def _kinds(f, *args):
  exe = f.lower(*args).compile().runtime_executable()
  return dict(zip([j for j, _ in exe.aliases], exe.meta["alias_kinds"]))


# ------------------------------------------------------------------------------------------------
# random shape-preserving programs: donated == not donated


_UNARY = [("neg", lambda x: -x), ("sin", jnp.sin), ("exp", lambda x: jnp.exp(-x * x)),
          ("rev0", lambda x: x[::-1]), ("rev1", lambda x: x[:, ::-1]), ("T", lambda x: x.T),
          ("roll", lambda x: jnp.roll(x, 1, axis=1)), ("cumsum", lambda x: jnp.cumsum(x, 0)),
          ("center", lambda x: x - x.mean(axis=1, keepdims=True)),
          ("colsum", lambda x: x + x.sum(axis=0)), ("dot", lambda x: x @ x),
          ("loop", lambda x: lax.fori_loop(0, 2, lambda i, c: c * 0.5 + 1.0, x)),
          ("loop_reads_x", lambda x: lax.fori_loop(0, 2, lambda i, c: c * 0.5 + x[::-1], x)),
          ("cond", lambda x: lax.cond(x[0, 0] > 0, lambda v: v * 2.0, lambda v: v[::-1], x)),
          ("dus", lambda x: x.at[1].set(x[0])),
          ("dus2", lambda x: lax.dynamic_update_slice(x, jnp.ones((1, x.shape[1])), (1, 0))),
          ("scatter_add", lambda x: x.at[jnp.array([0, 2, 0])].add(1.0))]
_BINARY = [("add", lambda x, y: x + y), ("mul", lambda x, y: x * y),
           ("max", jnp.maximum), ("sub", lambda x, y: x - 2.0 * y),
           ("dotT", lambda x, y: x @ y.T), ("where", lambda x, y: jnp.where(x > y, x, y))]


_SQUARE_ONLY = {"T", "dot", "dotT"}


@st.composite
def _programs(draw):
  # (large shapes make kernels run in pieces on several threads)
  shape = draw(st.sampled_from([(3, 3), (4, 4), (8, 8), (3, 5), (8, 3), (384, 384), (96, 1536)]))
  n_in = draw(st.integers(1, 3))
  square = shape[0] == shape[1]
  unary = [u for u in _UNARY if square or u[0] not in _SQUARE_ONLY]
  binary = [u for u in _BINARY if square or u[0] not in _SQUARE_ONLY]
  ops = []
  for _ in range(draw(st.integers(1, 7))):
    nvals = n_in + len(ops)
    if draw(st.booleans()):
      name, fn = draw(st.sampled_from(unary))
      ops.append((name, fn, (draw(st.integers(0, nvals - 1)),)))
    else:
      name, fn = draw(st.sampled_from(binary))
      ops.append((name, fn, (draw(st.integers(0, nvals - 1)), draw(st.integers(0, nvals - 1)))))
  nvals = n_in + len(ops)
  outs = draw(st.lists(st.integers(0, nvals - 1), min_size=1, max_size=4))
  donated = draw(st.lists(st.booleans(), min_size=n_in, max_size=n_in))
  seed = draw(st.integers(0, 2 ** 31 - 1))
  return shape, n_in, ops, outs, donated, seed


def _run_program(ops, outs):
  def f(*xs):
    env = list(xs)
    for _, fn, args in ops:
      env.append(fn(*[env[i] for i in args]))
    return [env[i] for i in outs]
  return f


@settings(deadline=None)
@given(_programs())
def test_random_programs_donated_equal_undonated(prog):
  shape, n_in, ops, outs, donated, seed = prog
  rng = np.random.default_rng(seed)
  inputs = [rng.standard_normal(shape).astype(F32) for _ in range(n_in)]
  f = _run_program(ops, outs)
  want = ourjax.jit(f)(*inputs)
  nums = tuple(i for i in range(n_in) if donated[i])
  g = ourjax.jit(f, donate_argnums=nums)
  args = [_fresh(x) for x in inputs]
  addrs = [_addr(a) for a in args]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    got = g(*args)
  for k, (a, b) in enumerate(zip(got, want)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"output {k} {ops}")
  # a donated input the outputs depend on is deleted when an output has its shape (all do
  # here), and the output it was paired with (the first unpaired one, in order) lives in its
  # buffer; an unused one is pruned (keep_unused=False), so not donated
  used, stack = set(), list(outs)
  while stack:
    v = stack.pop()
    if v not in used:
      used.add(v)
      if v >= n_in:
        stack.extend(ops[v - n_in][2])
  paired = iter(range(len(outs)))
  for i in range(n_in):
    if not donated[i] or i not in used:
      assert not args[i].is_deleted()
      np.testing.assert_array_equal(np.asarray(args[i]), inputs[i])    # untouched
      continue
    j = next(paired, None)
    if j is None:
      assert not args[i].is_deleted()
    else:
      assert args[i].is_deleted()
      assert _addr(got[j]) == addrs[i]


# ------------------------------------------------------------------------------------------------
# the buffer is reused; training loops


def test_output_written_into_donated_buffer_cpu():
  f = ourjax.jit(lambda x, y: x * 2.0 + y, donate_argnums=0)
  x, y = _fresh(np.arange(6, dtype=F32)), _fresh(np.ones(6, F32))
  px = _addr(x)
  out = f(x, y)
  assert _addr(out) == px and x.is_deleted() and not y.is_deleted()
  np.testing.assert_array_equal(out, np.arange(6) * 2.0 + 1)
  assert _kinds(f, np.ones(6, F32), np.ones(6, F32)) == {0: "direct"}
  text = f.lower(np.ones(6, F32), np.ones(6, F32)).compile().as_text()
  assert text.splitlines()[0] == ("HloModule jit_lambda, "
                                  "input_output_alias={ {0}: (0, {}, may-alias) }")


def test_read_after_write_is_copied_not_clobbered():
  # output 0 (paired with x) is computed before x is read reversed for output 1
  f = ourjax.jit(lambda x: (jnp.sin(x), x[::-1] * 2.0), donate_argnums=0)
  x0 = np.arange(8, dtype=F32)
  assert _kinds(f, x0) == {0: "copy"}
  x = _fresh(x0)
  px = _addr(x)
  a, b = f(x)
  np.testing.assert_allclose(a, np.sin(x0), rtol=1e-6)
  np.testing.assert_array_equal(b, x0[::-1] * 2)
  assert _addr(a) == px
  # one kernel reading the donated input at other indices than it writes
  g = ourjax.jit(lambda x: x[::-1] + x, donate_argnums=0)
  assert _kinds(g, x0) == {0: "copy"}
  np.testing.assert_array_equal(g(_fresh(x0)), x0[::-1] + x0)


def test_training_loop_with_donation():
  def step(params, opt, x, y):
    def loss(p):
      return jnp.mean((jnp.tanh(x @ p["w"] + p["b"]) - y) ** 2)
    g = ourjax.grad(loss)(params)
    opt = ourjax.tree_util.tree_map(lambda m, gi: 0.9 * m + gi, opt, g)
    params = ourjax.tree_util.tree_map(lambda p, m: p - 0.05 * m, params, opt)
    return params, opt, loss(params)

  rng = np.random.default_rng(0)
  x = rng.standard_normal((32, 8)).astype(F32)
  y = rng.standard_normal((32, 4)).astype(F32)
  p0 = {"w": rng.standard_normal((8, 4)).astype(F32) * 0.3, "b": np.zeros(4, F32)}
  m0 = {"w": np.zeros((8, 4), F32), "b": np.zeros(4, F32)}
  plain = ourjax.jit(step)
  donating = ourjax.jit(step, donate_argnums=(0, 1))
  pa, ma = p0, m0
  pb = ourjax.tree_util.tree_map(_fresh, p0)
  mb = ourjax.tree_util.tree_map(_fresh, m0)
  addrs = sorted(_addr(a) for a in ourjax.tree_util.tree_leaves((pb, mb)))
  for _ in range(6):
    pa, ma, la = plain(pa, ma, x, y)
    old = ourjax.tree_util.tree_leaves((pb, mb))
    pb, mb, lb = donating(pb, mb, x, y)
    assert all(a.is_deleted() for a in old)
    for u, v in zip(ourjax.tree_util.tree_leaves((pa, ma)), ourjax.tree_util.tree_leaves((pb, mb))):
      np.testing.assert_array_equal(u, v)
    assert float(la) == float(lb)
    # parameters and optimizer state stay in the same four buffers, step after step
    assert sorted(_addr(a) for a in ourjax.tree_util.tree_leaves((pb, mb))) == addrs


def test_updates_in_place():
  c0 = np.arange(64 * 32, dtype=F32).reshape(64, 32)
  # dynamic_update_slice and scatter write the donated operand's buffer in place (no copy of
  # the whole operand: the plan has one kernel for the update)
  f = ourjax.jit(lambda c, v, i: lax.dynamic_update_slice(c, v, (i, 0)), donate_argnums=0)
  g = ourjax.jit(lambda c, v, i: c.at[i].add(jnp.tanh(v)), donate_argnums=0)
  for fn, upd in ((f, np.ones((1, 32), F32)), (g, np.ones(32, F32))):
    steps = fn.lower(c0, upd, 5).compile().runtime_executable().meta["steps"]
    assert not any(s.startswith("CopyKernel") for s in steps), steps
    assert sum("[64, 32]" in s for s in steps) == 1, steps
    x = _fresh(c0)
    px = _addr(x)
    y = fn(x, upd, 5)
    want = c0.copy()
    want[5] = 1.0 if fn is f else c0[5] + np.tanh(np.float32(1.0))
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert _addr(y) == px
  # a KV-cache style loop: one row per step, in the same buffer throughout
  x = _fresh(np.zeros((8, 4), F32))
  px = _addr(x)
  for i in range(8):
    x = f(x, np.full((1, 4), i, F32), i)
  np.testing.assert_array_equal(x, np.repeat(np.arange(8, dtype=F32)[:, None], 4, 1))
  assert _addr(x) == px


def test_loop_state_donated():
  f = ourjax.jit(lambda x: lax.fori_loop(0, 5, lambda i, c: c * 0.5 + 1.0, x), donate_argnums=0)
  x0 = np.linspace(-1, 1, 12, dtype=F32).reshape(3, 4)
  want = x0.copy()
  for _ in range(5):
    want = want * np.float32(0.5) + np.float32(1.0)
  x = _fresh(x0)
  px = _addr(x)
  out = f(x)
  np.testing.assert_array_equal(out, want)
  assert _addr(out) == px


def test_identity_and_swapped_outputs():
  f = ourjax.jit(lambda x: x, donate_argnums=0)
  x = _fresh(np.arange(3, dtype=F32))
  px = _addr(x)
  y = f(x)
  assert x.is_deleted() and _addr(y) == px
  np.testing.assert_array_equal(y, [0, 1, 2])
  g = ourjax.jit(lambda a, b: (b, a), donate_argnums=(0, 1))
  a, b = _fresh(np.ones(4, F32)), _fresh(np.full(4, 2.0, F32))
  pa, pb = _addr(a), _addr(b)
  u, v = g(a, b)
  np.testing.assert_array_equal(u, 2.0)
  np.testing.assert_array_equal(v, 1.0)
  assert (_addr(u), _addr(v)) == (pa, pb)


def test_shared_buffers_are_not_overwritten():
  f = ourjax.jit(lambda x: x * 3.0, donate_argnums=0)
  x = _fresh(np.arange(6, dtype=F32))
  view = np.asarray(x)                       # a NumPy view of x's buffer is still alive
  out = f(x)
  np.testing.assert_array_equal(view, np.arange(6))
  np.testing.assert_array_equal(out, np.arange(6) * 3.0)
  assert x.is_deleted()
  n = np.arange(6, dtype=F32)                # NumPy arguments are never overwritten
  np.testing.assert_array_equal(f(n), np.arange(6) * 3.0)
  np.testing.assert_array_equal(n, np.arange(6))
  x = jnp.arange(6.0)
  r = x.reshape(2, 3)                        # an eager view of x
  f(x)
  np.testing.assert_array_equal(r, np.arange(6.0).reshape(2, 3))


# ------------------------------------------------------------------------------------------------
# JAX's errors and warnings


def test_deleted_array_errors():
  f = ourjax.jit(lambda x: x + 1.0, donate_argnums=0)
  x = _fresh(np.zeros(3, F32))
  f(x)
  assert x.is_deleted()
  assert x.shape == (3,) and x.dtype == np.float32
  msg = r"Array has been deleted with shape=float32\[3\]\."
  for use in (lambda: x + 1, lambda: np.asarray(x), lambda: repr(x), lambda: x[0],
              lambda: f(x), lambda: jnp.sin(x)):
    with pytest.raises(RuntimeError, match=msg):
      use()
  with pytest.raises(JaxRuntimeError, match=r"INVALID_ARGUMENT: BlockHostUntilReady\(\) called "
                     "on deleted or donated buffer"):
    x.block_until_ready()
  y = jnp.ones((2, 2), jnp.int32)
  y.delete()
  assert y.is_deleted()
  y.delete()                                  # twice is fine
  with pytest.raises(RuntimeError, match=r"shape=int32\[2,2\]"):
    np.asarray(y)


def test_unusable_donation_warns_and_keeps_the_array():
  g = ourjax.jit(lambda x: x.sum(), donate_argnums=0)
  x = _fresh(np.arange(3, dtype=F32))
  with pytest.warns(UserWarning, match=r"Some donated buffers were not usable: float32\[3\]\.\n"
                    r"See an explanation at https://docs.jax.dev/en/latest/faq.html"):
    assert float(g(x)) == 3.0
  assert not x.is_deleted()
  with pytest.warns(UserWarning, match="not usable: float32\\[2\\]"):
    g.lower(jnp.ones(2))
  # matched by element count only (JAX donates it to XLA): deleted, no warning
  h = ourjax.jit(lambda x: x.astype(jnp.int32) + 1, donate_argnums=0)
  x = _fresh(np.arange(3, dtype=F32))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    np.testing.assert_array_equal(h(x), [1, 2, 3])
  assert x.is_deleted()
  # an argument the computation does not use is pruned: neither deleted nor warned about
  k = ourjax.jit(lambda x, y: y * 2.0, donate_argnums=0)
  x = _fresh(np.arange(3, dtype=F32))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    k(x, jnp.ones(3))
  assert not x.is_deleted()


def test_donating_a_buffer_also_passed():
  f = ourjax.jit(lambda x, y: x + y, donate_argnums=0)
  x = _fresh(np.arange(3, dtype=F32))
  with pytest.raises(JaxRuntimeError, match=r"Attempt to use a buffer that was previously "
                     r"donated in the same call to Execute\(\) \(flattened argument 1, replica 0, "
                     r"partition 0, first use: 0\)"):
    f(x, x)
  assert not x.is_deleted()
  g = ourjax.jit(lambda x, y: x + y, donate_argnums=1)
  with pytest.raises(JaxRuntimeError, match=r"Attempt to donate a buffer which is also used"):
    g(x, x)
  h = ourjax.jit(lambda x, y: x + y, donate_argnums=(0, 1))
  with pytest.raises(JaxRuntimeError, match="previously donated"), \
       pytest.warns(UserWarning, match=r"not usable: float32\[3\]"):
    h(x, x)                                  # (one output for two donated inputs)
  assert not x.is_deleted()
  np.testing.assert_array_equal(h(x, _fresh(np.ones(3, F32))), [1, 2, 3])


def test_donation_by_name_pytrees_and_static():
  f = ourjax.jit(lambda d, s: {"a": d["a"] + s, "b": d["b"].sum()}, donate_argnames="d",
                 static_argnums=1)
  d = {"a": _fresh(np.ones(3, F32)), "b": _fresh(np.ones(2, F32))}
  pa = _addr(d["a"])
  with pytest.warns(UserWarning, match=r"not usable: float32\[2\]"):
    out = f(d, 2.0)
  assert d["a"].is_deleted() and not d["b"].is_deleted()
  assert _addr(out["a"]) == pa
  np.testing.assert_array_equal(out["a"], [3, 3, 3])


def test_compiled_call_donates():
  f = ourjax.jit(lambda x: x * 2.0, donate_argnums=0)
  c = f.lower(jnp.ones(4)).compile()
  x = _fresh(np.arange(4, dtype=F32))
  px = _addr(x)
  out = c(x)
  assert x.is_deleted() and _addr(out) == px
  np.testing.assert_array_equal(out, [0, 2, 4, 6])


# ------------------------------------------------------------------------------------------------
# memory_analysis


def test_memory_analysis_numbers():
  f = ourjax.jit(lambda x, y: (x * 2 + y, x.sum()), donate_argnums=0)
  m = f.lower(jnp.ones((16, 8)), jnp.ones((16, 8))).compile().memory_analysis()
  assert m.argument_size_in_bytes == 2 * 16 * 8 * 4
  assert m.output_size_in_bytes == 16 * 8 * 4 + 4
  assert m.alias_size_in_bytes == 16 * 8 * 4
  assert m.temp_size_in_bytes >= 0
  assert m.peak_memory_in_bytes == (m.argument_size_in_bytes + m.output_size_in_bytes
                                    + m.temp_size_in_bytes - m.alias_size_in_bytes)
  plain = ourjax.jit(lambda x, y: (x * 2 + y, x.sum())).lower(
      jnp.ones((16, 8)), jnp.ones((16, 8))).compile().memory_analysis()
  assert plain.alias_size_in_bytes == 0
  assert plain.peak_memory_in_bytes - m.peak_memory_in_bytes >= 16 * 8 * 4 - (
      m.temp_size_in_bytes - plain.temp_size_in_bytes)


def test_memory_analysis_temporaries():
  # a chain of large intermediates that fusion cannot remove: dots
  def f(x):
    h = jnp.tanh(x @ x)
    return (h @ h).sum()
  n = 64
  m = ourjax.jit(f).lower(jnp.ones((n, n))).compile().memory_analysis()
  assert m.argument_size_in_bytes == n * n * 4 and m.output_size_in_bytes == 4
  assert m.temp_size_in_bytes >= n * n * 4          # at least one intermediate matrix
  assert m.alias_size_in_bytes == 0


# ------------------------------------------------------------------------------------------------
# the CUDA backend's plan (compiled without a GPU)


def _cuda_exe(f, *args):
  return f.lower(*args).compile().runtime_executable()


def _slots_written(program, slot):
  return [op for op in program if op[0] == "k" and slot in op[2].tolist()]


def test_cuda_plan_writes_outputs_into_donated_parameters():
  def step(p, m, g):
    m2 = 0.9 * m + g
    return p - 0.1 * m2, m2
  f = ourjax.jit(step, donate_argnums=(0, 1), backend="cuda")
  x = jnp.ones((256, 64))
  exe = _cuda_exe(f, x, x, x)
  if type(exe).__name__ != "CudaExecutable":
    pytest.skip("the CUDA backend did not compile this module")
  assert exe.aliases == [(0, 0), (1, 1)]
  # no kernel writes the output slots (3, 4): the outputs live in the parameters' slots
  nparams = 3
  assert not any(_slots_written(exe.program, nparams + j) for j in range(2))
  m = ourjax.jit(step, donate_argnums=(0, 1), backend="cuda").lower(x, x, x).compile() \
      .memory_analysis()
  assert m.alias_size_in_bytes == 2 * 256 * 64 * 4


def test_cuda_plan_copies_when_read_after_write():
  f = ourjax.jit(lambda x: (jnp.sin(x), x[::-1] * 2.0), donate_argnums=0, backend="cuda")
  exe = _cuda_exe(f, jnp.ones((64, 8)))
  if type(exe).__name__ != "CudaExecutable":
    pytest.skip("the CUDA backend did not compile this module")
  assert exe.aliases == [(0, 0)]
  # the last step copies a temporary into parameter 0's buffer
  last = exe.program[-1]
  assert last[0] == "copy" and last[1] == (0, 0)


def _sgd_dot_step(w, x, d):
  # a weight update whose gradient is a dot: on the GPU the update is the dot's fused epilogue
  return w - 0.1 * (x.T @ d)


def test_cuda_plan_updates_weights_in_the_dot_epilogue():
  f = ourjax.jit(_sgd_dot_step, donate_argnums=0, backend="cuda")
  w, x, d = np.ones((512, 256), F32), np.ones((1024, 512), F32), np.ones((1024, 256), F32)
  exe = _cuda_exe(f, w, x, d)
  if type(exe).__name__ != "CudaExecutable":
    pytest.skip("the CUDA backend did not compile this module")
  assert exe.aliases == [(0, 0)]
  writers = [exe.kernels[op[1]] for op in exe.program if op[0] == "k" and 0 in op[2].tolist()
             and any(b.kind == "param" and b.slot == 0 for b in exe.kernels[op[1]].writes)]
  # one kernel writes the new weights, into the argument's own buffer (no copy at the end):
  # the dot's, its epilogue being the update (or, where the dot cannot take an epilogue, the
  # elementwise kernel after it)
  assert len(writers) == 1 and not [op for op in exe.program
                                    if op[0] == "copy" and op[1] == (0, 0)]
  assert getattr(writers[0], "epilogue", None) is not None or \
      type(writers[0]).__name__ == "Elementwise"


@pytest.fixture
def gpu():
  from ourjax.backends.cuda import driver
  if not driver.available():
    pytest.skip(f"no CUDA GPU ({driver.unavailable_reason()})")


def test_cuda_donation_on_gpu(gpu):
  def step(p, m, g):
    m2 = 0.9 * m + g
    return p - 0.1 * m2, m2
  rng = np.random.default_rng(1)
  p0, m0, g0 = (rng.standard_normal((128, 64)).astype(F32) for _ in range(3))
  plain = ourjax.jit(step, backend="cuda")
  f = ourjax.jit(step, donate_argnums=(0, 1), backend="cuda")
  p, m = ourjax.device_put(p0), ourjax.device_put(m0)
  pa, ma = p0, m0
  ptrs = {p._device_buf.ptr, m._device_buf.ptr}
  for _ in range(4):
    old = (p, m)
    p, m = f(p, m, g0)
    pa, ma = plain(pa, ma, g0)
    assert all(a.is_deleted() for a in old)
    assert {p._device_buf.ptr, m._device_buf.ptr} == ptrs
    np.testing.assert_array_equal(np.asarray(p), np.asarray(pa))
    np.testing.assert_array_equal(np.asarray(m), np.asarray(ma))
  # read after write: copied at the end, still into the donated buffer
  h = ourjax.jit(lambda x: (jnp.sin(x), x[::-1] * 2.0), donate_argnums=0, backend="cuda")
  x = ourjax.device_put(p0)
  px = x._device_buf.ptr
  a, b = h(x)
  np.testing.assert_allclose(np.asarray(a), np.sin(p0), rtol=2e-6, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(b), p0[::-1] * 2)
  assert a._device_buf.ptr == px and x.is_deleted()
  # a weight update fused into a dot's epilogue, in place
  rng2 = np.random.default_rng(2)
  w0 = rng2.standard_normal((512, 256)).astype(F32)
  x0 = rng2.standard_normal((1024, 512)).astype(F32)
  d0 = rng2.standard_normal((1024, 256)).astype(F32)
  plain_sgd = ourjax.jit(_sgd_dot_step, backend="cuda")
  sgd = ourjax.jit(_sgd_dot_step, donate_argnums=0, backend="cuda")
  wa, wb = w0, ourjax.device_put(w0)
  pw = wb._device_buf.ptr
  for _ in range(3):
    wa, wb = plain_sgd(wa, x0, d0), sgd(wb, x0, d0)
    np.testing.assert_array_equal(np.asarray(wb), np.asarray(wa))
    assert wb._device_buf.ptr == pw
  # a device buffer another Array shares is copied first, not overwritten
  x = ourjax.device_put(p0)
  from ourjax.array import Array
  twin = Array._from_device(x._device_buf, x.aval)
  gc.collect()
  y = f(x, ourjax.device_put(m0), g0)
  assert x.is_deleted() and y[0]._device_buf.ptr != twin._device_buf.ptr
  np.testing.assert_array_equal(np.asarray(twin), p0)
  np.testing.assert_array_equal(np.asarray(y[0]), np.asarray(plain(p0, m0, g0)[0]))
  # host arguments are uploaded into buffers of their own, which the outputs then use
  z = f(p0, m0, g0)
  np.testing.assert_array_equal(np.asarray(z[1]), np.asarray(plain(p0, m0, g0)[1]))
  # memory_analysis from the GPU plan
  m = f.lower(p0, m0, g0).compile().memory_analysis()
  assert m.alias_size_in_bytes == 2 * p0.nbytes and m.generated_code_size_in_bytes > 0


# ------------------------------------------------------------------------------------------------
# under transformations (JAX keeps a jitted call's donation for its primal inputs)


def test_donation_under_grad_vmap_jvp():
  f = ourjax.jit(lambda x, y: x * y + 1.0, donate_argnums=0)
  y0 = np.arange(3, dtype=F32)
  p = _fresh(np.ones(3, F32))
  g = ourjax.grad(lambda p: jnp.sum(f(p, y0)))(p)
  np.testing.assert_array_equal(g, y0)
  assert p.is_deleted()
  p = _fresh(np.ones(3, F32))
  v, t = ourjax.jvp(lambda p: f(p, y0), (p,), (np.ones(3, F32),))
  np.testing.assert_array_equal(v, y0 + 1)
  np.testing.assert_array_equal(t, y0)
  assert p.is_deleted()
  pp = _fresh(np.ones((2, 3), F32))
  out = ourjax.vmap(f)(pp, np.full((2, 3), 2.0, F32))
  np.testing.assert_array_equal(out, np.full((2, 3), 3.0))
  assert pp.is_deleted()
  # an inner jit's donation does not reach through an outer jit (its jaxpr is inlined)
  p = _fresh(np.ones(3, F32))
  np.testing.assert_array_equal(ourjax.jit(lambda p: f(p, y0))(p), y0 + 1)
  assert not p.is_deleted()
  text = str(ourjax.make_jaxpr(lambda p: f(p, y0))(np.ones(3, F32)))
  assert "donated_invars=(True, False)" in text
  assert "donated_invars" not in str(ourjax.make_jaxpr(ourjax.jit(lambda x: x + 1))(1.0))
  # the gradient of a function whose parameter is donated (JAX: the forwarded cotangent
  # source is not an output the parameter can be paired with)
  q = _fresh(np.ones(3, F32))
  h = ourjax.jit(ourjax.grad(lambda q, y: jnp.sum(q * y)), donate_argnums=0)
  np.testing.assert_array_equal(h(q, y0), y0)
  assert not q.is_deleted()


# ------------------------------------------------------------------------------------------------
# the profiler


def test_profiles_of_donating_functions():
  def step(p, g):
    return p - 0.1 * jnp.tanh(g @ p)
  f = ourjax.jit(step, donate_argnums=0)
  p, g = _fresh(np.ones((32, 32), F32)), _fresh(np.eye(32, dtype=F32))
  c = f.lower(p, g).compile()
  prof = c.profile(p, g, reps=2)              # the caller's arrays stay as they were
  assert not p.is_deleted()
  np.testing.assert_array_equal(p, np.ones((32, 32)))
  m = c.memory_analysis()
  text = str(prof)
  assert f"peak memory {m.peak_memory_in_bytes / 1e3:.1f} KB" in text
  assert "outputs in donated buffers 4.1 KB" in text
  mem = prof.sections[0]["memory"]
  assert mem["alias_size_in_bytes"] == 32 * 32 * 4
  assert mem["peak_memory_in_bytes"] == m.peak_memory_in_bytes
  # a trace records donating calls with their semantics
  want = np.ones((32, 32), F32)
  for _ in range(3):
    want = want - np.float32(0.1) * np.tanh(np.eye(32, dtype=F32) @ want)
  from ourjax import profiler
  with profiler._recording() as rec:
    for _ in range(3):
      old = p
      p = f(p, g)
      assert old.is_deleted()
  np.testing.assert_allclose(p, want, rtol=1e-6)
  traced = rec.profile(per_call=False, title="trace")
  assert "peak memory" in str(traced)
  assert traced._trace_json()["otherData"]["memory"]["jit_step"]["peak_memory_in_bytes"] == \
      m.peak_memory_in_bytes


def test_pmap_donation_deletes_inputs():
  f = ourjax.pmap(lambda x: x * 2.0, donate_argnums=0)
  x = _fresh(np.ones((1, 3), F32))
  np.testing.assert_array_equal(f(x), np.full((1, 3), 2.0))
  assert x.is_deleted()
  y = f(_fresh(np.ones((1, 3), F32)))        # a result laid out over the devices
  z = f(y)
  assert y.is_deleted() and not z.is_deleted()
  with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[1,3\]"):
    np.asarray(y)
  np.testing.assert_array_equal(z, np.full((1, 3), 4.0))
  n = np.ones((1, 3), F32)
  f(n)
  np.testing.assert_array_equal(n, 1.0)      # NumPy arguments are never touched
  g = ourjax.pmap(lambda x: x.sum(), donate_argnums=0)
  x = _fresh(np.ones((1, 3), F32))
  with pytest.warns(UserWarning, match=r"not usable: float32\[1,3\]"):
    np.testing.assert_array_equal(g(x), [3.0])
  assert not x.is_deleted()


def test_fast_path_repeated_calls():
  # positional Arrays of a signature seen before take jit's dispatch fast path: it donates too
  f = ourjax.jit(lambda p, g: (p - 0.5 * g, jnp.sum(g)), donate_argnums=0)
  g = _fresh(np.ones((4, 4), F32))
  p = _fresh(np.full((4, 4), 8.0, F32))
  px = _addr(p)
  for k in range(1, 5):
    old = p
    p, s = f(p, g)
    assert old.is_deleted() and _addr(p) == px and float(s) == 16.0
    np.testing.assert_array_equal(p, np.full((4, 4), 8.0 - 0.5 * k))
  view = np.asarray(p)                      # shared: this call copies instead of overwriting
  q, _ = f(p, g)
  assert p.is_deleted() and _addr(q) != px
  np.testing.assert_array_equal(view, np.full((4, 4), 6.0))
  np.testing.assert_array_equal(q, np.full((4, 4), 5.5))
  with pytest.raises(JaxRuntimeError, match="previously donated"):
    f(q, q)
  assert not q.is_deleted()
  with pytest.raises(RuntimeError, match="Array has been deleted"):
    f(p, g)


def test_cuda_runtime_with_the_stand_in_driver(monkeypatch):
  """The CUDA backend's host side (``tests/cuda_fake_driver.py`` records every launch with its
  parameters, nothing runs): outputs are written into the donated arguments' allocations."""
  fake_driver = pytest.importorskip("cuda_fake_driver")
  from ourjax.array import Array
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "0")
  with fake_driver.installed() as fake:
    def step(p, m, g):
      m2 = 0.9 * m + g
      return p - 0.1 * m2, m2
    f = ourjax.jit(step, donate_argnums=(0, 1), backend="cuda")
    p, m, g = (ourjax.device_put(np.full((64, 32), v, F32)) for v in (1.0, 0.0, 2.0))
    ptrs = (p._device_buf.ptr, m._device_buf.ptr)
    for _ in range(3):                        # (the general path, then jit's fast path)
      fake.executed.clear()
      old = (p, m)
      p, m = f(p, m, g)
      assert all(a.is_deleted() for a in old) and not g.is_deleted()
      assert (p._device_buf.ptr, m._device_buf.ptr) == ptrs
      (k,) = [r for r in fake.executed if r[0] == "kernel"]
      assert set(ptrs) | {g._device_buf.ptr} <= set(int(v) for v in k[5])
    # a buffer another Array shares: the call works on a copy of it
    twin = Array._from_device(p._device_buf, p.aval)
    q, _ = f(p, m, g)
    assert p.is_deleted() and not twin.is_deleted()
    assert q._device_buf.ptr != twin._device_buf.ptr
    # read after write: the output goes to a temporary copied into the argument at the end
    h = ourjax.jit(lambda x: (jnp.sin(x), x[::-1] * 2.0), donate_argnums=0, backend="cuda")
    x = ourjax.device_put(np.ones((64, 8), F32))
    px = x._device_buf.ptr
    fake.executed.clear()
    a, _ = h(x)
    assert x.is_deleted() and a._device_buf.ptr == px
    last = fake.executed[-1]
    assert last[0] == "copy" and last[1] == px
    del p, m, g, q, twin, a, x


def test_donation_when_the_jaxpr_runs_op_by_op():
  # a host callback keeps the jaxpr out of the compiler: the call still deletes what it donates
  def f(x):
    ourjax.debug.callback(lambda v: None, x)
    return x * 2.0
  g = ourjax.jit(f, donate_argnums=0)
  x = _fresh(np.ones(3, F32))
  np.testing.assert_array_equal(g(x), [2, 2, 2])
  assert x.is_deleted()
  h = ourjax.jit(lambda x, y: f(x) + y, donate_argnums=0)
  y = _fresh(np.ones(3, F32))
  with pytest.raises(JaxRuntimeError, match="previously donated"):
    h(y, y)
  assert not y.is_deleted()


def test_sharded_jit_donation_deletes(monkeypatch):
  monkeypatch.setenv("OURJAX_NUM_CPU_DEVICES", "4")
  monkeypatch.setitem(ourjax.config._values, "jax_platforms", "cpu")
  from ourjax.sharding import NamedSharding, PartitionSpec as P
  mesh = ourjax.make_mesh((4,), ("m",))
  x0 = np.arange(8 * 6, dtype=F32).reshape(8, 6)
  a = ourjax.device_put(x0, NamedSharding(mesh, P("m")))
  step = ourjax.jit(lambda v: v * 2 + 1, donate_argnums=0)
  b = step(a)
  assert a.is_deleted() and not b.is_deleted()
  np.testing.assert_array_equal(b, x0 * 2 + 1)
  with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[8,6\]"):
    np.asarray(a)
  c = step(b)                                  # the plan made once; results feed the next call
  assert b.is_deleted()
  np.testing.assert_array_equal(c, (x0 * 2 + 1) * 2 + 1)
