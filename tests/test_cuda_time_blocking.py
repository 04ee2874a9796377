"""Time blocking (``backends/cuda/time_blocking.py``): a loop whose body is one stencil chain
runs several iterations per launch, the state staying in shared memory between them.

Without a GPU: which loops are blocked and by how many iterations, the notes of those that are
not, that the kernels' PTX assembles.  On a GPU: blocked loops against the same program
unblocked (the state bit for bit: the same operations on the same operands; a reduction per
step combines the same per-tile partials in another order) and against the reference
backend."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as hst

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.backends.cuda import driver, stencil, time_blocking
from test_ptx import _assemble, needs_ptxas


def _rk(n_steps, dt=0.01, forcing=False):
  """An RK4 scan of coupled oscillators (rolled neighbours), ``mean(x**2)`` per step;
  ``forcing``: the right-hand side also reads the carried time."""
  def field(s, k, t):
    x, v = s[0], s[1]
    a = -x - 0.5 * x * x * x + k * (jnp.roll(x, 1) + jnp.roll(x, -1) - 2 * x) - 0.1 * v
    if forcing:
      a = a + 0.1 * jnp.sin(t)
    return jnp.stack([v, a])

  def run(s0, k):
    def step(c, _):
      s, t = c
      k1 = field(s, k, t)
      k2 = field(s + 0.5 * dt * k1, k, t)
      k3 = field(s + 0.5 * dt * k2, k, t)
      k4 = field(s + dt * k3, k, t)
      s = s + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
      return (s, t + dt), jnp.mean(s[0] * s[0])
    (s, t), ys = lax.scan(step, (s0, jnp.float32(0)), None, length=n_steps)
    return s, t, ys
  return run


def _rk_args(n, rows=2, dtype=np.float32):
  rng = np.random.RandomState(n)
  return (rng.uniform(-0.5, 0.5, (rows, n)).astype(dtype),
          rng.uniform(0.1, 0.5, n).astype(dtype))


def _heat(steps):
  """Explicit heat steps with zero boundaries (pads and shifted slices) in a fori_loop."""
  def run(u, a):
    def body(_, u):
      p = jnp.pad(u, ((0, 0), (1, 1)))
      return u + a * (p[:, :-2] + p[:, 2:] - 2 * u)
    return lax.fori_loop(0, steps, body, u)
  return run


def _compiled(fn, *args):
  return ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()


def _blocked(exe):
  return [k for k in exe.kernels if isinstance(k, time_blocking.TimeBlockedChain)]


def _notes(exe):
  return [n for n in exe.module.notes if n.startswith("time_blocking:")]


def _repeats(program):
  for op in program:
    if op[0] == "repeat":
      yield op
      yield from _repeats(op[2])


# -- planning -----------------------------------------------------------------------------------

@pytest.mark.parametrize("n,steps,iters,left", [
    (65536, 1000, 10, 0), (65536, 12, 12, 0), (65536, 7, 7, 0), (65536, 32, 8, 0),
    (65536, 17, 8, 1), (4096, 67, 11, 1)])
def test_rk4_scan_runs_several_iterations_per_launch(n, steps, iters, left):
  """The iterations per launch: as many as the halo allows, weighed against the halo's extra
  work (``_best``); those that do not fill a launch run one by one after the blocked ones."""
  exe = _compiled(_rk(steps), *_rk_args(n))
  (tb,) = _blocked(exe)
  assert tb.iterations == iters
  loops = list(_repeats(exe.program))
  assert [op[1] for op in loops] == [steps // iters] + ([left] if left else [])
  kinds = [type(exe.kernels[op[1]]).__name__ for op in loops[0][2] if op[0] == "k"]
  assert kinds == ["TimeBlockedChain", "BatchedFinish"]
  if left:
    assert "TimeBlockedChain" not in [type(exe.kernels[op[1]]).__name__
                                      for op in loops[1][2] if op[0] == "k"]
  # the halo covers every iteration's reach (four stages of +-1 neighbours each)
  assert tb.lo >= 4 * iters and tb.hi >= 4 * iters
  assert max(tb.lo, tb.hi) <= stencil.MAX_HALO
  assert tb.block == -(-(stencil.TILE + tb.lo + tb.hi) // 32) * 32    # a thread per position
  assert any(f"{iters} iterations per launch" in note for note in _notes(exe))
  # the state goes to memory once per launch; the stages' results stay on chip
  names = {b.name for b in tb.writes}
  assert any("next" in x for x in names) and any("rows" in x for x in names), names


@pytest.mark.parametrize("n", [300, 1024, 2048])
def test_a_small_states_reduction_becomes_the_chains_last_stage(n):
  """Too short to be split in two kernels, the mean per step is one block's reduction after
  the chain; blocked, it is the chain's last stage (partials per tile) and a batched finish
  that also stores each iteration's mean into its row."""
  exe = _compiled(_rk(1000), *_rk_args(n))
  (tb,) = _blocked(exe)
  assert tb.stages[-1].kind == "partials" and tb.tiles == -(-n // stencil.TILE)
  (loop,) = list(_repeats(exe.program))
  assert [type(exe.kernels[op[1]]).__name__ for op in loop[2] if op[0] == "k"] == \
      ["TimeBlockedChain", "BatchedFinish"]
  (fin,) = [k for k in exe.kernels if isinstance(k, time_blocking.BatchedFinish)]
  assert [type(t).__name__ for t in fin.fin.tails] == ["DynamicUpdateInPlace"]


def test_a_chain_reading_scalar_state_is_blocked_too():
  """A forcing term of the carried time: the scalar work (the time's step, its sine) runs
  for every iteration first, and each iteration's stages read their own values."""
  exe = _compiled(_rk(12, forcing=True), *_rk_args(4096))
  (tb,) = _blocked(exe)
  assert tb.iterations > 1 and tb.stemps and len(tb.sstates) == 2   # (time and counter)


def test_scalar_work_reading_the_big_state_is_not_blocked():
  def fn(s0):
    def step(c, _):
      s, t = c
      new = s + 0.01 * (jnp.roll(s, 1, axis=1) - s) * t
      return (new, t + s[0, 0]), None
    return lax.scan(step, (s0, jnp.float32(1)), None, length=12)[0]
  exe = _compiled(fn, np.ones((2, 4096), np.float32))
  assert _blocked(exe) == []


def test_switch_off(monkeypatch):
  monkeypatch.setenv("OURJAX_CUDA_TIME_BLOCKING", "0")
  assert _blocked(_compiled(_rk(12), *_rk_args(4096))) == []


def test_fori_loop_without_stacked_outputs_is_blocked():
  exe = _compiled(_heat(40), np.ones((3, 700), np.float32), np.float32(0.1))
  (tb,) = _blocked(exe)
  assert 40 % tb.iterations == 0 and tb.iterations > 1
  (loop,) = list(_repeats(exe.program))
  assert [type(exe.kernels[op[1]]).__name__ for op in loop[2] if op[0] == "k"] == \
      ["TimeBlockedChain"]


@needs_ptxas
def test_blocked_kernels_assemble():
  for fn, args in ((_rk(12), _rk_args(4096)), (_rk(6), _rk_args(70001)), (_rk(12), _rk_args(300)),
                   (_rk(100), _rk_args(4096)),
                   (_rk(12, forcing=True), _rk_args(4096)),
                   (_heat(40), (np.ones((3, 700), np.float32), np.float32(0.1)))):
    c = ourjax.jit(fn, backend="cuda").lower(*args).compile()
    assert _blocked(c.runtime_executable())
    _assemble(c.as_text(dialect="ptx"))       # (each module for its own .target)


# -- on the GPU ---------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not driver.available(), reason="no CUDA GPU")


def _both(monkeypatch, fn, *args):
  """(blocked result, unblocked result, reference result), each a list of arrays."""
  leaves = ourjax.tree_util.tree_leaves
  monkeypatch.setenv("OURJAX_CUDA_TIME_BLOCKING", "1")
  on = ourjax.jit(fn, backend="cuda")(*args)
  monkeypatch.setenv("OURJAX_CUDA_TIME_BLOCKING", "0")
  off = ourjax.jit(lambda *a: fn(*a), backend="cuda")(*args)
  ref = ourjax.jit(lambda *a: fn(*a), backend="reference")(*args)
  return ([np.asarray(x) for x in leaves(on)], [np.asarray(x) for x in leaves(off)],
          [np.asarray(x) for x in leaves(ref)])


@needs_gpu
@pytest.mark.parametrize("n,steps", [(5, 6), (300, 12), (1024, 1000), (4096, 30), (4096, 1000),
                                     (4096, 67), (20000, 7), (70001, 14), (65536, 17)])
def test_rk4_blocked_matches_unblocked_and_reference(monkeypatch, n, steps):
  on, off, ref = _both(monkeypatch, _rk(steps), *_rk_args(n))
  np.testing.assert_array_equal(on[0], off[0])            # the state: bit for bit
  np.testing.assert_array_equal(on[1], off[1])            # the carried time too
  np.testing.assert_allclose(on[2], off[2], rtol=1e-6)    # the means: another order
  np.testing.assert_allclose(on[0], ref[0], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(on[1], ref[1], rtol=1e-5)    # the carried time
  np.testing.assert_allclose(on[2], ref[2], rtol=1e-4)    # a mean per step


@needs_gpu
@pytest.mark.parametrize("n,steps", [(4096, 12), (20000, 30)])
def test_forced_rk4_blocked_matches(monkeypatch, n, steps):
  on, off, ref = _both(monkeypatch, _rk(steps, forcing=True), *_rk_args(n))
  np.testing.assert_array_equal(on[0], off[0])
  np.testing.assert_array_equal(on[1], off[1])
  np.testing.assert_allclose(on[2], off[2], rtol=1e-6)
  np.testing.assert_allclose(on[0], ref[0], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(on[2], ref[2], rtol=1e-4)


def _driven(s0, xs):
  """A stencil scan over inputs: each step reads its own row of ``xs`` (a dynamic slice at
  the loop's counter, which the blocked kernel keeps per iteration)."""
  def step(s, x):
    new = 0.5 * s + 0.25 * (jnp.roll(s, 1) + jnp.roll(s, -1)) + 0.1 * x
    return new, jnp.sum(new)
  return lax.scan(step, s0, xs)


def test_a_scan_over_inputs_is_blocked():
  exe = _compiled(_driven, np.ones(4096, np.float32), np.ones((20, 4096), np.float32))
  (tb,) = _blocked(exe)
  assert tb.iterations > 1 and len(tb.sstates) == 1          # (the counter, per iteration)


@needs_gpu
@pytest.mark.parametrize("n,steps", [(4096, 20), (70001, 13)])
def test_scan_over_inputs_blocked_matches(monkeypatch, n, steps):
  rng = np.random.RandomState(n)
  s0 = rng.uniform(-1, 1, n).astype(np.float32)
  xs = rng.uniform(-1, 1, (steps, n)).astype(np.float32)
  on, off, ref = _both(monkeypatch, _driven, s0, xs)
  np.testing.assert_array_equal(on[0], off[0])
  np.testing.assert_allclose(on[1], off[1], rtol=1e-5)
  np.testing.assert_allclose(on[0], ref[0], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(on[1], ref[1], rtol=1e-4, atol=1e-3)


@needs_gpu
def test_heat_blocked_matches(monkeypatch):
  u = np.random.RandomState(1).randn(3, 700).astype(np.float32)
  on, off, ref = _both(monkeypatch, _heat(40), u, np.float32(0.1))
  np.testing.assert_array_equal(on[0], off[0])
  np.testing.assert_allclose(on[0], ref[0], rtol=1e-4, atol=1e-5)


@needs_gpu
@settings(max_examples=10, deadline=None)
@given(hst.integers(1, 3), hst.integers(3, 20000), hst.integers(-3, 3), hst.integers(-2, 2),
       hst.integers(2, 24), hst.booleans(), hst.booleans())
def test_random_stencil_loops_match(rows, n, s1, s2, steps, reverse, stack):
  rng = np.random.RandomState(n)
  x = rng.uniform(-1, 1, (rows, n)).astype(np.float32)

  def fn(x):
    def step(c, _):
      a = jnp.roll(c, s1, axis=1) * 0.25 + 0.5 * c
      b = jnp.tanh(jnp.roll(a, s2, axis=1)) - 0.5 * a
      new = 0.5 * (b + jnp.pad(b, ((0, 0), (1, 1)))[:, 2:])
      return new, (jnp.sum(new * new) if stack else None)
    return lax.scan(step, x, None, length=steps, reverse=reverse)
  with pytest.MonkeyPatch.context() as mp:
    on, off, ref = _both(mp, fn, x)
  np.testing.assert_array_equal(on[0], off[0])
  for a, b in zip(on[1:], off[1:]):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  for a, c in zip(on, ref):
    np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-4)
